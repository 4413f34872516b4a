//! Idle keep-alive connections parked without a task.
//!
//! A balancer holds tens of thousands of keep-alive connections that send nothing for
//! seconds or minutes. As a task each, one costs about 1.2 KiB of heap: the task and its
//! future, the reactor's registration of its socket, the listener's handle on the task.
//! Parked, it costs its entry here (the socket, its vService, its peer) and a timer entry,
//! about a tenth of that: the socket leaves the worker's reactor for this worker's own
//! epoll set, whose readiness is one registration in the reactor for every parked socket,
//! and the keep-alive timeouts of all of them share one timer queue.
//!
//! A connection parks after [`PARK_AFTER`] without a request, so clients that send their
//! requests back to back never pay the move; one that sends again (or closes) goes back to
//! a task of its own on the same worker, and one that stays silent past its keep-alive
//! timeout is closed here, as its task would have closed it. When its listener closes, a
//! parked connection is woken too, and closes the way a waiting one does.

use std::cell::RefCell;
use std::io;
use std::os::fd::RawFd;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Token};
use slab::Slab;
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key;

/// A keep-alive connection without a request for this long is parked: longer than the
/// gap between the requests of a client that sends them back to back (so such clients
/// never pay the move out of and back into the reactor, a few microseconds), short
/// enough that nearly every idle connection of a busy balancer is parked.
pub(crate) const PARK_AFTER: Duration = Duration::from_millis(100);

/// Readiness events taken from the epoll set at a time.
const BATCH: usize = 256;

/// A connection waiting for its next request without a task: its socket, taken off the
/// worker's reactor, and whatever its serving path needs to go on.
pub(crate) trait Parked {
    /// The socket, watched for a request or the client's close.
    fn fd(&self) -> RawFd;

    /// Its listener is closing: the connection is woken to close the way a waiting one does.
    fn closing(&self) -> bool;

    /// Serves the connection again in a task of its own on this worker. `park_again`: it
    /// may be parked again once idle (false after parking failed, so that a failure that
    /// lasts does not make the connection move in and out of its task every
    /// [`PARK_AFTER`]).
    fn resume(self: Box<Self>, park_again: bool);
}

/// One parked connection.
struct Entry {
    conn: Box<dyn Parked>,
    /// Its keep-alive deadline in the timer queue.
    timer: Key,
}

/// The parked connections of one worker.
struct Parking {
    /// The epoll set of the parked sockets (token: the slab index), itself registered in
    /// the worker's reactor.
    epoll: AsyncFd<mio::Poll>,
    events: Events,
    /// The tokens of one batch of events (kept for its room).
    ready: Vec<usize>,
    parked: Slab<Entry>,
    /// Keep-alive deadlines, each naming its slab index.
    timers: DelayQueue<usize>,
    /// Connections taken out to be resumed once the state is no longer borrowed.
    woken: Vec<Box<dyn Parked>>,
}

thread_local! {
    /// This worker's parking, while its loop ([`run`]) runs.
    static PARKING: RefCell<Weak<RefCell<Parking>>> = const { RefCell::new(Weak::new()) };
}

/// This thread parks connections (a proxy worker whose loop runs).
pub(crate) fn available() -> bool {
    PARKING.with(|p| p.borrow().strong_count() > 0)
}

/// Parks `conn` until its socket has something to read, its listener closes, or
/// `deadline` (its keep-alive timeout) passes, when it is closed. Gives it back when this
/// thread cannot park it.
pub(crate) fn park(conn: Box<dyn Parked>, deadline: Instant) -> Result<(), Box<dyn Parked>> {
    let Some(parking) = PARKING.with(|p| p.borrow().upgrade()) else {
        return Err(conn);
    };
    let mut parking = parking.borrow_mut();
    parking.insert(conn, deadline)
}

