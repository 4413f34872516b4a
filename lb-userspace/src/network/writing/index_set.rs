//! A set of map indexes (backend slots, next-hop entries) as one flag per index: 100,000
//! lookups per apply cost nothing.

/// Indexes below a bound; indexes at or above it are never members.
pub(crate) struct IndexSet(Vec<bool>);

impl IndexSet {
    /// An empty set of indexes below `bound`.
    pub(crate) fn new(bound: u32) -> IndexSet {
        IndexSet(vec![false; bound as usize])
    }

    pub(crate) fn contains(&self, index: u32) -> bool {
        self.0.get(index as usize).copied().unwrap_or(false)
    }

    /// Adds `index` (ignored at or above the bound).
    pub(crate) fn insert(&mut self, index: u32) {
        if let Some(flag) = self.0.get_mut(index as usize) {
            *flag = true;
        }
    }
}
