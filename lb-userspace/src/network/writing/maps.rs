//! Typed handles on the data path's maps (the same types the eBPF side declares).

use std::os::fd::{AsFd, OwnedFd};

use crate::network::writing::counters::ServiceCounters;
use anyhow::{Context, Result, anyhow};
use aya::maps::{
    Array, ArrayOfMaps, HashMap, LpmTrie, Map, MapData, PerCpuArray, PerCpuValues, ProgramArray,
};
use lb_common::{
    AddrKey, BackendSlot, ClientKey, Counters, FloodGuard, FlowKey, FlowValue, HealthTunnel,
    NatBackendKey, NatTargets, NextHop, RangeData, TunnelSource, VipById, VipKey, VipMeta,
};

/// One handle per map.
pub(crate) struct Maps {
    pub addrs: HashMap<MapData, AddrKey, u32>,
    pub vips: HashMap<MapData, VipKey, VipMeta>,
    /// Exact VIPs by id (`VipById`), written beside `vips`.
    pub vip_by_id: Array<MapData, VipById>,
    pub ranges: LpmTrie<MapData, RangeData, VipMeta>,
    pub backends: Array<MapData, BackendSlot>,
    pub maglev: ArrayOfMaps<MapData, Array<MapData, u32>>,
    /// Descriptors of MAGLEV and BACKENDS for batched writes (aya's handles do not lend
    /// theirs out).
    pub maglev_fd: OwnedFd,
    pub backends_fd: OwnedFd,
    /// Kept open for status and adoption; flows are written by the program only.
    #[allow(dead_code)]
    pub conns: HashMap<MapData, ClientKey, FlowValue>,
    #[allow(dead_code)]
    pub conns_clash: HashMap<MapData, FlowKey, FlowValue>,
    /// Kept open for status and adoption; written by the program only.
    #[allow(dead_code)]
    pub nexthops: PerCpuArray<MapData, NextHop>,
    /// Written by the program only (a configuration change makes its entries stale through
    /// NEXTHOP_GEN); kept open as the others.
    #[allow(dead_code)]
    pub hops: Array<MapData, NextHop>,
    /// Generation of the next-hop cache: bumped to forget every entry.
    pub nexthop_gen: Array<MapData, u32>,
    pub vip_stats: PerCpuArray<MapData, Counters>,
    pub backend_stats: ServiceCounters,
    pub global_stats: PerCpuArray<MapData, u64>,
    /// Programs reached by tail call (written once at load).
    pub progs: ProgramArray<MapData>,
    /// The VIPs of each NAT backend (`network::nat`).
    pub nat_backends: HashMap<MapData, NatBackendKey, NatTargets>,
    /// The address filter (`network::filter`).
    pub filter: Array<MapData, u64>,
    /// The layout version these maps were written with (`LAYOUT_VERSION`).
    pub layout: Array<MapData, u32>,
    /// The connection table's flood guard, per CPU (`set_flood_limit`).
    pub flood_guard: PerCpuArray<MapData, FloodGuard>,
    /// Written and read by the program only (its hand-off to the tunnel program); kept open
    /// as the others.
    #[allow(dead_code)]
    pub tunnel_job: Map,
    /// The outer source prefixes of tunnel forwarding (`DataPath::set_tunnels`).
    pub tunnel_sources: Array<MapData, TunnelSource>,
    /// Health checks through the tunnel by socket mark (`DataPath::set_tunnels`).
    pub health_tunnels: HashMap<MapData, u32, HealthTunnel>,
}

/// A second descriptor of an array-type map, for the batched writes.
fn dup_fd(map: &Map, name: &str) -> Result<OwnedFd> {
    let data = match map {
        Map::Array(d) | Map::PerCpuArray(d) | Map::ArrayOfMaps(d) => d,
        _ => anyhow::bail!("{name} is not an array"),
    };
    data.fd()
        .as_fd()
        .try_clone_to_owned()
        .with_context(|| format!("duplicating {name}'s descriptor"))
}

