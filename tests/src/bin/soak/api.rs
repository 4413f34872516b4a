//! A minimal HTTP/1.1 client for the daemon's REST API (one request per connection), run on
//! the balancer namespace's runtime: what the fault schedule calls and the list watcher polls.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::config::API_PORT;

/// Longest an API call may take.
pub const API_TIMEOUT: Duration = Duration::from_secs(20);

/// Sends `method path` with an optional JSON body; Ok((status, body as JSON or text)).
pub async fn call(method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Value)> {
    tokio::time::timeout(API_TIMEOUT, call_inner(method, path, body))
        .await
        .with_context(|| format!("{method} {path}: no answer within {API_TIMEOUT:?}"))?
}

async fn call_inner(method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Value)> {
    let mut conn = TcpStream::connect(("127.0.0.1", API_PORT))
        .await
        .with_context(|| format!("{method} {path}: connecting to the API"))?;
    let payload = body.map(Value::to_string).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{payload}",
        payload.len()
    );
    conn.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).await?;
    let text = String::from_utf8_lossy(&answer);
    let Some((head, rest)) = text.split_once("\r\n\r\n") else {
        bail!("{method} {path}: the API answered without a header end");
    };
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("{method} {path}: no status in {head:?}"))?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    let value = serde_json::from_str(&body).unwrap_or(Value::String(body));
    Ok((status, value))
}

/// The body of a chunked answer.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

/// `call` that fails unless the answer is 2xx.
pub async fn ok(method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
    let (status, value) = call(method, path, body).await?;
    if !(200..300).contains(&status) {
        bail!("{method} {path}: HTTP {status}: {value}");
    }
    Ok(value)
}
