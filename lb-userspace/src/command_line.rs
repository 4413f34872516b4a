//! The `lb` command line: its clap definitions, in the library so that tests can read them.
//!
//! `lb --help`, the shell completions (`lb completions SHELL`) and the manual pages
//! (`lb man --dir DIR`, which the Debian package runs) are all generated from [`command`], so
//! they say the same thing; `tests/cli_docs.rs` checks the documentation against it too.
//! The `main` of the binary parses [`Cli`] and runs what it names.

use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

/// The configuration file of the Debian package (the systemd unit runs `lb run` with it).
pub const DEFAULT_CONFIG: &str = "/etc/lb/lb.toml";

/// The clap command of `lb`, with every subcommand and flag (hidden ones included).
pub fn command() -> clap::Command {
    Cli::command()
}

#[derive(Parser)]
#[command(
    name = "lb",
    version,
    about = "Load balancer: Network vServices in XDP (TCP, UDP, any IP; NAT or DSR; IPv4 and \
             IPv6), HTTP and L7 TCP vServices in a proxy, DNS vServices across sites, one \
             health engine for all, a REST API and a Live Stats page"
)]
pub struct Cli {
    /// How log lines are written to stderr: `text` (coloured only on a terminal) or `json`
    /// (one object per line, for log shippers).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Mode {
    /// Native (driver) XDP.
    Drv,
    /// Generic (skb) XDP, for NICs without native support.
    Skb,
}

#[derive(clap::Args)]
pub struct Target {
    /// Configuration file (TOML).
    #[arg(long)]
    pub config: PathBuf,
    /// Interface to attach to; repeat for several (NAT needs the backend side too).
    #[arg(long = "iface", value_delimiter = ',')]
    pub ifaces: Vec<String>,
    /// Attach mode (default: the config's, else drv).
    #[arg(long)]
    pub mode: Option<Mode>,
    /// bpffs directory for pins (default: the config's, else /sys/fs/bpf/lb).
    #[arg(long)]
    pub pin_dir: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub target: Target,
    /// Take over from the `lb run` running with the same --config (a binary upgrade or a
    /// restart without a refused connection): its listening sockets pass to this process,
    /// it stops accepting, finishes its open requests and connections, and exits.
    #[arg(long)]
    pub upgrade: bool,
    /// When a new `lb run --upgrade` takes over from this one: seconds its open requests
    /// and connections (L7 TCP, WebSocket) may take to finish before they are cut.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub drain_timeout: f64,
    /// Health decisions saved by a previous `lb run` (each second and at exit) are restored
    /// when younger than this; 0 starts every checked service in Preparing.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub restore_within: f64,
}

/// How `lb decap` attaches its program.
#[derive(Clone, Copy, ValueEnum)]
pub enum DecapMode {
    /// Native (driver) XDP.
    #[value(alias = "drv")]
    Native,
    /// Generic (skb) XDP, for NICs without native support.
    Skb,
    /// A tc ingress program instead of XDP, for an interface where XDP cannot attach
    /// (another XDP program holds it); the same checks and counters.
    Tc,
}

