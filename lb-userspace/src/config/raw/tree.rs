//! Finding and changing the values of a parsed TOML table by span, for [`super::recover`]:
//! serde errors name a span, not a key path, so repairs are made where a span points.

use std::borrow::Cow;
use std::ops::Range;

use serde_spanned::Spanned;
use toml::de::{DeTable, DeValue};

/// The value (or the table) whose span is `span`, anywhere under `value`.
pub(super) fn find_value<'i>(
    value: &DeValue<'i>,
    span: &Range<usize>,
) -> Option<Spanned<DeValue<'i>>> {
    match value {
        DeValue::Table(table) => table.iter().find_map(|(_, item)| {
            if item.span() == *span {
                Some(item.clone())
            } else {
                find_value(item.get_ref(), span)
            }
        }),
        DeValue::Array(items) => items.iter().find_map(|item| {
            if item.span() == *span {
                Some(item.clone())
            } else {
                find_value(item.get_ref(), span)
            }
        }),
        _ => None,
    }
}

/// Replaces the value whose span is `span` (not the root) by `by`.
pub(super) fn replace_value<'i>(
    root: &mut Spanned<DeValue<'i>>,
    span: &Range<usize>,
    by: Spanned<DeValue<'i>>,
) -> bool {
    match slot(root.get_mut(), span) {
        Some(found) => {
            *found = by;
            true
        }
        None => false,
    }
}

/// The value whose span is `span`, under `value`, for changing it in place.
fn slot<'a, 'i>(
    value: &'a mut DeValue<'i>,
    span: &Range<usize>,
) -> Option<&'a mut Spanned<DeValue<'i>>> {
    let items: Vec<&'a mut Spanned<DeValue<'i>>> = match value {
        DeValue::Table(table) => table.iter_mut().map(|(_, item)| item).collect(),
        DeValue::Array(items) => items.iter_mut().collect(),
        _ => return None,
    };
    for item in items {
        if item.span() == *span {
            return Some(item);
        }
        if let Some(found) = slot(item.get_mut(), span) {
            return Some(found);
        }
    }
    None
}

/// The table whose span is `span` (the root included), for changing it in place.
fn table_at<'a, 'i>(
    root: &'a mut Spanned<DeValue<'i>>,
    span: &Range<usize>,
) -> Option<&'a mut DeTable<'i>> {
    let found = if root.span() == *span {
        root.get_mut()
    } else {
        slot(root.get_mut(), span)?.get_mut()
    };
    match found {
        DeValue::Table(table) => Some(table),
        _ => None,
    }
}

/// Adds `key = value` to the table at `span` (replacing an earlier stand-in).
pub(super) fn insert_key<'i>(
    root: &mut Spanned<DeValue<'i>>,
    span: &Range<usize>,
    key: &str,
    value: Spanned<DeValue<'i>>,
) -> bool {
    let Some(table) = table_at(root, span) else {
        return false;
    };
    let name = Spanned::new(value.span(), Cow::Owned(key.to_owned()));
    table.remove(key);
    table.insert(name, value);
    true
}

/// Removes `key` from the table at `span`.
pub(super) fn remove_key_of_table(root: &mut Spanned<DeValue<'_>>, span: &Range<usize>, key: &str) {
    if let Some(table) = table_at(root, span) {
        table.remove(key);
    }
}

/// Removes the key whose name or value is at `span` from the table holding it; a value
/// inside an array removes the array's key (indices of the other items must not shift).
/// Records what was removed in `dropped` and returns the key.
pub(super) fn remove_key(
    root: &mut Spanned<DeValue<'_>>,
    span: &Range<usize>,
    dropped: &mut Vec<(Range<usize>, String)>,
) -> Option<String> {
    let table_span = root.span();
    remove_under(root.get_mut(), &table_span, span, dropped)
}

/// [`remove_key`] under `value` (whose span is `own`).
fn remove_under(
    value: &mut DeValue<'_>,
    own: &Range<usize>,
    span: &Range<usize>,
    dropped: &mut Vec<(Range<usize>, String)>,
) -> Option<String> {
    match value {
        DeValue::Table(table) => {
            let mut hit = None;
            for (key, item) in table.iter_mut() {
                if key.span() == *span || item.span() == *span || holds(item.get_ref(), span) {
                    hit = Some(key.get_ref().to_string());
                    break;
                }
                let item_span = item.span();
                if let Some(found) = remove_under(item.get_mut(), &item_span, span, dropped) {
                    return Some(found);
                }
            }
            let key = hit?;
            table.remove(key.as_str());
            dropped.push((own.clone(), key.clone()));
            Some(key)
        }
        DeValue::Array(items) => items.iter_mut().find_map(|item| {
            let item_span = item.span();
            remove_under(item.get_mut(), &item_span, span, dropped)
        }),
        _ => None,
    }
}

/// True when `value` is an array with an item at `span` (in it or in a nested array).
fn holds(value: &DeValue<'_>, span: &Range<usize>) -> bool {
    match value {
        DeValue::Array(items) => items
            .iter()
            .any(|item| item.span() == *span || holds(item.get_ref(), span)),
        _ => false,
    }
}
