//! Name uniqueness: every duplicate points at its second occurrence and names the first.

use std::collections::HashMap;

use serde_spanned::Spanned;

use crate::config::issues::Issues;

/// One namespace of names (health checks; backend services and groups together; vServices).
#[derive(Default)]
pub(in crate::config) struct Namespace {
    /// Name -> (line of its first definition, what it names).
    first: HashMap<String, (usize, &'static str)>,
}

impl Namespace {
    /// Defines `name` as a `what` (e.g. "backend service"); reports an empty or duplicate
    /// name at `field` and returns false in that case.
    pub(in crate::config) fn define(
        &mut self,
        name: &Spanned<String>,
        what: &'static str,
        field: &str,
        issues: &mut Issues,
    ) -> bool {
        let text = name.get_ref();
        if text.trim().is_empty() {
            issues.error(
                &name.span(),
                field,
                format!("{what} name must not be empty"),
            );
            return false;
        }
        if let Some((line, other)) = self.first.get(text) {
            issues.error(
                &name.span(),
                field,
                format!("duplicate name `{text}`: already used by the {other} at line {line}"),
            );
            return false;
        }
        let line = issues.line_of(name.span().start);
        self.first.insert(text.clone(), (line, what));
        true
    }
}
