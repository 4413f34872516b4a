//! Reading a table that serde rejects. serde stops at the first problem of a table, so a
//! table with a wrong type, an unknown key and a missing key would show one of them per run.
//! Here every problem is reported in one run: after each error the table is repaired and
//! read again. A value of the wrong type is replaced by a stand-in of the right type; an
//! unknown key is dropped; a missing key gets a stand-in. Stand-ins carry a placeholder span
//! ([`is_placeholder`]) so the semantic checks of the table's other keys still run, while
//! whatever they would say about a stand-in is left out (its own error was reported).
//!
//! A key for which no stand-in fits (an enum such as `kind`) cannot be replaced; when it is
//! required, its table cannot be read: a nested table is dropped from its parent, the entry
//! itself is given up, and one line says how many of its keys were therefore not checked.
//!
//! Tables that serde accepts at once take the fast path: one deserialization, as before.

use std::ops::Range;

use serde::Deserialize;
use serde_spanned::Spanned;
use toml::de::{DeValue, ValueDeserializer};

use super::tree::{find_value, insert_key, remove_key, remove_key_of_table, replace_value};
use crate::config::issues::Issues;

/// Placeholder spans start here: far past any text, so none can be mistaken for a position.
pub(in crate::config) const PLACEHOLDER_START: usize = usize::MAX / 2;

/// Enough repairs for any real table (each removes or replaces one written value or adds
/// one missing key); a bound so that a table with thousands of bad values (each repair
/// reads the table again) costs a bounded time, and a repair that makes no progress
/// cannot loop.
const MAX_REPAIRS: usize = 100;

/// Stand-in values tried in turn for a value of the wrong type or a missing key.
const STAND_INS: [&str; 6] = ["\"\"", "0", "0.0", "false", "[]", "{}"];

/// True for the span of a stand-in value: a check's problem there is not reported.
pub(in crate::config) fn is_placeholder(span: &Range<usize>) -> bool {
    span.start >= PLACEHOLDER_START
}

/// What reading one table gave.
pub(in crate::config) enum Read<T> {
    /// Read as written.
    Whole(T),
    /// Read with stand-ins for values whose problems were reported; checks may run on it,
    /// but it must not be used as a valid value by other entries.
    Partial(T),
    /// Not readable at all (problems reported).
    Unreadable,
}

/// Reads `value` (the table or value at field path `path`), reporting every problem.
pub(in crate::config) fn read<'i, T>(
    path: &str,
    value: Spanned<DeValue<'i>>,
    issues: &mut Issues,
) -> Read<T>
where
    T: Deserialize<'i>,
{
    let original = value.clone();
    match T::deserialize(ValueDeserializer::from(value)) {
        Ok(raw) => Read::Whole(raw),
        Err(error) => Repair::new(path, original).run(error, issues),
    }
}

/// The state of repairing one table.
struct Repair<'p, 'i> {
    /// Field path of the table.
    path: &'p str,
    /// The table as written: field paths and key counts are taken from it.
    original: Spanned<DeValue<'i>>,
    /// The table with the repairs so far.
    current: Spanned<DeValue<'i>>,
    /// Stand-ins made so far (each gets its own placeholder span).
    stand_ins: usize,
    /// Keys dropped because no stand-in fit: (span of their table, key). A "missing
    /// field" for one of them is the repair's doing, not the operator's.
    dropped: Vec<(Range<usize>, String)>,
}

impl<'p, 'i> Repair<'p, 'i> {
    fn new(path: &'p str, original: Spanned<DeValue<'i>>) -> Self {
        Self {
            path,
            current: original.clone(),
            original,
            stand_ins: 0,
            dropped: Vec::new(),
        }
    }

