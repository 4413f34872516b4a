//! Collects errors and warnings while validating, turning byte spans into lines and columns.

use std::ops::Range;

use super::error::{ConfigError, ConfigIssue};
use super::raw::recover::is_placeholder;

/// The sink every validation step reports into; it never stops the caller, so all
/// problems of a file are found in one run.
pub(super) struct Issues<'a> {
    origin: &'a str,
    text: &'a str,
    /// Byte offset where each line starts, so a position costs a binary search instead of
    /// a scan from the top (a file of 50,000 Backend Services reports thousands of them).
    line_starts: Vec<usize>,
    errors: Vec<ConfigIssue>,
    warnings: Vec<ConfigIssue>,
    /// Problems of stand-in values, not shown but counted: a step that compares
    /// [`Issues::error_count`] must still see that its input was not valid.
    unshown: usize,
}

impl<'a> Issues<'a> {
    /// A sink for the text `text` read from `origin`.
    pub(super) fn new(origin: &'a str, text: &'a str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Self {
            origin,
            text,
            line_starts,
            errors: Vec::new(),
            warnings: Vec::new(),
            unshown: 0,
        }
    }

    /// Records an error at the byte span `span` of the text. A problem of a stand-in value
    /// (a value that could not be read, already reported) is not recorded.
    pub(super) fn error(&mut self, span: &Range<usize>, field: &str, message: impl Into<String>) {
        if is_placeholder(span) {
            self.unshown += 1;
            return;
        }
        let issue = self.issue(span, field, message.into());
        self.errors.push(issue);
    }

    /// Records a warning (a value that was adjusted, S-HC4) at the byte span `span`.
    pub(super) fn warn(&mut self, span: &Range<usize>, field: &str, message: impl Into<String>) {
        if is_placeholder(span) {
            return;
        }
        let issue = self.issue(span, field, message.into());
        self.warnings.push(issue);
    }

    /// True once any error was recorded.
    #[cfg(test)]
    pub(super) fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// Number of errors recorded so far (those of stand-in values included); a step
    /// compares it before and after to learn whether its own input was valid.
    pub(super) fn error_count(&self) -> usize {
        self.errors.len() + self.unshown
    }

    /// 1-based line of the byte offset `offset`, used to mention a first definition.
    pub(super) fn line_of(&self, offset: usize) -> usize {
        self.position(offset).0
    }

    /// The errors (sorted by position) if there are any, else the warnings as text.
    pub(super) fn finish(mut self) -> Result<Vec<String>, ConfigError> {
        if self.errors.is_empty() {
            return Ok(self.warnings.iter().map(ToString::to_string).collect());
        }
        // The same problem reached twice (e.g. through two lists) is told once; sorting
        // then deduplicating keeps this linear-logarithmic for files with many errors.
        self.errors.sort_by(|a, b| {
            (a.line, a.column, &a.field, &a.message).cmp(&(b.line, b.column, &b.field, &b.message))
        });
        self.errors.dedup();
        Err(ConfigError {
            errors: self.errors,
        })
    }

    fn issue(&self, span: &Range<usize>, field: &str, message: String) -> ConfigIssue {
        let (line, column) = self.position(span.start);
        ConfigIssue {
            origin: self.origin.to_owned(),
            line,
            column,
            field: field.to_owned(),
            message,
        }
    }

    /// 1-based (line, column in characters) of a byte offset, clamped into the text.
    fn position(&self, offset: usize) -> (usize, usize) {
        let mut end = offset.min(self.text.len());
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        // Lines whose start is at or before `end`; the first line starts at 0, so >= 1.
        let line = self.line_starts.partition_point(|&start| start <= end);
        let line_start = self.line_starts[line - 1];
        let column = self.text[line_start..end].chars().count() + 1;
        (line, column)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based_lines_and_character_columns() {
        let text = "a = 1\n# é\nbé = 2\n";
        let issues = Issues::new("t.toml", text);
        assert_eq!(issues.position(0), (1, 1));
        assert_eq!(issues.position(4), (1, 5));
        assert_eq!(issues.position(6), (2, 1));
        // "bé = 2": the '=' is the 4th character but the 5th byte of the line.
        let line3 = text.find("bé").unwrap();
        assert_eq!(issues.position(line3 + 4), (3, 4));
        assert_eq!(issues.position(10_000).0, 4);
    }

    /// Every problem is reported in one run: a check's problem with a stand-in value (one
    /// that could not be read, its own error already shown) is counted, so the step knows
    /// its input was bad, but not shown.
    #[test]
    fn problems_of_stand_ins_are_counted_not_shown() {
        let text = "a = 1\n";
        let mut issues = Issues::new("lb.toml", text);
        let stand_in = crate::config::raw::recover::PLACEHOLDER_START + 1;
        issues.error(&(stand_in..stand_in), "a", "not shown");
        issues.warn(&(stand_in..stand_in), "a", "not shown");
        assert_eq!(issues.error_count(), 1);
        assert!(!issues.has_errors());
        issues.error(&(0..1), "a", "shown");
        let err = issues.finish().unwrap_err();
        assert_eq!(err.to_string(), "lb.toml:1:1: a: shown");
    }

    #[test]
    fn errors_are_sorted_and_displayed_one_per_line() {
        let text = "a = 1\nb = 2\n";
        let mut issues = Issues::new("lb.toml", text);
        issues.error(&(6..7), "b", "second");
        issues.error(&(0..1), "a", "first");
        let err = issues.finish().unwrap_err();
        assert_eq!(
            err.to_string(),
            "lb.toml:1:1: a: first\nlb.toml:2:1: b: second"
        );
    }
}
