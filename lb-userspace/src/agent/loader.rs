//! Loading the agent's object, or opening the copy pinned for an interface, and attaching
//! it. Each interface has a pin directory of its own (`<base>/<IF>/`: `prog`, `link`,
//! `maps/NAME`), so the program stays attached after `lb decap` exits and a second run
//! finds it and rewrites its maps in place.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use aya::maps::{Map, MapData};
use aya::programs::links::Link as _;
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::{ProgramInfo, SchedClassifier, TcAttachType, Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};
use aya_obj::generated::bpf_prog_type;
use aya_obj::programs::XdpAttachType;
use lb_common::decap::names;

use super::maps::{DecapMaps, MAP_NAMES};

/// Where each interface's pins go by default: `/sys/fs/bpf/lb-decap/<IF>/`, apart from the
/// balancer's `/sys/fs/bpf/lb`, since both may run on one host.
pub const DEFAULT_PIN_BASE: &str = "/sys/fs/bpf/lb-decap";

fn prog_pin(dir: &Path) -> PathBuf {
    dir.join("prog")
}

fn link_pin(dir: &Path) -> PathBuf {
    dir.join("link")
}

fn map_pin(dir: &Path, name: &str) -> PathBuf {
    dir.join("maps").join(name)
}

/// Where the agent hooks into an interface's receive path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    /// The XDP program, native (driver) or generic (skb).
    Xdp(XdpMode),
    /// The tc ingress program (a TCX link), for an interface where XDP cannot attach
    /// (another XDP program holds it).
    Tc,
}

impl Hook {
    /// The program of the object this hook runs.
    fn program(self) -> &'static str {
        match self {
            Hook::Xdp(_) => names::PROGRAM,
            Hook::Tc => names::TC_PROGRAM,
        }
    }
}

/// The program belongs to this process (with the name of the one loaded), or was opened
/// from its pin.
enum Program {
    Owned(Box<Ebpf>, &'static str),
    PinnedXdp(Box<Xdp>),
    PinnedTc(Box<SchedClassifier>),
}

/// The agent's program and maps for one interface.
pub struct Agent {
    program: Program,
    /// The maps, to write settings and read counters.
    pub maps: DecapMaps,
    dir: Option<PathBuf>,
    verified: Option<u32>,
}

impl Agent {
    /// Loads `object`'s XDP program into the kernel; with `dir`, pins the program and maps
    /// there (`None` keeps a private copy, for tests).
    pub fn load(object: &[u8], dir: Option<&Path>) -> Result<Agent> {
        Self::load_for(object, dir, Hook::Xdp(XdpMode::default()))
    }

    /// Loads the program of `object` that `hook` runs, as [`Agent::load`] does.
    pub fn load_for(object: &[u8], dir: Option<&Path>, hook: Hook) -> Result<Agent> {
        let level = crate::ebpf_log::load_level();
        let mut ebpf = EbpfLoader::new()
            .override_global(crate::ebpf_log::LEVEL_GLOBAL, &level, false)
            .load(object)
            .context("loading the agent's XDP object into the kernel")?;
        if let Some(dir) = dir {
            // Leftovers of an interrupted run: a fresh program starts from fresh pins.
            let _ = fs::remove_dir_all(dir);
            fs::create_dir_all(dir.join("maps"))
                .with_context(|| format!("creating pin directory {}", dir.display()))?;
        }
        let mut maps = Vec::new();
        for name in MAP_NAMES {
            let map = ebpf
                .take_map(name)
                .ok_or_else(|| anyhow!("the agent's object has no map {name}"))?;
            if let Some(dir) = dir {
                let path = map_pin(dir, name);
                map.pin(&path)
                    .with_context(|| format!("pinning map {name} at {}", path.display()))?;
            }
            maps.push(map);
        }
        let name = hook.program();
        let prog = ebpf
            .program_mut(name)
            .ok_or_else(|| anyhow!("the agent's object has no program {name}"))?;
        match hook {
            Hook::Xdp(_) => <&mut Xdp>::try_from(&mut *prog)?.load(),
            Hook::Tc => <&mut SchedClassifier>::try_from(&mut *prog)?.load(),
        }
        .with_context(|| format!("verifying the agent's program {name}"))?;
        let verified = prog
            .info()
            .ok()
            .and_then(|info| info.verified_instruction_count());
        if let Some(dir) = dir {
            prog.pin(prog_pin(dir))
                .with_context(|| format!("pinning the agent's program {name}"))?;
        }
        Ok(Agent {
            program: Program::Owned(Box::new(ebpf), name),
            maps: DecapMaps::new(maps)?,
            dir: dir.map(Path::to_path_buf),
            verified,
        })
    }

