//! Which files a conversion reads: the paths and glob patterns a user gives, resolved by one rule for the CLI
//! (`deltacells convert`) and the Python package (`deltacells.convert`), so the same arguments make the same
//! dataset through either.

use std::cmp::Ordering;

use crate::error::ConvertError;

/// The input files named by `patterns`, in the order a conversion reads them.
///
/// * An argument with `*`, `?` or `[` is a glob pattern: `**` matches any number of directories, and a name
///   beginning with `.` matches only a pattern that spells the dot (as the shell and Python's `glob` have it).
///   Its matches come in natural order ([`natural_cmp`]). A pattern that matches no file is an error.
/// * Any other argument names one input (a file, or a 10x Matrix Market directory), which must exist.
/// * A path given twice (by two patterns, or a pattern and a name) is read once, where it first came.
/// * With `sort`, the whole list is in natural order; without, in the order given.
///
/// Errors are [`ConvertError::Io`] of kind `NotFound` for an argument that names nothing, and
/// [`ConvertError::Inputs`] for a malformed pattern or when nothing is given.
pub fn resolve_inputs<S: AsRef<str>>(patterns: &[S], sort: bool) -> Result<Vec<String>, ConvertError> {
    if patterns.is_empty() {
        return Err(ConvertError::Inputs("no input given".into()));
    }
    // Hidden names are left out by matching each path again with `require_literal_leading_dot`: the directory
    // walk itself, given that option, drops every hidden entry, even for a pattern that spells the dot (`.*`).
    let walk = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: false,
    };
    let shown = glob::MatchOptions { require_literal_leading_dot: true, ..walk };
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for pattern in patterns {
        let pattern = pattern.as_ref();
        let is_glob = pattern.contains(['*', '?', '[']);
        let mut matched: Vec<String> = if is_glob {
            let bad = |e: glob::PatternError| ConvertError::Inputs(format!("bad pattern {pattern:?}: {e}"));
            // The walk gives paths without `.` components (`./d/*.h5ad` finds `d/a.h5ad`): the pattern they are
            // matched against again is written without them too.
            let walked = without_current_dir(pattern);
            let compiled = glob::Pattern::new(&walked).map_err(bad)?;
            let paths = glob::glob_with(&walked, walk).map_err(bad)?;
            let mut files = Vec::new();
            for entry in paths {
                let path = entry.map_err(|e| ConvertError::Io {
                    path: e.path().display().to_string(),
                    cause: std::io::Error::new(e.error().kind(), e.error().to_string()),
                })?;
                if compiled.matches_path_with(&path, shown) {
                    files.push(path.to_string_lossy().into_owned());
                }
            }
            files.sort_by(|a, b| natural_cmp(a, b));
            files
        } else if std::path::Path::new(pattern).exists() {
            vec![pattern.to_string()]
        } else {
            Vec::new()
        };
        if matched.is_empty() {
            let what = if is_glob { "matches nothing" } else { "does not exist" };
            return Err(ConvertError::Io {
                path: pattern.to_string(),
                cause: std::io::Error::new(std::io::ErrorKind::NotFound, format!("{what}; check the path")),
            });
        }
        matched.retain(|p| seen.insert(p.clone()));
        out.extend(matched);
    }
    if sort {
        out.sort_by(|a, b| natural_cmp(a, b));
    }
    Ok(out)
}

/// `pattern` without its `.` components (`./d/*.h5ad` as `d/*.h5ad`, `d/./*.h5ad` as `d/*.h5ad`).
fn without_current_dir(pattern: &str) -> String {
    let mut rest = pattern;
    while let Some(r) = rest.strip_prefix("./") {
        rest = r.trim_start_matches('/');
    }
    let mut out = rest.to_string();
    while out.contains("/./") {
        out = out.replace("/./", "/");
    }
    out
}

