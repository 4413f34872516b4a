//! Bearer-token authentication: when a token is configured, every request must carry
//! `Authorization: Bearer <token>`; the comparison takes the same time wherever the first
//! difference is, so the token cannot be guessed byte by byte from timings.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::warn;

use super::error::ApiError;

/// Compares two byte strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    let n = a.len().max(b.len());
    for i in 0..n {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// Middleware: lets the request through when no token is configured or the right one is
/// presented; answers 401 JSON and logs a warning otherwise.
pub(crate) async fn require_token(
    State(token): State<Option<Arc<str>>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = token else {
        return next.run(request).await;
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        Some(p) if constant_time_eq(p.trim().as_bytes(), token.as_bytes()) => {
            next.run(request).await
        }
        other => {
            let why = if other.is_some() {
                "wrong token"
            } else {
                "missing bearer token"
            };
            warn!(method = %request.method(), path = %request.uri().path(), "API request refused: {why}");
            let mut resp = ApiError::new(
                StatusCode::UNAUTHORIZED,
                format!("{why}: send `Authorization: Bearer <api.token>`"),
            )
            .into_response();
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            resp
        }
    }
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn compares_whole_strings() {
        assert!(constant_time_eq(b"0123456789abcdef", b"0123456789abcdef"));
        assert!(!constant_time_eq(b"0123456789abcdef", b"0123456789abcdeg"));
        assert!(!constant_time_eq(b"0123456789abcdef", b"0123456789abcde"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }
}
