//! The sockets of a DNS vService: one task reads the UDP socket, one accepts on the TCP
//! listener. Each message is answered (and counted) by [`Handler::reply`] before the next
//! one is read, so a stop never leaves a message read but unanswered: after the stop signal
//! nothing more is read (an upgrade's successor, which shares the sockets, reads what comes
//! next), and every answer decided is sent before the task ends.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::server::{Handler, Reply, Transport};

/// Largest datagram read; a DNS query over UDP is at most 512 bytes without EDNS and rarely
/// more than 1232 with it. A longer datagram is truncated by the kernel and answered FORMERR.
const MAX_DATAGRAM: usize = 4096;
/// How long one TCP answer may wait for the client to take it.
const TCP_WRITE: Duration = Duration::from_secs(5);

/// Serves `socket` until `stop` turns true: reads a datagram, answers it, reads the next.
/// Stopping takes effect between datagrams only, so the one being answered is sent.
pub async fn udp(socket: UdpSocket, handler: Arc<Handler>, mut stop: watch::Receiver<bool>) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let received = tokio::select! {
            // Checked first: once stopping, no datagram more is taken from the socket.
            biased;
            _ = stopped(&mut stop) => break,
            // Cancel-safe: a recv that loses the race has taken nothing from the socket.
            received = socket.recv_from(&mut buf) => received,
        };
        let (len, src) = match received {
            Ok(got) => got,
            Err(error) => {
                // ICMP errors of earlier answers surface here on some kernels; the socket
                // itself still works.
                tracing::debug!(%error, "dns udp receive");
                continue;
            }
        };
        let Some(datagram) = buf.get(..len) else {
            continue;
        };
        if let Reply::Send { bytes, code } = handler.reply(datagram, src, Transport::Udp) {
            match socket.send_to(&bytes, src).await {
                Ok(_) => handler.shared.counters.sent(code),
                Err(error) => {
                    handler.shared.counters.send_failed();
                    tracing::debug!(%error, source = %src, "dns answer not sent");
                }
            }
        }
    }
}

/// Accepts on `listener` until `stop` turns true, then waits for the open connections, which
/// finish the message they are answering and close.
pub async fn tcp(
    listener: TcpListener,
    handler: Arc<Handler>,
    idle: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            biased;
            _ = stopped(&mut stop) => break,
            accepted = listener.accept() => accepted,
        };
        while connections.try_join_next().is_some() {}
        match accepted {
            Ok((stream, src)) => {
                let (handler, stop) = (handler.clone(), stop.clone());
                connections.spawn(connection(stream, src, handler, idle, stop));
            }
            Err(error) => {
                tracing::debug!(%error, "dns tcp accept");
                // Out of descriptors, say: do not spin on it.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    while connections.join_next().await.is_some() {}
}

/// One DNS-over-TCP connection (RFC 7766): length-prefixed messages, each answered in turn;
/// closed when idle for `idle`, at the client's end, or on stop between messages.
async fn connection(
    mut stream: TcpStream,
    src: SocketAddr,
    handler: Arc<Handler>,
    idle: Duration,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let mut prefix = [0u8; 2];
        let read = tokio::select! {
            biased;
            _ = stopped(&mut stop) => return,
            read = tokio::time::timeout(idle, stream.read_exact(&mut prefix)) => read,
        };
        if !matches!(read, Ok(Ok(_))) {
            return;
        }
        let mut message = vec![0u8; usize::from(u16::from_be_bytes(prefix))];
        let body = tokio::time::timeout(idle, stream.read_exact(&mut message)).await;
        if !matches!(body, Ok(Ok(_))) {
            return;
        }
        let Reply::Send { bytes, code } = handler.reply(&message, src, Transport::Tcp) else {
            continue;
        };
        // Answers are at most u16::MAX bytes (the encoder's limit over TCP).
        let Ok(len) = u16::try_from(bytes.len()) else {
            handler.shared.counters.send_failed();
            return;
        };
        let mut framed = Vec::with_capacity(bytes.len() + 2);
        framed.extend_from_slice(&len.to_be_bytes());
        framed.extend_from_slice(&bytes);
        match tokio::time::timeout(TCP_WRITE, stream.write_all(&framed)).await {
            Ok(Ok(())) => handler.shared.counters.sent(code),
            _ => {
                handler.shared.counters.send_failed();
                return;
            }
        }
    }
}

/// Resolves once `stop` is true (or its sender is gone, which means the same).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}
