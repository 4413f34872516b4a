//! DNS check (S-HC2): a UDP query that must be answered. Any well-formed reply carrying our
//! query id counts, whatever its rcode: the server answered. A garbled reply is a failure.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::time::{Instant, timeout_at};

use crate::config::DnsCheck;

use super::probe::{BoxFuture, Probe, ProbeResult};
use super::tcp::describe_io;

/// Size of the DNS header.
const HEADER: usize = 12;
/// Largest reply read (EDNS replies can exceed 512 bytes).
const MAX_REPLY: usize = 4096;

/// Queries one DNS server.
#[derive(Clone, Debug)]
pub struct DnsProbe {
    addr: SocketAddr,
    /// Socket mark (0: none).
    mark: u32,
    check: DnsCheck,
    timeout: Duration,
}

impl DnsProbe {
    /// A probe for the server at `addr` (port 0 means 53), bounded by `timeout`.
    pub fn new(addr: SocketAddr, check: DnsCheck, timeout: Duration) -> Self {
        let port = if addr.port() == 0 { 53 } else { addr.port() };
        Self {
            addr: SocketAddr::new(addr.ip(), port),
            mark: 0,
            check,
            timeout,
        }
    }

    /// The same probe with its datagrams marked `mark` (a check through a tunnel, S-TN4).
    pub fn with_mark(mut self, mark: u32) -> Self {
        self.mark = mark;
        self
    }

    async fn run(&self) -> ProbeResult {
        let start = Instant::now();
        let id: u16 = rand::random();
        let outcome = match build_query(id, &self.check.query_name, self.check.query_type) {
            Ok(query) => self.ask(&query, id, start + self.timeout).await,
            Err(reason) => Err(reason),
        };
        match outcome {
            Ok(reason) => ProbeResult::success(reason, start.elapsed()),
            Err(reason) => ProbeResult::failure(reason, start.elapsed()),
        }
    }

    async fn ask(&self, query: &[u8], id: u16, deadline: Instant) -> Result<String, String> {
        let local: SocketAddr = match self.addr.ip() {
            IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let socket = UdpSocket::bind(local)
            .await
            .map_err(|e| describe_io("bind", &e))?;
        if self.mark != 0 {
            socket2::SockRef::from(&socket)
                .set_mark(self.mark)
                .map_err(|e| describe_io("mark", &e))?;
        }
        // Connecting makes the kernel drop datagrams from other sources and report ICMP
        // port unreachable as ECONNREFUSED.
        socket
            .connect(self.addr)
            .await
            .map_err(|e| describe_io("connect", &e))?;
        socket
            .send(query)
            .await
            .map_err(|e| describe_io("send query", &e))?;
        let mut buf = vec![0u8; MAX_REPLY];
        let mut ignored = 0u32;
        loop {
            let n = match timeout_at(deadline, socket.recv(&mut buf)).await {
                Ok(Ok(n)) => n,
                Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    return Err("port unreachable (ICMP)".to_string());
                }
                Ok(Err(e)) => return Err(describe_io("receive", &e)),
                Err(_) if ignored > 0 => {
                    return Err(format!(
                        "no reply with our id before the timeout ({ignored} other replies ignored)"
                    ));
                }
                Err(_) => return Err("no reply before the timeout".to_string()),
            };
            match judge_reply(&buf[..n], id, &self.check) {
                Reply::Answered(reason) => return Ok(reason),
                Reply::OtherId => ignored += 1,
                Reply::Garbled(reason) => return Err(reason),
            }
        }
    }
}

impl Probe for DnsProbe {
    fn check(&self) -> BoxFuture<'_, ProbeResult> {
        Box::pin(self.run())
    }
}

/// What a received datagram means for the check.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// A well-formed reply to our query.
    Answered(String),
    /// A reply to some other query (a late one from an earlier check): wait on.
    OtherId,
    /// Our id, but not a usable reply.
    Garbled(String),
}

/// Builds a standard query with recursion desired and one question of class IN.
pub(crate) fn build_query(id: u16, name: &str, qtype: u16) -> Result<Vec<u8>, String> {
    let mut packet = Vec::with_capacity(HEADER + name.len() + 6);
    packet.extend_from_slice(&id.to_be_bytes());
    packet.extend_from_slice(&0x0100u16.to_be_bytes()); // RD
    packet.extend_from_slice(&1u16.to_be_bytes()); // QDCOUNT
    packet.extend_from_slice(&[0; 6]); // ANCOUNT, NSCOUNT, ARCOUNT
    encode_name(name, &mut packet)?;
    packet.extend_from_slice(&qtype.to_be_bytes());
    packet.extend_from_slice(&1u16.to_be_bytes()); // class IN
    Ok(packet)
}

