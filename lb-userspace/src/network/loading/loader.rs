//! Loading the XDP object, or adopting the one already pinned, and attaching it.
//!
//! The program, its maps and its links are pinned under one bpffs directory, so that the
//! daemon can exit or restart while the kernel keeps forwarding: a restarted daemon opens
//! the pins instead of loading a second copy.

use std::fs;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use aya::maps::{Map, MapData};
use aya::programs::links::Link as _;
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::{TestRun, TestRunOptions, Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};
use aya_obj::programs::XdpAttachType;
use lb_common::{clash_table_size, names};

use crate::network::tables::spare::Pool;
use crate::network::writing::maps::Maps;
use crate::network::writing::nat::NatBackends;
use crate::network::writing::state::State;

/// Every map the program declares, in the order they are pinned.
const MAP_NAMES: [&str; 22] = [
    names::ADDRS,
    names::VIPS,
    names::RANGES,
    names::BACKENDS,
    names::MAGLEV,
    names::CONNS,
    names::NEXTHOPS,
    names::HOPS,
    names::VIP_STATS,
    names::BACKEND_STATS,
    names::GLOBAL_STATS,
    names::PROGS,
    names::ADDR_FILTER,
    names::NEXTHOP_GEN,
    names::NAT_BACKENDS,
    names::LAYOUT,
    names::FLOOD_GUARD,
    names::VIP_BY_ID,
    names::CONNS_CLASH,
    names::TUNNEL_JOB,
    names::TUNNEL_SOURCES,
    names::HEALTH_TUNNELS,
];

/// How to load the data path.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// bpffs directory for pins; `None` loads a private copy (tests, benchmarks).
    pub pin_dir: Option<PathBuf>,
    /// Connection-table size in flows (used only when the program is loaded fresh).
    pub conn_table_size: u32,
}

/// The program either belongs to this process or was adopted from its pin.
enum Program {
    Owned(Box<Ebpf>),
    Pinned(Box<Xdp>),
}

