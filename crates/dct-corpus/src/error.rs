//! What can go wrong with a corpus.

use dct_dataset::DatasetError;

/// An error of a corpus: each names the member (and gene or cell) it is about, and says its cause once.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CorpusError {
    /// A member dataset could not be read.
    #[error("corpus member {member:?}: {cause}")]
    Member {
        /// The member's name.
        member: String,
        /// What the dataset reader said.
        cause: Box<DatasetError>,
    },
    /// A member's genes cannot be identified as asked (no gene names, no such gene-table column, a missing value).
    #[error("corpus member {member:?}: {message}")]
    GeneKey {
        /// The member's name.
        member: String,
        /// What is wrong, and what to do.
        message: String,
    },
    /// A member names one gene twice, so its columns cannot be placed in the vocabulary.
    #[error(
        "corpus member {member:?} names gene {gene:?} twice; identify genes by a gene-table column whose values \
         are unique (a gene key such as \"gene_ids\")"
    )]
    DuplicateGene {
        /// The member's name.
        member: String,
        /// The repeated identifier.
        gene: String,
    },
    /// An obs column has one kind in one member and another kind in another.
    #[error(
        "obs column {column:?} is {first_kind} in member {first:?} but {kind} in member {member:?}: a corpus \
         column has one kind; rename one of them, or leave the column out"
    )]
    ObsConflict {
        /// The column.
        column: String,
        /// The first member that has it.
        first: String,
        /// Its kind there.
        first_kind: &'static str,
        /// The member that disagrees.
        member: String,
        /// Its kind there.
        kind: &'static str,
    },
    /// An obs column no member has.
    #[error("unknown obs column {column:?}; the corpus has {available:?}")]
    UnknownObsColumn {
        /// The name asked for.
        column: String,
        /// The corpus's columns.
        available: Vec<String>,
    },
    /// A member's obs could not be read.
    #[error("corpus member {member:?}: {message}")]
    Obs {
        /// The member's name.
        member: String,
        /// What the obs reader said.
        message: String,
    },
    /// A requested cell is not in the corpus (or the selection).
    #[error(transparent)]
    CellOutOfRange(#[from] dct_format::CellOutOfRange),
    /// A bad argument (members, vocabulary, selection).
    #[error("{0}")]
    InvalidArgument(String),
}

impl CorpusError {
    pub(crate) fn member(member: &str, cause: DatasetError) -> CorpusError {
        CorpusError::Member { member: member.to_string(), cause: Box::new(cause) }
    }
}
