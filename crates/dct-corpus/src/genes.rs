//! The corpus's gene vocabulary and, for each member, where each of its stored columns goes in it.

use crate::error::CorpusError;
use crate::interner::GeneInterner;

/// Which genes the corpus has, in its column order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GeneSpace {
    /// Every gene of any member, in order of first appearance (member 0's genes, then member 1's new ones, ...).
    Union,
    /// The genes every member has, in member 0's order.
    Intersection,
    /// A given vocabulary (a model's), in its order: genes no member has are empty columns, and member genes
    /// outside it are dropped when rows are read.
    Given(Vec<String>),
}

/// How genes are identified across members.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GeneKey {
    /// Each member's `var_names` (its gene names, in stored column order).
    #[default]
    VarNames,
    /// A column of each member's gene table (`var.parquet`), e.g. `gene_ids` for Ensembl IDs.
    Column(String),
}

/// Where one member's stored columns go in the corpus's columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberColumns {
    /// Corpus column of each stored column of the member; `dropped` for a gene the vocabulary leaves out.
    to_corpus: Vec<u32>,
    /// The vocabulary's size: the column past it, where a row's genes outside it are placed (and left).
    dropped: u32,
    /// The words of a row's bits (64 corpus columns each) that the member's kept columns fall in.
    words: std::ops::Range<usize>,
    /// Whether the kept columns keep their relative order, so a row's sorted indices stay sorted.
    increasing: bool,
    /// Whether every stored column is the corpus column of its own index (the vocabulary begins with the
    /// member's genes in their order), so rows are copied as they are.
    unchanged: bool,
    /// Member columns in the vocabulary.
    kept: usize,
}

impl MemberColumns {
    /// Where the stored columns of a member go: `to_corpus[j]` is the corpus column of stored column `j`, or
    /// `dropped` (the vocabulary's size) for a gene the vocabulary leaves out.
    fn new(to_corpus: Vec<u32>, dropped: u32) -> MemberColumns {
        let kept: Vec<u32> = to_corpus.iter().copied().filter(|&c| c != dropped).collect();
        let increasing = kept.windows(2).all(|w| w[0] < w[1]);
        // A dropped gene's column (the vocabulary's size) may equal its own index: it is not a copy then.
        let unchanged = kept.len() == to_corpus.len() && to_corpus.iter().enumerate().all(|(j, &c)| c as usize == j);
        let first = kept.iter().min().map_or(0, |&c| c as usize >> 6);
        let last = kept.iter().max().map_or(0, |&c| c as usize >> 6);
        MemberColumns { kept: kept.len(), words: first..last + 1, to_corpus, dropped, increasing, unchanged }
    }

    /// The corpus column of stored column `j` of the member (`None` if the vocabulary leaves it out).
    pub fn corpus_column(&self, j: usize) -> Option<u32> {
        self.to_corpus.get(j).copied().filter(|&c| c != self.dropped)
    }

    /// The member's genes in the vocabulary.
    pub fn kept(&self) -> usize {
        self.kept
    }

    /// The member's genes.
    pub fn n_genes(&self) -> usize {
        self.to_corpus.len()
    }

    /// Whether the member's genes in the vocabulary are stored in the vocabulary's order, so its rows are
    /// renumbered as they are read but not re-ordered (see `deltacells corpus align`).
    pub fn in_vocabulary_order(&self) -> bool {
        self.increasing
    }

    /// Whether the member's genes are the vocabulary's, in its order (rows then need no re-indexing).
    pub fn is_identity(&self, corpus_genes: usize) -> bool {
        self.unchanged && self.kept == corpus_genes
    }

    /// Whether every row keeps its length in the corpus's columns: the member's genes are all in the vocabulary, in
    /// its order (a member written by `corpus align`, or one in the vocabulary's genes), so a row is moved by
    /// renumbering its gene indices where it lies.
    pub fn keeps_row_lengths(&self) -> bool {
        self.unchanged || (self.increasing && self.kept == self.to_corpus.len())
    }

