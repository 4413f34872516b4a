//! What `lb decap` does: attach (or update in place), report, detach. Each returns what
//! happened for the binary to print, and fails with an error that names what is wrong.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use aya::programs::XdpMode;

use super::addrs::host_addresses;
use super::loader::{self, Agent, Hook};
use super::maps::{Settings, Snapshot};
use super::object;
use super::prefix::Prefix;

/// What `lb decap --iface IF` is asked to do.
pub struct AttachRequest {
    /// The interface tunnel packets arrive on.
    pub iface: String,
    /// Native (driver) or generic XDP, or tc; used only when the program is attached anew.
    pub hook: Hook,
    /// Balancer prefixes outer sources must be in (empty: any source).
    pub sources: Vec<Prefix>,
    /// VIPs inner destinations must be (empty: any).
    pub vips: Vec<IpAddr>,
    /// The UDP port of GUE tunnel packets (`None`: GUE not taken).
    pub gue_port: Option<u16>,
    /// The pin base directory (each interface gets `<base>/<IF>/`).
    pub pin_base: PathBuf,
}

/// What `lb decap --iface IF` did.
pub struct AttachReport {
    /// The interface.
    pub iface: String,
    /// Where its pins are.
    pub dir: PathBuf,
    /// True when the program was already attached and only its maps were rewritten.
    pub updated: bool,
    /// Where it hooked in, when attached now.
    pub hook: Option<Hook>,
    /// Instructions the verifier processed, when loaded now.
    pub verified: Option<u32>,
    /// What the maps hold now.
    pub settings: Settings,
    /// The kernel's id of the program (to follow its events).
    pub program_id: u32,
}

/// The root check comes first, so that a user without it is told that rather than a
/// permission error from deep inside the loader.
fn require_root() -> Result<()> {
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "lb decap must run as root: it loads an XDP program, attaches it and pins it in \
             the bpf filesystem"
        );
    }
    Ok(())
}

/// The interface must exist in this process's network namespace.
fn require_interface(iface: &str) -> Result<()> {
    let exists = std::ffi::CString::new(iface)
        // SAFETY: a valid NUL-terminated string; the call only reads it.
        .map(|c| unsafe { libc::if_nametoindex(c.as_ptr()) } != 0)
        .unwrap_or(false);
    if !exists {
        bail!("no such interface: {iface} (in this network namespace)");
    }
    Ok(())
}

/// The pin directory of `iface` under `base`.
pub fn pin_dir(base: &Path, iface: &str) -> PathBuf {
    base.join(iface)
}

/// Loads and attaches the agent on an interface, or rewrites the maps of the one already
/// attached there (no detach, so no packet goes by undecapsulated).
pub fn attach(req: &AttachRequest) -> Result<AttachReport> {
    require_root()?;
    require_interface(&req.iface)?;
    let dir = pin_dir(&req.pin_base, &req.iface);
    let settings = Settings {
        local: host_addresses()?,
        sources: req.sources.clone(),
        vips: req.vips.clone(),
        gue_port: req.gue_port,
    };
    loader::ensure_bpffs(&req.pin_base)?;
    let (mut agent, updated) = if Agent::pinned_in(&dir) {
        (Agent::open(&dir)?, loader::is_attached(&dir))
    } else {
        let object = object::read_object()?;
        (Agent::load_for(&object, Some(&dir), req.hook)?, false)
    };
    // The maps first: the program decapsulates nothing wrongly in between.
    agent.maps.write(&settings)?;
    let attached = agent.attach(&req.iface, req.hook)?;
    let now = agent.maps.read()?;
    Ok(AttachReport {
        iface: req.iface.clone(),
        dir,
        updated,
        hook: attached.then_some(req.hook),
        verified: agent.verified_instructions(),
        settings: now.settings,
        program_id: agent.program_id()?,
    })
}

/// One interface's agent as `lb decap --status` shows it.
pub struct Status {
    /// The interface.
    pub iface: String,
    /// Its pin directory.
    pub dir: PathBuf,
    /// Whether a link is pinned (the program is attached).
    pub attached: bool,
    /// The program is the tc one (`--mode tc`), not XDP.
    pub tc: bool,
    /// The maps' settings and counters.
    pub snapshot: Snapshot,
}

