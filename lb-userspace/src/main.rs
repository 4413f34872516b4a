//! `lb`: load the XDP data path onto interfaces, apply a configuration, show status, and
//! run as a daemon that survives its own restarts without interrupting forwarding.

use std::collections::HashSet;
use std::path::Path;

use anyhow::{Context, Result, bail};
use aya::programs::XdpMode;
use clap::Parser;
use lb::command_line::{
    Cli, Command, DEFAULT_CONFIG, DecapArgs, DecapMode, LogFormat, Mode, RunArgs, Target,
};
use lb::config::{self, AttachMode, Config};
use lb::network::{self, DataPath, LoadOptions};
use tracing::{info, warn};

fn main() {
    let cli = Cli::parse();
    // Following the agent means wanting its DEBUG records (unless RUST_LOG says otherwise).
    let follow = matches!(&cli.command, Command::Decap(d) if d.follow);
    init_logs(cli.log_format, follow);
    if let Err(e) = run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// `RUST_LOG` when set, else INFO, with the DNS library's per-query lines kept at WARN
/// (two INFO lines a query drowned everything else) and, for `lb decap --follow`, the
/// agent's records at DEBUG. Colour only when stderr is a terminal, so files and pipes get
/// plain text.
fn init_logs(format: LogFormat, agent_events: bool) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        let agent = if agent_events { ",lb_decap=debug" } else { "" };
        tracing_subscriber::EnvFilter::new(format!(
            "info,hickory_server=warn,hickory_proto=warn{agent}"
        ))
    });
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs.json().init(),
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Load(t) => {
            let (mut dp, cfg) = load(&t)?;
            apply(&mut dp, &cfg)?;
            // No daemon keeps health current after a one-shot load.
            if let Some(dir) = dp.pin_dir() {
                let _ = std::fs::remove_file(lb::daemon::report_path(dir));
            }
            Ok(())
        }
        Command::Run(r) => daemon(&r),
        Command::Unload {
            ifaces,
            pin_dir,
            config,
        } => {
            for iface in &ifaces {
                if network::detach(&pin_dir, iface)? {
                    let _ = std::fs::remove_file(lb::daemon::report_path(&pin_dir));
                    println!("detached from {iface}; program unloaded");
                    withdraw_routes(&config)?;
                } else {
                    println!("detached from {iface}");
                }
            }
            Ok(())
        }
        Command::Status(args) => lb::api::status::run(&args),
        Command::Table(args) => lb::api::table::run(&args),
        Command::Api(cmd) => lb::api::cli::run(cmd),
        Command::Completions { shell } => {
            let mut command = lb::command_line::command();
            clap_complete::generate(shell, &mut command, "lb", &mut std::io::stdout());
            Ok(())
        }
        Command::Man { dir } => man_pages(&dir),
        Command::Decap(args) => decap(&args),
        Command::BirdConfig { config } => {
            let cfg = read_config(&config)?;
            if !cfg.bgp.enabled {
                warn!(
                    "[bgp] is not enabled in {}: lb run keeps no VIP routes",
                    config.display()
                );
            }
            print!("{}", lb::routing::bird::snippet(&cfg.bgp));
            Ok(())
        }
        Command::CheckConfig { file } => {
            let (cfg, warnings) =
                config::load_with_warnings(&file).map_err(|e| anyhow::anyhow!("{e}"))?;
            for w in warnings {
                warn!("{w}");
            }
            println!(
                "{}: ok ({} vServices, {} Backend Services)",
                file.display(),
                cfg.vservices.len(),
                cfg.backend_services.len()
            );
            Ok(())
        }
    }
}

/// `lb decap`: the backend agent's attach (or update), status, or detach.
fn decap(args: &DecapArgs) -> Result<()> {
    let base = &args.pin_dir;
    if args.status {
        let all = lb::agent::status(base, args.iface.as_deref())?;
        if args.json {
            let list: Vec<serde_json::Value> = all.iter().map(|s| s.json()).collect();
            println!("{}", serde_json::to_string_pretty(&list)?);
        } else if all.is_empty() {
            println!(
                "lb-decap is attached to no interface (nothing under {})",
                base.display()
            );
        } else {
            for s in &all {
                print!("{s}");
            }
        }
        return Ok(());
    }
    let iface = args.iface.clone().context("--iface is required")?;
    if args.detach {
        let dir = lb::agent::detach(base, &iface)?;
        println!(
            "lb-decap detached from {iface}; pins under {} removed",
            dir.display()
        );
        return Ok(());
    }
    let report = lb::agent::attach(&lb::agent::AttachRequest {
        iface,
        hook: match args.mode {
            DecapMode::Native => lb::agent::Hook::Xdp(XdpMode::Driver),
            DecapMode::Skb => lb::agent::Hook::Xdp(XdpMode::Skb),
            DecapMode::Tc => lb::agent::Hook::Tc,
        },
        sources: args.sources.clone(),
        vips: args.vips.clone(),
        gue_port: args.gue_port,
        pin_base: base.clone(),
    })?;
    print!("{report}");
    if args.follow {
        follow_agent(&report)?;
    }
    Ok(())
}

/// `lb decap --follow`: the agent's records as log lines until SIGINT or SIGTERM.
fn follow_agent(report: &lb::agent::AttachReport) -> Result<()> {
    use std::io::Write;
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let task = lb::ebpf_log::follow(report.program_id)?;
        println!(
            "following the agent on {} (SIGINT or SIGTERM stops; the agent stays attached)",
            report.iface
        );
        std::io::stdout().flush()?;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        task.abort();
        Ok(())
    })
}

