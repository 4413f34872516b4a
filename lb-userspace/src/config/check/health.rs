//! `[[health_check]]` profiles (S-HC1..4): names, timing defaults, the S-HC4 adjustments
//! of Period and Timeout, and the success/failure counts.

use std::time::Duration;

use serde_spanned::Spanned;

use super::names::Namespace;
use super::probe::{probe, reject_foreign_fields};
use super::seconds::seconds;
use crate::config::issues::Issues;
use crate::config::model::{DEFAULT_MAX_EJECTION_PERCENT, HealthCheck};
use crate::config::raw::document::Entry;
use crate::config::raw::{RawHealthCheck, RawHealthType};

/// `passive_failures` of a `type = "passive"` profile that does not write it.
const DEFAULT_PASSIVE_FAILURES: u32 = 3;
/// S-HC4: P or T at or above this is applied as 1 s.
const TOO_LONG: Duration = Duration::from_secs(120);
/// S-HC1 default Period and Timeout; also the S-HC4 replacement value and minimum Period.
const ONE_SECOND: Duration = Duration::from_secs(1);

/// Validates every health check profile; invalid ones are reported and left out.
pub(in crate::config) fn health_checks(
    entries: &[Entry<RawHealthCheck>],
    issues: &mut Issues,
) -> Vec<HealthCheck> {
    let mut names = Namespace::default();
    let mut checks = Vec::new();
    for entry in entries {
        let before = issues.error_count();
        let field = format!("{}.name", entry.path);
        names.define(&entry.raw.name, "health check", &field, issues);
        let check = convert(entry, issues);
        if issues.error_count() == before && !entry.partial {
            checks.push(check);
        }
    }
    checks
}

/// `max_ejection_percent` of one profile: an integer from 0 to 100 (passive health's cap
/// on a list's mains in Error), the default when not written.
fn ejection_percent(entry: &Entry<RawHealthCheck>, issues: &mut Issues) -> u8 {
    let Some(value) = &entry.raw.max_ejection_percent else {
        return DEFAULT_MAX_EJECTION_PERCENT;
    };
    match u8::try_from(*value.get_ref()) {
        Ok(percent) if percent <= 100 => percent,
        _ => {
            issues.error(
                &value.span(),
                &format!("{}.max_ejection_percent", entry.path),
                format!(
                    "max_ejection_percent {} is out of range: an integer from 0 to 100",
                    value.get_ref()
                ),
            );
            DEFAULT_MAX_EJECTION_PERCENT
        }
    }
}

/// Converts one profile, reporting every problem; the result is only used without errors.
fn convert(entry: &Entry<RawHealthCheck>, issues: &mut Issues) -> HealthCheck {
    let raw = &entry.raw;
    let path = &entry.path;
    let kind = *raw.kind.get_ref();
    reject_foreign_fields(raw, path, issues);
    HealthCheck {
        name: raw.name.get_ref().clone(),
        kind: probe(entry, issues),
        period: period(raw.period.as_ref(), kind, &format!("{path}.period"), issues),
        timeout: timeout(raw.timeout.as_ref(), &format!("{path}.timeout"), issues),
        required_successes: count(
            raw.required_successes.as_ref(),
            3,
            &format!("{path}.required_successes"),
            issues,
        ),
        required_failures: count(
            raw.required_failures.as_ref(),
            2,
            &format!("{path}.required_failures"),
            issues,
        ),
        // A passive profile watches live traffic by definition: 3 failures in a row unless
        // written.
        passive_failures: match (&raw.passive_failures, kind) {
            (Some(n), _) => Some(count(
                Some(n),
                1,
                &format!("{path}.passive_failures"),
                issues,
            )),
            (None, RawHealthType::Passive) => Some(DEFAULT_PASSIVE_FAILURES),
            (None, _) => None,
        },
        max_ejection_percent: ejection_percent(entry, issues),
    }
}

/// Period P: S-HC4 minimum of 1 s except for ping, 120 s or more applied as 1 s.
fn period(
    raw: Option<&Spanned<f64>>,
    kind: RawHealthType,
    field: &str,
    issues: &mut Issues,
) -> Duration {
    let Some(value) = raw else {
        return ONE_SECOND;
    };
    let Some(period) = seconds(value, field, issues) else {
        return ONE_SECOND;
    };
    let secs = value.get_ref();
    if period >= TOO_LONG {
        issues.warn(
            &value.span(),
            field,
            format!("period {secs} s is 120 s or more: applied as 1 s per S-HC4"),
        );
        return ONE_SECOND;
    }
    if kind == RawHealthType::Ping {
        if period.is_zero() {
            issues.error(&value.span(), field, "period must be above 0 s");
        }
        return period;
    }
    if period < ONE_SECOND {
        issues.warn(
            &value.span(),
            field,
            format!(
                "period {secs} s is below the 1 s minimum for {} checks: applied as 1 s per S-HC4",
                kind.as_str()
            ),
        );
        return ONE_SECOND;
    }
    period
}

/// Timeout T: above 0; 120 s or more applied as 1 s (S-HC4).
fn timeout(raw: Option<&Spanned<f64>>, field: &str, issues: &mut Issues) -> Duration {
    let Some(value) = raw else {
        return ONE_SECOND;
    };
    let Some(timeout) = seconds(value, field, issues) else {
        return ONE_SECOND;
    };
    if timeout.is_zero() {
        issues.error(&value.span(), field, "timeout must be above 0 s");
    } else if timeout >= TOO_LONG {
        let secs = value.get_ref();
        issues.warn(
            &value.span(),
            field,
            format!("timeout {secs} s is 120 s or more: applied as 1 s per S-HC4"),
        );
        return ONE_SECOND;
    }
    timeout
}

/// Required Successes / Failures: at least 1.
fn count(raw: Option<&Spanned<i64>>, default: u32, field: &str, issues: &mut Issues) -> u32 {
    let Some(value) = raw else {
        return default;
    };
    match u32::try_from(*value.get_ref()) {
        Ok(count) if count >= 1 => count,
        _ => {
            let shown = value.get_ref();
            issues.error(
                &value.span(),
                field,
                format!("{shown} must be between 1 and {}", u32::MAX),
            );
            default
        }
    }
}