/// The status of the agent on `iface`, or on every interface pinned under `base`.
pub fn status(base: &Path, iface: Option<&str>) -> Result<Vec<Status>> {
    require_root()?;
    let ifaces: Vec<String> = match iface {
        Some(i) => vec![i.to_string()],
        None => {
            let mut all: Vec<String> = std::fs::read_dir(base)
                .map(|rd| {
                    rd.filter_map(|e| e.ok())
                        .filter(|e| Agent::pinned_in(&e.path()))
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            all.sort();
            all
        }
    };
    let mut out = Vec::new();
    for iface in ifaces {
        let dir = pin_dir(base, &iface);
        if !Agent::pinned_in(&dir) {
            bail!(
                "lb-decap is not attached to {iface}: nothing is pinned under {}",
                dir.display()
            );
        }
        let agent = Agent::open(&dir)?;
        out.push(Status {
            attached: loader::is_attached(&dir),
            tc: agent.is_tc(),
            snapshot: agent.maps.read()?,
            iface,
            dir,
        });
    }
    Ok(out)
}

/// Detaches the agent from `iface` and removes its pins.
pub fn detach(base: &Path, iface: &str) -> Result<PathBuf> {
    require_root()?;
    let dir = pin_dir(base, iface);
    loader::detach(&dir, iface)?;
    Ok(dir)
}

fn list<T: fmt::Display>(items: &[T], empty: &str) -> String {
    if items.is_empty() {
        return empty.to_string();
    }
    items
        .iter()
        .map(T::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn settings_lines(f: &mut fmt::Formatter<'_>, s: &Settings) -> fmt::Result {
    writeln!(
        f,
        "  sources: {}",
        list(&s.sources, "any (no --source given)")
    )?;
    writeln!(f, "  vips:    {}", list(&s.vips, "any (no --vip given)"))?;
    match s.gue_port {
        Some(port) => writeln!(f, "  gue:     UDP port {port}")?,
        None => writeln!(f, "  gue:     off (no --gue-port given)")?,
    }
    writeln!(
        f,
        "  local addresses ({}): {}",
        s.local.len(),
        list(&s.local, "none")
    )
}

impl fmt::Display for AttachReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.updated, self.hook) {
            (true, _) => writeln!(
                f,
                "lb-decap already attached to {}: maps updated in place",
                self.iface
            )?,
            (false, Some(hook)) => {
                let mode = match hook {
                    Hook::Xdp(XdpMode::Skb) => "skb",
                    Hook::Xdp(_) => "native",
                    Hook::Tc => "tc",
                };
                write!(f, "lb-decap attached to {} ({mode} mode)", self.iface)?;
                match self.verified {
                    Some(n) => writeln!(f, "; verifier: {n} instructions")?,
                    None => writeln!(f)?,
                }
            }
            (false, None) => writeln!(f, "lb-decap on {}: maps written", self.iface)?,
        }
        writeln!(f, "  pins: {}", self.dir.display())?;
        settings_lines(f, &self.settings)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match (self.attached, self.tc) {
            (true, true) => "attached (tc ingress)",
            (true, false) => "attached (XDP)",
            (false, _) => "pinned, not attached (run lb decap --iface again)",
        };
        writeln!(f, "lb-decap on {}: {state}", self.iface)?;
        writeln!(f, "  pins: {}", self.dir.display())?;
        settings_lines(f, &self.snapshot.settings)?;
        writeln!(f, "  {:<16} {:>20}", "counter", "value")?;
        for (name, value) in &self.snapshot.counters {
            writeln!(f, "  {name:<16} {value:>20}")?;
        }
        Ok(())
    }
}

impl Status {
    /// The status as JSON, for scripts and monitoring.
    pub fn json(&self) -> serde_json::Value {
        let s = &self.snapshot.settings;
        let strings = |v: Vec<String>| serde_json::Value::from(v);
        let counters: serde_json::Map<String, serde_json::Value> = self
            .snapshot
            .counters
            .iter()
            .map(|(n, v)| (n.to_string(), serde_json::Value::from(*v)))
            .collect();
        serde_json::json!({
            "iface": self.iface,
            "pin_dir": self.dir.display().to_string(),
            "attached": self.attached,
            "hook": if self.tc { "tc" } else { "xdp" },
            "sources": strings(s.sources.iter().map(Prefix::to_string).collect()),
            "vips": strings(s.vips.iter().map(IpAddr::to_string).collect()),
            "gue_port": s.gue_port,
            "local": strings(s.local.iter().map(IpAddr::to_string).collect()),
            "counters": counters,
        })
    }
}
