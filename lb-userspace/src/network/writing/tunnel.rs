//! What tunnel forwarding needs beside the VIPs (S-TN1, S-TN4): the outer source prefixes
//! (`TUNNEL_SOURCES`), and the tc egress program that sends the health checks of servers
//! behind a tunnel through that tunnel, with its `HEALTH_TUNNELS` map.
//!
//! The tc program comes in the XDP object and shares its maps; it is pinned beside the XDP
//! program (`health/prog`) and attached, as a TCX link pinned under `health/links/IFACE`, to
//! the egress of every interface the XDP program is attached to: the checks leave through
//! them. It stays attached as long as the XDP program does. The map holds, for each socket
//! mark the health engine uses ([`crate::config::TunnelCheck::mark`]), the outer header:
//! from the configured source prefix to the server's own address.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use aya::Ebpf;
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::{SchedClassifier, TcAttachType};
use lb_common::{Addr, FAMILY_V4, FAMILY_V6, HealthTunnel, TunnelSource, names};

use crate::config::Config;
use crate::network::loading::loader::DataPath;

/// Where the program is pinned.
pub(in crate::network) fn prog_pin(dir: &Path) -> PathBuf {
    dir.join("health").join("prog")
}

fn link_pin(dir: &Path, iface: &str) -> PathBuf {
    dir.join("health").join("links").join(iface)
}

/// Loads (verifies) the program of a freshly loaded object and pins it under `dir`.
/// Returns the instructions the verifier processed.
pub(in crate::network) fn load(ebpf: &mut Ebpf, dir: Option<&Path>) -> Result<u32> {
    let prog: &mut SchedClassifier = ebpf
        .program_mut(names::HEALTH_TUNNEL_PROGRAM)
        .ok_or_else(|| {
            anyhow!(
                "the XDP object has no program {}",
                names::HEALTH_TUNNEL_PROGRAM
            )
        })?
        .try_into()?;
    prog.load()
        .context("verifying the tc program for health checks through tunnels")?;
    let verified = prog
        .info()
        .ok()
        .and_then(|i| i.verified_instruction_count())
        .unwrap_or(0);
    if let Some(dir) = dir {
        let path = prog_pin(dir);
        fs::create_dir_all(dir.join("health").join("links"))?;
        let _ = fs::remove_file(&path);
        prog.pin(&path)
            .with_context(|| format!("pinning the tc program at {}", path.display()))?;
    }
    Ok(verified)
}

/// Attaches the pinned program to the egress of `iface` and pins the link; an interface
/// that has the link already is left as it is.
pub(in crate::network) fn attach(dir: &Path, iface: &str) -> Result<()> {
    let path = link_pin(dir, iface);
    if path.exists() {
        return Ok(());
    }
    let mut prog = SchedClassifier::from_pin(prog_pin(dir))
        .with_context(|| format!("opening the tc program pinned in {}", dir.display()))?;
    let id = prog
        .attach(iface, TcAttachType::Egress)
        .with_context(|| format!("attaching the health checks' tc program to {iface} egress"))?;
    let link = prog.take_link(id)?;
    let fd_link: FdLink = link.try_into().map_err(|e| {
        anyhow!("the kernel attached the tc program to {iface} without a bpf_link ({e})")
    })?;
    fs::create_dir_all(dir.join("health").join("links"))?;
    fd_link
        .pin(&path)
        .with_context(|| format!("pinning the tc link of {iface}"))?;
    Ok(())
}

/// Detaches the program from `iface`, if it is attached there.
pub(in crate::network) fn detach(dir: &Path, iface: &str) -> Result<()> {
    let path = link_pin(dir, iface);
    if !path.exists() {
        return Ok(());
    }
    let link = PinnedLink::from_pin(&path)
        .with_context(|| format!("opening the tc link pinned at {}", path.display()))?;
    let fd = link.unpin().context("removing the tc link pin")?;
    aya::programs::links::Link::detach(fd).context("detaching the tc link")?;
    Ok(())
}