    /// A row of a member that [`MemberColumns::keeps_row_lengths`], its stored columns (below the member's gene
    /// count, as the reader hands them out) turned into corpus columns where they lie.
    pub(crate) fn renumber_in_place(&self, indices: &mut [i32]) {
        if !self.unchanged {
            for g in indices {
                *g = self.to_corpus[*g as usize] as i32;
            }
        }
    }

    /// Entries of a member row (`indices`, stored columns) that the vocabulary keeps.
    #[cfg(test)]
    pub(crate) fn kept_in(&self, indices: &[i32]) -> usize {
        indices.iter().filter(|&&g| self.to_corpus[g as usize] != self.dropped).count()
    }

    /// Writes one member row (`indices` in stored column order, increasing) moved to the corpus's columns at the
    /// start of `out_indices` / `out_values` (which hold at least as many entries as the row keeps): genes
    /// outside the vocabulary dropped, the rest in increasing corpus column. Returns the entries written; the
    /// output's entries past those may be overwritten too. `scratch` is reused across rows (of any member).
    pub(crate) fn write_row<V: Copy + Default + 'static>(
        &self,
        indices: &[i32],
        values: &[V],
        out_indices: &mut [i32],
        out_values: &mut [V],
        scratch: &mut RowScratch<V>,
    ) -> usize {
        if self.unchanged {
            let n = indices.len();
            out_indices[..n].copy_from_slice(indices);
            out_values[..n].copy_from_slice(values);
            return n;
        }
        if self.increasing && self.kept == self.to_corpus.len() {
            // Every gene of the member is in the vocabulary, in its order (a member written by `corpus align`): each
            // entry is renumbered, with no test, and the values are copied whole.
            let n = indices.len();
            for (o, &g) in out_indices[..n].iter_mut().zip(indices) {
                *o = self.to_corpus[g as usize] as i32;
            }
            out_values[..n].copy_from_slice(values);
            return n;
        }
        if self.increasing {
            let kept = indices.iter().zip(values).filter_map(|(&g, &v)| {
                // The reader hands out only indices below the member's gene count.
                let c = self.to_corpus[g as usize];
                (c != self.dropped).then_some((c as i32, v))
            });
            let mut k = 0;
            for ((c, v), (oi, ov)) in kept.zip(out_indices.iter_mut().zip(out_values.iter_mut())) {
                *oi = c;
                *ov = v;
                k += 1;
            }
            return k;
        }
        scratch.place(self, indices, values, out_indices, out_values)
    }
}

/// A thread's scratch for re-ordering rows: a bit per corpus column and each column's value, so a row is placed
/// by its corpus columns and read back in increasing order in time linear in the row and the vocabulary's words,
/// instead of being sorted. The values sit at their columns so the read back walks them in order, not through a
/// second lookup; the slot past the vocabulary takes the genes it leaves out, so placing a row has no branch.
/// Kept per thread (one per value type) and reused.
#[derive(Debug, Clone, Default)]
pub(crate) struct RowScratch<V> {
    bits: Vec<u64>,
    dense: Vec<V>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<Box<dyn std::any::Any>>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl<V: Copy + Default + 'static> RowScratch<V> {
    /// Runs `f` with this thread's scratch for values of type `V`.
    pub(crate) fn with<R>(f: impl FnOnce(&mut RowScratch<V>) -> R) -> R {
        SCRATCH.with(|cell| {
            let mut all = cell.borrow_mut();
            let at = match all.iter().position(|s| s.is::<RowScratch<V>>()) {
                Some(at) => at,
                None => {
                    all.push(Box::new(RowScratch::<V>::default()));
                    all.len() - 1
                }
            };
            f(all[at].downcast_mut::<RowScratch<V>>().expect("found by its type above"))
        })
    }

