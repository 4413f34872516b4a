//! The fault schedule: drawn from a seed (printed, so a run can be repeated), one fault at a
//! time, each applied, held for 3-6 s, undone, then 2-4 s of quiet. Every fault is recorded
//! with its window, so failures can be attributed and the invariants can tell a cut the
//! fault explains from one it does not.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use lb_tests::netns::Topology;
use serde_json::json;

use crate::abuse::{self, AbuseTally};
use crate::api;
use crate::backends::Backend;
use crate::config::{self, L7_ADDR, TCP_PORT, Variant, WEB_PORT};
use crate::daemon::DaemonCtl;
use crate::events::now_ms;
use crate::rt::NsRuntime;

/// The kinds of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// A backend's servers killed (listeners and connections closed), then restarted.
    BackendKill,
    /// A backend's link down (nothing answers, not even a refusal), then up.
    BackendSilent,
    /// A backend's `/health` answers 500, then 200.
    Health500,
    /// Maintenance on one Backend Service through the API, then off.
    Maintenance,
    /// Maintenance on every main of the HTTP Default list (w1..w3): the backups serve.
    MainsMaintenance,
    /// The Backup flag toggled through the API (w1 on, or w4 off), then back.
    BackupToggle,
    /// A weight changed through the API (0 = drain, or 3), then back to 1.
    Weight,
    /// A reload (API) of a file with changed lists, then of the original.
    Reload,
    /// SIGHUP with an invalid file: `lb run` must refuse it and keep serving.
    SighupInvalid,
    /// `lb run --upgrade` takes over from the running daemon.
    Upgrade,
    /// `lb run` killed with SIGKILL and started again.
    DaemonKill,
    /// 100 slowloris connections to the HTTP vService, held past its client timeout.
    Slowloris,
    /// Malformed HTTP requests and random bytes to the L7 vServices.
    Malformed,
}

impl FaultKind {
    /// Every kind with its weight in the draw (restarts rarer, so the daemon has long
    /// lifetimes to measure memory over).
    const DRAW: [(FaultKind, u64); 13] = [
        (FaultKind::BackendKill, 3),
        (FaultKind::BackendSilent, 2),
        (FaultKind::Health500, 3),
        (FaultKind::Maintenance, 3),
        (FaultKind::MainsMaintenance, 2),
        (FaultKind::BackupToggle, 2),
        (FaultKind::Weight, 2),
        (FaultKind::Reload, 2),
        (FaultKind::SighupInvalid, 2),
        (FaultKind::Upgrade, 1),
        (FaultKind::DaemonKill, 1),
        (FaultKind::Slowloris, 1),
        (FaultKind::Malformed, 1),
    ];

    /// The name `--faults` takes.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::BackendKill => "backend-kill",
            FaultKind::BackendSilent => "backend-silent",
            FaultKind::Health500 => "health-500",
            FaultKind::Maintenance => "maintenance",
            FaultKind::MainsMaintenance => "mains-maintenance",
            FaultKind::BackupToggle => "backup",
            FaultKind::Weight => "weight",
            FaultKind::Reload => "reload",
            FaultKind::SighupInvalid => "sighup-invalid",
            FaultKind::Upgrade => "upgrade",
            FaultKind::DaemonKill => "daemon-kill",
            FaultKind::Slowloris => "slowloris",
            FaultKind::Malformed => "malformed",
        }
    }

    /// The kinds named in `list` (comma-separated [`FaultKind::name`]s).
    pub fn parse_list(list: &str) -> anyhow::Result<Vec<FaultKind>> {
        list.split(',')
            .map(|n| {
                FaultKind::DRAW
                    .iter()
                    .map(|d| d.0)
                    .find(|k| k.name() == n.trim())
                    .with_context(|| {
                        let all: Vec<&str> = FaultKind::DRAW.iter().map(|d| d.0.name()).collect();
                        format!(
                            "--faults: no fault {n:?}; the faults are {}",
                            all.join(", ")
                        )
                    })
            })
            .collect()
    }

    /// The name the report prints.
    pub fn label(self) -> &'static str {
        match self {
            FaultKind::BackendKill => "backend killed",
            FaultKind::BackendSilent => "backend silent",
            FaultKind::Health500 => "/health 500",
            FaultKind::Maintenance => "Maintenance",
            FaultKind::MainsMaintenance => "every main in Maintenance",
            FaultKind::BackupToggle => "Backup toggled",
            FaultKind::Weight => "weight changed",
            FaultKind::Reload => "reload, changed lists",
            FaultKind::SighupInvalid => "SIGHUP, invalid file",
            FaultKind::Upgrade => "lb run --upgrade",
            FaultKind::DaemonKill => "lb run killed -9",
            FaultKind::Slowloris => "slowloris",
            FaultKind::Malformed => "malformed clients",
        }
    }
}

