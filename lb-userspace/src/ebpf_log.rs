//! The eBPF programs' rare events (aya-log records: a tunnel packet the agent dropped, a
//! packet the balancer could not encapsulate) as this process's log lines, each at the
//! level the program gave it and under the program's module as target (`lb_xdp::events`,
//! `lb_decap::events`). Like `stats`, it stands at the bottom and imports nothing of the
//! library: both the balancer's loader and the agent's use it.

use aya_log::{EbpfLogger, Level};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::task::JoinHandle;
use tracing::level_filters::LevelFilter;

/// The global of an aya-log program that bounds the levels it writes records for.
pub const LEVEL_GLOBAL: &str = aya_log::LEVEL;

/// Why the events of a program cannot be followed.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// The program is gone, or has no log ring (loaded from an object without aya-log).
    #[error("opening the log ring of program {id}: {source}")]
    Ring {
        id: u32,
        #[source]
        source: aya_log::Error,
    },
    /// The ring's descriptor could not be registered with the runtime.
    #[error("watching the log ring of program {id}: {source}")]
    Watch {
        id: u32,
        #[source]
        source: std::io::Error,
    },
}

/// The level to load a program with (its `AYA_LOG_LEVEL`): the most verbose one this
/// process's log filter lets through, so that the kernel does not even write the records
/// nobody would see (at the default INFO, the DEBUG events cost one comparison). A program
/// keeps the level it was loaded with: a daemon that adopts it shows what it writes.
pub fn load_level() -> u8 {
    let level = match LevelFilter::current().into_level() {
        None => return 0,
        Some(l) => l,
    };
    let aya = match level {
        tracing::Level::ERROR => Level::Error,
        tracing::Level::WARN => Level::Warn,
        tracing::Level::INFO => Level::Info,
        tracing::Level::DEBUG => Level::Debug,
        tracing::Level::TRACE => Level::Trace,
    };
    aya as u8
}

/// Reads the records of the loaded program `id` into this process's log (through the
/// `log` facade, which the tracing subscriber takes) on the current tokio runtime, until
/// the task is aborted or the runtime ends.
pub fn follow(id: u32) -> Result<JoinHandle<()>, FollowError> {
    let logger = EbpfLogger::init_from_id(id).map_err(|source| FollowError::Ring { id, source })?;
    // SAFETY: the descriptor is the logger's ring map, which the logger owns and keeps open
    // and unchanged until it is dropped, with the `AsyncFd` that owns it.
    let mut ring =
        unsafe { AsyncFd::register_with_interest(logger, Interest::READABLE) }.map_err(|e| {
            FollowError::Watch {
                id,
                source: e.into_parts().1,
            }
        })?;
    Ok(tokio::spawn(async move {
        loop {
            let Ok(mut ready) = ring.readable_mut().await else {
                return;
            };
            ready.get_inner_mut().flush();
            ready.clear_ready();
        }
    }))
}
