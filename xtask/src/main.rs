//! The developer and operator CLI. Every command sets up what it needs first, so a
//! newcomer on a fresh Debian 12 machine only ever types `cargo xtask <command>`.

mod build;
mod package;
mod setup;
mod sh;

use std::path::PathBuf;
use std::process::Command;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::sh::run;

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "Build, load, test and benchmark the load balancer"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install what is missing: Debian rustc-web + BPF core, bpf-linker, bpftool, bpffs.
    Setup,
    /// Set up, then build the XDP object and the `lb` binary.
    Build,
    /// Load the data path onto interfaces and write a config's VIPs (see `lb load --help`).
    Load {
        /// Interface(s) to attach to.
        #[arg(long = "iface", value_delimiter = ',', required = true)]
        ifaces: Vec<String>,
        /// Configuration file.
        #[arg(long)]
        config: PathBuf,
        /// drv (native) or skb (generic).
        #[arg(long, default_value = "drv")]
        mode: String,
        /// bpffs pin directory.
        #[arg(long)]
        pin_dir: Option<PathBuf>,
    },
    /// Detach from an interface (the last one unloads the program).
    Unload {
        /// Interface(s) to detach from.
        #[arg(long = "iface", value_delimiter = ',', required = true)]
        ifaces: Vec<String>,
        /// bpffs pin directory.
        #[arg(long, default_value = "/sys/fs/bpf/lb")]
        pin_dir: PathBuf,
    },
    /// VIPs, backends and counters of the loaded data path.
    Status {
        /// bpffs pin directory.
        #[arg(long, default_value = "/sys/fs/bpf/lb")]
        pin_dir: PathBuf,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Set up, build, and run every test (unit, packet fixtures, namespace end to end).
    Test {
        /// Extra arguments passed to `cargo test` (e.g. a test name filter).
        #[arg(trailing_var_arg = true)]
        args: Vec<String>,
    },
    /// Benchmarks; `xdp`: ns/packet through BPF_PROG_TEST_RUN, Maglev build time, and
    /// Katran's XDP program beside ours on the same frames;
    /// `health`: CPU and memory of `lb run` checking 10,000 services over TCP beside HAProxy
    /// (and 50,000 at P = 5 s);
    /// `l7`: the HTTP proxy against HAProxy and nginx (wrk), and failed requests while
    /// Maintenance is toggled every second; `l4`: XDP (nat, dsr) vs nftables DNAT vs kernel
    /// routing vs a minimal XDP forwarder in namespaces; `control`: Maglev rebuild for 1,000
    /// VIPs; `all`: every part, into target/bench/report.md with plots.
    Bench {
        /// Which benchmark.
        #[arg(value_parser = ["xdp", "health", "l7", "all", "l4", "control"])]
        what: String,
    },
    /// Set up, build, and run the namespace demo (client, balancer, three backends);
    /// `demo scale`: three balancers behind an ECMP router (BGP, BFD), a balancer lost,
    /// drained and resumed, with live counters.
    Demo {
        /// `scale` for the three-balancer demo; nothing for the single-balancer one.
        #[arg(value_parser = ["scale"])]
        part: Option<String>,
    },
    /// Build the Debian package (target/debian/lb_VERSION_ARCH.deb): `lb`, the XDP object,
    /// the systemd unit, /etc/lb/lb.toml, shell completions and man pages.
    Package,
    /// The property tests of the parsers that face clients and operators (HTTP/1.1 heads
    /// and chunked bodies, DNS datagrams, the configuration, the API's JSON bodies) with
    /// many more cases than `cargo test` runs, in release mode.
    Fuzz {
        /// Cases per property.
        #[arg(long, default_value_t = 20_000)]
        cases: u32,
    },
    /// A long run of the namespace topology (HTTP, L7 TCP, NAT, DSR and UDP vServices) under
    /// load, with a fault schedule drawn from a printed seed (backends killed, silent or
    /// failing /health; Maintenance, Backup and weight changes; reloads; SIGHUP with an
    /// invalid file; `lb run` upgraded and killed -9; slowloris and malformed clients) and
    /// invariant checks (backups, Maintenance, established flows, memory and fds). Writes
    /// target/soak/{report.txt,samples.csv,failures.csv,soak.png}; fails on any violation.
    Soak {
        /// Minutes of load.
        #[arg(long, default_value_t = 10.0)]
        minutes: f64,
        /// The fault schedule's seed (default: from the clock; the run prints it).
        #[arg(long)]
        seed: Option<u64>,
        /// Only these faults (comma-separated: backend-kill, backend-silent, health-500,
        /// maintenance, mains-maintenance, backup, weight, reload, sighup-invalid, upgrade,
        /// daemon-kill, slowloris, malformed).
        #[arg(long)]
        faults: Option<String>,
        /// Build and run in release mode (the daemon and the soak).
        #[arg(long)]
        release: bool,
    },
}

fn main() {
    if let Err(e) = run_cli(Cli::parse()) {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

fn lb(args: &[String]) -> Result<()> {
    run(Command::new(build::root().join("target/debug/lb")).args(args))
}

fn run_cli(cli: Cli) -> Result<()> {
    match cli.command {
        Cmd::Setup => setup::setup(),
        Cmd::Build => build::all(),
        Cmd::Load {
            ifaces,
            config,
            mode,
            pin_dir,
        } => {
            build::all()?;
            let mut args = vec![
                "load".into(),
                "--config".into(),
                config.display().to_string(),
            ];
            args.extend(["--iface".into(), ifaces.join(","), "--mode".into(), mode]);
            if let Some(p) = pin_dir {
                args.extend(["--pin-dir".into(), p.display().to_string()]);
            }
            lb(&args)
        }
        Cmd::Unload { ifaces, pin_dir } => {
            build::all()?;
            lb(&[
                "unload".into(),
                "--iface".into(),
                ifaces.join(","),
                "--pin-dir".into(),
                pin_dir.display().to_string(),
            ])
        }
        Cmd::Status { pin_dir, json } => {
            build::all()?;
            let mut args = vec![
                "status".into(),
                "--pin-dir".into(),
                pin_dir.display().to_string(),
            ];
            if json {
                args.push("--json".into());
            }
            lb(&args)
        }
        Cmd::Test { args } => build::test(&args),
        Cmd::Bench { what } => match what.as_str() {
            "xdp" => build::bench_xdp(),
            "health" => build::bench_health(),
            "l7" => build::bench_l7(),
            "all" | "l4" | "control" => build::bench_suite(&what),
            other => anyhow::bail!("unknown benchmark {other}"),
        },
        Cmd::Demo { part } => build::demo(part.as_deref() == Some("scale")),
        Cmd::Package => {
            let deb = package::package()?;
            println!("{}", deb.display());
            Ok(())
        }
        Cmd::Fuzz { cases } => build::fuzz(cases),
        Cmd::Soak {
            minutes,
            seed,
            faults,
            release,
        } => build::soak(minutes, seed, faults.as_deref(), release),
    }
}
