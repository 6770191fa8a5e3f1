//! Gene identifiers held once: many gene lists as lists of small ids over one table of distinct identifiers, so
//! that a thousand inputs or members naming the same 36,000 genes cost 4 bytes a gene each, not a string.

use rustc_hash::FxHashMap;

/// Distinct gene identifiers, each with an id (its position), and the ids of the lists interned so far.
#[derive(Debug, Clone, Default)]
pub struct GeneInterner {
    // FxHash: a few times faster than SipHash on short identifiers, and the lists are the user's own.
    ids: FxHashMap<String, u32>,
    names: Vec<String>,
}

impl GeneInterner {
    /// An empty table.
    pub fn new() -> GeneInterner {
        GeneInterner::default()
    }

    /// The id of `gene`, added if new.
    pub fn intern(&mut self, gene: &str) -> u32 {
        if let Some(&id) = self.ids.get(gene) {
            return id;
        }
        let id = u32::try_from(self.names.len()).expect("fewer than 2^32 distinct genes");
        self.ids.insert(gene.to_string(), id);
        self.names.push(gene.to_string());
        id
    }

    /// The ids of `genes`, in order (new identifiers added).
    pub fn intern_all<S: AsRef<str>>(&mut self, genes: &[S]) -> Vec<u32> {
        genes.iter().map(|g| self.intern(g.as_ref())).collect()
    }

    /// The identifier of `id`.
    pub fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }

    /// Distinct identifiers held.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_identifier_is_held_once() {
        let mut t = GeneInterner::new();
        assert_eq!(t.intern_all(&["a", "b", "a"]), [0, 1, 0]);
        assert_eq!(t.intern_all(&["c", "b"]), [2, 1]);
        assert_eq!((t.len(), t.name(2)), (3, "c"));
    }
}