    /// Reports `error` and every later one, repairing after each.
    fn run<T: Deserialize<'i>>(
        mut self,
        mut error: toml::de::Error,
        issues: &mut Issues,
    ) -> Read<T> {
        for _ in 0..MAX_REPAIRS {
            if !self.repair::<T>(&error, issues) {
                return Read::Unreadable;
            }
            match T::deserialize(ValueDeserializer::from(self.current.clone())) {
                Ok(raw) => return Read::Partial(raw),
                Err(next) => error = next,
            }
        }
        issues.error(
            &self.original.span(),
            self.path,
            format!(
                "more than {MAX_REPAIRS} values of this table could not be read: the rest of \
                 it was not checked"
            ),
        );
        Read::Unreadable
    }

    /// Reports one error and repairs what it points at; false when the table cannot be read.
    fn repair<T: Deserialize<'i>>(&mut self, error: &toml::de::Error, issues: &mut Issues) -> bool {
        let span = error.span().unwrap_or_else(|| self.current.span());
        let message = error.message();
        if let Some(key) = quoted_after(message, "missing field `") {
            let ours = self.dropped.iter().any(|(s, k)| *s == span && k == key);
            if !ours {
                self.report(&span, message, issues);
                if self.fill::<T>(&span, key) {
                    return true;
                }
            }
            return self.drop_table(&span, key, issues);
        }
        self.report(&span, message, issues);
        if message.starts_with("unknown field `") {
            return remove_key(&mut self.current, &span, &mut self.dropped).is_some();
        }
        if span == self.current.span() {
            return false;
        }
        if self.replace::<T>(&span) {
            return true;
        }
        // No stand-in fits (an enum): drop the key; if it is required, the next error is
        // its "missing field", which `dropped` marks as the repair's own.
        remove_key(&mut self.current, &span, &mut self.dropped).is_some()
    }

    /// Reports an error at `span` with the field path of what is written there.
    fn report(&self, span: &Range<usize>, message: &str, issues: &mut Issues) {
        let field = super::document::field_path(self.path, self.original.get_ref(), span);
        issues.error(span, &field, super::document::plain_types(message));
    }

    /// A fresh placeholder span.
    fn placeholder(&mut self) -> Range<usize> {
        self.stand_ins += 1;
        PLACEHOLDER_START + self.stand_ins..PLACEHOLDER_START + self.stand_ins
    }

    /// Replaces the value at `span` by the first stand-in T accepts there.
    fn replace<T: Deserialize<'i>>(&mut self, span: &Range<usize>) -> bool {
        let mut at = span.clone();
        for text in STAND_INS {
            let here = self.placeholder();
            let Some(value) = stand_in(text, here.clone()) else {
                continue;
            };
            if !replace_value(&mut self.current, &at, value) {
                return false;
            }
            at = here;
            if self.accepts::<T>(&at) {
                return true;
            }
        }
        // Nothing fits: put the value back, so that `remove_key` finds it at its own span.
        if let Some(original) = find_value(self.original.get_ref(), span) {
            replace_value(&mut self.current, &at, original);
        }
        false
    }

    /// Adds a stand-in for the missing `key` of the table at `span`.
    fn fill<T: Deserialize<'i>>(&mut self, span: &Range<usize>, key: &str) -> bool {
        for text in STAND_INS {
            let here = self.placeholder();
            let Some(value) = stand_in(text, here.clone()) else {
                continue;
            };
            if !insert_key(&mut self.current, span, key, value) {
                return false;
            }
            if self.accepts::<T>(&here) {
                return true;
            }
        }
        remove_key_of_table(&mut self.current, span, key);
        false
    }

    /// True when T accepts the stand-in at `at` (reading now fails elsewhere or not at all).
    fn accepts<T: Deserialize<'i>>(&self, at: &Range<usize>) -> bool {
        match T::deserialize(ValueDeserializer::from(self.current.clone())) {
            Ok(_) => true,
            Err(error) => error.span().is_some_and(|s| s != *at),
        }
    }

    /// The table at `span` lacks `key` and nothing can stand in: drop the table from its
    /// parent (false when it is the table being read), saying which keys go unchecked.
    fn drop_table(&mut self, span: &Range<usize>, key: &str, issues: &mut Issues) -> bool {
        let field = super::document::field_path(self.path, self.original.get_ref(), span);
        let root = *span == self.original.span();
        let table = if root {
            Some(self.original.clone())
        } else {
            find_value(self.original.get_ref(), span)
        };
        let others = table
            .as_ref()
            .and_then(|t| t.get_ref().as_table())
            .map_or(0, |t| t.iter().filter(|(k, _)| k.get_ref() != key).count());
        let field = if root { self.path.to_owned() } else { field };
        if others > 0 {
            let skipped = if others == 1 {
                "the check of its other key was".to_owned()
            } else {
                format!("the checks of its other {others} keys were")
            };
            issues.error(
                span,
                &field,
                format!("without a readable `{key}`, {skipped} skipped"),
            );
        }
        if root {
            return false;
        }
        remove_key(&mut self.current, span, &mut self.dropped).is_some()
    }
}

/// The text between `prefix` and the next backquote in `message`.
fn quoted_after<'m>(message: &'m str, prefix: &str) -> Option<&'m str> {
    let rest = message.strip_prefix(prefix)?;
    rest.split('`').next()
}

/// A stand-in value parsed from `text`, at `span`.
fn stand_in<'i>(text: &'static str, span: Range<usize>) -> Option<Spanned<DeValue<'i>>> {
    let value = DeValue::parse(text).ok()?.into_inner();
    Some(Spanned::new(span, value))
}
