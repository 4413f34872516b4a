//! The daemon's wiring: `lb run` binds the API, starts the daemon's parts and hands the API
//! the handle it serves, then turns signals into reloads and a clean exit, and hands its
//! listening sockets to a successor on an upgrade ([`handover`]).
//!
//! It lives above both [`crate::daemon`] and [`crate::api`] so that neither imports the
//! other's way: the API reads the daemon, the daemon knows nothing of the API.

mod handover;
mod memory;
mod notify;

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use crate::cluster::{Cluster, Edit};
use crate::config::Config;
use crate::daemon::Daemon;
use crate::network::DataPath;
use handover::{Role, Taken};

/// How `lb run` starts and ends.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Take over the listening sockets of the `lb run` running with the same configuration
    /// file, which then drains and exits (`lb run --upgrade`).
    pub upgrade: bool,
    /// After handing its sockets to a successor, how long open requests and connections
    /// may take to finish before they are cut (`--drain-timeout`).
    pub drain: Duration,
    /// Saved health decisions younger than this are restored at start
    /// (`--restore-within`; zero restores none).
    pub restore_within: Duration,
}

/// Runs until SIGTERM or SIGINT, or until a successor (`lb run --upgrade`) took over;
/// SIGHUP reloads `config_path`. `dp` is the loaded (or adopted) data path, if the
/// configuration has Network vServices.
pub fn daemon(
    dp: Option<DataPath>,
    cfg: Config,
    config_path: PathBuf,
    options: RunOptions,
) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(serve(dp, cfg, config_path, options))
}

async fn serve(
    dp: Option<DataPath>,
    cfg: Config,
    config_path: PathBuf,
    options: RunOptions,
) -> Result<()> {
    let api = cfg.api.clone();
    let mut taken = match options.upgrade {
        true => {
            let path = config_path.clone();
            let taken = tokio::task::spawn_blocking(move || handover::take(&path));
            Some(taken.await.context("the hand-over")??)
        }
        false => None,
    };
    // Before anything starts: a daemon nobody can reach is refused, not half-started.
    let api_listener = match taken.as_mut().and_then(|t| t.api.take()) {
        Some((addr, socket)) if addr == api.listen => {
            socket.set_nonblocking(true)?;
            TcpListener::from_std(socket).context("the API socket handed over")?
        }
        _ => crate::api::bind(api.listen, api.token.is_some()).await?,
    };
    let api_socket = (
        api_listener.local_addr().context("the API's address")?,
        api_listener.as_fd().try_clone_to_owned()?,
    );
    let inherited = taken
        .as_mut()
        .map(|t| std::mem::take(&mut t.l7))
        .unwrap_or_default();
    let dns = taken
        .as_mut()
        .map(|t| std::mem::take(&mut t.dns))
        .unwrap_or_default();
    let start = crate::daemon::StartOptions {
        inherited,
        dns,
        restore_within: options.restore_within,
    };
    let running = crate::daemon::start_with(dp, cfg, config_path.clone(), start).await?;
    let daemon = running.daemon.clone();
    let (api_stop, api_stop_rx) = watch::channel(false);
    // The shared configuration (etcd), followed once this process is the one serving.
    let cluster = Cluster::new(daemon.clone());
    // The API's Unix socket, if any, is made here (or the start fails) and served with it.
    let api_task = crate::api::spawn(
        daemon.clone(),
        cluster.clone(),
        api_listener,
        api,
        api_stop_rx,
    )?;
    if let Some(taken) = taken {
        tokio::task::spawn_blocking(move || Taken::serving(taken))
            .await
            .context("the hand-over")??;
        info!("took over from the previous lb run, which now drains");
    }
    cluster.follow();
    let trimmer = memory::spawn();
    let (handed_over, mut successor) = mpsc::channel(1);
    let waiting = wait_for_successor(&config_path, daemon.clone(), api_socket, handed_over);
    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    info!("running; SIGHUP reloads {}", daemon.config_path().display());
    // The data path was attached before this function, the L7 and DNS listeners are bound
    // by `start_with`, the API's listener above and served by its task.
    notify::ready();
    let upgraded = loop {
        tokio::select! {
            _ = hup.recv() => {
                notify::reloading();
                match reload(&daemon, &cluster).await {
                    Ok(()) => notify::reloaded(None),
                    Err(e) => {
                        warn!("{e:#}");
                        notify::reloaded(Some(&format!("{e:#}")));
                    }
                }
            }
            _ = term.recv() => break false,
            _ = int.recv() => break false,
            Some(()) = successor.recv() => break true,
        }
    };
    notify::stopping();
    trimmer.abort();
    // A successor follows etcd from now on (and writes the file); this process stops at once.
    cluster.stop().await;
    if let Some(task) = waiting {
        task.abort();
    }
    let _ = api_stop.send(true);
    let _ = api_task.await;
    if upgraded {
        info!(drain = ?options.drain, "a new lb run took over: finishing open requests and connections");
        running.hand_over(options.drain).await;
        info!("exiting; the new lb run serves");
    } else {
        running.stop().await;
        let _ = std::fs::remove_file(handover::socket_path(&config_path));
        info!("exiting; the data path stays attached");
    }
    Ok(())
}

