//! The hostile clients the fault schedule lets loose for a while: slowloris (connections
//! that trickle a request head one byte a second) and malformed requests (bad request
//! lines, over-long heads, a bad chunked body, bytes that are not HTTP). What matters is
//! that the other clients do not notice; the tally says how the balancer answered these.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How the balancer treated the hostile clients.
#[derive(Default)]
pub struct AbuseTally {
    /// Slowloris connections opened.
    pub slow_opened: AtomicU64,
    /// Slowloris connections the balancer closed before the fault ended.
    pub slow_closed: AtomicU64,
    /// Malformed requests sent.
    pub bad_sent: AtomicU64,
    /// Answered 4xx.
    pub bad_4xx: AtomicU64,
    /// Closed without an answer.
    pub bad_closed: AtomicU64,
    /// Answered anything else (a 2xx to a malformed request would be a finding).
    pub bad_other: AtomicU64,
}

/// `n` slowloris connections to `addr`, each sending one byte of a never-ending head per
/// second for `hold`.
pub async fn slowloris(addr: SocketAddr, n: usize, hold: Duration, tally: Arc<AbuseTally>) {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let tally = tally.clone();
        tasks.push(tokio::spawn(async move {
            let Ok(Ok(mut c)) =
                tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)).await
            else {
                return;
            };
            tally.slow_opened.fetch_add(1, Ordering::Relaxed);
            let _ = c
                .write_all(b"GET / HTTP/1.1\r\nHost: soak\r\nX-Slow: ")
                .await;
            let end = tokio::time::Instant::now() + hold;
            while tokio::time::Instant::now() < end {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if c.write_all(b"a").await.is_err() {
                    tally.slow_closed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Requests no server should accept.
const BAD: &[&[u8]] = &[
    b"GARBAGE\r\n\r\n",
    b"GET /\x00 HTTP/1.1\r\nHost: soak\r\n\r\n",
    b"GET / HTTP/9.9\r\nHost: soak\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: soak\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello",
    b"POST / HTTP/1.1\r\nHost: soak\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nhello\r\n0\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost soak\r\n\r\n",
];

/// Malformed HTTP to `web` (and a 64 KiB header) and random bytes to `tcp`, for `hold`.
pub async fn malformed(web: SocketAddr, tcp: SocketAddr, hold: Duration, tally: Arc<AbuseTally>) {
    let end = tokio::time::Instant::now() + hold;
    let mut i = 0usize;
    let long = {
        let mut v = b"GET / HTTP/1.1\r\nHost: soak\r\nX-Long: ".to_vec();
        v.extend(std::iter::repeat_n(b'x', 64 * 1024));
        v.extend_from_slice(b"\r\n\r\n");
        v
    };
    while tokio::time::Instant::now() < end {
        let request: &[u8] = if i % (BAD.len() + 1) == BAD.len() {
            &long
        } else {
            BAD[i % (BAD.len() + 1)]
        };
        i += 1;
        tally.bad_sent.fetch_add(1, Ordering::Relaxed);
        let answer = async {
            let mut c = TcpStream::connect(web).await?;
            c.write_all(request).await?;
            let mut got = vec![0u8; 64];
            let n = c.read(&mut got).await?;
            Ok::<_, std::io::Error>(got[..n].to_vec())
        };
        match tokio::time::timeout(Duration::from_secs(3), answer).await {
            Ok(Ok(got)) if got.starts_with(b"HTTP/1.1 4") || got.starts_with(b"HTTP/1.0 4") => {
                tally.bad_4xx.fetch_add(1, Ordering::Relaxed)
            }
            Ok(Ok(got)) if got.is_empty() => tally.bad_closed.fetch_add(1, Ordering::Relaxed),
            Ok(Err(_)) => tally.bad_closed.fetch_add(1, Ordering::Relaxed),
            _ => tally.bad_other.fetch_add(1, Ordering::Relaxed),
        };
        // Random bytes through the L7 TCP vService: the backend answers its name and echoes.
        if let Ok(Ok(mut c)) =
            tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(tcp)).await
        {
            let noise: Vec<u8> = (0..512u32)
                .map(|k| (k.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect();
            let _ = c.write_all(&noise).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
