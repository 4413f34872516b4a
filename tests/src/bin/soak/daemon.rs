//! `lb run` under the soak: started, upgraded (`lb run --upgrade`), killed with SIGKILL and
//! started again, sent SIGHUP. The pid of the serving process is published for the sampler;
//! a process that exits when the soak did not stop it is reported as a death.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use lb_tests::netns::{Daemon, Topology};

use crate::api;
use crate::rt::NsRuntime;

/// The serving `lb run` and the ones draining after an upgrade.
pub struct DaemonCtl {
    netns: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    /// The serving process.
    current: Option<Daemon>,
    /// Processes an upgrade replaced, finishing their open connections.
    retiring: Vec<(Daemon, Instant)>,
    /// The serving process's pid, for the sampler.
    pub pid: Arc<AtomicU32>,
    /// Old processes that took longer than the drain timeout to exit.
    pub slow_exits: u32,
}

impl DaemonCtl {
    /// The control of `lb run --config config` on every balancer interface of `topo`.
    pub fn new(topo: &Topology, config: &std::path::Path) -> DaemonCtl {
        let mut args = vec![
            "run".to_owned(),
            "--config".to_owned(),
            config.display().to_string(),
        ];
        for dev in topo.interfaces() {
            args.extend(["--iface".to_owned(), dev]);
        }
        args.extend(["--pin-dir".to_owned(), topo.pin_dir.display().to_string()]);
        DaemonCtl {
            netns: topo.balancer.path(),
            args,
            log: topo.work_dir.join("run.log"),
            current: None,
            retiring: Vec::new(),
            pid: Arc::new(AtomicU32::new(0)),
            slow_exits: 0,
        }
    }

    fn spawn(&mut self, upgrade: bool) -> Result<Daemon> {
        let mut args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        if upgrade {
            args.push("--upgrade");
        }
        let d = Daemon::start(&self.netns, &args, &self.log)?;
        self.pid.store(d.pid(), Ordering::SeqCst);
        Ok(d)
    }

    /// Starts `lb run` and waits until its API answers.
    pub fn start(&mut self, balancer: &NsRuntime) -> Result<()> {
        let d = self.spawn(false)?;
        self.current = Some(d);
        self.wait_api(balancer)
    }

    /// Waits up to 20 s for `GET /api/v1/status` to answer 200.
    pub fn wait_api(&mut self, balancer: &NsRuntime) -> Result<()> {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            if !self.alive() {
                bail!("lb run exited while starting; log:\n{}", self.log_tail());
            }
            let answered = balancer.run(Duration::from_secs(3), async {
                matches!(api::call("GET", "/api/v1/status", None).await, Ok((200, _)))
            });
            if matches!(answered, Ok(true)) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!(
            "the API did not answer within 20 s; log:\n{}",
            self.log_tail()
        )
    }

    /// Whether the serving process runs.
    pub fn alive(&mut self) -> bool {
        self.current.as_mut().is_some_and(Daemon::is_running)
    }

    /// `lb run --upgrade`: the new process takes the listening sockets; the old one drains
    /// in the background.
    pub fn upgrade(&mut self, balancer: &NsRuntime) -> Result<()> {
        let new = self.spawn(true)?;
        if let Some(old) = self.current.replace(new) {
            self.retiring.push((old, Instant::now()));
        }
        self.wait_api(balancer)
    }

    /// SIGKILL, then a new `lb run` (which adopts the pinned data path and restores the
    /// saved health states).
    pub fn kill_and_restart(&mut self, balancer: &NsRuntime) -> Result<()> {
        if let Some(mut d) = self.current.take() {
            d.signal(libc::SIGKILL)?;
            d.wait_exit(Duration::from_secs(5))?;
        }
        std::thread::sleep(Duration::from_millis(500));
        self.start(balancer)
    }

    /// Sends `signal` to the serving process.
    pub fn signal(&mut self, signal: libc::c_int) -> Result<()> {
        match self.current.as_mut() {
            Some(d) => d.signal(signal),
            None => bail!("no lb run"),
        }
    }

    /// Reaps upgraded processes that finished; counts those past 40 s (drain timeout 30 s).
    pub fn reap(&mut self) {
        let mut kept = Vec::new();
        for (mut d, since) in self.retiring.drain(..) {
            if !d.is_running() {
                continue;
            }
            if since.elapsed() > Duration::from_secs(40) {
                self.slow_exits += 1;
                continue; // dropped: SIGKILL
            }
            kept.push((d, since));
        }
        self.retiring = kept;
    }

    /// SIGTERM to every process, waiting for each.
    pub fn stop(&mut self) {
        for mut d in self
            .current
            .take()
            .into_iter()
            .chain(self.retiring.drain(..).map(|(d, _)| d))
        {
            if d.signal(libc::SIGTERM).is_ok() {
                let _ = d.wait_exit(Duration::from_secs(10));
            }
        }
    }

    /// The last 3000 bytes of the daemons' log.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut start = log.len().saturating_sub(3000);
        while !log.is_char_boundary(start) {
            start += 1;
        }
        log[start..].to_owned()
    }

    /// Lines of the log that say something went wrong (ERROR, panicked).
    pub fn log_errors(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("ERROR") || l.contains("panicked"))
            .map(str::to_owned)
            .collect()
    }
}