impl Maps {
    /// Takes the maps in `loader::MAP_NAMES` order.
    pub fn new(maps: Vec<Map>) -> Result<Maps> {
        let mut it = maps.into_iter();
        let mut next = |name: &str| it.next().ok_or_else(|| anyhow!("map {name} missing"));
        let (addrs, vips, ranges, backends) = (
            next("ADDRS")?,
            next("VIPS")?,
            next("RANGES")?,
            next("BACKENDS")?,
        );
        let maglev = next("MAGLEV")?;
        let (conns, nexthops) = (next("CONNS")?, next("NEXTHOPS")?);
        let hops = next("HOPS")?;
        let (vip_stats, backend_stats) = (next("VIP_STATS")?, next("BACKEND_STATS")?);
        Ok(Maps {
            maglev_fd: dup_fd(&maglev, "MAGLEV")?,
            backends_fd: dup_fd(&backends, "BACKENDS")?,
            addrs: addrs.try_into().context("ADDRS")?,
            vips: vips.try_into().context("VIPS")?,
            ranges: ranges.try_into().context("RANGES")?,
            backends: backends.try_into().context("BACKENDS")?,
            maglev: maglev.try_into().context("MAGLEV")?,
            conns: conns.try_into().context("CONNS")?,
            nexthops: nexthops.try_into().context("NEXTHOPS")?,
            hops: hops.try_into().context("HOPS")?,
            vip_stats: vip_stats.try_into().context("VIP_STATS")?,
            backend_stats: ServiceCounters::map(
                backend_stats,
                aya::util::nr_cpus().map_err(|(_, e)| e)?,
            )?,
            global_stats: next("GLOBAL_STATS")?.try_into().context("GLOBAL_STATS")?,
            progs: next("PROGS")?.try_into().context("PROGS")?,
            filter: next("ADDR_FILTER")?.try_into().context("ADDR_FILTER")?,
            nexthop_gen: next("NEXTHOP_GEN")?.try_into().context("NEXTHOP_GEN")?,
            nat_backends: next("NAT_BACKENDS")?.try_into().context("NAT_BACKENDS")?,
            layout: next("LAYOUT")?.try_into().context("LAYOUT")?,
            flood_guard: next("FLOOD_GUARD")?.try_into().context("FLOOD_GUARD")?,
            vip_by_id: next("VIP_BY_ID")?.try_into().context("VIP_BY_ID")?,
            conns_clash: next("CONNS_CLASH")?.try_into().context("CONNS_CLASH")?,
            tunnel_job: next("TUNNEL_JOB")?,
            tunnel_sources: next("TUNNEL_SOURCES")?
                .try_into()
                .context("TUNNEL_SOURCES")?,
            health_tunnels: next("HEALTH_TUNNELS")?
                .try_into()
                .context("HEALTH_TUNNELS")?,
        })
    }

    /// Forgets every cached next hop, so routes and neighbours are looked up afresh after a
    /// configuration change (new backends often mean new neighbours): one write, which
    /// makes every CPU's entries stale at once.
    pub fn flush_nexthops(&mut self) -> Result<()> {
        let generation = self.nexthop_gen.get(&0, 0).unwrap_or(0);
        self.nexthop_gen
            .set(0, generation.wrapping_add(1), 0)
            .context("writing NEXTHOP_GEN")
    }

    /// Sets how many new flows per second each CPU records in the connection table (0:
    /// all of them). Every CPU's guard starts a new second with it.
    pub fn set_flood_limit(&mut self, limit: u32) -> Result<()> {
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
        let guard = FloodGuard {
            limit,
            ..FloodGuard::default()
        };
        let values = PerCpuValues::try_from(vec![guard; cpus])?;
        self.flood_guard
            .set(0, values, 0)
            .context("writing FLOOD_GUARD")
    }

    /// The flood guard's limit as written (0: none).
    pub fn flood_limit(&self) -> Result<u32> {
        let values = self.flood_guard.get(&0, 0).context("reading FLOOD_GUARD")?;
        Ok(values.iter().map(|g| g.limit).max().unwrap_or(0))
    }

    /// Sums one entry of a per-CPU counter array.
    pub fn sum_counters(map: &PerCpuArray<MapData, Counters>, index: u32) -> Result<Counters> {
        let per_cpu = map.get(&index, 0)?;
        let mut total = Counters::default();
        for c in per_cpu.iter() {
            total.add(c);
        }
        Ok(total)
    }

    /// Zeroes one entry of a per-CPU counter array (a slot or VIP id given to a new owner).
    pub fn reset_counters(map: &mut PerCpuArray<MapData, Counters>, index: u32) -> Result<()> {
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
        let zeros = PerCpuValues::try_from(vec![Counters::default(); cpus])?;
        map.set(index, zeros, 0)?;
        Ok(())
    }
}