/// Compares natural-sort keys: digit runs by value, so `part2` sorts before `part10`.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (a.as_bytes(), b.as_bytes());
    loop {
        match (x.first(), y.first()) {
            (None, None) => return a.cmp(b),
            (None, _) => return Ordering::Less,
            (_, None) => return Ordering::Greater,
            (Some(c), Some(d)) if c.is_ascii_digit() && d.is_ascii_digit() => {
                let lx = x.iter().take_while(|c| c.is_ascii_digit()).count();
                let ly = y.iter().take_while(|c| c.is_ascii_digit()).count();
                let (nx, ny) = (trim_zeros(&x[..lx]), trim_zeros(&y[..ly]));
                let ord = nx.len().cmp(&ny.len()).then_with(|| nx.cmp(ny));
                if ord != Ordering::Equal {
                    return ord;
                }
                x = &x[lx..];
                y = &y[ly..];
            }
            (Some(c), Some(d)) => {
                if c != d {
                    return c.cmp(d);
                }
                x = &x[1..];
                y = &y[1..];
            }
        }
    }
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let z = d.iter().take_while(|&&c| c == b'0').count();
    &d[z.min(d.len().saturating_sub(1))..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut v = vec!["b10.h5ad", "b2.h5ad", "a.h5ad", "b02x", "b1.h5ad"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["a.h5ad", "b1.h5ad", "b2.h5ad", "b02x", "b10.h5ad"]);
    }

    /// `d/s2.h5ad d/s10.h5ad d/s1.h5ad d/.hidden.h5ad d/sub/s3.h5ad d/sub/deeper/s0.h5ad`, and the names relative
    /// to `d` of what `patterns` resolve to.
    fn resolved(patterns: &[&str], sort: bool) -> Result<Vec<String>, ConvertError> {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("sub/deeper")).unwrap();
        for name in ["s2.h5ad", "s10.h5ad", "s1.h5ad", ".hidden.h5ad", "sub/s3.h5ad", "sub/deeper/s0.h5ad"] {
            std::fs::write(d.join(name), b"x").unwrap();
        }
        let root = format!("{}/", d.display());
        let patterns: Vec<String> = patterns.iter().map(|p| format!("{root}{p}")).collect();
        resolve_inputs(&patterns, sort).map(|v| v.into_iter().map(|p| p[root.len()..].to_string()).collect())
    }

    #[test]
    fn patterns_match_in_natural_order_without_hidden_files() {
        assert_eq!(resolved(&["*.h5ad"], true).unwrap(), ["s1.h5ad", "s2.h5ad", "s10.h5ad"]);
        assert_eq!(resolved(&[".*.h5ad"], true).unwrap(), [".hidden.h5ad"]);
        assert_eq!(resolved(&["./*.h5ad"], true).unwrap(), ["s1.h5ad", "s2.h5ad", "s10.h5ad"], "a `.` component");
        assert_eq!(resolved(&["sub/./*.h5ad"], true).unwrap(), ["sub/s3.h5ad"]);
        assert_eq!(
            resolved(&["**/*.h5ad"], true).unwrap(),
            ["s1.h5ad", "s2.h5ad", "s10.h5ad", "sub/deeper/s0.h5ad", "sub/s3.h5ad"]
        );
    }

    #[test]
    fn a_path_given_twice_is_read_once_where_it_first_came() {
        let got = resolved(&["s10.h5ad", "*.h5ad", "s2.h5ad"], false).unwrap();
        assert_eq!(got, ["s10.h5ad", "s1.h5ad", "s2.h5ad"]);
        assert_eq!(resolved(&["s10.h5ad", "*.h5ad", "s2.h5ad"], true).unwrap(), ["s1.h5ad", "s2.h5ad", "s10.h5ad"]);
        assert_eq!(resolved(&["sub", "sub"], true).unwrap(), ["sub"], "a folder (10x Matrix Market) is an input too");
    }

    #[test]
    fn an_argument_naming_nothing_is_an_error() {
        for (pattern, says) in [("nothing*.h5ad", "matches nothing"), ("s3.h5ad", "does not exist")] {
            match resolved(&["s1.h5ad", pattern], true) {
                Err(ConvertError::Io { path, cause: source }) => {
                    assert!(path.ends_with(pattern) && source.kind() == std::io::ErrorKind::NotFound);
                    assert!(source.to_string().contains(says), "{source}");
                }
                other => panic!("{pattern}: {other:?}"),
            }
        }
        assert!(matches!(resolve_inputs::<&str>(&[], true), Err(ConvertError::Inputs(_))));
        assert!(matches!(resolved(&["[z.h5ad"], true), Err(ConvertError::Inputs(_))));
    }
}
