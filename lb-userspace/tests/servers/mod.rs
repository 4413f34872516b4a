//! Small backends the daemon-level tests share: a keep-alive HTTP/1.1 server that answers
//! every request with a fixed status and its name.
#![allow(dead_code)]

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A keep-alive HTTP/1.1 server that answers every request with its name.
pub async fn named_server(name: &'static str) -> (u16, tokio::task::JoinHandle<()>) {
    server(name, "200 OK").await
}

/// A keep-alive HTTP/1.1 server that answers every request with `status` and its name.
pub async fn server(
    name: &'static str,
    status: &'static str,
) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let task = tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let answer = format!(
                            "HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n{name}",
                            name.len()
                        );
                        if conn.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    match conn.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    (port, task)
}