    /// Places a row of the member `columns` describes and reads it back in column order into `out_i` / `out_v`;
    /// returns the entries written.
    fn place(
        &mut self,
        columns: &MemberColumns,
        indices: &[i32],
        values: &[V],
        out_i: &mut [i32],
        out_v: &mut [V],
    ) -> usize {
        let dropped = columns.dropped as usize;
        // Whole words of bits; the values have a word's slack past the last slot, which the dense read back's
        // unconditional reads of a word's next bits may reach.
        let words = (dropped + 1).div_ceil(64);
        if self.bits.len() < words || self.dense.len() < words * 64 + 64 {
            self.bits.resize(self.bits.len().max(words), 0);
            self.dense.resize(self.dense.len().max(words * 64 + 64), V::default());
        }
        for (&g, &v) in indices.iter().zip(values) {
            // The reader hands out only indices below the member's gene count; a column is at most `dropped`.
            let c = columns.to_corpus[g as usize] as usize;
            self.bits[c >> 6] |= 1u64 << (c & 63);
            self.dense[c] = v;
        }
        self.bits[dropped >> 6] &= !(1u64 << (dropped & 63));
        // The member's words whole, not the row's first to last: tracking those costs each entry more than
        // walking words the row leaves empty.
        let span = columns.words.clone();
        if indices.len() >= span.len() + span.len() / 2 {
            self.read_back_dense(span, out_i, out_v)
        } else {
            self.read_back(span, 0, out_i, out_v)
        }
    }

    /// The set bits of `span`'s words, from entry `k` on; clears them. Returns the entries written.
    fn read_back(&mut self, span: std::ops::Range<usize>, mut k: usize, out_i: &mut [i32], out_v: &mut [V]) -> usize {
        for w in span {
            let mut word = std::mem::take(&mut self.bits[w]);
            while word != 0 {
                let c = (w << 6) + word.trailing_zeros() as usize;
                out_i[k] = c as i32;
                out_v[k] = self.dense[c];
                k += 1;
                word &= word - 1;
            }
        }
        k
    }

    /// [`RowScratch::read_back`] for rows of a few bits a word: each word's first bits are written whether or not
    /// they are set (an unset one writes a slot that the next word overwrites, or that lies past the row), since a
    /// loop over exactly a word's bits mispredicts its exit at nearly every word. Near the end of the output
    /// (where such writes would not fit) it goes on bit by bit.
    fn read_back_dense(&mut self, span: std::ops::Range<usize>, out_i: &mut [i32], out_v: &mut [V]) -> usize {
        let room = out_i.len().min(out_v.len());
        let mut k = 0;
        for w in span.clone() {
            if k + READ_AHEAD > room {
                return self.read_back(w..span.end, k, out_i, out_v);
            }
            let mut word = std::mem::take(&mut self.bits[w]);
            let base = w << 6;
            let set = word.count_ones() as usize;
            let (oi, ov) = (&mut out_i[k..k + READ_AHEAD], &mut out_v[k..k + READ_AHEAD]);
            for (oi, ov) in oi.iter_mut().zip(ov.iter_mut()) {
                // An empty word's trailing zeros are 64: the next word's first slot (or the slack).
                let c = base + word.trailing_zeros() as usize;
                *oi = c as i32;
                *ov = self.dense[c];
                word &= word.wrapping_sub(1);
            }
            k += set.min(READ_AHEAD);
            while word != 0 {
                let c = base + word.trailing_zeros() as usize;
                out_i[k] = c as i32;
                out_v[k] = self.dense[c];
                k += 1;
                word &= word - 1;
            }
        }
        k
    }
}

/// Bits of a word the dense read back writes unconditionally: a row of a few hundred genes over a vocabulary of
/// tens of thousands sets two or three bits a word.
const READ_AHEAD: usize = 4;