/// One fault as it happened.
#[derive(Clone, Debug)]
pub struct FaultRecord {
    /// Its kind.
    pub kind: FaultKind,
    /// The backend namespace it hit (1-based), for backend faults.
    pub backend: Option<u8>,
    /// The Backend Service it changed through the API, if any.
    pub service: Option<String>,
    /// When it was applied (ms since the start).
    pub start: u64,
    /// When it was undone.
    pub end: u64,
}

impl FaultRecord {
    /// One line for the report.
    pub fn describe(&self) -> String {
        let target = match (&self.service, self.backend) {
            (Some(s), _) => format!(" {s}"),
            (None, Some(b)) => format!(" b{b}"),
            _ => String::new(),
        };
        format!(
            "{}{target} at {:.1}-{:.1} s",
            self.kind.label(),
            self.start as f64 / 1000.0,
            self.end as f64 / 1000.0
        )
    }
}

/// A Maintenance interval as the API saw it: from the answer of "on" to the sending of
/// "off" (S-MT3 holds in between).
#[derive(Clone, Debug)]
pub struct MtWindow {
    /// `w2`, `t1`...
    pub service: String,
    /// Its backend namespace (1-based).
    pub backend: u8,
    /// When the "on" call answered.
    pub on_answered: u64,
    /// When the "off" call was sent.
    pub off_sent: u64,
}

/// A small seeded generator (SplitMix64): the schedule depends on the seed only.
pub struct Rng(u64);

impl Rng {
    /// From `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// A kind drawn by weight among `only` (every kind when empty).
    fn kind(&mut self, only: &[FaultKind]) -> FaultKind {
        let draw: Vec<(FaultKind, u64)> = FaultKind::DRAW
            .into_iter()
            .filter(|d| only.is_empty() || only.contains(&d.0))
            .collect();
        let total: u64 = draw.iter().map(|d| d.1).sum();
        let mut pick = self.next() % total.max(1);
        for (k, w) in draw {
            if pick < w {
                return k;
            }
            pick -= w;
        }
        FaultKind::BackendKill
    }
}

/// What the fault loop works on.
pub struct Ctx<'a> {
    /// The namespaces.
    pub topo: &'a Topology,
    /// b1..b5's servers.
    pub backends: &'a [Backend],
    /// The balancer namespace's runtime (API calls).
    pub balancer: &'a NsRuntime,
    /// The client namespace's runtime (hostile clients).
    pub client: &'a NsRuntime,
    /// `lb run`.
    pub daemon: &'a mut DaemonCtl,
    /// The file `lb run` reads.
    pub config: PathBuf,
    /// How the hostile clients were treated.
    pub abuse: Arc<AbuseTally>,
    /// Each API write call: what it was and how long it took to answer (ms).
    pub api_times: std::cell::RefCell<Vec<(String, u64)>>,
}

/// What the fault loop recorded.
#[derive(Default)]
pub struct Outcome {
    /// Every fault, in order.
    pub records: Vec<FaultRecord>,
    /// Every Maintenance interval.
    pub mt: Vec<MtWindow>,
    /// Faults that could not be applied or undone as planned (and why).
    pub errors: Vec<String>,
    /// Times `lb run` was found dead when the soak had not stopped it.
    pub deaths: Vec<(u64, String)>,
}

