//! The health engine's own thread: a single-threaded Tokio runtime that runs every check task,
//! so that 10,000 checks a second neither wake the proxy's workers nor bounce between them
//! (HAProxy's checks, likewise, run in its event loop, not in a pool). The daemon's other
//! parts read the engine's snapshot and subscribe to its changes from their own runtime.

use std::io;

use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

/// A thread driving a current-thread runtime until dropped. Dropping it does not wait for
/// the thread (which could be waiting on a lock the dropping thread holds): the thread drops
/// the runtime and its tasks and ends on its own.
pub struct EngineThread {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
}

impl EngineThread {
    /// Starts the thread and its runtime.
    pub fn start() -> io::Result<Self> {
        let runtime = Builder::new_current_thread().enable_all().build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("lb-health".into())
            .spawn(move || {
                // Spawned tasks run while this blocks; a dropped sender ends it too.
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        Ok(Self {
            handle,
            stop: Some(stop),
        })
    }

    /// Where the engine spawns its tasks ([`super::EngineOptions::runtime`]).
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }
}

impl Drop for EngineThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
