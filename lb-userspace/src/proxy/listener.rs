//! One vService's accept loop and the lifetime of its connections.
//!
//! A listener runs until it is told to close: it then stops accepting, asks HTTP connections
//! to finish their in-flight requests and close, lets L7 TCP connections run until they end on
//! their own (S-MT1), and ends when the last connection has. Aborting the task cuts them all.

use std::sync::Arc;
use std::time::Duration;

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use super::runtime::VsRuntime;
use super::workers::Workers;
use crate::config::VServiceKind;

/// What connections of a listener should do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Serve normally.
    Running,
    /// The listener stopped accepting: HTTP connections close after in-flight requests.
    Closing,
}

/// A running listener.
pub(crate) struct Listener {
    /// The vService it serves.
    pub(crate) rt: Arc<VsRuntime>,
    /// The bound socket (shared so a reload can hand it to a successor without a gap).
    pub(crate) socket: Arc<TcpListener>,
    /// The accept loop's phase, and one per worker for its connections: each connection
    /// waits for Closing on its own worker's channel, so keep-alive waits on two workers
    /// never share a lock.
    phase: watch::Sender<Phase>,
    worker_phases: Vec<watch::Sender<Phase>>,
    task: JoinHandle<()>,
}

impl Listener {
    /// Starts accepting on `socket` for `rt`; connections are served on `workers`.
    pub(crate) fn spawn(
        rt: Arc<VsRuntime>,
        socket: Arc<TcpListener>,
        workers: Arc<Workers>,
    ) -> Listener {
        let (phase, rx) = watch::channel(Phase::Running);
        let worker_phases: Vec<watch::Sender<Phase>> = (0..workers.count())
            .map(|_| watch::Sender::new(Phase::Running))
            .collect();
        let conn_phases = worker_phases.iter().map(watch::Sender::subscribe).collect();
        let task = tokio::spawn(accept_loop(
            rt.clone(),
            socket.clone(),
            rx,
            workers,
            conn_phases,
        ));
        Listener {
            rt,
            socket,
            phase,
            worker_phases,
            task,
        }
    }

    /// Stops accepting; returns the task, which ends when the last connection has.
    pub(crate) fn close(self) -> JoinHandle<()> {
        self.phase.send_replace(Phase::Closing);
        for phase in &self.worker_phases {
            phase.send_replace(Phase::Closing);
        }
        self.task
    }
}

async fn accept_loop(
    rt: Arc<VsRuntime>,
    socket: Arc<TcpListener>,
    mut phase: watch::Receiver<Phase>,
    workers: Arc<Workers>,
    conn_phases: Vec<watch::Receiver<Phase>>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = socket.accept() => match accepted.and_then(|(s, peer)| Ok((s.into_std()?, peer))) {
                Ok((stream, peer)) => {
                    let (i, worker) = workers.pick();
                    let conn = serve(rt.clone(), stream, peer, conn_phases[i].clone());
                    conns.spawn_on(conn, worker);
                }
                Err(error) => {
                    // Typically out of file descriptors: back off instead of spinning.
                    tracing::warn!(vservice = %rt.name, %error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            () = closing(&mut phase) => break,
        }
    }
    drop(socket);
    tracing::info!(vservice = %rt.name, open = conns.len(), "listener closed; open connections finish");
    while conns.join_next().await.is_some() {}
}

/// Serves one accepted connection on the worker running this task: the socket joins that
/// worker's reactor, so its readiness events wake no other thread.
async fn serve(
    rt: Arc<VsRuntime>,
    stream: std::net::TcpStream,
    peer: SocketAddr,
    phase: watch::Receiver<Phase>,
) {
    let stream = match TcpStream::from_std(stream) {
        Ok(stream) => stream,
        Err(error) => {
            return tracing::warn!(vservice = %rt.name, %error, "cannot register a connection");
        }
    };
    match rt.kind {
        // Boxed: the tunnel's state would otherwise size every HTTP connection's task.
        VServiceKind::L7Tcp => Box::pin(super::tcp::serve(rt, stream, peer)).await,
        _ => super::http::serve(rt, stream, peer, phase).await,
    }
}

/// Returns once the listener is closing (or its owner is gone).
pub(crate) async fn closing(phase: &mut watch::Receiver<Phase>) {
    // The guard `wait_for` returns is dropped here, so callers' futures stay `Send`.
    let _ = phase.wait_for(|p| *p == Phase::Closing).await.is_ok();
}
