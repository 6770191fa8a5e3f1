//! The zstd parameters of each frame: a level, tuned for tile planes, or a named preset.
//!
//! Every choice here yields standard single zstd frames with their content size, so decoding is unaffected; only
//! the encoder's search differs. The figures behind the choices are in `docs/BENCHMARKS.md` ("zstd presets").

use std::fmt;
use std::str::FromStr;

use zstd_safe::CParameter;

/// How the encoder chooses zstd parameters for a tile's frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Preset {
    /// The level's parameters with the shortest match chosen for tile planes at the levels that use zstd's optimal
    /// parser (16 and above): 6 bytes for gap planes, 5 for count planes, instead of the level's 3. Since libzstd
    /// 1.5.6 the optimal parser takes short matches that cost more than the literals they replace on these planes;
    /// at level 19 this is 1.6% smaller than the level's own parameters (and than the original implementation's
    /// tiles, made with libzstd 1.5.4) and about 15% faster to encode. Lower levels keep their own parameters.
    #[default]
    Tuned,
    /// The level's own parameters, as `zstd -N` would use them.
    Plain,
    /// A parameter set that gives level-19 size or smaller in about half of level 19's time (zstd's btopt search
    /// of level 16 with a shallower search and longer shortest matches); ignores the level.
    Fast,
}

impl Preset {
    /// Every preset, in the order the command line lists them.
    pub const ALL: [Preset; 3] = [Preset::Tuned, Preset::Plain, Preset::Fast];

    /// The preset's name (`tuned`, `plain`, `fast`).
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Tuned => "tuned",
            Preset::Plain => "plain",
            Preset::Fast => "fast",
        }
    }

    /// The level this preset always uses, if it ignores the caller's.
    pub fn base_level(self) -> Option<i32> {
        match self {
            Preset::Fast => Some(FAST_LEVEL),
            Preset::Tuned | Preset::Plain => None,
        }
    }

    /// The zstd parameters of a frame of `plane` compressed at `level` (applied after a reset, in this order).
    pub(crate) fn parameters(self, level: i32, plane: Plane) -> Vec<CParameter> {
        match (self, plane) {
            (_, Plane::Exceptions) | (Preset::Plain, _) => vec![CParameter::CompressionLevel(level)],
            (Preset::Tuned, _) if level < OPTIMAL_PARSER_LEVEL => vec![CParameter::CompressionLevel(level)],
            (Preset::Tuned, Plane::Gaps) => vec![CParameter::CompressionLevel(level), CParameter::MinMatch(6)],
            (Preset::Tuned, Plane::Counts) => vec![CParameter::CompressionLevel(level), CParameter::MinMatch(5)],
            (Preset::Fast, Plane::Gaps) => {
                vec![
                    CParameter::CompressionLevel(FAST_LEVEL),
                    CParameter::MinMatch(6),
                    CParameter::SearchLog(FAST_GAPS_SEARCH_LOG),
                ]
            }
            (Preset::Fast, Plane::Counts) => vec![
                CParameter::CompressionLevel(FAST_LEVEL),
                CParameter::MinMatch(6),
                CParameter::SearchLog(FAST_COUNTS_SEARCH_LOG),
                CParameter::TargetLength(256),
            ],
        }
    }
}

/// The lowest zstd level whose strategy is an optimal parser (btopt), where [`Preset::Tuned`] applies.
const OPTIMAL_PARSER_LEVEL: i32 = 16;
const FAST_LEVEL: i32 = 16;
const FAST_GAPS_SEARCH_LOG: u32 = 3;
const FAST_COUNTS_SEARCH_LOG: u32 = 4;

/// What a frame holds, for the choice of its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plane {
    /// The low and high byte planes of a chunk's gaps.
    Gaps,
    /// The low and high byte planes of a chunk's counts.
    Counts,
    /// Exception positions and payloads (rare and small): always the plain level.
    Exceptions,
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Preset {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Preset::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("unknown preset {s:?}: use tuned (the default), plain or fast"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for p in Preset::ALL {
            assert_eq!(p.as_str().parse::<Preset>(), Ok(p));
        }
        assert!("fastest".parse::<Preset>().unwrap_err().contains("tuned"));
    }

    #[test]
    fn tuning_applies_from_the_optimal_parser_levels_only() {
        let level_only = |l| vec![CParameter::CompressionLevel(l)];
        assert_eq!(Preset::Tuned.parameters(3, Plane::Gaps), level_only(3));
        assert_eq!(Preset::Tuned.parameters(15, Plane::Counts), level_only(15));
        assert_eq!(Preset::Plain.parameters(19, Plane::Gaps), level_only(19));
        assert_eq!(Preset::Tuned.parameters(19, Plane::Exceptions), level_only(19));
        assert_eq!(
            Preset::Tuned.parameters(16, Plane::Gaps),
            [CParameter::CompressionLevel(16), CParameter::MinMatch(6)]
        );
        assert_eq!(
            Preset::Tuned.parameters(22, Plane::Counts),
            [CParameter::CompressionLevel(22), CParameter::MinMatch(5)]
        );
    }
}