impl Ctx<'_> {
    fn api(&self, method: &str, path: &str, body: serde_json::Value) -> Result<()> {
        let what = format!("{method} {path} {body}");
        let path = path.to_owned();
        let method = method.to_owned();
        let sent = Instant::now();
        let answer = self
            .balancer
            .run(api::API_TIMEOUT + Duration::from_secs(1), async move {
                api::ok(&method, &path, Some(&body)).await
            });
        self.api_times
            .borrow_mut()
            .push((what, sent.elapsed().as_millis() as u64));
        answer?.map(drop)
    }

    fn maintenance(&self, service: &str, on: bool) -> Result<()> {
        self.api(
            "POST",
            &format!("/api/v1/backends/{service}/maintenance"),
            json!({ "on": on }),
        )
    }

    fn write(&self, text: &str) -> Result<()> {
        std::fs::write(&self.config, text)
            .with_context(|| format!("writing {}", self.config.display()))
    }

    fn backend(&self, n: u8) -> &Backend {
        &self.backends[usize::from(n) - 1]
    }
}

/// Runs faults (of the kinds in `only`, or all) until `until` (ms since the start), then returns what happened.
pub fn run(ctx: &mut Ctx<'_>, rng: &mut Rng, only: &[FaultKind], until: u64) -> Outcome {
    let mut out = Outcome::default();
    while now_ms() + 10_000 < until {
        let kind = rng.kind(only);
        let hold = Duration::from_millis(rng.range(3_000, 6_000));
        let gap = Duration::from_millis(rng.range(2_000, 4_000));
        let mut rec = FaultRecord {
            kind,
            backend: None,
            service: None,
            start: now_ms(),
            end: 0,
        };
        if let Err(e) = apply(ctx, rng, &mut rec, hold, &mut out.mt) {
            out.errors.push(format!("{}: {e:#}", rec.describe()));
        }
        rec.end = now_ms();
        println!("  fault: {}", rec.describe());
        out.records.push(rec);
        let quiet = Instant::now();
        while quiet.elapsed() < gap {
            std::thread::sleep(Duration::from_millis(100));
        }
        ctx.daemon.reap();
        if !ctx.daemon.alive() {
            let tail = ctx.daemon.log_tail();
            out.deaths.push((now_ms(), tail.clone()));
            eprintln!("soak: lb run died; log tail:\n{tail}");
            if let Err(e) = ctx.daemon.start(ctx.balancer) {
                out.errors
                    .push(format!("restarting the dead lb run: {e:#}"));
                break;
            }
        }
    }
    out
}

