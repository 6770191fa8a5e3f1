//! A corpus's members written again with their genes in the corpus's vocabulary order: each member becomes a
//! [`subset`] of all its cells and of its genes in the vocabulary, stored in the vocabulary's order. A corpus over
//! the aligned members (with the same vocabulary) then moves each row to its columns by renumbering its entries,
//! where members in orders of their own need every row re-ordered, which costs about as much as decoding it. For
//! training over many epochs the one pass pays back at the second epoch; the price is the bytes: genes in the
//! vocabulary's order compress less well than in a member's own order of decreasing totals.

use std::collections::HashSet;
use std::sync::Arc;

use dct_codec::Preset;
use dct_corpus::{Corpus, GeneKey, GeneSpace, Member};
use dct_dataset::{Dataset, ReadOptions};
use dct_store::StoreOptions;

use crate::error::ConvertError;
use crate::subset::{SubsetOptions, SubsetReport, subset};

/// How [`align_members`] writes the members.
#[derive(Debug, Clone)]
pub struct AlignOptions {
    /// The vocabulary: the members' union or intersection, or a list of gene identifiers (its order is the
    /// order the aligned members store their genes in).
    pub genes: GeneSpace,
    /// How genes are identified across members: the var names, or a column of each member's gene table.
    pub gene_key: GeneKey,
    /// zstd level (default 19) and preset of the aligned members' tiles.
    pub level: i32,
    /// How the zstd parameters follow from the level.
    pub preset: Preset,
    /// Replace datasets already at the outputs.
    pub overwrite: bool,
    /// Backends of the members and the outputs.
    pub store: StoreOptions,
}

impl Default for AlignOptions {
    fn default() -> Self {
        AlignOptions {
            genes: GeneSpace::Union,
            gene_key: GeneKey::VarNames,
            level: 19,
            preset: Preset::default(),
            overwrite: false,
            store: StoreOptions::default(),
        }
    }
}

/// One member written by [`align_members`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlignedMember {
    /// The member read.
    pub source: String,
    /// Where its aligned copy is.
    pub output: String,
    /// What was written (or found already written).
    pub report: SubsetReport,
}

/// The name a member's aligned copy takes in the output folder: the last component of its path or URL.
fn member_name(url: &str) -> &str {
    let trimmed = url.trim_end_matches('/');
    trimmed.rsplit(['/', '\\']).next().unwrap_or(trimmed)
}

/// Where `member`'s aligned copy goes in `output_dir`.
fn member_output(output_dir: &str, member: &str) -> String {
    format!("{}/{}", output_dir.trim_end_matches('/'), member_name(member))
}

/// Writes each of `members` (paths or store URLs, read as one corpus with `opts.genes` and `opts.gene_key`) into
/// `output_dir`, under its own last path component, holding every cell and obs column of the member and its genes
/// in the vocabulary, in the vocabulary's order (genes of the member outside it are left out). Members are written
/// one after another; each is a [`subset`], so an interrupted run is completed by running it again (members already
/// written are left as they are). Members whose names collide, a member that cannot be opened, or one with no gene
/// in the vocabulary are refused before anything is written.
pub fn align_members(
    members: &[String],
    output_dir: &str,
    opts: &AlignOptions,
) -> Result<Vec<AlignedMember>, ConvertError> {
    if members.is_empty() {
        return Err(ConvertError::Inputs("no member to align".into()));
    }
    let mut names = HashSet::new();
    for url in members {
        let name = member_name(url);
        if name.is_empty() || !names.insert(name) {
            return Err(ConvertError::Inputs(format!(
                "member {url} would be written as {name:?} in {output_dir}, which another member takes too: give \
                 the members distinct folder names"
            )));
        }
    }
    for url in members {
        crate::io::refuse_output_at_a_source(&member_output(output_dir, url), members, "alignment")?;
    }
    let read = ReadOptions { store: opts.store.clone(), max_cached_tiles: 2, ..ReadOptions::default() };
    let opened = members
        .iter()
        .map(|url| {
            let dataset = Dataset::open(url, read.clone()).map_err(|e| ConvertError::Inputs(format!("{url}: {e}")))?;
            Ok(Member { name: url.clone(), dataset: Arc::new(dataset) })
        })
        .collect::<Result<Vec<_>, ConvertError>>()?;
    let corpus = Corpus::open(opened, &opts.gene_key, &opts.genes).map_err(|e| ConvertError::Inputs(e.to_string()))?;
    // (A given vocabulary keeps some gene of every member: `Corpus::open` refuses one that leaves a member none.)
    let vocabulary = corpus.genes().to_vec();
    drop(corpus);
    let mut written = Vec::with_capacity(members.len());
    for url in members {
        let output = member_output(output_dir, url);
        let options = SubsetOptions {
            genes: Some(vocabulary.clone()),
            gene_key: opts.gene_key.clone(),
            listed_gene_order: true,
            skip_missing_genes: true,
            level: opts.level,
            preset: opts.preset,
            overwrite: opts.overwrite,
            store: opts.store.clone(),
            ..SubsetOptions::default()
        };
        let report = subset(url, &output, &options)?;
        written.push(AlignedMember { source: url.clone(), output, report });
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::member_name;

    #[test]
    fn a_member_is_named_by_the_last_component_of_its_path_or_url() {
        assert_eq!(member_name("/data/a/pbmc.dct"), "pbmc.dct");
        assert_eq!(member_name("/data/a/pbmc.dct/"), "pbmc.dct");
        assert_eq!(member_name("s3://bucket/atlas/lung"), "lung");
        assert_eq!(member_name("lung"), "lung");
    }
}
