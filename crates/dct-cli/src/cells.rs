//! Cell selections given on the command line (`--cells 0:100,5000,7:9`), kept as ranges: a selection of every
//! cell of a large dataset (or of one whose manifest claims more cells than it holds) costs nothing until its cells
//! are read, a batch at a time.

use std::ops::Range;

/// Half-open ranges of cells, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellSelection {
    ranges: Vec<Range<u64>>,
}

impl CellSelection {
    /// Parses `0:100,5000,7:9` (half-open ranges, either end open, and single cells) against `n_cells`.
    pub fn parse(spec: &str, n_cells: u64) -> anyhow::Result<CellSelection> {
        let mut ranges = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let num = |s: &str, what: &str| -> anyhow::Result<u64> {
                s.trim().parse::<u64>().map_err(|_| {
                    crate::output::Usage(format!("--cells: {what} `{s}` in `{part}` is not a cell index")).into()
                })
            };
            let (lo, hi) = match part.split_once(':') {
                Some((a, b)) => {
                    let lo = if a.trim().is_empty() { 0 } else { num(a, "start")? };
                    let hi = if b.trim().is_empty() { n_cells } else { num(b, "end")? };
                    (lo, hi)
                }
                None => {
                    let c = num(part, "cell")?;
                    (c, c.saturating_add(1))
                }
            };
            if lo > hi {
                return Err(crate::output::Usage(format!("--cells: `{part}` ends before it starts (START:END)")).into());
            }
            if hi > n_cells {
                anyhow::bail!("--cells: `{part}` is outside the dataset's {n_cells} cells (0:{n_cells})");
            }
            if lo < hi {
                ranges.push(lo..hi);
            }
        }
        Ok(CellSelection { ranges })
    }

    /// Cells selected.
    pub fn len(&self) -> u64 {
        self.ranges.iter().map(|r| r.end - r.start).sum()
    }

    /// The cells in order, `size` at a time (the last batch shorter).
    pub fn batches(&self, size: usize) -> impl Iterator<Item = Vec<u64>> + '_ {
        let mut cells = self.ranges.iter().flat_map(|r| r.clone());
        std::iter::from_fn(move || {
            let batch: Vec<u64> = cells.by_ref().take(size.max(1)).collect();
            (!batch.is_empty()).then_some(batch)
        })
    }

    /// Every cell selected (for selections the user spelled out, such as the few cells `obs show` prints).
    pub fn to_vec(&self) -> Vec<u64> {
        self.ranges.iter().flat_map(|r| r.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_selections() {
        let cells = |spec: &str, n: u64| CellSelection::parse(spec, n).map(|s| s.to_vec());
        assert_eq!(cells("0:3,7", 10).unwrap(), vec![0, 1, 2, 7]);
        assert_eq!(cells("8:", 10).unwrap(), vec![8, 9]);
        assert_eq!(cells(":", 0).unwrap(), Vec::<u64>::new());
        assert!(cells("0:11", 10).is_err());
        assert!(cells("x", 10).is_err());
        assert!(cells("5:2", 10).is_err());
        assert!(cells("10", 10).is_err());
    }

    #[test]
    fn a_selection_of_every_cell_of_a_huge_dataset_costs_its_ranges_only() {
        let all = CellSelection::parse(":", 1 << 40).unwrap();
        assert_eq!(all.len(), 1 << 40);
        let first: Vec<Vec<u64>> = all.batches(3).take(2).collect();
        assert_eq!(first, vec![vec![0, 1, 2], vec![3, 4, 5]]);
        let some = CellSelection::parse("5,0:2,9:11", 20).unwrap();
        let batches: Vec<Vec<u64>> = some.batches(2).collect();
        assert_eq!(batches, vec![vec![5, 0], vec![1, 9], vec![10]]);
        assert_eq!(some.len(), 5);
    }
}
