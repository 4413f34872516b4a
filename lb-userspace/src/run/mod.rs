//! The daemon's wiring: `lb run` binds the API, starts the daemon's parts and hands the API
//! the handle it serves, then turns signals into reloads and a clean exit, and hands its
//! listening sockets to a successor on an upgrade ([`handover`]).
//!
//! It lives above both [`crate::daemon`] and [`crate::api`] so that neither imports the
//! other's way: the API reads the daemon, the daemon knows nothing of the API.

mod fdstore;
mod files;
mod handover;
mod memory;
mod notify;

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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
use fdstore::FdStore;
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

/// Set by [`hold_hangups`]'s handler for a SIGHUP that came before the daemon listened for
/// them itself; the daemon reloads once ready.
static HELD_HANGUP: AtomicBool = AtomicBool::new(false);
/// True until the daemon's own SIGHUP stream exists (from then on it gets every SIGHUP).
static HANGUPS_EARLY: AtomicBool = AtomicBool::new(true);

extern "C" fn hold_hangup(_: libc::c_int) {
    if HANGUPS_EARLY.load(Ordering::Relaxed) {
        HELD_HANGUP.store(true, Ordering::Relaxed);
    }
}

/// Makes a SIGHUP harmless from now on: one that comes while `lb run` starts (reading the
/// configuration, loading the data path, taking sockets over) would otherwise end the
/// process with the default action. It is held and becomes a reload once the daemon is
/// ready. [`daemon`] calls it first thing; the command line may call it earlier still,
/// before it reads the configuration and loads the XDP program (most of a start with
/// Network vServices). Calling it again does nothing more.
pub fn hold_hangups() {
    // SAFETY: a zeroed sigaction with a handler that only stores to atomics (async-signal
    // safe); SA_RESTART keeps interrupted system calls of the start going.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGHUP, std::ptr::null(), &mut current) == 0
            && current.sa_sigaction != libc::SIG_DFL
        {
            return;
        }
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = hold_hangup as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGHUP, &action, std::ptr::null_mut()) != 0 {
            warn!(
                "cannot hold SIGHUP during the start: {}",
                std::io::Error::last_os_error()
            );
        }
    }
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
    hold_hangups();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // The daemon's own stream right away: a SIGHUP from now on waits in it for the loop.
    let hup = {
        let _inside = rt.enter();
        signal(SignalKind::hangup())?
    };
    HANGUPS_EARLY.store(false, Ordering::Relaxed);
    rt.block_on(serve(dp, cfg, config_path, options, hup))
}

