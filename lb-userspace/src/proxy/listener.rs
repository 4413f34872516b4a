//! One vService's accept loop and the lifetime of its connections.
//!
//! A listener runs until it is told to close: it then stops accepting, asks HTTP connections
//! to finish their in-flight requests and close, lets L7 TCP connections run until they end on
//! their own (S-MT1), and ends when the last connection has: each connection, in a task or
//! parked while idle, holds a [`Ticket`] of its listener. Connections are cut when their
//! worker stops.

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::futures::Notified;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::runtime::VsRuntime;
use super::workers::Workers;
use crate::config::VServiceKind;

/// What the accept loop of a listener should do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Serve normally.
    Running,
    /// Stop accepting.
    Closing,
}

/// Tells the connections of one listener on one worker that the listener is closing: HTTP
/// connections then close after their in-flight requests. A flag and a wakeup rather than a
/// channel: every idle keep-alive connection waits on it, and the smaller the wait, the
/// less an idle connection costs. It also counts the listener's open connections
/// on that worker, so that a closing listener knows when the last one has ended.
pub(crate) struct Closing {
    closed: AtomicBool,
    notify: Notify,
    /// Tickets held: connections open, in a task or parked.
    open: AtomicUsize,
    /// Notified when the last ticket is dropped.
    ended: Notify,
    /// Wakes the worker's parked connections, which wait on no [`Notify`] of their own.
    parked: Arc<Notify>,
}

/// One open connection of a listener on one worker: dropped when the connection ends.
pub(crate) struct Ticket(Arc<Closing>);

impl Deref for Ticket {
    type Target = Closing;

    fn deref(&self) -> &Closing {
        &self.0
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.ended.notify_waiters();
        }
    }
}

impl Closing {
    fn new(parked: Arc<Notify>) -> Closing {
        Closing {
            closed: AtomicBool::new(false),
            notify: Notify::new(),
            open: AtomicUsize::new(0),
            ended: Notify::new(),
            parked,
        }
    }

    /// A new connection's ticket.
    fn ticket(self: &Arc<Self>) -> Ticket {
        self.open.fetch_add(1, Ordering::AcqRel);
        Ticket(self.clone())
    }

    /// Connections open now.
    fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Returns once no connection is open.
    async fn all_ended(&self) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            // Registered before the count is read: a last drop between the two still wakes it.
            ended.as_mut().enable();
            if self.open() == 0 {
                return;
            }
            ended.await;
        }
    }

    /// The listener is closing.
    pub(crate) fn now(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// A wakeup for the close; registered when first polled, so [`Closing::now`] read after
    /// that poll sees a close that came before it.
    pub(crate) fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }

    /// Returns once the listener is closing.
    pub(crate) async fn wait(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        // Registered before the flag is read: a close between the two still wakes it.
        notified.as_mut().enable();
        if self.now() {
            return;
        }
        notified.await;
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.notify.notify_waiters();
        self.parked.notify_one();
    }
}

/// A running listener.
pub(crate) struct Listener {
    /// The vService it serves.
    pub(crate) rt: Arc<VsRuntime>,
    /// The bound socket (shared so a reload can hand it to a successor without a gap).
    pub(crate) socket: Arc<TcpListener>,
    /// The accept loop's phase, and one closing signal per worker for its connections: each
    /// connection waits on its own worker's, so keep-alive waits on two workers never share
    /// a lock.
    phase: watch::Sender<Phase>,
    worker_closing: Vec<Arc<Closing>>,
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
        let worker_closing: Vec<Arc<Closing>> = (0..workers.count())
            .map(|i| Arc::new(Closing::new(workers.park_signal(i))))
            .collect();
        let task = tokio::spawn(accept_loop(
            rt.clone(),
            socket.clone(),
            rx,
            workers,
            worker_closing.clone(),
        ));
        Listener {
            rt,
            socket,
            phase,
            worker_closing,
            task,
        }
    }

    /// Stops accepting; returns the task, which ends when the last connection has (aborting
    /// it stops the wait, not the connections).
    pub(crate) fn close(self) -> JoinHandle<()> {
        self.phase.send_replace(Phase::Closing);
        for closing in &self.worker_closing {
            closing.close();
        }
        self.task
    }
}

async fn accept_loop(
    rt: Arc<VsRuntime>,
    socket: Arc<TcpListener>,
    mut phase: watch::Receiver<Phase>,
    workers: Arc<Workers>,
    worker_closing: Vec<Arc<Closing>>,
) {
    loop {
        tokio::select! {
            accepted = socket.accept() => match accepted.and_then(|(s, peer)| Ok((s.into_std()?, peer))) {
                Ok((stream, peer)) => {
                    let (i, worker) = workers.pick();
                    spawn(&rt, stream, peer, worker, worker_closing[i].ticket());
                }
                Err(error) => {
                    // Typically out of file descriptors: back off instead of spinning.
                    tracing::warn!(vservice = %rt.name, %error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            () = stopped(&mut phase) => break,
        }
    }
    drop(socket);
    let open: usize = worker_closing.iter().map(|c| c.open()).sum();
    tracing::info!(vservice = %rt.name, open, "listener closed; open connections finish");
    for closing in &worker_closing {
        closing.all_ended().await;
    }
}

/// Serves one accepted connection on `worker`: the socket joins that worker's reactor, so
/// its readiness events wake no other thread. The task runs the path of the connection's
/// kind from its start (L7 TCP, TLS, plain HTTP), with no layer between: an idle keep-alive
/// connection's task holds only what its path needs.
fn spawn(
    rt: &Arc<VsRuntime>,
    stream: std::net::TcpStream,
    peer: SocketAddr,
    worker: &Handle,
    ticket: Ticket,
) {
    let stream = {
        let _on_worker = worker.enter();
        match TcpStream::from_std(stream) {
            Ok(stream) => stream,
            Err(error) => {
                return tracing::warn!(vservice = %rt.name, %error, "cannot register a connection");
            }
        }
    };
    let rt = rt.clone();
    if rt.kind == VServiceKind::L7Tcp {
        worker.spawn(async move {
            let _open = ticket;
            super::tcp::serve(rt, stream, peer).await;
        });
        return;
    }
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%error, "set_nodelay failed");
    }
    match rt.settings.load().tls.clone() {
        Some(tls) => worker.spawn(super::http::serve_tls(rt, tls, stream, peer, ticket)),
        None => worker.spawn(super::h1::serve(rt, stream, peer, ticket)),
    };
}

/// Returns once the accept loop should stop (or its owner is gone).
async fn stopped(phase: &mut watch::Receiver<Phase>) {
    // The guard `wait_for` returns is dropped here, so the future stays `Send`.
    let _ = phase.wait_for(|p| *p == Phase::Closing).await.is_ok();
}