/// A given vocabulary must keep some gene of every member: one that keeps none would serve that member's cells as
/// empty rows, which is a mismatch of identifiers (symbols against Ensembl IDs, bytes against text), not data.
fn check_every_member_keeps_a_gene(
    names: &[String],
    member_ids: &[Vec<u32>],
    members: &[MemberColumns],
    vocabulary: &[u32],
    interner: &GeneInterner,
) -> Result<(), CorpusError> {
    let empty: Vec<usize> =
        (0..members.len()).filter(|&m| members[m].kept() == 0 && !member_ids[m].is_empty()).collect();
    let Some(&first) = empty.first() else { return Ok(()) };
    let quote = |ids: &[u32]| ids.iter().take(3).map(|&id| format!("{:?}", interner.name(id))).collect::<Vec<_>>();
    let which = if empty.len() == members.len() {
        "no member has any gene of the given vocabulary".to_string()
    } else {
        let listed: Vec<&str> = empty.iter().take(5).map(|&m| names[m].as_str()).collect();
        format!("member(s) {} have no gene of the given vocabulary", listed.join(", "))
    };
    Err(CorpusError::InvalidArgument(format!(
        "{which}: it lists {} while member {} names its genes {}, ...; their cells would be empty rows. Give the \
         vocabulary in the members' identifiers (gene_key chooses var_names or a gene-table column such as Ensembl \
         IDs), or leave such members out",
        quote(vocabulary).join(", "),
        names[first],
        quote(&member_ids[first]).join(", "),
    )))
}

/// The corpus's genes and each member's columns in them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneMap {
    genes: Vec<String>,
    members: Vec<MemberColumns>,
}

impl GeneMap {
    /// The vocabulary `space` over members whose genes (identifiers in stored column order) are `member_genes`;
    /// `names` name the members in errors. A member naming one gene twice is refused, naming the member and the
    /// gene; so is an empty vocabulary (an intersection of disjoint members, say).
    pub fn build(names: &[String], member_genes: &[Vec<String>], space: &GeneSpace) -> Result<GeneMap, CorpusError> {
        let mut interner = GeneInterner::new();
        let lists: Vec<Vec<u32>> = member_genes.iter().map(|g| interner.intern_all(g)).collect();
        GeneMap::build_interned(names, &lists, &mut interner, space)
    }

    /// [`GeneMap::build`] over members whose genes are ids of `interner` (see [`GeneInterner`]): what callers
    /// holding many gene lists use, so each identifier is held once. A given vocabulary's identifiers are added
    /// to the interner.
    pub fn build_interned(
        names: &[String],
        member_ids: &[Vec<u32>],
        interner: &mut GeneInterner,
        space: &GeneSpace,
    ) -> Result<GeneMap, CorpusError> {
        // Each member's genes once (a stamp per id: the member that saw it last), and how many members have each.
        let mut stamp = vec![u32::MAX; interner.len()];
        let mut members_with = vec![0u32; interner.len()];
        for (m, (name, ids)) in names.iter().zip(member_ids).enumerate() {
            for &id in ids {
                if std::mem::replace(&mut stamp[id as usize], m as u32) == m as u32 {
                    return Err(CorpusError::DuplicateGene { member: name.clone(), gene: interner.name(id).into() });
                }
                members_with[id as usize] += 1;
            }
        }
        let vocabulary: Vec<u32> = match space {
            GeneSpace::Union => {
                let mut taken = vec![false; interner.len()];
                member_ids
                    .iter()
                    .flatten()
                    .copied()
                    .filter(|&id| !std::mem::replace(&mut taken[id as usize], true))
                    .collect()
            }
            GeneSpace::Intersection => match member_ids.first() {
                None => Vec::new(),
                Some(first) => {
                    first.iter().copied().filter(|&id| members_with[id as usize] as usize == member_ids.len()).collect()
                }
            },
            GeneSpace::Given(vocabulary) => {
                let ids = interner.intern_all(vocabulary);
                let mut taken = vec![false; interner.len()];
                if let Some(&id) = ids.iter().find(|&&id| std::mem::replace(&mut taken[id as usize], true)) {
                    return Err(CorpusError::InvalidArgument(format!(
                        "the gene vocabulary lists {:?} twice; each gene must appear once",
                        interner.name(id)
                    )));
                }
                ids
            }
        };
        if vocabulary.is_empty() {
            return Err(CorpusError::InvalidArgument(
                "the corpus's gene vocabulary is empty (no gene common to every member, or an empty list given)".into(),
            ));
        }
        if vocabulary.len() > i32::MAX as usize {
            return Err(CorpusError::InvalidArgument(format!("{} genes are more than 2^31 - 1", vocabulary.len())));
        }
        let dropped = vocabulary.len() as u32;
        let mut column_of = vec![dropped; interner.len()];
        for (c, &id) in vocabulary.iter().enumerate() {
            column_of[id as usize] = c as u32;
        }
        let members: Vec<MemberColumns> = member_ids
            .iter()
            .map(|ids| MemberColumns::new(ids.iter().map(|&id| column_of[id as usize]).collect(), dropped))
            .collect();
        if let GeneSpace::Given(_) = space {
            check_every_member_keeps_a_gene(names, member_ids, &members, &vocabulary, interner)?;
        }
        let genes = vocabulary.iter().map(|&id| interner.name(id).to_string()).collect();
        Ok(GeneMap { genes, members })
    }