/// After the last detach: withdraws the VIP routes of `config`'s `[bgp]` table, since no
/// data path forwards those VIPs any more (S-AN1). A missing default file is skipped.
fn withdraw_routes(config: &Path) -> Result<()> {
    if config == Path::new(DEFAULT_CONFIG) && !config.exists() {
        return Ok(());
    }
    let cfg = read_config(config)?;
    if !cfg.bgp.enabled {
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let withdrawn = runtime.block_on(lb::routing::withdraw_all(&cfg.bgp))?;
    println!(
        "withdrew {} VIP route(s) from table {}",
        withdrawn.len(),
        cfg.bgp.table
    );
    Ok(())
}

/// Writes one page per command from the clap definitions, so the pages say what `--help`
/// says; the hidden commands (these generators) get none.
fn man_pages(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(lb::command_line::command(), dir)
        .with_context(|| format!("writing the manual pages into {}", dir.display()))?;
    println!("manual pages written into {}", dir.display());
    Ok(())
}

fn read_config(path: &Path) -> Result<Config> {
    let (cfg, warnings) = config::load_with_warnings(path).map_err(|e| anyhow::anyhow!("{e}"))?;
    for w in warnings {
        warn!("{w}");
    }
    Ok(cfg)
}

/// Validates everything first, so a bad config or interface changes nothing loaded.
fn load(t: &Target) -> Result<(DataPath, Config)> {
    let cfg = read_config(&t.config)?;
    let ifaces = if t.ifaces.is_empty() {
        cfg.xdp.interfaces.clone()
    } else {
        t.ifaces.clone()
    };
    if ifaces.is_empty() {
        bail!(
            "no interface: give --iface or set xdp.interfaces in {}",
            t.config.display()
        );
    }
    for iface in &ifaces {
        if !interface_exists(iface) {
            bail!("interface {iface} does not exist");
        }
    }
    // Plan before touching the kernel: an unsupported vService fails here.
    network::plan(&cfg, &|_| lb::selection::Health::Ok)?;
    let mode = match t.mode {
        Some(Mode::Drv) => XdpMode::Driver,
        Some(Mode::Skb) => XdpMode::Skb,
        None => match cfg.xdp.attach_mode {
            AttachMode::Driver => XdpMode::Driver,
            AttachMode::Skb => XdpMode::Skb,
        },
    };
    let pin_dir = t.pin_dir.clone().unwrap_or_else(|| cfg.xdp.pin_dir.clone());
    let object = network::read_object()?;
    let opts = LoadOptions {
        pin_dir: Some(pin_dir.clone()),
        conn_table_size: cfg.xdp.conn_table_size,
    };
    let mut dp = DataPath::load(&object, &opts)?;
    dp.set_flood_limit(cfg.xdp.flood_guard_rate)?;
    if dp.adopted() {
        info!(pin_dir = %pin_dir.display(), "adopted the running data path");
    } else {
        info!(pin_dir = %pin_dir.display(), "loaded the data path");
    }
    for iface in &ifaces {
        dp.attach(iface, mode)?;
        info!(iface, "attached");
        for problem in network::lab_warnings(iface) {
            warn!(iface, "{problem}");
        }
    }
    Ok((dp, cfg))
}

/// Looks the name up in the calling process's network namespace (/sys/class/net may
/// belong to another one under `nsenter --net`).
fn interface_exists(name: &str) -> bool {
    let Ok(c) = std::ffi::CString::new(name) else {
        return false;
    };
    // SAFETY: a valid NUL-terminated string; the call only reads it.
    unsafe { libc::if_nametoindex(c.as_ptr()) != 0 }
}

fn apply(dp: &mut DataPath, cfg: &Config) -> Result<()> {
    network::apply(dp, cfg, &HashSet::new()).context("writing the Network vServices")?;
    let n = cfg.vservices.iter().filter(|v| v.kind.is_network()).count();
    info!(vservices = n, "Network vServices written");
    Ok(())
}

/// Without Network vServices and interfaces the daemon runs without XDP (health, L7, API).
fn daemon(r: &RunArgs) -> Result<()> {
    // Before anything slow: a SIGHUP while the configuration is read and the data path
    // loaded is held and becomes a reload once the daemon is ready.
    lb::run::hold_hangups();
    let t = &r.target;
    let seconds = |value: f64, flag: &str| {
        std::time::Duration::try_from_secs_f64(value)
            .with_context(|| format!("{flag} {value}: not a number of seconds"))
    };
    let options = lb::run::RunOptions {
        upgrade: r.upgrade,
        drain: seconds(r.drain_timeout, "--drain-timeout")?,
        restore_within: seconds(r.restore_within, "--restore-within")?,
    };
    let cfg = read_config(&t.config)?;
    lb::routing::check(&cfg.bgp)?;
    let has_network = cfg.vservices.iter().any(|v| v.kind.is_network());
    if !has_network && t.ifaces.is_empty() && cfg.xdp.interfaces.is_empty() {
        info!("no Network vService and no interface: running without XDP");
        return lb::run::daemon(None, cfg, t.config.clone(), options);
    }
    let (dp, cfg) = load(t)?;
    lb::run::daemon(Some(dp), cfg, t.config.clone(), options)
}