/// Runs the parking of this worker: never returns (the worker drops it when it stops, and
/// the parked connections with it). `signal` wakes it when a listener closes.
pub(crate) async fn run(signal: Arc<Notify>) {
    let parking = match Parking::new() {
        Ok(parking) => Rc::new(RefCell::new(parking)),
        Err(error) => {
            tracing::warn!(%error, "idle connections will wait in tasks: no epoll set for them");
            return std::future::pending().await;
        }
    };
    PARKING.with(|p| *p.borrow_mut() = Rc::downgrade(&parking));
    loop {
        tokio::select! {
            () = signal.notified() => parking.borrow_mut().wake_closing(),
            () = std::future::poll_fn(|cx| parking.borrow_mut().poll(cx)) => {}
        }
        let mut woken = std::mem::take(&mut parking.borrow_mut().woken);
        for conn in woken.drain(..) {
            conn.resume(true);
        }
        // The vector's room is kept for the next turn.
        parking.borrow_mut().woken = woken;
    }
}

impl Parking {
    fn new() -> io::Result<Parking> {
        // SAFETY: the poll owns its descriptor, which stays open while the AsyncFd holds it.
        let epoll = unsafe { AsyncFd::register(mio::Poll::new()?)? };
        Ok(Parking {
            epoll,
            events: Events::with_capacity(BATCH),
            ready: Vec::with_capacity(BATCH),
            parked: Slab::new(),
            timers: DelayQueue::new(),
            woken: Vec::new(),
        })
    }

    fn insert(&mut self, conn: Box<dyn Parked>, deadline: Instant) -> Result<(), Box<dyn Parked>> {
        let fd = conn.fd();
        let slot = self.parked.vacant_entry();
        let index = slot.key();
        // Edge-triggered: a request that arrived before this call is reported at once.
        let registered = self.epoll.get_ref().registry().register(
            &mut SourceFd(&fd),
            Token(index),
            Interest::READABLE,
        );
        if let Err(error) = registered {
            tracing::debug!(%error, "cannot park an idle connection");
            return Err(conn);
        }
        let timer = self.timers.insert_at(index, deadline);
        slot.insert(Entry { conn, timer });
        Ok(())
    }

    /// Takes the connection at `index` out of the set and its timer out of the queue.
    fn take(&mut self, index: usize) -> Option<Box<dyn Parked>> {
        let entry = self.parked.try_remove(index)?;
        self.timers.try_remove(&entry.timer);
        self.forget(&*entry.conn);
        Some(entry.conn)
    }

    fn forget(&self, conn: &dyn Parked) {
        if let Err(error) = self
            .epoll
            .get_ref()
            .registry()
            .deregister(&mut SourceFd(&conn.fd()))
        {
            tracing::debug!(%error, "removing a parked connection from its epoll set");
        }
    }

    /// Takes out the sockets that have something to read and closes those past their
    /// keep-alive timeout; ready when it did either.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut progress = false;
        let mut ready = std::mem::take(&mut self.ready);
        while let Poll::Ready(guard) = self.epoll.poll_read_ready_mut(cx) {
            let mut guard = match guard {
                Ok(guard) => guard,
                Err(error) => {
                    tracing::warn!(%error, "the parked connections' epoll set failed");
                    break;
                }
            };
            if let Err(error) = guard
                .get_inner_mut()
                .poll(&mut self.events, Some(Duration::ZERO))
            {
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::warn!(%error, "reading the parked connections' epoll set");
                break;
            }
            ready.extend(self.events.iter().map(|e| e.token().0));
            // Fewer than a batch: the set is drained until it is next reported ready.
            let drained = ready.len() < BATCH;
            if drained {
                guard.clear_ready();
            }
            for index in ready.drain(..) {
                if let Some(conn) = self.take(index) {
                    self.woken.push(conn);
                    progress = true;
                }
            }
            if drained {
                break;
            }
        }
        self.ready = ready;
        while let Poll::Ready(Some(expired)) = self.timers.poll_expired(cx) {
            // Silent past the keep-alive timeout: closed as its task would have closed it.
            if let Some(entry) = self.parked.try_remove(expired.into_inner()) {
                self.forget(&*entry.conn);
                progress = true;
            }
        }
        if progress {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Takes out every connection whose listener is closing.
    fn wake_closing(&mut self) {
        let closing: Vec<usize> = self
            .parked
            .iter()
            .filter(|(_, e)| e.conn.closing())
            .map(|(index, _)| index)
            .collect();
        for index in closing {
            if let Some(conn) = self.take(index) {
                self.woken.push(conn);
            }
        }
    }
}
