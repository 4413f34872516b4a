//! Per-backend connection limit with a bounded FIFO queue (S-BK8).
//!
//! A backend at its limit is not unavailable: a request for it waits in its queue, in arrival
//! order, until a slot frees (the longest waiter gets it), the queue timeout passes, or the
//! queue is already full. A freed slot is handed straight to the first waiter under the lock,
//! so a newcomer can never overtake a waiter.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// Limit value meaning "no limit".
const UNLIMITED: u64 = u64::MAX;

/// The queue, changed only under the gate's lock.
#[derive(Debug, Default)]
struct State {
    /// Waiters, oldest first.
    queue: VecDeque<Waiter>,
    /// Next waiter ticket.
    next_ticket: u64,
}

/// The limit and queue of one backend.
///
/// Taking and releasing a slot while nobody waits is lock-free (a compare-and-swap on the
/// open count), so the proxy's worker threads do not serialize on a busy backend; the lock
/// is taken only to queue, to hand a freed slot to a waiter, or to change the limit. A
/// waiter publishes itself (`queued`) before its last look for room, and a releaser frees
/// its slot before looking for waiters (both sequentially consistent), so a slot cannot be
/// freed unseen while a waiter goes to sleep.
#[derive(Debug)]
pub(crate) struct Gate {
    /// Connection limit, UNLIMITED for none.
    limit: AtomicU64,
    /// Granted slots not yet released.
    open: AtomicU64,
    /// Length of the queue.
    queued: AtomicU64,
    state: Mutex<State>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            limit: AtomicU64::new(UNLIMITED),
            open: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            state: Mutex::new(State::default()),
        }
    }
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
        let new = limit.map_or(UNLIMITED, u64::from);
        if self.limit.load(Ordering::Relaxed) == new {
            return;
        }
        let mut state = lock(&self.state);
        self.limit.store(new, Ordering::SeqCst);
        self.grant_waiters(&mut state);
    }

    /// Current use.
    pub(crate) fn usage(&self) -> Usage {
        let open = self.open.load(Ordering::Relaxed);
        let queued = self.queued.load(Ordering::Relaxed);
        Usage {
            open,
            queued,
            has_room: open < self.limit.load(Ordering::Relaxed) && queued == 0,
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
        if self.queued.load(Ordering::SeqCst) == 0 && self.try_take() {
            return Ok(());
        }
        let (ticket, grant) = {
            let mut state = lock(&self.state);
            if state.queue.is_empty() && self.try_take() {
                return Ok(());
            }
            if state.queue.len() >= queue_size {
                return Err(WaitError::Full);
            }
            let (tx, rx) = oneshot::channel();
            let ticket = state.next_ticket;
            state.next_ticket = state.next_ticket.wrapping_add(1);
            state.queue.push_back(Waiter { ticket, grant: tx });
            self.queued
                .store(state.queue.len() as u64, Ordering::SeqCst);
            // A slot freed before `queued` was visible went unseen by its releaser.
            self.grant_waiters(&mut state);
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
        let _ = self
            .open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if self.queued.load(Ordering::SeqCst) > 0 {
            let mut state = lock(&self.state);
            self.grant_waiters(&mut state);
        }
    }

    /// One more open slot if below the limit.
    fn try_take(&self) -> bool {
        let limit = self.limit.load(Ordering::SeqCst);
        self.open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// Hands free slots to the oldest waiters (called under the lock).
    fn grant_waiters(&self, state: &mut State) {
        while !state.queue.is_empty() && self.try_take() {
            let Some(waiter) = state.queue.pop_front() else {
                break;
            };
            self.queued
                .store(state.queue.len() as u64, Ordering::SeqCst);
            // A waiter removes itself under this lock before it stops listening, so a send
            // only fails if it vanished abnormally; then the slot goes to the next one.
            if waiter.grant.send(()).is_err() {
                self.open.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// Removes waiter `ticket` from the queue (under the lock); false if it was not there.
    fn dequeue(&self, state: &mut State, ticket: u64) -> bool {
        match state.queue.iter().position(|w| w.ticket == ticket) {
            Some(at) => {
                state.queue.remove(at);
                self.queued
                    .store(state.queue.len() as u64, Ordering::SeqCst);
                true
            }
            None => false,
        }
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
        let mut state = lock(&self.gate.state);
        let queued = self.gate.dequeue(&mut state, self.ticket);
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
        if !self.gate.dequeue(&mut state, self.ticket) && self.grant.try_recv().is_ok() {
            // Handed a slot but nobody will use it: pass it on.
            self.gate.open.fetch_sub(1, Ordering::SeqCst);
            self.gate.grant_waiters(&mut state);
        }
    }
}