/// The `HEALTH_TUNNELS` entries `cfg` asks for: one per address of every server whose
/// checks travel a tunnel, the outer source taken from the family's prefix with the mark
/// as the hash (any address of the prefix would do; the agent accepts the whole prefix).
pub fn entries(cfg: &Config) -> HashMap<u32, HealthTunnel> {
    let sources = [
        (FAMILY_V4, cfg.xdp.tunnel_source_v4.map(ipnet::IpNet::V4)),
        (FAMILY_V6, cfg.xdp.tunnel_source_v6.map(ipnet::IpNet::V6)),
    ];
    let mut out = HashMap::new();
    for service in &cfg.backend_services {
        let Some(check) = &service.tunnel_check else {
            continue;
        };
        for (_, address) in service.health_targets() {
            if check.vip(address).is_none() {
                continue;
            }
            let family = if address.is_ipv4() {
                FAMILY_V4
            } else {
                FAMILY_V6
            };
            let Some((_, Some(prefix))) = sources.iter().find(|(f, _)| *f == family) else {
                continue;
            };
            let mark = check.mark(address);
            let source = source_of(*prefix, cfg.xdp.gue_port);
            let words = if family == FAMILY_V4 { 1 } else { 4 };
            let gue = check.gue(address);
            out.insert(
                mark,
                HealthTunnel {
                    src: Addr::from_words(&source.outer_source(words, mark)),
                    dst: Addr::from_ip(address).0,
                    family,
                    gue: u8::from(gue),
                    gue_port: if gue { source.gue_port } else { 0 },
                },
            );
        }
    }
    out
}

/// The `TUNNEL_SOURCES` entry of a configured prefix, GUE packets going to `gue_port`.
fn source_of(net: ipnet::IpNet, gue_port: u16) -> TunnelSource {
    TunnelSource {
        addr: Addr::from_ip(net.network()).0,
        host_mask: Addr::from_ip(net.hostmask()).0,
        set: 1,
        gue_port: gue_port.to_be(),
        pad: 0,
    }
}

impl DataPath {
    /// Writes what `cfg`'s tunnel forwarding needs: the outer source prefixes and the
    /// outer headers of the health checks that travel a tunnel.
    pub fn set_tunnels(&mut self, cfg: &Config) -> Result<()> {
        self.set_tunnel_sources(&cfg.xdp)?;
        self.set_health_tunnels(&entries(cfg))
    }

    /// Writes the outer source prefixes of tunnel forwarding (`[xdp] tunnel_source_v4`,
    /// `tunnel_source_v6`); a family without one cannot be tunnelled (its packets are
    /// dropped and counted, which the configuration's checks prevent).
    fn set_tunnel_sources(&mut self, xdp: &crate::config::XdpSettings) -> Result<()> {
        let v4 = xdp.tunnel_source_v4.map(ipnet::IpNet::V4);
        let v6 = xdp.tunnel_source_v6.map(ipnet::IpNet::V6);
        for (index, net) in [
            (lb_common::TUNNEL_SOURCE_V4, v4),
            (lb_common::TUNNEL_SOURCE_V6, v6),
        ] {
            let source = net.map_or_else(TunnelSource::default, |net| source_of(net, xdp.gue_port));
            if self.maps.tunnel_sources.get(&index, 0).ok() != Some(source) {
                self.maps
                    .tunnel_sources
                    .set(index, source, 0)
                    .context("writing TUNNEL_SOURCES")?;
            }
        }
        Ok(())
    }

    /// Makes `HEALTH_TUNNELS` hold exactly `wanted`.
    fn set_health_tunnels(&mut self, wanted: &HashMap<u32, HealthTunnel>) -> Result<()> {
        let map = &mut self.maps.health_tunnels;
        let stale: Vec<u32> = map
            .keys()
            .filter_map(|k| k.ok())
            .filter(|k| !wanted.contains_key(k))
            .collect();
        for mark in stale {
            map.remove(&mark).context("removing from HEALTH_TUNNELS")?;
        }
        for (mark, tunnel) in wanted {
            if map.get(mark, 0).ok().as_ref() != Some(tunnel) {
                map.insert(mark, tunnel, 0)
                    .context("writing HEALTH_TUNNELS")?;
            }
        }
        Ok(())
    }
}
