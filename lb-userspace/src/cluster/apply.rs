//! Applying a configuration text on this node, the one path every change takes (an API
//! change, a peer's push, a revision from etcd): validate it whole, write the file
//! atomically, reload; a refused reload restores the previous file, so nothing is ever
//! half-applied and unchanged services keep their health.

use tracing::warn;

use crate::config::write_back::{self, WriteBackError};
use crate::config::{self, ConfigError};
use crate::daemon::Daemon;

/// Why a configuration text was not applied; the running configuration stays.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// It does not validate.
    #[error("configuration rejected ({} issue(s)); the running configuration stays", .0.errors.len())]
    Invalid(ConfigError),
    /// It validates, but a running part refused it (a listener that cannot bind, say).
    #[error("configuration rejected: {0}; the running configuration stays")]
    Refused(String),
    /// The file could not be written (or restored).
    #[error(transparent)]
    File(#[from] WriteBackError),
}

impl ApplyError {
    /// Every validation issue, one line each (empty for the other kinds).
    pub fn issues(&self) -> Vec<String> {
        match self {
            ApplyError::Invalid(e) => e.errors.iter().map(ToString::to_string).collect(),
            _ => Vec::new(),
        }
    }

    /// The message and every issue, for a log line or a node record.
    pub fn detail(&self) -> String {
        let mut lines = vec![self.to_string()];
        lines.extend(self.issues());
        lines.join("\n")
    }
}

/// Checks `new` the way [`apply_text`] would, without applying it.
pub fn validate(daemon: &Daemon, new: &str) -> Result<(), ApplyError> {
    validate_as(new, &daemon.config_path().display().to_string())
}

/// [`validate`], the issues naming `origin` (which text: the file, a revision in etcd).
pub fn validate_as(new: &str, origin: &str) -> Result<(), ApplyError> {
    config::parse_with_warnings(new, origin)
        .map(|_| ())
        .map_err(ApplyError::Invalid)
}

/// Validates `new`, writes it over the configuration file, reloads; restores `old` when the
/// reload is refused. Returns the reload's warnings. The caller holds the edit lock.
pub async fn apply_text(daemon: &Daemon, old: &str, new: &str) -> Result<Vec<String>, ApplyError> {
    validate(daemon, new)?;
    let path = daemon.config_path();
    write_back::atomic_write(path, new)?;
    let reloaded = async {
        let (cfg, mut warnings) = config::load_with_warnings(path).map_err(ApplyError::Invalid)?;
        warnings.extend(daemon.restart_only_changes(&cfg));
        daemon
            .apply(cfg)
            .await
            .map_err(|e| ApplyError::Refused(format!("{e:#}")))?;
        Ok(warnings)
    }
    .await;
    if reloaded.is_err()
        && let Err(restore) = write_back::atomic_write(path, old)
    {
        warn!(
            "restoring {} after a refused reload failed: {restore}",
            path.display()
        );
        return Err(ApplyError::File(restore));
    }
    reloaded
}
