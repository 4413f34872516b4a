//! The Live Stats page's static files, compiled into the binary so the daemon needs no
//! files beside it.

use axum::http::header;
use axum::response::IntoResponse;

/// `GET /`.
pub(crate) async fn index() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        include_str!("ui/index.html"),
    )
}

/// `GET /ui/app.js`.
pub(crate) async fn app_js() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("ui/app.js"),
    )
}

/// `GET /ui/charts.js`: rates and the hand-written SVG charts.
pub(crate) async fn charts_js() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("ui/charts.js"),
    )
}

/// `GET /ui/style.css`.
pub(crate) async fn style_css() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("ui/style.css"),
    )
}