/// The loaded (or adopted) XDP program and its maps.
pub struct DataPath {
    program: Program,
    pub(crate) maps: Maps,
    pub(crate) state: State,
    pin_dir: Option<PathBuf>,
    adopted: bool,
    /// True once this process has written the maps: the state then matches them exactly.
    pub(crate) written: bool,
    /// The type information of the Maglev tables this process creates (`btf.rs`).
    pub(crate) table_btf: Option<OwnedFd>,
    /// The Maglev tables this process made, in use and spare.
    pub(crate) pool: Pool,
    /// What NAT_BACKENDS holds after this process's last write (`None` before one).
    pub(crate) nat: Option<NatBackends>,
    /// Instructions the verifier processed per program this process loaded (its limit is
    /// 1,000,000 per program): how close a data-path change comes to being refused.
    verified: Vec<(&'static str, u32)>,
}

/// The instructions the verifier processed for a loaded program (0: the kernel does not say).
fn verified_instructions(prog: &Xdp) -> u32 {
    prog.info()
        .ok()
        .and_then(|info| info.verified_instruction_count())
        .unwrap_or(0)
}

/// Entries of BACKEND_STATS: one counter block per backend slot and possible CPU (see
/// `counters`).
fn backend_stats_entries() -> Result<u32> {
    let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
    u32::try_from(cpus)
        .ok()
        .and_then(|c| c.checked_mul(lb_common::MAX_BACKEND_SLOTS))
        .with_context(|| format!("BACKEND_STATS for {cpus} CPUs is too large"))
}

fn prog_pin(dir: &Path) -> PathBuf {
    dir.join("prog")
}

fn map_pin(dir: &Path, name: &str) -> PathBuf {
    dir.join("maps").join(name)
}

fn link_pin(dir: &Path, iface: &str) -> PathBuf {
    dir.join("links").join(iface)
}

/// Makes sure `dir` is on a mounted bpffs, with the program's `maps` and `links`
/// directories in it.
fn ensure_bpffs(dir: &Path) -> Result<()> {
    crate::bpffs::ensure(dir)?;
    fs::create_dir_all(dir.join("maps"))
        .with_context(|| format!("creating pin directory {}", dir.display()))?;
    fs::create_dir_all(dir.join("links"))?;
    Ok(())
}

impl DataPath {
    /// Loads the object, or adopts the pinned program and maps when `pin_dir` holds them.
    pub fn load(object: &[u8], opts: &LoadOptions) -> Result<DataPath> {
        if let Some(dir) = &opts.pin_dir {
            ensure_bpffs(dir)?;
            if prog_pin(dir).exists() {
                return Self::adopt(dir).with_context(|| {
                    format!(
                        "adopting the data path pinned in {} (pinned by another version of lb \
                         when its maps differ: `lb unload` it, then load again)",
                        dir.display()
                    )
                });
            }
        }
        if let Some(dir) = &opts.pin_dir {
            // A fresh program starts from empty maps: forget any earlier bookkeeping.
            State::remove(dir);
        }
        let level = crate::ebpf_log::load_level();
        let mut ebpf = EbpfLoader::new()
            .override_global(crate::ebpf_log::LEVEL_GLOBAL, &level, false)
            .map_max_entries(names::CONNS, opts.conn_table_size)
            .map_max_entries(names::CONNS_CLASH, clash_table_size(opts.conn_table_size))
            .map_max_entries(names::BACKEND_STATS, backend_stats_entries()?)
            .load(object)
            .context("loading the XDP object into the kernel")?;
        let mut maps = Vec::new();
        for name in MAP_NAMES {
            let map = ebpf
                .take_map(name)
                .ok_or_else(|| anyhow!("the XDP object has no map {name}"))?;
            if let Some(dir) = &opts.pin_dir {
                let path = map_pin(dir, name);
                let _ = fs::remove_file(&path);
                map.pin(&path)
                    .with_context(|| format!("pinning map {name} at {}", path.display()))?;
            }
            maps.push(map);
        }
        let prog: &mut Xdp = ebpf
            .program_mut(names::PROGRAM)
            .ok_or_else(|| anyhow!("the XDP object has no program {}", names::PROGRAM))?
            .try_into()?;
        prog.load().context("verifying the XDP program")?;
        let mut verified = vec![(names::PROGRAM, verified_instructions(prog))];
        if let Some(dir) = &opts.pin_dir {
            prog.pin(prog_pin(dir)).context("pinning the XDP program")?;
        }
        let mut maps = Maps::new(maps)?;
        maps.layout
            .set(0, lb_common::LAYOUT_VERSION, 0)
            .context("writing LAYOUT")?;
        // The tail-called programs live as long as the (pinned) PROGS map holds them.
        let tail_calls = [
            (
                names::ICMP_PROGRAM,
                lb_common::PROG_ICMP_ERROR,
                "ICMP errors",
            ),
            (names::NAT_PROGRAM, lb_common::PROG_NAT_REPLY, "NAT replies"),
            (
                names::TUNNEL_PROGRAM,
                lb_common::PROG_TUNNEL,
                "tunnel forwarding",
            ),
        ];
        for (name, index, what) in tail_calls {
            let prog: &mut Xdp = ebpf
                .program_mut(name)
                .ok_or_else(|| anyhow!("the XDP object has no program {name}"))?
                .try_into()?;
            prog.load()
                .with_context(|| format!("verifying the XDP program for {what}"))?;
            verified.push((name, verified_instructions(prog)));
            maps.progs
                .set(index, prog.fd()?, 0)
                .context("writing PROGS")?;
        }
        verified.push((
            names::HEALTH_TUNNEL_PROGRAM,
            crate::network::writing::tunnel::load(&mut ebpf, opts.pin_dir.as_deref())?,
        ));
        Ok(DataPath {
            program: Program::Owned(Box::new(ebpf)),
            maps,
            state: State::default(),
            pin_dir: opts.pin_dir.clone(),
            adopted: false,
            written: false,
            table_btf: crate::network::tables::btf::load(),
            pool: Pool::default(),
            nat: None,
            verified,
        })
    }