async fn serve(
    dp: Option<DataPath>,
    cfg: Config,
    config_path: PathBuf,
    options: RunOptions,
    mut hup: tokio::signal::unix::Signal,
) -> Result<()> {
    let api = cfg.api.clone();
    // Claimed first, so that the pruning below never takes this configuration's files.
    let _owner = match files::claim(&config_path, options.restore_within) {
        Ok(owner) => Some(owner),
        Err(e) => {
            warn!("{e:#}: this daemon's runtime files may be pruned by the next lb run");
            None
        }
    };
    files::prune();
    // The sockets to listen on instead of binding: the running process's (an upgrade) or
    // those systemd kept across a restart.
    let (mut sockets, taken, mut store) = match options.upgrade {
        true => {
            let path = config_path.clone();
            let taken = tokio::task::spawn_blocking(move || handover::take(&path));
            let mut taken = taken.await.context("the hand-over")??;
            let store = FdStore::after_handover(&taken.names);
            (std::mem::take(&mut taken.sockets), Some(taken), store)
        }
        false => {
            let (store, sockets) = FdStore::inherit();
            (sockets, None, store)
        }
    };
    // Before anything starts: a daemon nobody can reach is refused, not half-started.
    let api_listener = match sockets.api.take() {
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
    let inherited = std::mem::take(&mut sockets.l7);
    let dns = std::mem::take(&mut sockets.dns);
    let start = crate::daemon::StartOptions {
        inherited,
        dns,
        restore_within: options.restore_within,
    };
    let events = dp.as_ref().and_then(follow_events);
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
        // Under systemd: this process becomes the unit's main process before the old one
        // is told to go, so its exit never looks like the service's end.
        tokio::task::spawn_blocking(notify::took_over)
            .await
            .context("telling systemd")?;
        tokio::task::spawn_blocking(move || Taken::serving(taken))
            .await
            .context("the hand-over")??;
        info!("took over from the previous lb run, which now drains");
    }
    cluster.follow();
    let trimmer = memory::spawn();
    let (handed_over, mut successor) = mpsc::channel(1);
    let api_socket = Arc::new(api_socket);
    let waiting = wait_for_successor(
        &config_path,
        daemon.clone(),
        api_socket.clone(),
        handed_over,
    );
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    info!("running; SIGHUP reloads {}", daemon.config_path().display());
    // The data path was attached before this function, the L7 and DNS listeners are bound
    // by `start_with`, the API's listener above and served by its task.
    // Every applied change (a SIGHUP, the API, etcd) may open or close listeners, which the
    // FD store follows.
    let mut changes = daemon.changes();
    store.sync(&listening_sockets(&daemon, &api_socket).await);
    notify::ready();
    if HELD_HANGUP.swap(false, Ordering::Relaxed) {
        info!("a SIGHUP came while starting: reloading now");
        reload_telling_systemd(&daemon, &cluster).await;
    }
    let upgraded = loop {
        tokio::select! {
            _ = hup.recv() => reload_telling_systemd(&daemon, &cluster).await,
            _ = term.recv() => break false,
            _ = int.recv() => break false,
            Some(()) = successor.recv() => break true,
            Ok(()) = changes.changed() => {
                store.sync(&listening_sockets(&daemon, &api_socket).await);
            }
        }
    };
    if !upgraded {
        notify::stopping();
    }
    trimmer.abort();
    // A successor reads the data path's events from now on.
    if let Some(task) = events {
        task.abort();
    }
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
        files::clean_exit(&config_path);
        info!("exiting; the data path stays attached");
    }
    Ok(())
}

/// The data path's rare events (a packet a tunnelled VIP could not encapsulate, one too
/// big for its tunnel) as DEBUG lines of this daemon, read from the program's log ring. A
/// data path pinned by an `lb` whose program writes no such records is served all the
/// same, with a warning.
fn follow_events(dp: &DataPath) -> Option<tokio::task::JoinHandle<()>> {
    let followed = dp
        .program_id()
        .and_then(|id| crate::ebpf_log::follow(id).map_err(Into::into));
    match followed {
        Ok(task) => Some(task),
        Err(e) => {
            warn!("{e:#}: the data path's events are not shown (its counters are)");
            None
        }
    }
}

/// A SIGHUP's reload between RELOADING=1 and READY=1 (with the refusal in STATUS=).
async fn reload_telling_systemd(daemon: &Daemon, cluster: &Cluster) {
    notify::reloading();
    match reload(daemon, cluster).await {
        Ok(()) => notify::reloaded(None),
        Err(e) => {
            warn!("{e:#}");
            notify::reloaded(Some(&format!("{e:#}")));
        }
    }
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
    api_socket: Arc<(SocketAddr, OwnedFd)>,
    done: mpsc::Sender<()>,
) -> Option<tokio::task::JoinHandle<()>> {
    let listener = match handover::listen(config_path) {
        Ok(listener) => listener,
        Err(e) => {
            warn!("{e:#}: `lb run --upgrade` cannot take over from this daemon");
            return None;
        }
    };
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
                let sockets = || runtime.block_on(listening_sockets(&daemon, &api_socket));
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
async fn listening_sockets(
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
    for (addr, udp, tcp) in daemon.dns_sockets().await {
        out.push((Role::DnsUdp, addr, udp));
        out.push((Role::DnsTcp, addr, tcp));
    }
    match api.1.try_clone() {
        Ok(fd) => out.push((Role::Api, api.0, fd)),
        Err(e) => warn!("cannot copy the API socket: {e}"),
    }
    out
}