    /// The corpus's genes, in column order.
    pub fn genes(&self) -> &[String] {
        &self.genes
    }

    /// Member `m`'s columns in the corpus.
    pub fn member(&self, m: usize) -> &MemberColumns {
        &self.members[m]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("m{i}")).collect()
    }

    #[test]
    fn union_intersection_and_given() {
        let members = vec![strings(&["a", "b", "c"]), strings(&["c", "d", "a"])];
        let u = GeneMap::build(&names(2), &members, &GeneSpace::Union).unwrap();
        assert_eq!(u.genes(), strings(&["a", "b", "c", "d"]));
        assert_eq!((0..3).map(|j| u.member(1).corpus_column(j)).collect::<Vec<_>>(), [Some(2), Some(3), Some(0)]);
        assert!(u.member(0).is_identity(3) && !u.member(0).is_identity(4));
        let i = GeneMap::build(&names(2), &members, &GeneSpace::Intersection).unwrap();
        assert_eq!(i.genes(), strings(&["a", "c"]));
        assert_eq!(i.member(0).corpus_column(1), None);
        let g = GeneMap::build(&names(2), &members, &GeneSpace::Given(strings(&["z", "d", "b"]))).unwrap();
        assert_eq!(g.member(1).kept(), 1);
        assert_eq!(g.member(0).corpus_column(1), Some(2));
    }

    #[test]
    fn rows_come_out_sorted_without_dropped_genes() {
        let members = vec![strings(&["a", "b"]), strings(&["c", "b", "x", "a"])];
        let m = GeneMap::build(&names(2), &members, &GeneSpace::Given(strings(&["a", "b", "c"]))).unwrap();
        let columns = m.member(1);
        assert_eq!(columns.kept_in(&[0, 1, 2, 3]), 3);
        let (mut i, mut v) = (vec![0; 3], vec![0u32; 3]);
        RowScratch::with(|scratch| {
            columns.write_row(&[0, 1, 2, 3], &[10u32, 20, 30, 40], &mut i, &mut v, scratch);
            assert_eq!((&i, &v), (&vec![0, 1, 2], &vec![40, 20, 10]));
            // The scratch is clean for the next row.
            let (mut i, mut v) = (vec![0; 1], vec![0u32; 1]);
            columns.write_row(&[1], &[7u32], &mut i, &mut v, scratch);
            assert_eq!((i, v), (vec![1], vec![7]));
        });
    }

    #[test]
    fn members_in_the_vocabulary_s_order_are_copied_or_filtered() {
        let vocabulary = strings(&["a", "b", "c", "d"]);
        let members = vec![strings(&["a", "b", "c"]), strings(&["a", "x", "c", "d"])];
        let m = GeneMap::build(&names(2), &members, &GeneSpace::Given(vocabulary)).unwrap();
        RowScratch::with(|scratch| {
            // The vocabulary's first genes in its order: the row as it is.
            assert_eq!(m.member(0).kept_in(&[0, 2]), 2);
            let (mut i, mut v) = (vec![0; 2], vec![0u32; 2]);
            m.member(0).write_row(&[0, 2], &[5u32, 6], &mut i, &mut v, scratch);
            assert_eq!((i, v), (vec![0, 2], vec![5, 6]));
            // In its order with a gene the vocabulary lacks: that gene dropped, the rest renumbered.
            assert_eq!(m.member(1).kept_in(&[0, 1, 2, 3]), 3);
            let (mut i, mut v) = (vec![0; 3], vec![0u32; 3]);
            m.member(1).write_row(&[0, 1, 2, 3], &[1u32, 2, 3, 4], &mut i, &mut v, scratch);
            assert_eq!((i, v), (vec![0, 2, 3], vec![1, 3, 4]));
        });
    }

    #[test]
    fn a_member_whose_every_gene_is_in_the_vocabulary_in_its_order_is_renumbered() {
        // Member 0 as `corpus align` writes it: its genes, all in the vocabulary, in the vocabulary's order, with
        // vocabulary genes it lacks in between (so it is not the vocabulary itself).
        let vocabulary = strings(&["z", "a", "y", "b", "c", "x"]);
        let members = vec![strings(&["a", "b", "c"]), strings(&["c", "a"])];
        let m = GeneMap::build(&names(2), &members, &GeneSpace::Given(vocabulary)).unwrap();
        assert!(m.member(0).in_vocabulary_order() && !m.member(0).is_identity(6) && m.member(0).kept() == 3);
        assert!(!m.member(1).in_vocabulary_order());
        let (mut i, mut v) = (vec![-1; 4], vec![0u32; 4]);
        let k = RowScratch::with(|scratch| m.member(0).write_row(&[0, 1, 2], &[7u32, 8, 9], &mut i, &mut v, scratch));
        assert_eq!((&i[..k], &v[..k]), (&[1, 3, 4][..], &[7u32, 8, 9][..]));
        let k = RowScratch::with(|scratch| m.member(0).write_row(&[2], &[5u32], &mut i, &mut v, scratch));
        assert_eq!((&i[..k], &v[..k]), (&[4][..], &[5u32][..]));
    }

    #[test]
    fn a_member_with_the_vocabulary_first_and_one_gene_more_drops_that_gene() {
        // Member 0's third gene goes to column 2, the vocabulary's size: its own index, yet dropped.
        let members = vec![strings(&["a", "b", "c"]), strings(&["a", "b"])];
        let m = GeneMap::build(&names(2), &members, &GeneSpace::Intersection).unwrap();
        assert_eq!(m.genes(), strings(&["a", "b"]));
        let (mut i, mut v) = (vec![-1; 3], vec![0u32; 3]);
        let k = RowScratch::with(|scratch| m.member(0).write_row(&[0, 1, 2], &[1u32, 2, 3], &mut i, &mut v, scratch));
        assert_eq!((&i[..k], &v[..k]), (&[0, 1][..], &[1u32, 2][..]));
    }

    #[test]
    fn long_rows_over_many_words_match_a_sort() {
        let n: i32 = 300;
        let member: Vec<String> = (0..n).rev().map(|g| format!("g{g}")).collect();
        let vocabulary: Vec<String> = (0..n).filter(|g| g % 3 != 0).map(|g| format!("g{g}")).collect();
        let m = GeneMap::build(&names(1), &[member], &GeneSpace::Given(vocabulary)).unwrap();
        let indices: Vec<i32> = (0..n).filter(|j| j % 2 == 0).collect();
        let values: Vec<u32> = indices.iter().map(|&j| j as u32 + 1).collect();
        let k = m.member(0).kept_in(&indices);
        let (mut i, mut v) = (vec![0; k], vec![0u32; k]);
        RowScratch::with(|scratch| m.member(0).write_row(&indices, &values, &mut i, &mut v, scratch));
        let mut want: Vec<(i32, u32)> = indices
            .iter()
            .zip(&values)
            .filter_map(|(&j, &x)| m.member(0).corpus_column(j as usize).map(|c| (c as i32, x)))
            .collect();
        want.sort_unstable();
        assert_eq!(i.iter().copied().zip(v.iter().copied()).collect::<Vec<_>>(), want);
    }

    #[test]
    fn rows_of_every_density_match_a_sort() {
        // A seeded (splitmix64) shuffle of 2,000 member genes, 1,500 of them in a reversed 2,500-gene vocabulary:
        // rows from a gene or two to every gene, so words of the row's bits hold from none to all 64 (and both
        // ways of reading a row back are taken, each with outputs of exactly the row's room).
        let mut state = 7u64;
        let mut next = move || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let n = 2000usize;
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            order.swap(i, (next() % (i as u64 + 1)) as usize);
        }
        let member: Vec<String> = order.iter().map(|g| format!("g{g}")).collect();
        // The member's genes behind 1,000 it lacks, so its words begin past the vocabulary's first.
        let absent = (0..1000).map(|g| format!("x{g}"));
        let vocabulary: Vec<String> =
            absent.chain((0..2500).rev().filter(|g| g % 4 != 0).map(|g| format!("g{g}"))).collect();
        let m = GeneMap::build(&names(1), &[member], &GeneSpace::Given(vocabulary)).unwrap();
        let columns = m.member(0);
        RowScratch::with(|scratch| {
            for per_10k in [1u64, 10, 500, 2_000, 5_000, 9_000, 10_000] {
                for _ in 0..5 {
                    let indices: Vec<i32> = (0..n as i32).filter(|_| next() % 10_000 < per_10k).collect();
                    let values: Vec<u32> = indices.iter().map(|_| (next() % 1000) as u32 + 1).collect();
                    let k = columns.kept_in(&indices);
                    let (mut i, mut v) = (vec![-1; k], vec![0u32; k]);
                    columns.write_row(&indices, &values, &mut i, &mut v, scratch);
                    let mut want: Vec<(i32, u32)> = indices
                        .iter()
                        .zip(&values)
                        .filter_map(|(&j, &x)| columns.corpus_column(j as usize).map(|c| (c as i32, x)))
                        .collect();
                    want.sort_unstable();
                    let got: Vec<(i32, u32)> = i.iter().copied().zip(v.iter().copied()).collect();
                    assert_eq!(got, want, "{per_10k} in 10,000 genes");
                }
            }
        });
    }

    #[test]
    fn refusals_name_the_member_and_gene() {
        let e = GeneMap::build(&names(2), &[strings(&["a"]), strings(&["b", "b"])], &GeneSpace::Union).unwrap_err();
        assert!(matches!(&e, CorpusError::DuplicateGene { member, gene } if member == "m1" && gene == "b"), "{e}");
        let e = GeneMap::build(&names(2), &[strings(&["a"]), strings(&["b"])], &GeneSpace::Intersection);
        assert!(e.unwrap_err().to_string().contains("empty"));
        let e = GeneMap::build(&names(1), &[strings(&["a"])], &GeneSpace::Given(strings(&["a", "a"])));
        assert!(e.unwrap_err().to_string().contains("twice"));
    }

    #[test]
    fn a_given_vocabulary_must_keep_a_gene_of_every_member() {
        let members = vec![strings(&["g1", "g2"]), strings(&["ENSG1", "ENSG2"]), strings(&["g2", "g3"])];
        // Identifiers of another kind (bytes' text form, say) match no member.
        let e = GeneMap::build(&names(3), &members, &GeneSpace::Given(strings(&["b'g1'", "b'g2'"]))).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("no member has any gene of the given vocabulary"), "{msg}");
        assert!(msg.contains("\"b'g1'\"") && msg.contains("member m0 names its genes \"g1\", \"g2\""), "{msg}");
        // One member in other identifiers is named.
        let e = GeneMap::build(&names(3), &members, &GeneSpace::Given(strings(&["g1", "g3"]))).unwrap_err();
        assert!(e.to_string().starts_with("member(s) m1 have no gene"), "{e}");
        // A vocabulary that keeps a gene of each is fine, whatever else it lists.
        let g = GeneMap::build(&names(3), &members, &GeneSpace::Given(strings(&["z", "g2", "ENSG2"]))).unwrap();
        assert_eq!((g.member(0).kept(), g.member(1).kept(), g.member(2).kept()), (1, 1, 1));
    }
}