/// SIGHUP: the file as it is now. With etcd it is published (against the revision running
/// here) so that every node runs it, as `lb reload` does; else it is applied here.
async fn reload(daemon: &Daemon, cluster: &Cluster) -> Result<()> {
    if !cluster.is_etcd() {
        return daemon.reload_from_file().await;
    }
    let done = cluster
        .change(Edit::Reload)
        .await
        .with_context(|| format!("reload of {} refused", daemon.config_path().display()))?;
    for w in &done.warnings {
        warn!("{w}");
    }
    info!(
        revision = done.revision,
        staged = done.staged,
        "reloaded and published to etcd"
    );
    Ok(())
}

/// Answers successors (`lb run --upgrade`) until one takes over, then says so on `done`.
/// None when the hand-over socket cannot be made (upgrades are then impossible; the
/// daemon runs on).
fn wait_for_successor(
    config_path: &Path,
    daemon: Arc<Daemon>,
    api_socket: (SocketAddr, OwnedFd),
    done: mpsc::Sender<()>,
) -> Option<tokio::task::JoinHandle<()>> {
    let listener = match handover::listen(config_path) {
        Ok(listener) => listener,
        Err(e) => {
            warn!("{e:#}: `lb run --upgrade` cannot take over from this daemon");
            return None;
        }
    };
    let api_socket = Arc::new(api_socket);
    Some(tokio::spawn(async move {
        loop {
            let Ok((line, _)) = listener.accept().await else {
                continue;
            };
            let daemon = daemon.clone();
            let api_socket = api_socket.clone();
            let runtime = tokio::runtime::Handle::current();
            let answered = tokio::task::spawn_blocking(move || {
                let line = line.into_std()?;
                line.set_nonblocking(false)?;
                let sockets = || sockets_of(&runtime, &daemon, &api_socket);
                let before = || {
                    if let Err(e) = daemon.save_health_states() {
                        warn!("saving the health states for the new lb run: {e:#}");
                    }
                };
                handover::answer(line, &sockets, &before)
            });
            match answered.await {
                Ok(Ok(true)) => {
                    let _ = done.send(()).await;
                    return;
                }
                Ok(Ok(false)) => {
                    warn!("a new lb run took the sockets but did not start; serving on")
                }
                Ok(Err(e)) => warn!("hand-over to a new lb run failed: {e:#}; serving on"),
                Err(e) => warn!("hand-over to a new lb run failed: {e}; serving on"),
            }
        }
    }))
}

/// Copies of every listening socket: each L7 vService's, each DNS vService's and the API's.
fn sockets_of(
    runtime: &tokio::runtime::Handle,
    daemon: &Daemon,
    api: &(SocketAddr, OwnedFd),
) -> Vec<(Role, SocketAddr, OwnedFd)> {
    let mut out: Vec<(Role, SocketAddr, OwnedFd)> = daemon
        .proxy()
        .map(|p| p.listening_sockets())
        .unwrap_or_default()
        .into_iter()
        .map(|(addr, fd)| (Role::L7, addr, fd))
        .collect();
    for (addr, udp, tcp) in runtime.block_on(daemon.dns_sockets()) {
        out.push((Role::DnsUdp, addr, udp));
        out.push((Role::DnsTcp, addr, tcp));
    }
    match api.1.try_clone() {
        Ok(fd) => out.push((Role::Api, api.0, fd)),
        Err(e) => warn!("cannot copy the API socket: {e}"),
    }
    out
}
