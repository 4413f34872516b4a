//! The one setting mistake that makes a namespace lab forward nothing, said at start: a veth
//! delivers what XDP sends into it (`XDP_TX`, `XDP_REDIRECT`) only when its peer has GRO on
//! or an XDP program of its own, and a peer with transmit checksum offload on sends frames
//! whose checksums are left for hardware that does not exist, which XDP forwards as they
//! are and the receivers drop. Neither shows anywhere else: the daemon sees every backend
//! healthy (health checks do not go through XDP). A real NIC has neither property.
//!
//! The peer may live in another namespace; it is looked for in the namespaces under
//! `/run/netns` (where `ip netns add` puts them) and the first process's, on threads that
//! enter each in turn, and read over rtnetlink (the link, its XDP program) and the ethtool
//! ioctls (GRO, TX checksumming).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use futures_util::TryStreamExt;
use rtnetlink::packet_route::link::{InfoKind, LinkAttribute, LinkInfo, LinkMessage, LinkXdp};

/// What the kernel says of one link.
struct Link {
    name: String,
    index: u32,
    veth: bool,
    /// The peer's index (in its own namespace).
    peer: Option<u32>,
    /// Set when the peer is in another namespace.
    peer_elsewhere: bool,
    xdp: bool,
}

impl Link {
    fn from_message(m: &LinkMessage) -> Link {
        let mut link = Link {
            name: String::new(),
            index: m.header.index,
            veth: false,
            peer: None,
            peer_elsewhere: false,
            xdp: false,
        };
        for a in &m.attributes {
            match a {
                LinkAttribute::IfName(n) => link.name = n.clone(),
                LinkAttribute::Link(i) => link.peer = Some(*i),
                LinkAttribute::LinkNetNsId(_) => link.peer_elsewhere = true,
                LinkAttribute::LinkInfo(infos) => {
                    link.veth |= infos
                        .iter()
                        .any(|i| matches!(i, LinkInfo::Kind(InfoKind::Veth)));
                }
                LinkAttribute::Xdp(xdp) => {
                    link.xdp |= xdp.iter().any(|x| {
                        matches!(
                            x,
                            LinkXdp::ProgId(id) | LinkXdp::DrvProgId(id) | LinkXdp::SkbProgId(id)
                                if *id != 0
                        )
                    });
                }
                _ => {}
            }
        }
        link
    }
}

/// The link named `name` or numbered `index` in the calling thread's namespace.
fn link(by: Result<&str, u32>) -> Option<Link> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .ok()?;
    rt.block_on(async {
        let (connection, handle, _) = rtnetlink::new_connection().ok()?;
        let task = tokio::spawn(connection);
        let request = handle.link().get();
        let request = match by {
            Ok(name) => request.match_name(name.to_owned()),
            Err(index) => request.match_index(index),
        };
        let found = request.execute().try_next().await.ok().flatten();
        task.abort();
        found.map(|m| Link::from_message(&m))
    })
}

/// `ethtool_value`-shaped ioctls: `ETHTOOL_GTXCSUM`, `ETHTOOL_GGRO`.
const ETHTOOL_GTXCSUM: u32 = 0x16;
const ETHTOOL_GGRO: u32 = 0x2b;

/// One ethtool flag of `name` in the calling thread's namespace.
fn ethtool_flag(name: &str, cmd: u32) -> Option<bool> {
    #[repr(C)]
    struct Value {
        cmd: u32,
        data: u32,
    }
    let mut value = Value { cmd, data: 0 };
    // SAFETY: a zeroed ifreq is valid; the name is copied with its NUL kept.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let bytes = name.as_bytes();
    if bytes.len() >= req.ifr_name.len() {
        return None;
    }
    for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    req.ifr_ifru.ifru_data = (&raw mut value).cast();
    // SAFETY: a datagram socket for the ioctl, closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: SIOCETHTOOL reads req and writes `value`, both alive for the call.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCETHTOOL, &raw mut req) };
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    (rc == 0).then_some(value.data != 0)
}

