//! The agent's maps as typed handles: what `lb decap` writes (this host's addresses, the
//! balancers' prefixes, the VIPs and which filters are in use) and reads back (the same,
//! and the counters summed over CPUs).

use std::collections::BTreeSet;
use std::net::IpAddr;

use anyhow::{Context, Result, anyhow};
use aya::maps::lpm_trie::Key;
use aya::maps::{Array, HashMap, LpmTrie, Map, MapData, PerCpuArray};
use lb_common::AddrKey;
use lb_common::decap::{
    DECAP_COUNT, DECAP_COUNTERS, DECAP_F_SOURCES, DECAP_F_VIPS, DecapConfig, SourceKey, names,
};

use super::prefix::Prefix;

/// Every map the object declares, in the order they are pinned.
pub const MAP_NAMES: [&str; 5] = [
    names::LOCAL,
    names::SOURCES,
    names::VIPS,
    names::CONFIG,
    names::STATS,
];

/// What the maps should hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// This host's addresses (outer destinations taken).
    pub local: Vec<IpAddr>,
    /// Balancer prefixes outer sources must be in; empty: any source.
    pub sources: Vec<Prefix>,
    /// VIPs inner destinations must be; empty: any.
    pub vips: Vec<IpAddr>,
    /// The UDP port of GUE tunnel packets; `None`: GUE is not taken.
    pub gue_port: Option<u16>,
}

/// What the maps hold now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The maps' settings (sources and VIPs empty when their filter is off).
    pub settings: Settings,
    /// Each counter's name and value summed over CPUs, in the order the program decides.
    pub counters: Vec<(&'static str, u64)>,
}

impl Snapshot {
    /// The value of the counter named `name` (0 when there is none).
    pub fn counter(&self, name: &str) -> u64 {
        self.counters
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v)
    }
}

/// The agent's maps, opened from a loaded object or from their pins.
pub struct DecapMaps {
    local: HashMap<MapData, AddrKey, u8>,
    sources: LpmTrie<MapData, SourceKey, u32>,
    vips: HashMap<MapData, AddrKey, u8>,
    config: Array<MapData, DecapConfig>,
    stats: PerCpuArray<MapData, u64>,
}

fn addr_key(ip: IpAddr) -> AddrKey {
    let (addr, family) = lb_common::Addr::from_ip(ip);
    AddrKey {
        addr,
        family,
        pad: [0; 3],
    }
}

/// Writes `want` into a hash map of addresses and removes what is not in it.
fn sync_addrs(map: &mut HashMap<MapData, AddrKey, u8>, want: &[IpAddr], what: &str) -> Result<()> {
    let want: BTreeSet<(u8, [u8; 16])> = want
        .iter()
        .map(|ip| {
            let k = addr_key(*ip);
            (k.family, k.addr.octets)
        })
        .collect();
    for (family, octets) in &want {
        let key = AddrKey {
            addr: lb_common::Addr { octets: *octets },
            family: *family,
            pad: [0; 3],
        };
        map.insert(key, 1, 0)
            .with_context(|| format!("writing {what}"))?;
    }
    let stale: Vec<AddrKey> = map
        .keys()
        .filter_map(|k| k.ok())
        .filter(|k| !want.contains(&(k.family, k.addr.octets)))
        .collect();
    for key in stale {
        map.remove(&key)
            .with_context(|| format!("removing a stale entry of {what}"))?;
    }
    Ok(())
}

fn addrs_of(map: &HashMap<MapData, AddrKey, u8>) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = map
        .keys()
        .filter_map(|k| k.ok())
        .map(|k| k.addr.to_ip(k.family))
        .collect();
    out.sort();
    out
}

impl DecapMaps {
    /// Typed handles of `maps`, given in the order of [`MAP_NAMES`].
    pub fn new(maps: Vec<Map>) -> Result<DecapMaps> {
        let mut it = maps.into_iter();
        let mut next = |name: &str| it.next().ok_or_else(|| anyhow!("map {name} is missing"));
        Ok(DecapMaps {
            local: HashMap::try_from(next(names::LOCAL)?).context(names::LOCAL)?,
            sources: LpmTrie::try_from(next(names::SOURCES)?).context(names::SOURCES)?,
            vips: HashMap::try_from(next(names::VIPS)?).context(names::VIPS)?,
            config: Array::try_from(next(names::CONFIG)?).context(names::CONFIG)?,
            stats: PerCpuArray::try_from(next(names::STATS)?).context(names::STATS)?,
        })
    }

    /// Makes the maps hold `s`, in an order that never filters more or less than either
    /// the old or the new settings would: new entries first, then the flags, then the
    /// stale entries go (a filter switched off is off before its entries are removed).
    pub fn write(&mut self, s: &Settings) -> Result<()> {
        sync_addrs(&mut self.local, &s.local, names::LOCAL)?;
        for p in &s.sources {
            let (len, data) = p.key();
            self.sources
                .insert(&Key::new(len, data), 1, 0)
                .with_context(|| format!("writing {p} into {}", names::SOURCES))?;
        }
        for vip in &s.vips {
            self.vips
                .insert(addr_key(*vip), 1, 0)
                .with_context(|| format!("writing {vip} into {}", names::VIPS))?;
        }
        let mut flags = 0;
        if !s.sources.is_empty() {
            flags |= DECAP_F_SOURCES;
        }
        if !s.vips.is_empty() {
            flags |= DECAP_F_VIPS;
        }
        self.config
            .set(
                0,
                DecapConfig {
                    flags,
                    gue_port: s.gue_port.unwrap_or(0).to_be(),
                    pad: 0,
                },
                0,
            )
            .with_context(|| format!("writing {}", names::CONFIG))?;
        let stale: Vec<Key<SourceKey>> = self
            .sources
            .keys()
            .filter_map(|k| k.ok())
            .filter(|k| {
                !s.sources
                    .contains(&Prefix::from_key(k.prefix_len(), &k.data()))
            })
            .collect();
        for key in stale {
            self.sources
                .remove(&key)
                .with_context(|| format!("removing a stale entry of {}", names::SOURCES))?;
        }
        sync_addrs(&mut self.vips, &s.vips, names::VIPS)
    }

    /// What the maps hold, and the counters.
    pub fn read(&self) -> Result<Snapshot> {
        let config = self
            .config
            .get(&0, 0)
            .with_context(|| format!("reading {}", names::CONFIG))?;
        let flags = config.flags;
        let mut sources: Vec<Prefix> = if flags & DECAP_F_SOURCES != 0 {
            self.sources
                .keys()
                .filter_map(|k| k.ok())
                .map(|k| Prefix::from_key(k.prefix_len(), &k.data()))
                .collect()
        } else {
            Vec::new()
        };
        sources.sort_by_key(|p| (p.addr, p.len));
        let vips = if flags & DECAP_F_VIPS != 0 {
            addrs_of(&self.vips)
        } else {
            Vec::new()
        };
        let mut counters = Vec::with_capacity(DECAP_COUNT as usize);
        for (index, name) in DECAP_COUNTERS {
            let values = self
                .stats
                .get(&index, 0)
                .with_context(|| format!("reading {} [{name}]", names::STATS))?;
            counters.push((name, values.iter().sum()));
        }
        Ok(Snapshot {
            settings: Settings {
                local: addrs_of(&self.local),
                sources,
                vips,
                gue_port: Some(u16::from_be(config.gue_port)).filter(|p| *p != 0),
            },
            counters,
        })
    }
}