    /// Opens the program and maps pinned in `dir`.
    pub fn open(dir: &Path) -> Result<Agent> {
        let mut maps = Vec::new();
        for name in MAP_NAMES {
            let path = map_pin(dir, name);
            let data = MapData::from_pin(&path)
                .with_context(|| format!("opening pinned map {}", path.display()))?;
            maps.push(Map::from_map_data(data)?);
        }
        let pin = prog_pin(dir);
        let opening = || format!("opening the program pinned in {}", dir.display());
        let info = ProgramInfo::from_pin(&pin).with_context(opening)?;
        let program = if info.program_type() == bpf_prog_type::BPF_PROG_TYPE_SCHED_CLS {
            Program::PinnedTc(Box::new(
                SchedClassifier::from_pin(&pin).with_context(opening)?,
            ))
        } else {
            Program::PinnedXdp(Box::new(
                Xdp::from_pin(&pin, XdpAttachType::Interface).with_context(opening)?,
            ))
        };
        Ok(Agent {
            program,
            maps: DecapMaps::new(maps)?,
            dir: Some(dir.to_path_buf()),
            verified: None,
        })
    }

    /// The kernel's id of the program, by which `lb decap --follow` finds its log ring.
    pub fn program_id(&self) -> Result<u32> {
        let info = match &self.program {
            Program::Owned(ebpf, name) => ebpf
                .program(name)
                .ok_or_else(|| anyhow!("program {name} vanished"))?
                .info(),
            Program::PinnedXdp(xdp) => xdp.info(),
            Program::PinnedTc(tc) => tc.info(),
        };
        Ok(info.context("reading the agent's program info")?.id())
    }

    /// Where this agent hooks in: the tc program, or XDP.
    pub fn is_tc(&self) -> bool {
        match &self.program {
            Program::Owned(_, name) => *name == names::TC_PROGRAM,
            Program::PinnedXdp(_) => false,
            Program::PinnedTc(_) => true,
        }
    }

    /// Whether `dir` holds a pinned program to open.
    pub fn pinned_in(dir: &Path) -> bool {
        prog_pin(dir).exists()
    }

    /// Instructions the verifier processed when this process loaded the program (its
    /// limit is 1,000,000); `None` for an opened pin or a kernel that does not say.
    pub fn verified_instructions(&self) -> Option<u32> {
        self.verified
    }

    /// The XDP program, for BPF_PROG_TEST_RUN.
    pub fn program(&self) -> Result<&Xdp> {
        match &self.program {
            Program::Owned(ebpf, name) => Ok(ebpf
                .program(name)
                .ok_or_else(|| anyhow!("program {name} vanished"))?
                .try_into()?),
            Program::PinnedXdp(xdp) => Ok(xdp),
            Program::PinnedTc(_) => bail!("this agent runs its tc program, not XDP"),
        }
    }

    /// The tc program, for BPF_PROG_TEST_RUN.
    pub fn tc_program(&self) -> Result<&SchedClassifier> {
        match &self.program {
            Program::Owned(ebpf, name) => Ok(ebpf
                .program(name)
                .ok_or_else(|| anyhow!("program {name} vanished"))?
                .try_into()?),
            Program::PinnedTc(tc) => Ok(tc),
            Program::PinnedXdp(_) => bail!("this agent runs its XDP program, not tc"),
        }
    }

