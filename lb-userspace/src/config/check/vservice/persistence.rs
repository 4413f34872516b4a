//! `[vservice.persistence]` and `[vservice.timeouts]` of an L7 vService, with their
//! defaults.

use std::time::Duration;

use serde_spanned::Spanned;

use super::matchers::is_token;
use crate::config::check::seconds::seconds;
use crate::config::issues::Issues;
use crate::config::model::{CookiePersistence, Persistence, SameSite, Timeouts};
use crate::config::raw::{RawPersistence, RawPersistenceType, RawSameSite, RawTimeouts};

/// Default cookie name.
const DEFAULT_COOKIE: &str = "LBSERVER";
/// Default idle expiry of a source-IP pin: 30 min.
const DEFAULT_IDLE: Duration = Duration::from_secs(1800);
/// Every L7 timeout must be below a day: longer ones are typos that would hold resources.
const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);

/// The persistence of the vService at `path`; the cookie is only allowed on http (checked
/// by the kind rules), so no kind is needed here.
pub(in crate::config) fn persistence(
    raw: Option<&Spanned<RawPersistence>>,
    path: &str,
    issues: &mut Issues,
) -> Persistence {
    let Some(raw) = raw.map(Spanned::get_ref) else {
        return Persistence::None;
    };
    let path = format!("{path}.persistence");
    let kind = *raw.kind.get_ref();
    reject_foreign_keys(raw, kind, &path, issues);
    match kind {
        RawPersistenceType::None => Persistence::None,
        RawPersistenceType::SourceIp => {
            let idle = raw.idle_timeout.as_ref().and_then(|value| {
                positive(
                    value,
                    MAX_TIMEOUT * 365,
                    &format!("{path}.idle_timeout"),
                    issues,
                )
            });
            Persistence::SourceIp {
                idle: idle.unwrap_or(DEFAULT_IDLE),
            }
        }
        RawPersistenceType::Cookie => Persistence::Cookie(CookiePersistence {
            name: cookie_name(raw.cookie_name.as_ref(), &path, issues),
            http_only: raw.http_only.as_ref().is_none_or(|v| *v.get_ref()),
            secure: raw.secure.as_ref().is_some_and(|v| *v.get_ref()),
            same_site: match raw.same_site.as_ref().map(|s| *s.get_ref()) {
                Some(RawSameSite::Strict) => SameSite::Strict,
                Some(RawSameSite::None) => SameSite::None,
                Some(RawSameSite::Lax) | None => SameSite::Lax,
            },
        }),
    }
}

/// Keys of one persistence type set on another.
fn reject_foreign_keys(
    raw: &RawPersistence,
    kind: RawPersistenceType,
    path: &str,
    issues: &mut Issues,
) {
    fn span<T>(value: &Option<Spanned<T>>) -> Option<std::ops::Range<usize>> {
        value.as_ref().map(Spanned::span)
    }
    let keys = [
        (
            "cookie_name",
            span(&raw.cookie_name),
            RawPersistenceType::Cookie,
        ),
        (
            "http_only",
            span(&raw.http_only),
            RawPersistenceType::Cookie,
        ),
        ("secure", span(&raw.secure), RawPersistenceType::Cookie),
        (
            "same_site",
            span(&raw.same_site),
            RawPersistenceType::Cookie,
        ),
        (
            "idle_timeout",
            span(&raw.idle_timeout),
            RawPersistenceType::SourceIp,
        ),
    ];
    for (key, span, owner) in keys {
        let Some(span) = span else { continue };
        if owner != kind {
            let owner = match owner {
                RawPersistenceType::Cookie => "cookie",
                _ => "source-ip",
            };
            issues.error(
                &span,
                &format!("{path}.{key}"),
                format!("`{key}` applies only to `type = \"{owner}\"` persistence"),
            );
        }
    }
}

/// The cookie name: an HTTP token (RFC 6265 cookie-name).
fn cookie_name(raw: Option<&Spanned<String>>, path: &str, issues: &mut Issues) -> String {
    let Some(name) = raw else {
        return DEFAULT_COOKIE.to_owned();
    };
    if !is_token(name.get_ref()) {
        issues.error(
            &name.span(),
            &format!("{path}.cookie_name"),
            format!(
                "`{}` is not a valid cookie name: use letters, digits and !#$%&'*+-.^_`|~",
                name.get_ref()
            ),
        );
    }
    name.get_ref().clone()
}

/// `[vservice.timeouts]`: every one above 0 and below a day.
pub(in crate::config) fn timeouts(
    raw: Option<&Spanned<RawTimeouts>>,
    path: &str,
    issues: &mut Issues,
) -> Timeouts {
    let defaults = Timeouts {
        connect: Duration::from_secs(5),
        client: Duration::from_secs(30),
        server: Duration::from_secs(30),
        queue: Duration::from_secs(5),
        keep_alive: Duration::from_secs(60),
    };
    let Some(raw) = raw.map(Spanned::get_ref) else {
        return defaults;
    };
    let mut one = |value: &Option<Spanned<f64>>, key: &str, default: Duration| {
        value
            .as_ref()
            .and_then(|v| positive(v, MAX_TIMEOUT, &format!("{path}.timeouts.{key}"), issues))
            .unwrap_or(default)
    };
    Timeouts {
        connect: one(&raw.connect, "connect", defaults.connect),
        client: one(&raw.client, "client", defaults.client),
        server: one(&raw.server, "server", defaults.server),
        queue: one(&raw.queue, "queue", defaults.queue),
        keep_alive: one(&raw.keep_alive, "keep_alive", defaults.keep_alive),
    }
}

/// A duration in seconds above 0 and below `max`.
fn positive(
    value: &Spanned<f64>,
    max: Duration,
    field: &str,
    issues: &mut Issues,
) -> Option<Duration> {
    let duration = seconds(value, field, issues)?;
    if duration.is_zero() || duration >= max {
        issues.error(
            &value.span(),
            field,
            format!(
                "{} s must be above 0 and below {} s",
                value.get_ref(),
                max.as_secs()
            ),
        );
        return None;
    }
    Some(duration)
}