    fn adopt(dir: &Path) -> Result<DataPath> {
        let mut maps = Vec::new();
        for name in MAP_NAMES {
            let path = map_pin(dir, name);
            let data = MapData::from_pin(&path)
                .with_context(|| format!("opening pinned map {}", path.display()))?;
            maps.push(Map::from_map_data(data)?);
        }
        let maps = Maps::new(maps)?;
        let layout = maps.layout.get(&0, 0).context("reading LAYOUT")?;
        if layout != lb_common::LAYOUT_VERSION {
            bail!(
                "its maps have layout version {layout}, this lb writes version {}",
                lb_common::LAYOUT_VERSION
            );
        }
        let prog = Xdp::from_pin(prog_pin(dir), XdpAttachType::Interface)
            .with_context(|| format!("opening pinned program in {}", dir.display()))?;
        Ok(DataPath {
            program: Program::Pinned(Box::new(prog)),
            maps,
            state: State::read(dir)?,
            pin_dir: Some(dir.to_path_buf()),
            adopted: true,
            written: false,
            table_btf: crate::network::tables::btf::load(),
            pool: Pool::default(),
            nat: None,
            verified: Vec::new(),
        })
    }

    /// Per program this process loaded (none when it adopted pins): the instructions the
    /// verifier processed, of its limit of 1,000,000.
    pub fn verified_instructions(&self) -> &[(&'static str, u32)] {
        &self.verified
    }

    /// Sets the connection table's flood guard: new flows per second and CPU recorded at
    /// most (0: every one). A freshly loaded data path records every flow until this is
    /// called.
    pub fn set_flood_limit(&mut self, limit: u32) -> Result<()> {
        self.maps.set_flood_limit(limit)
    }

    /// True when this process adopted an already running data path.
    pub fn adopted(&self) -> bool {
        self.adopted
    }

    /// The pin directory, if the data path is pinned.
    pub fn pin_dir(&self) -> Option<&Path> {
        self.pin_dir.as_deref()
    }

    /// The kernel's id of the XDP program, by which the daemon finds its log ring
    /// (`ebpf_log`), whether this process loaded it or adopted its pin.
    pub fn program_id(&self) -> Result<u32> {
        Ok(self
            .xdp_ref()?
            .info()
            .context("reading the XDP program's info")?
            .id())
    }

    fn xdp(&mut self) -> Result<&mut Xdp> {
        match &mut self.program {
            Program::Owned(ebpf) => Ok(ebpf
                .program_mut(names::PROGRAM)
                .ok_or_else(|| anyhow!("program {} vanished", names::PROGRAM))?
                .try_into()?),
            Program::Pinned(xdp) => Ok(xdp),
        }
    }

    fn xdp_ref(&self) -> Result<&Xdp> {
        match &self.program {
            Program::Owned(ebpf) => Ok(ebpf
                .program(names::PROGRAM)
                .ok_or_else(|| anyhow!("program {} vanished", names::PROGRAM))?
                .try_into()?),
            Program::Pinned(xdp) => Ok(xdp),
        }
    }

    /// Attaches to `iface` and pins the link, so it stays attached after this process.
    /// An interface that already has our pinned link is left as it is.
    pub fn attach(&mut self, iface: &str, mode: XdpMode) -> Result<()> {
        let dir = self
            .pin_dir
            .clone()
            .ok_or_else(|| anyhow!("attaching needs a pin directory"))?;
        let path = link_pin(&dir, iface);
        if !path.exists() {
            self.attach_xdp(iface, mode, &path)?;
        }
        // The health checks of servers behind tunnels leave through the same interfaces
        // (S-TN4); forwarding does not depend on it, so a kernel that refuses it only costs
        // those checks their tunnel.
        if let Err(e) = crate::network::writing::tunnel::attach(&dir, iface) {
            tracing::warn!(
                "health checks of tunnelled servers will not travel the tunnel on {iface}: {e:#}"
            );
        }
        Ok(())
    }

    fn attach_xdp(&mut self, iface: &str, mode: XdpMode, path: &Path) -> Result<()> {
        let xdp = self.xdp()?;
        let id = xdp
            .attach(iface, mode)
            .with_context(|| format!("attaching XDP to interface {iface} ({mode:?} mode)"))?;
        let link = xdp.take_link(id)?;
        let fd_link: FdLink = link
            .try_into()
            .map_err(|e| anyhow!("the kernel attached {iface} without a bpf_link ({e})"))?;
        fd_link
            .pin(path)
            .with_context(|| format!("pinning the link of {iface}"))?;
        Ok(())
    }

    /// Runs the program once on `frame` (BPF_PROG_TEST_RUN) and returns (verdict, output).
    /// `ingress_ifindex` is an interface of the calling thread's network namespace.
    pub fn test_run(&self, frame: &[u8], ingress_ifindex: Option<u32>) -> Result<(u32, Vec<u8>)> {
        let run = run_xdp(self.xdp_ref()?, frame, 1, ingress_ifindex)?;
        Ok((run.verdict, run.output))
    }

    /// Runs the program `repeat` times on `frame` and returns the kernel's mean time per run.
    pub fn bench_run(&self, frame: &[u8], repeat: u32) -> Result<Duration> {
        Ok(run_xdp(self.xdp_ref()?, frame, repeat, None)?.per_run)
    }
}

/// What one BPF_PROG_TEST_RUN call gave.
pub struct XdpRun {
    /// The XDP verdict (of the last run).
    pub verdict: u32,
    /// The frame as the program left it.
    pub output: Vec<u8>,
    /// The kernel's mean time per run.
    pub per_run: Duration,
}

/// Runs any loaded XDP program `repeat` times on `frame` with BPF_PROG_TEST_RUN: ours, or
/// another balancer's that a bench times beside ours through the same call.
/// `ingress_ifindex` is an interface of the calling thread's network namespace.
pub fn run_xdp(
    prog: &Xdp,
    frame: &[u8],
    repeat: u32,
    ingress_ifindex: Option<u32>,
) -> Result<XdpRun> {
    let mut out = vec![0u8; frame.len() + 256];
    let ctx = ingress_ifindex.map(|ifindex| xdp_md(frame.len(), ifindex));
    let opts = TestRunOptions {
        data_in: Some(frame),
        data_out: Some(&mut out),
        ctx_in: ctx.as_ref().map(|c| &c[..]),
        repeat,
        ..Default::default()
    };
    let res = prog.test_run(opts).context("BPF_PROG_TEST_RUN")?;
    out.truncate(res.data_size_out as usize);
    Ok(XdpRun {
        verdict: res.return_value,
        output: out,
        per_run: res.duration,
    })
}

/// The `struct xdp_md` context for a test run: data 0..len, given ingress interface.
fn xdp_md(len: usize, ifindex: u32) -> [u8; 24] {
    let mut md = [0u8; 24];
    md[4..8].copy_from_slice(&(len as u32).to_ne_bytes());
    md[12..16].copy_from_slice(&ifindex.to_ne_bytes());
    md
}

/// Interfaces that have a pinned link under `dir`.
pub fn attached_interfaces(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = fs::read_dir(dir.join("links"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Forgets the writer's bookkeeping of `dir` (for callers that remove pins themselves).
pub fn forget_state(dir: &Path) {
    State::remove(dir);
}

/// Detaches from `iface` (removing its pinned link). When no interface remains, removes
/// every pin under `dir`, which unloads the program and frees its maps.
pub fn detach(dir: &Path, iface: &str) -> Result<bool> {
    crate::network::writing::tunnel::detach(dir, iface)?;
    let path = link_pin(dir, iface);
    let link = PinnedLink::from_pin(&path).map_err(|e| {
        anyhow!(
            "interface {iface} has no XDP link pinned at {}: {e}",
            path.display()
        )
    })?;
    let fd = link.unpin().context("removing the link pin")?;
    fd.detach().context("detaching the XDP link")?;
    if !attached_interfaces(dir).is_empty() {
        return Ok(false);
    }
    fs::remove_dir_all(dir).with_context(|| format!("removing pins under {}", dir.display()))?;
    State::remove(dir);
    Ok(true)
}
