//! Katran's compiled XDP balancer (`../shared/reference/katran/balancer.bpf.o`), loaded with
//! aya like our own program and given the same VIPs, so both are timed on the same frames in
//! one run. The layouts below are read from Katran's headers (see the reference's README);
//! Katran is a measuring stick here and is never shipped.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use aya::maps::{Array, ArrayOfMaps, HashMap, Map, MapData};
use aya::programs::Xdp;
use aya::{Ebpf, EbpfLoader, Pod};
use lb::network::run_xdp;

/// Ring size of each VIP in `ch_rings` (Katran's default).
pub const RING: u32 = 65_537;
/// Flows each per-CPU connection table holds: as many as our program's table, so that
/// neither evicts the timed flows after the bench's million.
const LRU_SIZE: u32 = 1 << 20;
/// Katran's IP protocol numbers.
pub const TCP: u8 = 6;
pub const UDP: u8 = 17;

/// `struct flow_key`: addresses in the first 4 of 16 bytes for IPv4, ports as on the wire.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FlowKey {
    src: [u32; 4],
    dst: [u32; 4],
    ports: [u16; 2],
    proto: u8,
    pad: [u8; 3],
}

/// `struct real_pos_lru`: the real a flow is pinned to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct RealPos {
    pos: u32,
    pad: u32,
    atime: u64,
}

/// `struct vip_definition`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct VipDefinition {
    addr: [u32; 4],
    port: u16,
    proto: u8,
    pad: u8,
}

/// `struct vip_meta`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct VipMeta {
    flags: u32,
    vip_num: u32,
}

/// `struct real_definition`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct RealDefinition {
    addr: [u32; 4],
    flags: u8,
    pad: [u8; 3],
}

// SAFETY: plain #[repr(C)] data with explicit padding fields: every bit pattern is valid.
unsafe impl Pod for FlowKey {}
// SAFETY: as above.
unsafe impl Pod for RealPos {}
// SAFETY: as above.
unsafe impl Pod for VipDefinition {}
// SAFETY: as above.
unsafe impl Pod for VipMeta {}
// SAFETY: as above.
unsafe impl Pod for RealDefinition {}

impl FlowKey {
    /// An IPv4 flow as Katran keys it.
    pub fn v4(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16, proto: u8) -> FlowKey {
        FlowKey {
            src: [u32::from(src).to_be(), 0, 0, 0],
            dst: [u32::from(dst).to_be(), 0, 0, 0],
            ports: [sport.to_be(), dport.to_be()],
            proto,
            pad: [0; 3],
        }
    }
}

/// Where the reference object is: `KATRAN_OBJECT`, else `shared/reference/katran/` beside
/// the repository.
pub fn object_path() -> PathBuf {
    std::env::var_os("KATRAN_OBJECT").map_or_else(
        || {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../shared/reference/katran/balancer.bpf.o")
        },
        PathBuf::from,
    )
}

/// Katran's program and maps, loaded and ready for test runs.
pub struct Katran {
    ebpf: Ebpf,
    /// One connection table per CPU (the kernel keeps them alive through `lru_mapping`,
    /// these handles let the bench fill them).
    lrus: Vec<HashMap<MapData, FlowKey, RealPos>>,
}

impl Katran {
    /// Loads the object, creates one connection table per possible CPU and sets the
    /// gateway MAC every forwarded packet is sent to.
    pub fn load(path: &Path, gateway: [u8; 6]) -> Result<Katran> {
        let mut ebpf = EbpfLoader::new()
            .load_file(path)
            .with_context(|| format!("loading Katran's object {}", path.display()))?;
        let prog: &mut Xdp = ebpf
            .program_mut("balancer_ingress")
            .ok_or_else(|| anyhow!("Katran's object has no balancer_ingress"))?
            .try_into()?;
        prog.load().context("verifying Katran's program")?;
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
        let mut lrus = Vec::new();
        {
            let mut mapping: ArrayOfMaps<&mut MapData, HashMap<MapData, FlowKey, RealPos>> =
                ArrayOfMaps::try_from(map(&mut ebpf, "lru_mapping")?)?;
            for cpu in 0..cpus as u32 {
                let obj = aya_obj::Map::new_from_params(
                    aya_obj::generated::bpf_map_type::BPF_MAP_TYPE_LRU_HASH as u32,
                    size_of::<FlowKey>() as u32,
                    size_of::<RealPos>() as u32,
                    LRU_SIZE,
                    0,
                );
                let data = MapData::create(obj, "katran_lru", None)
                    .context("creating a connection table for Katran")?;
                let lru: HashMap<MapData, FlowKey, RealPos> =
                    HashMap::try_from(Map::LruHashMap(data))?;
                mapping
                    .set(cpu, &lru, 0)
                    .with_context(|| format!("lru_mapping[{cpu}]"))?;
                lrus.push(lru);
            }
        }
        let mut ctl: Array<&mut MapData, [u8; 8]> = Array::try_from(map(&mut ebpf, "ctl_array")?)?;
        let mut mac = [0u8; 8];
        mac[..6].copy_from_slice(&gateway);
        ctl.set(0, mac, 0).context("ctl_array[0]")?;
        Ok(Katran { ebpf, lrus })
    }

