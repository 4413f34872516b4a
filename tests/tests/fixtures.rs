//! XDP packet fixtures through BPF_PROG_TEST_RUN, in the style of Katran's: each fixture
//! sends an input frame and checks the verdict and the EXACT output frame (built with
//! `lb_tests::packet`, checksums from scratch), plus counters where counting is the point.
//!
//! `harness = false`: prints `fixture <name> ... ok|FAILED` per fixture (with a per-field
//! diff on failure), then `N passed, M failed`; exits 1 on any failure. Needs root and the
//! object built by `cargo xtask build` (or `LB_XDP_OBJECT`). Run:
//! `cargo test -p lb-tests --test fixtures` (optional argument: a name filter substring).

#[path = "fixtures/cases_backends.rs"]
mod cases_backends;
#[path = "fixtures/cases_flood.rs"]
mod cases_flood;
#[path = "fixtures/cases_fuzz.rs"]
mod cases_fuzz;
#[path = "fixtures/cases_header_checks.rs"]
mod cases_header_checks;
#[path = "fixtures/cases_icmp_error.rs"]
mod cases_icmp_error;
#[path = "fixtures/cases_ipv6.rs"]
mod cases_ipv6;
#[path = "fixtures/cases_ipv6_edge.rs"]
mod cases_ipv6_edge;
#[path = "fixtures/cases_ipv6_parse.rs"]
mod cases_ipv6_parse;
#[path = "fixtures/cases_mtu.rs"]
mod cases_mtu;
#[path = "fixtures/cases_nat.rs"]
mod cases_nat;
#[path = "fixtures/cases_parse.rs"]
mod cases_parse;
#[path = "fixtures/cases_tunnel.rs"]
mod cases_tunnel;
#[path = "fixtures/config.rs"]
mod config;
#[path = "fixtures/ctx.rs"]
mod ctx;
#[path = "fixtures/frames.rs"]
mod frames;
#[path = "fixtures/frames6.rs"]
mod frames6;
#[path = "fixtures/icmp.rs"]
mod icmp;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::process::ExitCode;

use anyhow::Context;
use lb::network::{DataPath, LoadOptions};
use lb_tests::fixture_env::FixtureEnv;

use crate::ctx::Ctx;

/// The body of a fixture; an error carries the readable diff.
pub type Check = Box<dyn Fn(&mut Ctx) -> anyhow::Result<()>>;

/// One named fixture.
pub struct Fixture {
    /// Printed name.
    pub name: String,
    /// The check; an error carries the readable diff.
    pub run: Check,
}

/// Shorthand for a fixture from a plain function or closure.
pub fn fixture(name: &str, run: impl Fn(&mut Ctx) -> anyhow::Result<()> + 'static) -> Fixture {
    Fixture {
        name: name.to_string(),
        run: Box::new(run),
    }
}

fn setup() -> anyhow::Result<Ctx> {
    let path = lb::network::object_path();
    let object = std::fs::read(&path).with_context(|| {
        format!(
            "reading the XDP object {} (build it with `cargo xtask build`)",
            path.display()
        )
    })?;
    let dp = DataPath::load(
        &object,
        &LoadOptions {
            pin_dir: None,
            conn_table_size: 65536,
        },
    )
    .context("loading")?;
    let env = FixtureEnv::create().context("creating the fixture namespace")?;
    let mut ctx = Ctx { dp, env };
    ctx.apply(&config::base())?;
    Ok(ctx)
}

fn main() -> ExitCode {
    // libtest-style flags (e.g. --nocapture) are ignored; a plain word filters by name.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let mut ctx = match setup() {
        Ok(ctx) => ctx,
        Err(e) => {
            println!("fixture setup ... FAILED\n  {e:#}");
            println!("0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    };
    let fixtures: Vec<Fixture> = [
        cases_nat::list(),
        cases_parse::list(),
        cases_backends::list(),
        cases_ipv6::list(),
        cases_ipv6_edge::list(),
        cases_mtu::list(),
        cases_icmp_error::list(),
        cases_flood::list(),
        cases_ipv6_parse::list(),
        cases_header_checks::list(),
        cases_tunnel::list(),
        // Last: its 100,000 frames leave flows behind.
        cases_fuzz::list(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let (mut passed, mut failed) = (0, 0);
    for f in fixtures
        .iter()
        .filter(|f| filter.as_deref().is_none_or(|s| f.name.contains(s)))
    {
        match catch_unwind(AssertUnwindSafe(|| (f.run)(&mut ctx))) {
            Ok(Ok(())) => {
                passed += 1;
                println!("fixture {} ... ok", f.name);
            }
            Ok(Err(e)) => {
                failed += 1;
                println!("fixture {} ... FAILED", f.name);
                for cause in e.chain() {
                    println!(
                        "{}",
                        cause
                            .to_string()
                            .lines()
                            .map(|l| format!("    {l}"))
                            .collect::<Vec<_>>()
                            .join("\n")
                    );
                }
            }
            Err(_) => {
                failed += 1;
                println!("fixture {} ... FAILED (panicked)", f.name);
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    drop(ctx);
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
