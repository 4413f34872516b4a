//! Per-backend connection limit with a bounded FIFO queue (S-BK8).
//!
//! A backend at its limit is not unavailable: a request for it waits in its queue, in arrival
//! order, until a slot frees (the longest waiter gets it), the queue timeout passes, or the
//! queue is already full. A freed slot is handed straight to the first waiter under the lock,
//! so a newcomer can never overtake a waiter.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;

use super::lock;

/// Why a slot could not be granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitError {
    /// The queue already holds `queue_size` waiters.
    Full,
    /// The wait lasted longer than the queue timeout.
    Timeout,
}

/// One waiting request: its ticket and the channel its slot is handed over on.
#[derive(Debug)]
struct Waiter {
    ticket: u64,
    grant: oneshot::Sender<()>,
}

#[derive(Debug, Default)]
struct State {
    /// Connection limit; None = unlimited.
    limit: Option<u32>,
    /// Granted slots not yet released.
    open: u64,
    /// Waiters, oldest first.
    queue: VecDeque<Waiter>,
    /// Next waiter ticket.
    next_ticket: u64,
}

impl State {
    fn has_room(&self) -> bool {
        self.limit.is_none_or(|l| self.open < u64::from(l))
    }

    /// Hands free slots to the oldest waiters.
    fn grant_waiters(&mut self) {
        while self.has_room() {
            let Some(waiter) = self.queue.pop_front() else {
                return;
            };
            // A waiter removes itself under this lock before it stops listening, so a send
            // only fails if it vanished abnormally; then the slot goes to the next one.
            if waiter.grant.send(()).is_ok() {
                self.open += 1;
            }
        }
    }
}

/// The limit and queue of one backend.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    state: Mutex<State>,
}

/// Current use of a gate, for counters and algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Granted slots.
    pub open: u64,
    /// Waiting requests.
    pub queued: u64,
    /// Whether a new request would be served at once.
    pub has_room: bool,
}

impl Gate {
    /// Applies a (possibly changed) limit; a raised limit serves waiters at once.
    pub(crate) fn set_limit(&self, limit: Option<u32>) {
        let mut state = lock(&self.state);
        if state.limit != limit {
            state.limit = limit;
            state.grant_waiters();
        }
    }

    /// Current use.
    pub(crate) fn usage(&self) -> Usage {
        let state = lock(&self.state);
        Usage {
            open: state.open,
            queued: state.queue.len() as u64,
            has_room: state.has_room() && state.queue.is_empty(),
        }
    }

    /// Takes a slot: at once when below the limit and nobody waits, otherwise after waiting
    /// in the queue (at most `queue_size` waiters, at most `timeout`). Dropping the future
    /// while it waits leaves the queue cleanly.
    pub(crate) async fn enter(
        &self,
        queue_size: usize,
        timeout: Duration,
    ) -> Result<(), WaitError> {
        let (ticket, grant) = {
            let mut state = lock(&self.state);
            if state.queue.is_empty() && state.has_room() {
                state.open += 1;
                return Ok(());
            }
            if state.queue.len() >= queue_size {
                return Err(WaitError::Full);
            }
            let (tx, rx) = oneshot::channel();
            let ticket = state.next_ticket;
            state.next_ticket = state.next_ticket.wrapping_add(1);
            state.queue.push_back(Waiter { ticket, grant: tx });
            (ticket, rx)
        };
        let mut waiting = Waiting {
            gate: self,
            ticket,
            grant,
            granted: false,
        };
        match tokio::time::timeout(timeout, &mut waiting.grant).await {
            Ok(Ok(())) => {
                waiting.granted = true;
                Ok(())
            }
            Ok(Err(_)) | Err(_) => waiting.give_up(),
        }
    }

    /// Releases a granted slot; the oldest waiter, if any, gets it.
    pub(crate) fn leave(&self) {
        let mut state = lock(&self.state);
        state.open = state.open.saturating_sub(1);
        state.grant_waiters();
    }
}

/// A queued request; if dropped before it resolves, it leaves the queue, or passes on the
/// slot it was handed at the last moment.
struct Waiting<'a> {
    gate: &'a Gate,
    ticket: u64,
    grant: oneshot::Receiver<()>,
    granted: bool,
}

impl Waiting<'_> {
    /// The wait ended without a grant being seen: leave the queue, unless a slot was handed
    /// over in the meantime (then take it: it was granted within the wait).
    fn give_up(&mut self) -> Result<(), WaitError> {
        let state = lock(&self.gate.state);
        let queued = state.queue.iter().any(|w| w.ticket == self.ticket);
        drop(state);
        if !queued && self.grant.try_recv().is_ok() {
            self.granted = true;
            return Ok(());
        }
        Err(WaitError::Timeout)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.granted {
            return;
        }
        let mut state = lock(&self.gate.state);
        if let Some(at) = state.queue.iter().position(|w| w.ticket == self.ticket) {
            state.queue.remove(at);
        } else if self.grant.try_recv().is_ok() {
            // Handed a slot but nobody will use it: pass it on.
            state.open = state.open.saturating_sub(1);
            state.grant_waiters();
        }
    }
}
