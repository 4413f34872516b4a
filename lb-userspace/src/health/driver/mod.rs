//! TCP checks without a task each, so that tens of thousands of them cost little: one
//! thread with one epoll set and one timer heap runs every TCP check of the engine, the way
//! HAProxy's event loop runs its checks.
//!
//! A check costs the system calls it needs and no more: socket (already non-blocking),
//! TCP_QUICKACK off (half-open), connect, one epoll_ctl ADD, and on the answer SO_LINGER 0
//! and close. Closing a descriptor takes it out of the epoll set, so there is no DEL, and
//! SO_ERROR is read only when the answer is an error. A Tokio task per check made two
//! epoll_ctl calls, two timer entries, a boxed future and a wake-up per check.
//!
//! Scheduling is the task's (S-HC3): the first check after the spread delay, each next one P
//! after the previous ended, a check cut at T; the results go through the same
//! [`CheckBook`] as every other check type's. One-off checks ([`super::TcpProbe`]) run here
//! too, so there is one TCP check on the wire, whoever asks for it.

mod check;
mod timers;

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use mio::{Events, Poll, Token, Waker};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::error;

use super::probe::ProbeResult;
use super::scheduler::CheckBook;
use check::{Opened, Sink, Slot};
use timers::{Due, Timers};

/// The token of the driver's own wake-up (commands are waiting).
const WAKE: Token = Token(usize::MAX);

/// Timers run between two polls for answers. A half-open check must close its socket before
/// the kernel's delayed ACK goes out (40 ms after the SYN-ACK): after a stall, thousands of
/// due checks started in one go would hold back the answers of the first ones that long.
const TIMERS_PER_TURN: usize = 128;

/// One service's TCP check, as the engine hands it over.
pub(crate) struct TcpCheck {
    /// The target.
    pub addr: SocketAddr,
    /// Socket mark of the check's connections (0: none), for checks that travel a tunnel.
    pub mark: u32,
    /// Half-open (SYN, SYN-ACK, RST) or the full handshake.
    pub half_open: bool,
    /// Delay before the first check.
    pub first_delay: Duration,
    /// Where results go.
    pub book: CheckBook,
}

/// One check on its own, whose result is sent back (a [`super::TcpProbe`]).
pub(crate) struct OnceCheck {
    /// The target.
    pub addr: SocketAddr,
    /// Socket mark (0: none).
    pub mark: u32,
    /// Half-open or the full handshake.
    pub half_open: bool,
    /// The check is cut after this long.
    pub timeout: Duration,
    /// Where the result goes.
    pub reply: oneshot::Sender<ProbeResult>,
}

enum Command {
    Add(u64, Box<TcpCheck>),
    Once(Box<OnceCheck>),
    Remove(u64),
}

/// The handle on the driver's thread, one per process ([`shared`]).
pub(crate) struct TcpDriver {
    commands: Mutex<Sender<Command>>,
    waker: Waker,
    /// Ids of added checks, unique in the process (every engine shares the driver).
    next_id: AtomicU64,
}

/// The process's TCP check thread, started at first use; None (logged once) when it could
/// not be started, and then TCP checks run as tasks.
pub(crate) fn shared() -> Option<&'static TcpDriver> {
    static DRIVER: OnceLock<Option<TcpDriver>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            TcpDriver::start()
                .inspect_err(|e| error!(error = %e, "cannot start the TCP health check thread"))
                .ok()
        })
        .as_ref()
}

impl TcpDriver {
    /// Starts the thread, which lives as long as the process.
    fn start() -> io::Result<TcpDriver> {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKE)?;
        let (commands, rx) = mpsc::channel();
        let driver = Loop {
            poll,
            rx,
            slots: Vec::new(),
            generations: Vec::new(),
            free: Vec::new(),
            by_id: HashMap::new(),
            timers: Timers::default(),
            reason: String::new(),
        };
        std::thread::Builder::new()
            .name("lb-health-tcp".into())
            .spawn(move || driver.run())?;
        Ok(TcpDriver {
            commands: Mutex::new(commands),
            waker,
            next_id: AtomicU64::new(0),
        })
    }

    /// Starts checking as `check` says; returns the id that [`Self::remove`] stops it by.
    pub(crate) fn add(&self, check: TcpCheck) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.send(Command::Add(id, Box::new(check)));
        id
    }

    /// Runs one check and sends its result to `check.reply`.
    pub(crate) fn once(&self, check: OnceCheck) {
        self.send(Command::Once(Box::new(check)));
    }

    /// Stops the checks added as `id` (a reload replaced or removed their service).
    pub(crate) fn remove(&self, id: u64) {
        self.send(Command::Remove(id));
    }

    fn send(&self, command: Command) {
        let sent = self
            .commands
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(command);
        if sent.is_ok()
            && let Err(e) = self.waker.wake()
        {
            error!(error = %e, "cannot wake the TCP health check thread");
        }
    }
}