/// The peer as found: its name, namespace (when another), and what it lacks.
struct Peer {
    name: String,
    namespace: Option<String>,
    tx_checksum: Option<bool>,
    gro: Option<bool>,
    xdp: bool,
}

/// The veth numbered `index` here whose own peer is `of` (in another namespace when
/// `elsewhere`).
fn peer_here(index: u32, of: u32, elsewhere: bool) -> Option<Peer> {
    let l = link(Err(index))?;
    if !l.veth || l.peer != Some(of) || l.peer_elsewhere != elsewhere {
        return None;
    }
    Some(Peer {
        tx_checksum: ethtool_flag(&l.name, ETHTOOL_GTXCSUM),
        gro: ethtool_flag(&l.name, ETHTOOL_GGRO),
        xdp: l.xdp,
        name: l.name,
        namespace: None,
    })
}

/// Looks for the peer (`index` there, pointing back at `of` here) in `ns`, on a thread
/// that enters it.
fn peer_in(ns: PathBuf, index: u32, of: u32) -> Option<Peer> {
    std::thread::spawn(move || {
        let file = File::open(&ns).ok()?;
        // SAFETY: setns on this short-lived thread only, with a namespace file held open.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return None;
        }
        let mut peer = peer_here(index, of, true)?;
        peer.namespace = Some(ns.display().to_string());
        Some(peer)
    })
    .join()
    .ok()
    .flatten()
}

/// The namespaces a lab's peers may be in, this process's own left out (a link there with
/// the peer's index would be another link).
fn namespaces() -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let inode = |p: &PathBuf| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
    let own = inode(&PathBuf::from("/proc/self/ns/net"));
    let mut out: Vec<PathBuf> = std::fs::read_dir("/run/netns")
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    out.sort();
    out.push(PathBuf::from("/proc/1/ns/net"));
    out.retain(|p| inode(p).is_some_and(|i| Some(i) != own));
    out
}

/// What will drop or corrupt the frames XDP forwards through `iface`, one sentence each
/// naming the fix (none for an interface that is not a veth, or whose peer is set right).
pub fn lab_warnings(iface: &str) -> Vec<String> {
    let iface = iface.to_owned();
    // rtnetlink on a thread of its own: the caller may be inside a Tokio runtime.
    let here = {
        let name = iface.clone();
        std::thread::spawn(move || link(Ok(&name)))
            .join()
            .ok()
            .flatten()
    };
    let Some(here) = here else {
        return Vec::new();
    };
    let Some(peer_index) = here.peer.filter(|_| here.veth) else {
        return Vec::new();
    };
    let found = if here.peer_elsewhere {
        namespaces()
            .into_iter()
            .find_map(|ns| peer_in(ns, peer_index, here.index))
    } else {
        let of = here.index;
        std::thread::spawn(move || peer_here(peer_index, of, false))
            .join()
            .ok()
            .flatten()
    };
    let Some(peer) = found else {
        return vec![format!(
            "{iface} is a veth whose peer is in a namespace lb cannot find (not under \
             /run/netns): check its settings by hand, see docs/operations.md (namespace lab)"
        )];
    };
    let where_ = match &peer.namespace {
        Some(ns) => format!("{} in {ns}", peer.name),
        None => peer.name.clone(),
    };
    let run = match &peer.namespace {
        Some(ns) => format!("nsenter --net={ns} ethtool -K {}", peer.name),
        None => format!("ethtool -K {}", peer.name),
    };
    let mut out = Vec::new();
    if peer.tx_checksum == Some(true) {
        out.push(format!(
            "{iface} is a veth whose peer {where_} has TX checksum offload on: the frames it \
             sends carry unfinished checksums, which XDP forwards as they are and the \
             receivers drop; run `{run} tx off`"
        ));
    }
    if peer.gro == Some(false) && !peer.xdp {
        out.push(format!(
            "{iface} is a veth whose peer {where_} has GRO off and no XDP program: every frame \
             the program sends out of {iface} (XDP_TX, XDP_REDIRECT) is dropped by the veth; \
             run `{run} gro on`"
        ));
    }
    out
}
