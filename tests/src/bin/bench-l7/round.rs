//! The TLS, HTTP/2 and idle-connection cases of one round on one proxy: the TLS warm-up,
//! then HTTPS keep-alive, handshakes, HTTP/2 and the idle connections, each recorded in the
//! system's runs.

use std::time::Duration;

use anyhow::{Context, Result};
use lb_tests::bench::Scratch;

use crate::cases::Case;
use crate::peers::local;
use crate::wrk::{self, Load, Target, WrkResult};
use crate::{System, WARM_UP, h2load, idle, measure_with};

/// wrk connections beside the idle ones.
const ACTIVE_BESIDE_IDLE: u32 = 16;

/// The TLS, HTTP/2 and idle-connection cases of one round on `s`: a TLS warm-up, then each
/// case; a case that fails is reported as not measured for `s` and the others go on.
pub fn run_cases(
    s: &mut System,
    cases: &[Case],
    load: Load,
    scratch: &Scratch,
    label: &str,
    round: u64,
) {
    if cases.is_empty() {
        return;
    }
    let warm = Load {
        duration: WARM_UP,
        ..load
    };
    let target = Target {
        addr: local(s.tls_port),
        tls: true,
        close: false,
    };
    if let Err(e) = wrk::run_target(warm, target, None) {
        for &case in cases {
            s.cases[case.index()].broken = Some(format!("TLS warm-up failed: {e:#}"));
        }
        return;
    }
    for &case in cases {
        if s.cases[case.index()].broken.is_some() {
            continue;
        }
        match measure_case(s, case, load, scratch, label) {
            Ok((measured, mem)) => {
                let runs = &mut s.cases[case.index()];
                runs.push(measured, round);
                if let Some((kib, mib)) = mem {
                    runs.mem_kib.push(kib);
                    runs.rss_mib.push(mib);
                }
            }
            Err(e) => s.cases[case.index()].broken = Some(format!("{e:#}")),
        }
    }
}

/// What the idle case adds to a run: RSS growth per idle connection (KiB) and the whole
/// RSS with them open (MiB).
type IdleMemory = Option<(f64, f64)>;

/// One run of `case` against `s` (running, warmed up over TLS); the idle case also returns
/// the proxy's memory.
fn measure_case(
    s: &mut System,
    case: Case,
    load: Load,
    scratch: &Scratch,
    label: &str,
) -> Result<((WrkResult, Option<f64>), IdleMemory)> {
    let label = format!("{label} {:<9}", case.name());
    let tls = |close| Target {
        addr: local(s.tls_port),
        tls: true,
        close,
    };
    let (https, handshake) = (tls(false), tls(true));
    match case {
        Case::Https => Ok((
            measure_with(s, &label, "", || wrk::run_target(load, https, None))?,
            None,
        )),
        Case::Handshake => Ok((
            measure_with(s, &label, " (one per connection)", || {
                wrk::run_target(load, handshake, None)
            })?,
            None,
        )),
        Case::H2 => {
            let addr = local(s.tls_port);
            let log = scratch.path.join("h2load.log");
            Ok((
                measure_with(s, &label, "", || h2load::run(load, addr, &log))?,
                None,
            ))
        }
        Case::Idle => measure_idle(s, load, &label),
    }
}

/// The idle case: opens [`idle::IDLE`] keep-alive connections (one request each) on the
/// plain listener, reads the proxy's RSS growth, then measures a wrk load on
/// [`ACTIVE_BESIDE_IDLE`] other connections while they stay open.
fn measure_idle(
    s: &mut System,
    load: Load,
    label: &str,
) -> Result<((WrkResult, Option<f64>), IdleMemory)> {
    let guard = s
        .guard
        .as_ref()
        .with_context(|| format!("{} is not running", s.name))?;
    let before = idle::rss_kib(guard);
    let conns = idle::open(local(s.port), idle::IDLE)?;
    // Let the proxy settle (connections accepted on every worker, buffers returned).
    std::thread::sleep(Duration::from_millis(500));
    let after = idle::rss_kib(guard);
    let memory = before.zip(after).map(|(b, a)| {
        (
            a.saturating_sub(b) as f64 / conns.len() as f64,
            a as f64 / 1024.0,
        )
    });
    let active = Load {
        connections: ACTIVE_BESIDE_IDLE,
        ..load
    };
    let port = s.port;
    let suffix = format!(
        " ({} idle open, {})",
        conns.len(),
        memory.map_or("RSS unknown".into(), |(k, m)| format!(
            "{k:.2} KiB RSS per idle connection, {m:.1} MiB RSS"
        ))
    );
    let measured = measure_with(s, label, &suffix, || wrk::run(active, local(port), None))?;
    drop(conns);
    Ok((measured, memory))
}