/// The driver thread's state.
struct Loop {
    poll: Poll,
    rx: Receiver<Command>,
    slots: Vec<Option<Slot>>,
    /// Per slot index, bumped at every check and every reuse, so a token or timer of an
    /// earlier check never matches a later one.
    generations: Vec<u32>,
    free: Vec<usize>,
    by_id: HashMap<u64, usize>,
    timers: Timers,
    /// Reused for every reason text.
    reason: String,
}

impl Loop {
    fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        loop {
            let wait = self
                .timers
                .next()
                .map(|at| at.saturating_duration_since(Instant::now()));
            if let Err(e) = self.poll.poll(&mut events, wait) {
                if e.kind() != io::ErrorKind::Interrupted {
                    error!(error = %e, "TCP health checks: waiting for events failed");
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
            for event in events.iter() {
                if event.token() == WAKE {
                    self.commands();
                    continue;
                }
                let refused = event.is_error() || event.is_write_closed();
                self.answered(event.token(), refused);
            }
            self.fire(Instant::now());
        }
    }

    /// Applies the waiting commands.
    fn commands(&mut self) {
        while let Ok(command) = self.rx.try_recv() {
            match command {
                Command::Add(id, check) => {
                    let TcpCheck {
                        addr,
                        half_open,
                        mark,
                        first_delay,
                        book,
                    } = *check;
                    let slot = Slot::new((addr, mark), half_open, Sink::Book(book));
                    let index = self.add(slot, first_delay);
                    self.by_id.insert(id, index);
                }
                Command::Once(check) => {
                    let OnceCheck {
                        addr,
                        mark,
                        half_open,
                        timeout,
                        reply,
                    } = *check;
                    self.add(
                        Slot::new(
                            (addr, mark),
                            half_open,
                            Sink::Once {
                                timeout,
                                reply: Some(reply),
                            },
                        ),
                        Duration::ZERO,
                    );
                }
                Command::Remove(id) => {
                    if let Some(index) = self.by_id.remove(&id) {
                        self.release(index);
                    }
                }
            }
        }
    }

    /// Takes a free slot for `slot`, its first check `first_delay` from now.
    fn add(&mut self, slot: Slot, first_delay: Duration) -> usize {
        let index = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.generations.push(0);
            self.slots.len() - 1
        });
        let generation = self.generations[index].wrapping_add(1);
        self.generations[index] = generation;
        self.slots[index] = Some(slot);
        self.timers
            .at(Instant::now() + first_delay, index, generation, Due::Start);
        index
    }

    /// Frees a slot; dropping it closes a check in flight.
    fn release(&mut self, index: usize) {
        self.slots[index] = None;
        self.generations[index] = self.generations[index].wrapping_add(1);
        self.free.push(index);
    }

    /// Runs the timers that are due, at most [`TIMERS_PER_TURN`]; the next turn's poll
    /// does not wait while more are due.
    fn fire(&mut self, now: Instant) {
        for _ in 0..TIMERS_PER_TURN {
            let Some((_, index, generation, due)) = self.timers.pop_due(now) else {
                return;
            };
            if self.generations.get(index) != Some(&generation) {
                continue;
            }
            match due {
                Due::Start => self.start(index, now),
                Due::Deadline => self.cut(index, now),
            }
        }
    }

    fn start(&mut self, index: usize, now: Instant) {
        let generation = self.generations[index].wrapping_add(1);
        self.generations[index] = generation;
        let token = Token(index | (generation as usize) << 32);
        let Some(slot) = self.slots[index].as_mut() else {
            return;
        };
        match slot.open(now, self.poll.registry(), token) {
            Opened::Waiting(timeout) => {
                self.timers
                    .after(now, timeout, index, generation, Due::Deadline)
            }
            Opened::Done { ok } => {
                self.reason.clear();
                slot.describe(ok, &mut self.reason);
                self.finish(index, ok, now);
            }
        }
    }

    /// The target answered the check of `token` (SYN-ACK, or an error such as a refusal).
    fn answered(&mut self, token: Token, refused: bool) {
        let index = token.0 & 0xffff_ffff;
        let generation = (token.0 >> 32) as u32;
        if self.generations.get(index) != Some(&generation) {
            return;
        }
        let Some(slot) = self.slots[index].as_mut() else {
            return;
        };
        self.reason.clear();
        let ok = slot.answered(refused, &mut self.reason);
        self.finish(index, ok, Instant::now());
    }

    /// Cuts the check in flight at its Timeout.
    fn cut(&mut self, index: usize, now: Instant) {
        let Some(slot) = self.slots[index].as_mut() else {
            return;
        };
        slot.cut(&mut self.reason);
        self.finish(index, false, now);
    }

    /// Records the check that just ended and schedules the next one P later (a one-off
    /// check's slot is freed instead).
    fn finish(&mut self, index: usize, ok: bool, now: Instant) {
        let generation = self.generations[index].wrapping_add(1);
        self.generations[index] = generation;
        let Some(slot) = self.slots[index].as_mut() else {
            return;
        };
        match slot.record(ok, now, &self.reason) {
            Some(next) => self.timers.after(now, next, index, generation, Due::Start),
            None => self.release(index),
        }
    }
}