    /// Real `id` (1-based) at `addr`.
    pub fn add_real(&mut self, id: u32, addr: Ipv4Addr) -> Result<()> {
        let mut reals: Array<&mut MapData, RealDefinition> =
            Array::try_from(map(&mut self.ebpf, "reals")?)?;
        let real = RealDefinition {
            addr: [u32::from(addr).to_be(), 0, 0, 0],
            ..Default::default()
        };
        reals
            .set(id, real, 0)
            .with_context(|| format!("reals[{id}]"))
    }

    /// VIP number `num` on `addr:port/proto`, its ring spread over `reals` in turn (the
    /// spread does not change the cost of a lookup).
    pub fn add_vip(
        &mut self,
        num: u32,
        addr: Ipv4Addr,
        port: u16,
        proto: u8,
        reals: &[u32],
    ) -> Result<()> {
        if reals.is_empty() {
            bail!("a VIP needs reals");
        }
        let mut vips: HashMap<&mut MapData, VipDefinition, VipMeta> =
            HashMap::try_from(map(&mut self.ebpf, "vip_map")?)?;
        let key = VipDefinition {
            addr: [u32::from(addr).to_be(), 0, 0, 0],
            port: port.to_be(),
            proto,
            pad: 0,
        };
        let meta = VipMeta {
            flags: 0,
            vip_num: num,
        };
        vips.insert(key, meta, 0).context("vip_map")?;
        let mut rings: Array<&mut MapData, u32> =
            Array::try_from(map(&mut self.ebpf, "ch_rings")?)?;
        let base = num * RING;
        for i in 0..RING {
            rings
                .set(base + i, reals[i as usize % reals.len()], 0)
                .context("ch_rings")?;
        }
        Ok(())
    }

    /// Pins `count` flows to `real` in the connection table of `cpu` (so that timed hits
    /// look up a table as full as a busy balancer's).
    pub fn fill_flows(&mut self, cpu: usize, flows: &[FlowKey], real: u32) -> Result<()> {
        let lru = self
            .lrus
            .get_mut(cpu)
            .ok_or_else(|| anyhow!("no connection table for CPU {cpu}"))?;
        let pos = RealPos {
            pos: real,
            ..Default::default()
        };
        for flow in flows {
            lru.insert(flow, pos, 0)
                .context("filling Katran's connection table")?;
        }
        Ok(())
    }

    fn prog(&self) -> Result<&Xdp> {
        Ok(self
            .ebpf
            .program("balancer_ingress")
            .ok_or_else(|| anyhow!("no balancer_ingress"))?
            .try_into()?)
    }

    /// One run on `frame`: the verdict and the frame as the program left it.
    pub fn test_run(&self, frame: &[u8]) -> Result<(u32, Vec<u8>)> {
        let run = run_xdp(self.prog()?, frame, 1, None).context("Katran")?;
        Ok((run.verdict, run.output))
    }

    /// `repeat` runs on `frame`: the kernel's mean time per run.
    pub fn bench_run(&self, frame: &[u8], repeat: u32) -> Result<Duration> {
        Ok(run_xdp(self.prog()?, frame, repeat, None)
            .context("Katran")?
            .per_run)
    }
}

fn map<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut Map> {
    ebpf.map_mut(name)
        .ok_or_else(|| anyhow!("Katran's object has no map {name}"))
}
