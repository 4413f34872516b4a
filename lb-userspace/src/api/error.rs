//! The API's error answer: a status code and `{"error": "..."}` naming the problem, so that
//! operators and the CLI can act on it without reading logs.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered to an API client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    /// HTTP status of the answer.
    pub status: StatusCode,
    /// What went wrong, in words an operator can act on.
    pub message: String,
    /// Every configuration issue, when a configuration was rejected.
    pub issues: Vec<String>,
}

impl ApiError {
    /// An error with a status and a message.
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            issues: Vec::new(),
        }
    }

    /// 400: the request itself is wrong.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404: the named thing does not exist.
    pub fn not_found(what: &str, name: &str) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, format!("no {what} named `{name}`"))
    }

    /// 500: the daemon failed to do what was asked.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = if self.issues.is_empty() {
            json!({ "error": self.message })
        } else {
            json!({ "error": self.message, "issues": self.issues })
        };
        (self.status, Json(body)).into_response()
    }
}

/// The result type of every handler.
pub type ApiResult<T> = Result<T, ApiError>;