    /// Attaches to `iface` by `hook` and pins the link, unless a link is pinned already.
    /// Returns whether it attached now.
    pub fn attach(&mut self, iface: &str, hook: Hook) -> Result<bool> {
        let dir = self
            .dir
            .clone()
            .ok_or_else(|| anyhow!("attaching needs a pin directory"))?;
        let path = link_pin(&dir);
        if path.exists() {
            return Ok(false);
        }
        let fd_link = match (hook, &mut self.program) {
            (Hook::Xdp(mode), Program::PinnedXdp(xdp)) => attach_xdp(xdp, iface, mode)?,
            (Hook::Tc, Program::PinnedTc(tc)) => attach_tc(tc, iface)?,
            (Hook::Xdp(mode), Program::Owned(ebpf, name)) if *name == names::PROGRAM => {
                let xdp: &mut Xdp = ebpf
                    .program_mut(name)
                    .ok_or_else(|| anyhow!("program {name} vanished"))?
                    .try_into()?;
                attach_xdp(xdp, iface, mode)?
            }
            (Hook::Tc, Program::Owned(ebpf, name)) if *name == names::TC_PROGRAM => {
                let tc: &mut SchedClassifier = ebpf
                    .program_mut(name)
                    .ok_or_else(|| anyhow!("program {name} vanished"))?
                    .try_into()?;
                attach_tc(tc, iface)?
            }
            _ => bail!(
                "lb-decap's pins under {} are of the other hook: `lb decap --detach --iface                  {iface}` first",
                dir.display()
            ),
        };
        fd_link
            .pin(&path)
            .with_context(|| format!("pinning the link of {iface} at {}", path.display()))?;
        Ok(true)
    }
}

/// Attaches XDP in `mode`; the link, to pin.
fn attach_xdp(xdp: &mut Xdp, iface: &str, mode: XdpMode) -> Result<FdLink> {
    let id = xdp
        .attach(iface, mode)
        .with_context(|| format!("attaching XDP to interface {iface} ({mode:?} mode)"))?;
    xdp.take_link(id)?
        .try_into()
        .map_err(|e| anyhow!("the kernel attached {iface} without a bpf_link ({e})"))
}

/// Attaches the tc program to the ingress of `iface` (a TCX link); the link, to pin.
fn attach_tc(tc: &mut SchedClassifier, iface: &str) -> Result<FdLink> {
    let id = tc
        .attach(iface, TcAttachType::Ingress)
        .with_context(|| format!("attaching the tc program to {iface} ingress"))?;
    tc.take_link(id)?
        .try_into()
        .map_err(|e| anyhow!("the kernel attached {iface} without a bpf_link ({e})"))
}

/// Whether `dir` has a pinned link (the program is attached through it).
pub fn is_attached(dir: &Path) -> bool {
    link_pin(dir).exists()
}

/// Detaches the program pinned in `dir` and removes every pin there, which unloads the
/// program and frees its maps.
pub fn detach(dir: &Path, iface: &str) -> Result<()> {
    if !dir.exists() {
        bail!(
            "lb-decap is not attached to {iface}: nothing is pinned under {}",
            dir.display()
        );
    }
    let path = link_pin(dir);
    if path.exists() {
        let link = PinnedLink::from_pin(&path)
            .map_err(|e| anyhow!("opening the link pinned at {}: {e}", path.display()))?;
        let fd = link.unpin().context("removing the link pin")?;
        fd.detach().context("detaching the XDP link")?;
    }
    fs::remove_dir_all(dir).with_context(|| format!("removing pins under {}", dir.display()))
}

/// Makes sure `dir` is on a mounted bpffs and exists (`crate::bpffs`).
pub fn ensure_bpffs(dir: &Path) -> Result<()> {
    crate::bpffs::ensure(dir)
}
