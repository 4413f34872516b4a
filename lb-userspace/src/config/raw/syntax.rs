//! After a TOML syntax error the parser still gives the rest of the file, but the part
//! around the error may be read wrongly (a broken header merges two tables, a broken value
//! reads as something else). So the top-level items that hold a syntax error are left out
//! of the checks (one line each says so), and all the others are checked as usual.

use std::collections::HashMap;
use std::ops::Range;

use toml::de::{DeTable, DeValue};

/// The top-level items (a `[section]`, one `[[section]]` entry, or a key outside any
/// table) that a syntax error makes unreliable, by where they start.
#[derive(Default)]
pub(in crate::config) struct Taint {
    /// Start of each unreliable item -> start of the first syntax error in it.
    starts: HashMap<usize, usize>,
}

impl Taint {
    /// Finds the items of `root` that hold one of the syntax errors at `errors` (sorted,
    /// so each item names its first). An error
    /// belongs to the last item that starts before it; keys outside any table that follow
    /// an error (before the next table) are unreliable too, since a broken `[header]` leaves
    /// its keys at the top level.
    pub(in crate::config) fn new(root: &DeTable<'_>, errors: &[usize]) -> Self {
        if errors.is_empty() {
            return Self::default();
        }
        // (start, true for a table or `[[...]]` entry, false for a plain key), by position.
        let mut items: Vec<(usize, bool)> = Vec::new();
        for (key, value) in root.iter() {
            match value.get_ref() {
                DeValue::Table(_) => items.push((value.span().start, true)),
                DeValue::Array(entries) if entries.iter().all(|e| e.get_ref().is_table()) => {
                    items.extend(entries.iter().map(|e| (e.span().start, true)));
                }
                _ => items.push((key.span().start, false)),
            }
        }
        items.sort_unstable();
        let mut starts = HashMap::new();
        for &error in errors {
            let after = items.partition_point(|&(start, _)| start <= error);
            if let Some(&(start, _)) = after.checked_sub(1).and_then(|i| items.get(i)) {
                starts.entry(start).or_insert(error);
            }
            for &(start, table) in &items[after..] {
                if table {
                    break;
                }
                starts.entry(start).or_insert(error);
            }
        }
        Self { starts }
    }

    /// The offset of the syntax error that makes the item at `span` unreliable, if any.
    pub(in crate::config) fn error_in(&self, span: &Range<usize>) -> Option<usize> {
        self.starts.get(&span.start).copied()
    }
}
