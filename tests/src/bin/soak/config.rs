//! The soak's configuration text: one HTTP vService (mains, two backups, a conditional set
//! with its own backup, cookie persistence), one L7 TCP vService and the Network vServices
//! (TCP NAT, UDP NAT, TCP DSR), over backends b1..b5. A variant with changed lists is what
//! the "reload with a changed list" fault loads, and an invalid text is what the SIGHUP
//! fault offers.

use std::net::Ipv4Addr;

use lb_tests::netns::Topology;

/// Where the balancer answers the L7 vServices (its own address on the client side).
pub const L7_ADDR: Ipv4Addr = Ipv4Addr::new(10, 10, 0, 1);
/// The HTTP vService's port.
pub const WEB_PORT: u16 = 80;
/// The L7 TCP vService's port.
pub const TCP_PORT: u16 = 9000;
/// The NAT VIP (TCP on [`NAT_PORT`], UDP on [`UDP_PORT`]).
pub const NAT_VIP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 12);
/// The TCP NAT vService's port (backends listen on it too).
pub const NAT_PORT: u16 = 9100;
/// The UDP NAT vService's port (backends listen on it too).
pub const UDP_PORT: u16 = 5300;
/// The DSR VIP (the backends hold it on `lo`).
pub const DSR_VIP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 13);
/// The DSR vService's port.
pub const DSR_PORT: u16 = 7000;
/// The HTTP vService's client timeout (a slowloris connection must be closed after it).
pub const CLIENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Backends' HTTP port (`/health` answers the check).
pub const HTTP_PORT: u16 = 8080;
/// The API, on loopback of the balancer namespace.
pub const API_PORT: u16 = 9180;
/// Backend namespaces: b1..b3 carry every vService, b4 and b5 only the HTTP backups.
pub const BACKENDS: usize = 5;
/// Backend namespaces that carry the L7 TCP and Network vServices.
pub const STREAM_BACKENDS: usize = 3;

/// What differs between the texts the soak writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The configuration the run starts from and returns to.
    Base,
    /// w2 out of the HTTP Default list and t2 out of the L7 TCP list.
    ChangedLists,
}

/// The configuration text for `variant`.
pub fn text(topo: &Topology, variant: Variant) -> String {
    let mut s = format!(
        "# written by the soak (cargo xtask soak)\n\
         [xdp]\nconn_table_size = 65536\n\n\
         [api]\nlisten = \"127.0.0.1:{API_PORT}\"\n\n\
         [proxy]\nworkers = 2\n\n\
         [[health_check]]\nname = \"web\"\ntype = \"http\"\npath = \"/health\"\n\n\
         [[health_check]]\nname = \"tcp\"\ntype = \"tcp\"\n\n"
    );
    for (i, b) in topo.backends.iter().enumerate() {
        let n = i + 1;
        let addr = b.addr;
        s += &format!(
            "[[backend_service]]\nname = \"w{n}\"\naddress = \"{addr}\"\nport = {HTTP_PORT}\n\
             health_check = \"web\"\nbackup = {}\n\n",
            n > STREAM_BACKENDS
        );
        if n > STREAM_BACKENDS {
            continue;
        }
        s += &format!(
            "[[backend_service]]\nname = \"t{n}\"\naddress = \"{addr}\"\nport = {TCP_PORT}\nhealth_check = \"tcp\"\n\n\
             [[backend_service]]\nname = \"n{n}\"\naddress = \"{addr}\"\nport = {NAT_PORT}\nhealth_check = \"tcp\"\n\n\
             [[backend_service]]\nname = \"u{n}\"\naddress = \"{addr}\"\nport = {UDP_PORT}\n\n\
             [[backend_service]]\nname = \"d{n}\"\naddress = \"{addr}\"\nport = 0\n\n"
        );
    }
    let changed = variant == Variant::ChangedLists;
    let web: &[&str] = if changed {
        &["w1", "w3", "w4", "w5"]
    } else {
        &["w1", "w2", "w3", "w4", "w5"]
    };
    let tcp: &[&str] = if changed {
        &["t1", "t3"]
    } else {
        &["t1", "t2", "t3"]
    };
    s += &format!(
        "[[vservice]]\nname = \"web\"\nkind = \"http\"\naddress = \"{L7_ADDR}\"\nport = {WEB_PORT}\n\
         backends = {}\n\
         [vservice.persistence]\ntype = \"cookie\"\n\
         [vservice.timeouts]\nconnect = 1.0\nserver = 5.0\nclient = {}\n\
         [[vservice.conditional_set]]\nname = \"api\"\npath_prefix = \"/api/\"\nbackends = [\"w2\", \"w3\", \"w5\"]\n\n\
         [[vservice]]\nname = \"tcp\"\nkind = \"l7-tcp\"\naddress = \"{L7_ADDR}\"\nport = {TCP_PORT}\n\
         backends = {}\n[vservice.timeouts]\nconnect = 1.0\n\n\
         [[vservice]]\nname = \"nat\"\nkind = \"tcp-l4\"\naddress = \"{NAT_VIP}\"\nport = {NAT_PORT}\n\
         backends = [\"n1\", \"n2\", \"n3\"]\n\n\
         [[vservice]]\nname = \"udp\"\nkind = \"udp-l4\"\naddress = \"{NAT_VIP}\"\nport = {UDP_PORT}\n\
         backends = [\"u1\", \"u2\", \"u3\"]\n\n\
         [[vservice]]\nname = \"dsr\"\nkind = \"tcp-l4\"\naddress = \"{DSR_VIP}\"\nport = {DSR_PORT}\n\
         forwarding = \"dsr\"\nbackends = [\"d1\", \"d2\", \"d3\"]\n",
        list(web),
        CLIENT_TIMEOUT.as_secs_f64(),
        list(tcp)
    );
    s
}

/// A file `lb run` must refuse on SIGHUP: the base text with a vService naming a Backend
/// Service that does not exist.
pub fn invalid(topo: &Topology) -> String {
    text(topo, Variant::Base)
        + "\n[[vservice]]\nname = \"broken\"\nkind = \"tcp-l4\"\naddress = \"10.99.0.50\"\n\
           port = 80\nbackends = [\"no-such-backend\"]\n"
}

fn list(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    format!("[{}]", quoted.join(", "))
}
