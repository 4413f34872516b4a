//! Configuration: the TOML schema, its defaults and its validation.
//!
//! [`parse`] and [`load`] turn a TOML file into the validated [`Config`] model or into a
//! [`ConfigError`] that lists every problem found, each with its file, line, column and
//! field path. Values adjusted by S-HC4 (a health check Period or Timeout applied as 1 s)
//! are not errors but warnings: [`parse`] and [`load`] log each one once with
//! `tracing::warn!`; [`parse_with_warnings`] and [`load_with_warnings`] return them instead
//! (as display lines, same format as an issue) and log nothing, for callers such as a
//! reload API that report them to the operator themselves.
//!
//! Besides the XDP and health sections, the file holds `[api]`, `[cluster]` and the L7
//! vServices (`http`, `l7-tcp`); files an L7 vService names (TLS certificate and key, error
//! page) are checked or read during validation, so a bad path fails the load.
//!
//! `[[dns_vservice]]` tables hold the DNS vServices of global service standby (S-GS): a
//! listener, a zone and its names, each name with its site services.

mod check;
mod error;
mod issues;
mod model;
mod raw;
pub mod write_back;

use std::path::Path;

pub use error::{ConfigError, ConfigIssue};
pub use model::*;

use check::vservice::{self, listeners};
use check::{backends, bgp, control, dns, health, settings};
use issues::Issues;
use raw::document;

/// Parse and validate a config file. The error lists every problem found; S-HC4 warnings
/// are logged with `tracing::warn!`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let (config, warnings) = load_with_warnings(path)?;
    log_warnings(&warnings);
    Ok(config)
}

/// Same as [`parse`], from text; `origin` names the text in messages (a file name).
/// S-HC4 warnings are logged with `tracing::warn!`.
pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
    let (config, warnings) = parse_with_warnings(text, origin)?;
    log_warnings(&warnings);
    Ok(config)
}

/// Like [`load`], but returns the S-HC4 warnings instead of logging them.
pub fn load_with_warnings(path: &Path) -> Result<(Config, Vec<String>), ConfigError> {
    let origin = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => parse_with_warnings(&text, &origin),
        Err(error) => Err(ConfigError {
            errors: vec![ConfigIssue {
                origin,
                line: 0,
                column: 0,
                field: String::new(),
                message: format!("cannot read the file: {error}"),
            }],
        }),
    }
}

/// Like [`parse`], but returns the S-HC4 warnings (one display line each) instead of
/// logging them.
pub fn parse_with_warnings(text: &str, origin: &str) -> Result<(Config, Vec<String>), ConfigError> {
    let mut issues = Issues::new(origin, text);
    let config = validate(text, &mut issues);
    let warnings = issues.finish()?;
    Ok((config, warnings))
}

/// Runs every step, each reporting into `issues`; the result is only meaningful when no
/// error was reported.
fn validate(text: &str, issues: &mut Issues) -> Config {
    let doc = document::read(text, issues);
    let xdp = settings::xdp(&doc.xdp, issues);
    let reflection = settings::reflection(&doc.reflection, issues);
    let api = control::api(&doc.api, issues);
    let proxy = settings::proxy(&doc.proxy, issues);
    let cluster = control::cluster(doc.cluster.as_ref(), &api.settings, issues);
    let bgp = bgp::bgp(&doc.bgp, issues);
    let health_checks = health::health_checks(&doc.health_checks, issues);
    let mut backends = backends::backends(&doc, issues);
    let (vservices, listeners) = vservice::vservices(&doc.vservices, &backends, issues);
    vservice::network::tunnel_sources(&doc.vservices, &xdp, issues);
    vservice::network::tunnel_checks(&vservices, &mut backends, issues);
    listeners::check_api(api.settings.listen, api.listen_span, &listeners, issues);
    let dns_context = dns::Context {
        vservices: &doc.vservices,
        listeners: &listeners,
        api: api.settings.listen,
    };
    let dns_vservices = dns::dns_vservices(&doc.dns_vservices, &dns_context, issues);
    Config {
        xdp,
        reflection,
        health_checks,
        backend_services: backends.services,
        backend_groups: backends.groups,
        vservices,
        api: api.settings,
        proxy,
        cluster,
        dns_vservices,
        bgp,
    }
}

fn log_warnings(warnings: &[String]) {
    for warning in warnings {
        tracing::warn!("{warning}");
    }
}

#[cfg(test)]
mod tests;
