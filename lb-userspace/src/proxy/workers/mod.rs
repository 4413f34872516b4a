//! The proxy's worker threads: one single-threaded runtime per worker, each with its own
//! reactor, timers, idle backend connections and parked idle client connections (`park`)
//! (HAProxy's and nginx's model).
//!
//! A client connection is handed to one worker at accept time and stays there with every
//! backend connection it uses, so serving a request never wakes another thread and never
//! takes a lock shared with another worker's requests. The listeners stay on the daemon's
//! runtime (a reload swaps them without touching the workers).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use tokio::runtime::Handle;
use tokio::sync::{Notify, oneshot};

use super::h1::idle;

mod park;
mod sched;

pub(crate) use park::{PARK_AFTER, Parked, available as parks, park};

/// How often each worker closes its expired idle backend connections.
const SWEEP: Duration = Duration::from_secs(1);

/// The running worker threads; they stop when this is dropped (their connections are cut).
pub(crate) struct Workers {
    handles: Vec<Handle>,
    /// Per worker: wakes its parked connections when a listener closes.
    park_signals: Vec<Arc<Notify>>,
    next: AtomicUsize,
    /// Dropping these tells each worker to stop.
    _stop: Vec<oneshot::Sender<()>>,
}

impl Workers {
    /// Starts `count` workers (at least one), each asking the kernel for `slice` (None: the
    /// kernel's default).
    pub(crate) fn start(count: usize, slice: Option<Duration>) -> anyhow::Result<Workers> {
        let mut handles = Vec::new();
        let mut park_signals = Vec::new();
        let mut stops = Vec::new();
        for i in 0..count.max(1) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting a proxy worker runtime")?;
            handles.push(rt.handle().clone());
            let park_signal = Arc::new(Notify::new());
            park_signals.push(park_signal.clone());
            let (stop, stopped) = oneshot::channel::<()>();
            stops.push(stop);
            std::thread::Builder::new()
                .name(format!("lb-proxy-{i}"))
                .spawn(move || {
                    if let Some(slice) = slice {
                        match sched::request_slice(slice) {
                            Ok(()) => tracing::debug!(worker = i, ?slice, "scheduler slice requested"),
                            Err(error) => tracing::warn!(
                                worker = i,
                                ?slice,
                                %error,
                                "could not request a scheduler slice; the worker keeps the kernel's default"
                            ),
                        }
                    }
                    rt.block_on(async move {
                        let sweep = async {
                            let mut tick = tokio::time::interval(SWEEP);
                            loop {
                                tick.tick().await;
                                idle::expire();
                            }
                        };
                        tokio::select! {
                            _ = stopped => {}
                            () = sweep => {}
                            () = park::run(park_signal) => {}
                        }
                    });
                })
                .context("starting a proxy worker thread")?;
        }
        Ok(Workers {
            handles,
            park_signals,
            next: AtomicUsize::new(0),
            _stop: stops,
        })
    }

    /// The worker for the next connection (round robin): its index and runtime.
    pub(crate) fn pick(&self) -> (usize, &Handle) {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        (i, &self.handles[i])
    }

    /// What wakes worker `i`'s parked connections (a listener closing).
    pub(crate) fn park_signal(&self, i: usize) -> Arc<Notify> {
        self.park_signals[i].clone()
    }

    /// How many workers run.
    pub(crate) fn count(&self) -> usize {
        self.handles.len()
    }
}

/// Workers when the configuration does not say: one per CPU.
pub(crate) fn default_count() -> usize {
    std::thread::available_parallelism().map_or(2, usize::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slice each worker runs with, read on the worker's own thread.
    fn slices(workers: &Workers) -> Vec<u64> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("test runtime");
        workers
            .handles
            .iter()
            .map(|h| {
                let attr = rt.block_on(h.spawn(async { sched::current() }));
                attr.expect("worker task")
                    .expect("sched_getattr")
                    .sched_runtime
            })
            .collect()
    }

    #[test]
    fn every_worker_runs_with_the_configured_slice() {
        let workers = Workers::start(2, Some(Duration::from_micros(300))).expect("workers");
        assert_eq!(slices(&workers), [300_000, 300_000]);
    }

    #[test]
    fn no_slice_leaves_the_kernel_default() {
        let default = sched::current().expect("sched_getattr").sched_runtime;
        let workers = Workers::start(1, None).expect("workers");
        assert_eq!(slices(&workers), [default]);
    }
}
