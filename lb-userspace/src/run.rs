//! The daemon's wiring: `lb run` binds the API, starts the daemon's parts and hands the API
//! the handle it serves, then turns signals into reloads and a clean exit.
//!
//! It lives above both [`crate::daemon`] and [`crate::api`] so that neither imports the
//! other's way: the API reads the daemon, the daemon knows nothing of the API.

use std::path::PathBuf;

use anyhow::{Context, Result};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::config::Config;
use crate::network::DataPath;

/// Runs until SIGTERM or SIGINT; SIGHUP reloads `config_path`. `dp` is the loaded (or
/// adopted) data path, if the configuration has Network vServices.
pub fn daemon(dp: Option<DataPath>, cfg: Config, config_path: PathBuf) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let api = cfg.api.clone();
        // Before anything starts: a daemon nobody can reach is refused, not half-started.
        let api_listener = crate::api::bind(api.listen, api.token.is_some()).await?;
        let running = crate::daemon::start(dp, cfg, config_path).await?;
        let daemon = running.daemon.clone();
        let (api_stop, api_stop_rx) = watch::channel(false);
        let api_task = {
            let daemon = daemon.clone();
            tokio::spawn(async move {
                if let Err(e) =
                    crate::api::serve_on(daemon, api_listener, api.token, api_stop_rx).await
                {
                    warn!("the API stopped: {e:#}");
                }
            })
        };
        let mut hup = signal(SignalKind::hangup())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        info!("running; SIGHUP reloads {}", daemon.config_path().display());
        loop {
            tokio::select! {
                _ = hup.recv() => if let Err(e) = daemon.reload_from_file().await {
                    warn!("{e:#}");
                },
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
        }
        let _ = api_stop.send(true);
        let _ = api_task.await;
        running.stop().await;
        info!("exiting; the data path stays attached");
        Ok(())
    })
}
