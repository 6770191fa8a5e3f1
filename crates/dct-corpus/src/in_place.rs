//! Rows of members aligned to the vocabulary, decoded where they go: a member whose genes are all in the
//! vocabulary, in its order (written by `corpus align`), keeps each row's length in the corpus's columns, so the
//! output can be laid out from the rows' stored lengths before anything is decoded and each row decoded at its
//! place and renumbered there, where other members' rows go through a member batch and are copied out of it.

use dct_dataset::CountValue;

use crate::corpus::{Corpus, Place, row_places};
use crate::error::CorpusError;

impl Corpus {
    /// [`Corpus::fill_rows`] where every member read keeps its rows' lengths (members aligned to the vocabulary):
    /// the rows' lengths first, so the output is laid out before anything is decoded, then each member's rows
    /// decoded straight into their places and renumbered there, with no member batch between.
    pub(crate) fn fill_rows_in_place<'o, V: CountValue>(
        &self,
        located: &[(u32, u64)],
        member_cells: &[Vec<u64>],
        row_in_member: &[usize],
        indptr: &mut Vec<i64>,
        output: impl FnOnce(usize) -> Result<(&'o mut [i32], &'o mut [V]), CorpusError>,
    ) -> Result<(), CorpusError> {
        let mut lengths: Vec<Vec<u64>> = vec![Vec::new(); member_cells.len()];
        for (m, locals) in member_cells.iter().enumerate() {
            if !locals.is_empty() {
                let member = &self.members[m];
                member
                    .dataset
                    .row_nnz_into(locals, &mut lengths[m])
                    .map_err(|e| CorpusError::member(&member.name, e))?;
            }
        }
        indptr.clear();
        indptr.reserve(located.len() + 1);
        indptr.push(0);
        let mut total = 0u64;
        for (i, &(m, _)) in located.iter().enumerate() {
            total += lengths[m as usize][row_in_member[i]];
            indptr.push(total as i64);
        }
        let (out_indices, out_values) = output(total as usize)?;
        // Each row's place in the output, handed to its member in the member's row order.
        let mut places: Vec<Vec<Option<Place<'o, V>>>> =
            member_cells.iter().map(|locals| (0..locals.len()).map(|_| None).collect()).collect();
        for (i, place) in row_places(indptr, out_indices, out_values).enumerate() {
            places[located[i].0 as usize][row_in_member[i]] = Some(place);
        }
        for (m, member_places) in places.into_iter().enumerate() {
            if member_places.is_empty() {
                continue;
            }
            // Every row of the member has its place: row_in_member numbers the member's rows densely.
            let mut member_places: Vec<Place<'o, V>> = member_places.into_iter().flatten().collect();
            let (member, columns) = (&self.members[m], self.map.member(m));
            member
                .dataset
                .map_rows_in_place(&member_cells[m], &mut member_places, |indices, _| {
                    columns.renumber_in_place(indices)
                })
                .map_err(|e| CorpusError::member(&member.name, e))?;
        }
        Ok(())
    }
}
