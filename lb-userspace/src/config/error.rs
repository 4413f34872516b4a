//! The error returned when a configuration is rejected: every problem found, each located.

use std::fmt;

/// One problem in a configuration file, located at the offending key or value.
///
/// Operators fix configs from these messages, so each names the file, the 1-based line and
/// column, and the field path with TOML names (`vservice[0].backends[1]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigIssue {
    /// Where the text came from (a file name), as given to `parse` or `load`.
    pub origin: String,
    /// 1-based line of the offending key or value; 0 when the problem has no position
    /// (the file could not be read).
    pub line: usize,
    /// 1-based column (in characters) of the offending key or value; 0 with `line` 0.
    pub column: usize,
    /// Field path with TOML names, e.g. `backend_service[2].name`; empty for syntax errors
    /// that belong to no field.
    pub field: String,
    /// What is wrong, in words an operator can act on.
    pub message: String,
}

impl fmt::Display for ConfigIssue {
    /// `{origin}:{line}:{column}: {field}: {message}`; the position is left out when the
    /// issue has none (line 0) and the field when it is empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// A rejected configuration: all the problems found, in file order.
///
/// Validation does not stop at the first problem, so an operator can fix a file in one pass.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", Lines(errors))]
pub struct ConfigError {
    /// Every problem found, sorted by line and column.
    pub errors: Vec<ConfigIssue>,
}

/// Displays issues one per line.
struct Lines<'a>(&'a [ConfigIssue]);

impl fmt::Display for Lines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, issue) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{issue}")?;
        }
        Ok(())
    }
}