fn apply(
    ctx: &mut Ctx<'_>,
    rng: &mut Rng,
    rec: &mut FaultRecord,
    hold: Duration,
    mt: &mut Vec<MtWindow>,
) -> Result<()> {
    match rec.kind {
        FaultKind::BackendKill => {
            let b = rng.range(1, 5) as u8;
            rec.backend = Some(b);
            ctx.backend(b).kill();
            std::thread::sleep(hold);
            ctx.backend(b).start()
        }
        FaultKind::BackendSilent => {
            let b = rng.range(1, 5) as u8;
            rec.backend = Some(b);
            let name = format!("b{b}");
            ctx.topo.set_backend_link(&name, false)?;
            std::thread::sleep(hold);
            ctx.topo.set_backend_link(&name, true)
        }
        FaultKind::Health500 => {
            let b = rng.range(1, 5) as u8;
            rec.backend = Some(b);
            ctx.backend(b).set_health(false);
            std::thread::sleep(hold);
            ctx.backend(b).set_health(true);
            Ok(())
        }
        FaultKind::Maintenance => {
            let b = rng.range(1, 5) as u8;
            let service = if b <= 3 && rng.range(0, 1) == 0 {
                format!("t{b}")
            } else {
                format!("w{b}")
            };
            rec.backend = Some(b);
            rec.service = Some(service.clone());
            maintenance_window(ctx, &[(service, b)], hold, mt)
        }
        FaultKind::MainsMaintenance => {
            rec.service = Some("w1+w2+w3".into());
            let mains: Vec<(String, u8)> = (1..=3).map(|b| (format!("w{b}"), b)).collect();
            maintenance_window(ctx, &mains, hold, mt)
        }
        FaultKind::BackupToggle => {
            let (service, on) = if rng.range(0, 1) == 0 {
                ("w1", true)
            } else {
                ("w4", false)
            };
            rec.service = Some(service.into());
            let path = format!("/api/v1/backends/{service}/backup");
            ctx.api("POST", &path, json!({ "on": on }))?;
            std::thread::sleep(hold);
            ctx.api("POST", &path, json!({ "on": !on }))
        }
        FaultKind::Weight => {
            let b = rng.range(1, 3);
            let service = if rng.range(0, 1) == 0 {
                format!("w{b}")
            } else {
                format!("n{b}")
            };
            let weight = if rng.range(0, 1) == 0 { 0 } else { 3 };
            rec.service = Some(format!("{service}={weight}"));
            let path = format!("/api/v1/backends/{service}/weight");
            ctx.api("POST", &path, json!({ "weight": weight }))?;
            std::thread::sleep(hold);
            ctx.api("POST", &path, json!({ "weight": 1 }))
        }
        FaultKind::Reload => {
            ctx.write(&config::text(ctx.topo, Variant::ChangedLists))?;
            ctx.api("POST", "/api/v1/reload", json!({}))?;
            std::thread::sleep(hold);
            ctx.write(&config::text(ctx.topo, Variant::Base))?;
            ctx.api("POST", "/api/v1/reload", json!({}))
        }
        FaultKind::SighupInvalid => {
            ctx.write(&config::invalid(ctx.topo))?;
            ctx.daemon.signal(libc::SIGHUP)?;
            std::thread::sleep(hold);
            ctx.write(&config::text(ctx.topo, Variant::Base))?;
            anyhow::ensure!(ctx.daemon.alive(), "lb run exited after SIGHUP");
            Ok(())
        }
        FaultKind::Upgrade => {
            ctx.daemon.upgrade(ctx.balancer)?;
            std::thread::sleep(hold);
            Ok(())
        }
        FaultKind::DaemonKill => {
            ctx.daemon.kill_and_restart(ctx.balancer)?;
            std::thread::sleep(hold);
            Ok(())
        }
        FaultKind::Slowloris => {
            // Longer than the HTTP vService's client timeout, so the balancer should have
            // closed every one of them by the end.
            let web = (L7_ADDR, WEB_PORT).into();
            let hold = config::CLIENT_TIMEOUT + Duration::from_secs(4);
            let run = ctx
                .client
                .spawn(abuse::slowloris(web, 100, hold, ctx.abuse.clone()));
            wait_task(run, hold)
        }
        FaultKind::Malformed => {
            let web = (L7_ADDR, WEB_PORT).into();
            let tcp = (L7_ADDR, TCP_PORT).into();
            let run = ctx
                .client
                .spawn(abuse::malformed(web, tcp, hold, ctx.abuse.clone()));
            wait_task(run, hold)
        }
    }
}

/// Waits for a hostile client's task (it ends by itself after `hold`).
fn wait_task(task: tokio::task::JoinHandle<()>, hold: Duration) -> Result<()> {
    let until = Instant::now() + hold + Duration::from_secs(5);
    while !task.is_finished() {
        anyhow::ensure!(Instant::now() < until, "a hostile client did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Maintenance on each of `services`, held, then off; records each S-MT3 interval.
fn maintenance_window(
    ctx: &Ctx<'_>,
    services: &[(String, u8)],
    hold: Duration,
    mt: &mut Vec<MtWindow>,
) -> Result<()> {
    let mut on = Vec::new();
    for (s, b) in services {
        ctx.maintenance(s, true)?;
        on.push((s.clone(), *b, now_ms()));
    }
    std::thread::sleep(hold);
    let mut result = Ok(());
    for (s, b, answered) in on {
        let off_sent = now_ms();
        mt.push(MtWindow {
            service: s.clone(),
            backend: b,
            on_answered: answered,
            off_sent,
        });
        if let Err(e) = ctx.maintenance(&s, false) {
            result = Err(e);
        }
    }
    result
}