/// `lb decap`: one subcommand with three actions, so that the attach, the status and the
/// detach of one interface read alike.
#[derive(clap::Args)]
pub struct DecapArgs {
    /// Interface the tunnel packets arrive on (for --status: only this one).
    #[arg(long, required_unless_present = "status")]
    pub iface: Option<String>,
    /// Attach mode, when the program is attached anew.
    #[arg(long, value_enum, default_value_t = DecapMode::Native)]
    pub mode: DecapMode,
    /// A balancer's address or prefix (192.0.2.0/24, 2001:db8::/48); repeat for several.
    /// Given, other outer sources are dropped; none: any source.
    #[arg(long = "source", value_name = "PREFIX")]
    pub sources: Vec<crate::agent::Prefix>,
    /// A VIP inner packets may be addressed to; repeat for several. Given, other inner
    /// destinations are dropped; none: any.
    #[arg(long = "vip", value_name = "ADDR")]
    pub vips: Vec<std::net::IpAddr>,
    /// Take GUE tunnel packets too: UDP to this port (the balancers' `[xdp] gue_port`,
    /// 6080 by default there). Without it, UDP is never a tunnel packet.
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub gue_port: Option<u16>,
    /// bpffs directory under which each interface's pins go (`DIR/IF/`).
    #[arg(long, default_value = crate::agent::DEFAULT_PIN_BASE)]
    pub pin_dir: PathBuf,
    /// Print the counters (summed over CPUs) and the configured sources and VIPs.
    #[arg(long, conflicts_with_all = ["detach", "sources", "vips", "gue_port"])]
    pub status: bool,
    /// With --status: JSON instead of text.
    #[arg(long, requires = "status")]
    pub json: bool,
    /// Detach from --iface and remove its pins.
    #[arg(long, conflicts_with_all = ["sources", "vips", "gue_port"])]
    pub detach: bool,
    /// After attaching (or updating), stay in the foreground and log each tunnel packet
    /// the agent drops, with its source and why, until SIGINT or SIGTERM; the agent stays
    /// attached. The program writes these records only when it was loaded with them on:
    /// by `--follow` itself, or under RUST_LOG=debug.
    #[arg(long, conflicts_with_all = ["status", "detach"])]
    pub follow: bool,
}

#[derive(Subcommand)]
pub enum Command {
    /// Load (or adopt) the data path, attach it, write the config's VIPs, and exit.
    Load(Target),
    /// Like `load`, then stay in the foreground: SIGHUP reloads the config; SIGTERM/SIGINT
    /// exit and leave the program attached (forwarding continues; a restart adopts it).
    Run(RunArgs),
    /// Detach from an interface; the last detach unloads the program and its maps.
    Unload {
        /// Interface to detach from.
        #[arg(long = "iface", value_delimiter = ',', required = true)]
        ifaces: Vec<String>,
        /// bpffs directory of the pins.
        #[arg(long, default_value = "/sys/fs/bpf/lb")]
        pin_dir: PathBuf,
        /// Configuration file whose `[bgp]` table holds the VIP routes: when the program is
        /// unloaded they are withdrawn (nothing forwards this balancer's VIPs any more).
        /// A missing default file is skipped.
        #[arg(long, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
    },
    /// Print a BIRD 2 configuration for announcing the VIPs that `lb run` keeps in the
    /// `[bgp]` table (kernel protocol, BFD, BGP template); fill in its capitals.
    BirdConfig {
        /// Configuration file (TOML) with `[bgp]`.
        #[arg(long, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
    },
    /// Everything at a glance: the XDP data path's VIPs, backends and counters (read from its
    /// pins), and the daemon's L7 and DNS vServices and Backend Services (from its API).
    Status(crate::api::status::StatusArgs),
    /// A Network vService's Maglev table as the kernel holds it (one backend per entry) and
    /// its digest: balancers whose digests agree send every flow to the same backend.
    Table(crate::api::table::TableArgs),
    /// The backend agent: strip the outer header of the balancer's tunnel packets (IPIP,
    /// IP6IP6, 4in6, 6in4) on a backend whose kernel has no tunnel devices. Attaches (or
    /// updates in place) with --iface; --status reads its counters; --detach removes it.
    Decap(DecapArgs),
    /// Validate a configuration file and print every error.
    CheckConfig {
        /// Configuration file (TOML).
        file: PathBuf,
    },
    /// Commands that talk to a running daemon's REST API.
    #[command(flatten)]
    Api(crate::api::cli::ApiCommand),
    /// Print the shell completion script for `lb` (bash, zsh, fish, elvish, powershell);
    /// the Debian package installs them already.
    #[command(hide = true)]
    Completions {
        /// Shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Write the manual pages (lb.1, and lb-SUBCOMMAND.1 for each subcommand) into a
    /// directory; the Debian package installs them already.
    #[command(hide = true)]
    Man {
        /// Directory to write the pages into (created when missing).
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
}
