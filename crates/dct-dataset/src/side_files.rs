//! The small side files of a dataset (`var_names.txt`, `gene_order.npy`): size limits, parsing and checks, shared
//! by the reader, the verifier and the writer.

use bytes::Bytes;
use dct_store::{Store, StoreError};

use crate::error::DatasetError;

pub(crate) fn gene_order_limit(n_genes: u64) -> u64 {
    n_genes.saturating_mul(4).saturating_add(crate::npy::MAX_HEADER_LEN as u64 + 12)
}

pub(crate) fn side_file_result(
    store: &Store,
    rel: &str,
    limit: u64,
    got: Result<Bytes, StoreError>,
) -> Result<Bytes, DatasetError> {
    let url = store.url(rel);
    match got {
        Ok(b) => Ok(b),
        Err(StoreError::NotFound { .. }) => Err(DatasetError::SideFileMissing { url }),
        Err(StoreError::TooLarge { size, .. }) => Err(DatasetError::SideFile {
            url,
            message: format!("the file is {size} bytes, more than the {limit} bytes accepted"),
        }),
        Err(e) => Err(e.into()),
    }
}

/// [`side_file_result`], then the bytes checked against the digest `manifest` records for `rel` (if any).
pub(crate) fn checked_side_file(
    store: &Store,
    manifest: &crate::manifest::Manifest,
    rel: &str,
    limit: u64,
    got: Result<Bytes, StoreError>,
) -> Result<Bytes, DatasetError> {
    let bytes = side_file_result(store, rel, limit, got)?;
    manifest.check_side_file(rel, &bytes).map_err(|message| DatasetError::SideFile { url: store.url(rel), message })?;
    Ok(bytes)
}

/// The first column at which `names` lists the genes of `stored` (a dataset's gene names, in its column order) in
/// another order, if it holds the same names in another order: a gene table or names file of another gene order,
/// which would put counts under other genes' names. Names of another kind (symbols against IDs) are not compared.
pub fn same_genes_in_another_order(names: &[String], stored: &[String]) -> Option<usize> {
    if names == stored {
        return None;
    }
    let (mut a, mut b) = (names.to_vec(), stored.to_vec());
    a.sort_unstable();
    b.sort_unstable();
    (a == b).then(|| names.iter().zip(stored).position(|(x, y)| x != y).unwrap_or_default())
}

/// Parses `var_names.txt`: UTF-8, one name per line (`\n`, an optional `\r` before it is dropped), exactly
/// `n_genes` lines.
pub(crate) fn parse_var_names(bytes: &[u8], n_genes: u64) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8 text: {e}"))?;
    let body = text.strip_suffix('\n').unwrap_or(text);
    let lines = if text.is_empty() { 0 } else { body.split('\n').count() as u64 };
    if lines != n_genes {
        return Err(format!("holds {lines} names but the dataset has {n_genes} genes (one name per line expected)"));
    }
    Ok(body.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l).to_string()).collect())
}

/// Parses `gene_order.npy` and checks it is a permutation of `0..n_genes`.
pub(crate) fn parse_gene_order(bytes: &[u8], n_genes: u64) -> Result<Vec<i32>, String> {
    let order = crate::npy::parse_i32(bytes)?;
    if order.len() as u64 != n_genes {
        return Err(format!("holds {} entries but the dataset has {n_genes} genes", order.len()));
    }
    check_permutation(&order)?;
    Ok(order)
}

pub(crate) fn check_permutation(order: &[i32]) -> Result<(), String> {
    let n = order.len();
    let mut seen = vec![false; n];
    for (j, &g) in order.iter().enumerate() {
        let ok = usize::try_from(g).ok().filter(|&g| g < n);
        let Some(g) = ok else {
            return Err(format!("entry {j} is {g}, outside 0..{n}: not a permutation of the genes"));
        };
        if std::mem::replace(&mut seen[g], true) {
            return Err(format!("gene {g} appears twice (again at entry {j}): not a permutation of the genes"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn var_names_parsing() {
        assert_eq!(parse_var_names(b"a\nb\n", 2).unwrap(), vec!["a", "b"]);
        assert_eq!(parse_var_names(b"a\r\nb", 2).unwrap(), vec!["a", "b"]);
        assert_eq!(parse_var_names(b"\n", 1).unwrap(), vec![""]);
        assert!(parse_var_names(b"a\nb\n", 3).is_err());
        assert!(parse_var_names(b"", 1).is_err());
        assert!(parse_var_names(b"\xff\n", 1).is_err());
    }

    #[test]
    fn permutation_check() {
        assert!(check_permutation(&[2, 0, 1]).is_ok());
        assert!(check_permutation(&[2, 0, 0]).is_err());
        assert!(check_permutation(&[3, 0, 1]).is_err());
        assert!(check_permutation(&[-1, 0, 1]).is_err());
    }
}
