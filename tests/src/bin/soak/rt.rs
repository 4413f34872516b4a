//! One tokio runtime per network namespace: a thread enters the namespace, then runs a
//! current-thread runtime there, so every socket a task spawned on it creates lives in that
//! namespace. Work is handed over with [`NsRuntime::spawn`] and [`NsRuntime::run`].

use std::future::Future;
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use lb_tests::netns::ns::enter_path;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// A runtime whose thread lives in one namespace; stopped (tasks dropped) on drop.
pub struct NsRuntime {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl NsRuntime {
    /// Starts the thread in the namespace bound at `ns_path`.
    pub fn start(ns_path: &Path, label: &str) -> Result<NsRuntime> {
        let (tx, rx) = mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let path = ns_path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name(format!("soak-{label}"))
            .spawn(move || {
                let rt = enter_path(&path).and_then(|()| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .context("building a runtime")
                });
                match rt {
                    Ok(rt) => {
                        let _ = tx.send(Ok(rt.handle().clone()));
                        rt.block_on(async {
                            let _ = stopped.await;
                        });
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })?;
        let handle = rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| anyhow!("the {label} runtime did not start"))??;
        Ok(NsRuntime {
            handle,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Runs `fut` on the namespace's thread in the background.
    pub fn spawn<F>(&self, fut: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(fut)
    }

    /// Runs `fut` on the namespace's thread and waits for its output, at most `limit`.
    pub fn run<F, T>(&self, limit: Duration, fut: F) -> Result<T>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = mpsc::channel();
        self.handle.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv_timeout(limit)
            .map_err(|_| anyhow!("no result within {limit:?}"))
    }
}

impl Drop for NsRuntime {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