fn encode_name(name: &str, out: &mut Vec<u8>) -> Result<(), String> {
    let trimmed = name.strip_suffix('.').unwrap_or(name);
    let start = out.len();
    if !trimmed.is_empty() {
        for label in trimmed.split('.') {
            if label.is_empty() || label.len() > 63 {
                return Err(format!("invalid query name {name:?}: bad label length"));
            }
            out.push(label.len() as u8);
            out.extend_from_slice(label.as_bytes());
        }
    }
    out.push(0);
    if out.len() - start > 255 {
        return Err(format!(
            "invalid query name {name:?}: longer than 255 bytes"
        ));
    }
    Ok(())
}

/// Decides what a datagram is: our answer, someone else's, or garbage.
pub(crate) fn judge_reply(packet: &[u8], id: u16, check: &DnsCheck) -> Reply {
    if packet.len() < HEADER {
        return Reply::Garbled(format!("truncated reply ({} bytes)", packet.len()));
    }
    let field = |i: usize| u16::from_be_bytes([packet[i], packet[i + 1]]);
    if field(0) != id {
        return Reply::OtherId;
    }
    let flags = field(2);
    if flags & 0x8000 == 0 {
        return Reply::Garbled("reply without the QR bit".to_string());
    }
    let qdcount = field(4);
    let ancount = field(6);
    if qdcount > 0 {
        let mut expected = Vec::new();
        if build_question(&mut expected, check).is_err() {
            return Reply::Garbled("query name cannot be encoded".to_string());
        }
        let question = &packet[HEADER..];
        let matches = question.len() >= expected.len()
            && question[..expected.len()].eq_ignore_ascii_case(&expected);
        if !matches {
            return Reply::Garbled("reply question does not match the query".to_string());
        }
    }
    let rcode = flags & 0x000f;
    let truncated = if flags & 0x0200 != 0 {
        ", truncated (TC)"
    } else {
        ""
    };
    Reply::Answered(format!(
        "answered, rcode {}, {ancount} answers{truncated}",
        rcode_name(rcode)
    ))
}

fn build_question(out: &mut Vec<u8>, check: &DnsCheck) -> Result<(), String> {
    encode_name(&check.query_name, out)?;
    out.extend_from_slice(&check.query_type.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    Ok(())
}

fn rcode_name(rcode: u16) -> String {
    match rcode {
        0 => "NOERROR".to_string(),
        1 => "FORMERR".to_string(),
        2 => "SERVFAIL".to_string(),
        3 => "NXDOMAIN".to_string(),
        4 => "NOTIMP".to_string(),
        5 => "REFUSED".to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check() -> DnsCheck {
        DnsCheck {
            query_name: "example.org.".into(),
            query_type: 1,
        }
    }

    #[test]
    fn s_hc2_query_packet_layout() {
        let q = build_query(0xbeef, "example.org", 28).unwrap();
        assert_eq!(&q[..4], &[0xbe, 0xef, 0x01, 0x00]);
        assert_eq!(&q[4..6], &[0, 1]);
        assert_eq!(&q[12..25], b"\x07example\x03org\x00");
        assert_eq!(&q[25..], &[0, 28, 0, 1]);
        assert!(build_query(1, "a..b", 1).is_err());
        assert!(build_query(1, &"x".repeat(64), 1).is_err());
    }

    #[test]
    fn s_hc2_any_rcode_with_our_id_is_an_answer() {
        let mut reply = build_query(7, "example.org", 1).unwrap();
        reply[2] |= 0x80; // QR
        reply[3] |= 3; // NXDOMAIN
        match judge_reply(&reply, 7, &check()) {
            Reply::Answered(reason) => assert!(reason.contains("NXDOMAIN")),
            other => panic!("expected an answer, got {other:?}"),
        }
        assert_eq!(judge_reply(&reply, 8, &check()), Reply::OtherId);
    }

    #[test]
    fn s_hc2_garbled_replies_fail_with_reason() {
        let query = build_query(7, "example.org", 1).unwrap();
        assert!(matches!(
            judge_reply(&query[..5], 7, &check()),
            Reply::Garbled(_)
        ));
        assert!(matches!(judge_reply(&query, 7, &check()), Reply::Garbled(r) if r.contains("QR")));
        let mut wrong_question = build_query(7, "example.com", 1).unwrap();
        wrong_question[2] |= 0x80;
        assert!(matches!(
            judge_reply(&wrong_question, 7, &check()),
            Reply::Garbled(_)
        ));
    }
}
