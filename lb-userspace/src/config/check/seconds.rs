//! Durations written as seconds (integer or float), as in the schema.

use std::time::Duration;

use serde_spanned::Spanned;

use crate::config::issues::Issues;

/// Converts a number of seconds; reports negative, non-finite or huge values at `field`.
pub(in crate::config) fn seconds(
    value: &Spanned<f64>,
    field: &str,
    issues: &mut Issues,
) -> Option<Duration> {
    let secs = *value.get_ref();
    let problem = if !secs.is_finite() {
        "must be a finite number of seconds"
    } else if secs < 0.0 {
        "must not be negative"
    } else {
        match Duration::try_from_secs_f64(secs) {
            Ok(duration) => return Some(duration),
            Err(_) => "is too large",
        }
    };
    issues.error(&value.span(), field, format!("duration {secs} s {problem}"));
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(secs: f64) -> Option<Duration> {
        let text = "x = 1\n";
        let mut issues = Issues::new("t", text);
        let result = seconds(&Spanned::new(4..5, secs), "x", &mut issues);
        assert_eq!(result.is_none(), issues.has_errors());
        result
    }

    #[test]
    fn fractions_zero_and_bad_values() {
        assert_eq!(convert(2.5), Some(Duration::from_millis(2500)));
        assert_eq!(convert(0.0), Some(Duration::ZERO));
        assert_eq!(convert(-1.0), None);
        assert_eq!(convert(f64::NAN), None);
        assert_eq!(convert(f64::INFINITY), None);
        assert_eq!(convert(1e30), None);
    }
}
