//! The control plane over HTTP: the REST API, the Live Stats page and Prometheus metrics.
//!
//! Reads come from one snapshot of the running [`Daemon`]; changes (Maintenance, Backup,
//! reload, a peer's configuration) are written to the configuration file first and then
//! reloaded, so they survive restarts (S-MT8), and are published to the cluster: through
//! etcd (S-CL3) or pushed to peers (S-CL1/2).

mod admin;
mod auth;
mod change;
pub mod cli;
pub mod client;
mod cluster;
mod error;
mod live;
mod metrics;
mod node;
mod node_cli;
mod read;
mod sessions;
mod stats_csv;
pub mod status;
pub mod table;
mod ui;
mod view;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, bail};
use axum::Router;
use axum::http::{StatusCode, Uri};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::info;

/// Kept here for callers of the API's write-back (it moved to the configuration module).
pub use crate::config::write_back;
pub use auth::constant_time_eq;
pub use error::ApiError;

use crate::cluster::Cluster;
use crate::daemon::Daemon;

/// Shared by every handler.
#[derive(Clone)]
pub(crate) struct ApiState {
    /// The running daemon.
    pub daemon: Arc<Daemon>,
    /// The shared configuration (etcd) and the edit lock every change holds.
    pub cluster: Arc<Cluster>,
    /// Pushes to `[[cluster.peer]]` (`store = "peers"`).
    pub pushes: Arc<cluster::ClusterState>,
}

/// The router alone: every route, behind the token check when `token` is set; `cluster`
/// is this node's side of the shared configuration ([`Cluster::start`]).
pub fn router(daemon: Arc<Daemon>, cluster: Arc<Cluster>, token: Option<String>) -> Router {
    metrics::start_time();
    let state = ApiState {
        daemon,
        cluster,
        pushes: Arc::default(),
    };
    // The page's static files hold no data, and a browser cannot send a bearer token when it
    // loads a page: they are served without the token; the page sends it on its API calls.
    let page = Router::new()
        .route("/", get(ui::index))
        .route("/ui/app.js", get(ui::app_js))
        .route("/ui/charts.js", get(ui::charts_js))
        .route("/ui/style.css", get(ui::style_css));
    let api = Router::new()
        .route("/metrics", get(metrics::metrics))
        .route("/api/v1/status", get(read::status))
        .route("/api/v1/vservices", get(read::vservices))
        .route("/api/v1/vservices/{name}", get(read::vservice))
        .route("/api/v1/vservices/{name}/table", get(table::table))
        .route("/api/v1/backends", get(read::backends))
        .route("/api/v1/backends/{name}", get(read::backend))
        .route(
            "/api/v1/backends/{name}/transitions",
            get(read::transitions),
        )
        .route(
            "/api/v1/backends/{name}/maintenance",
            post(admin::backend_maintenance),
        )
        .route(
            "/api/v1/backends/{name}/backup",
            post(admin::backend_backup),
        )
        .route(
            "/api/v1/backends/{name}/weight",
            post(admin::backend_weight),
        )
        .route("/api/v1/groups", get(read::groups))
        .route("/api/v1/groups/{name}", get(read::group))
        .route(
            "/api/v1/groups/{name}/maintenance",
            post(admin::group_maintenance),
        )
        .route("/api/v1/groups/{name}/backup", post(admin::group_backup))
        .route("/api/v1/profiles", get(read::profiles))
        .route("/api/v1/gslb", get(read::gslb))
        .route("/api/v1/reload", post(admin::reload_handler))
        .route("/api/v1/stats/live", get(live::live))
        .route("/api/v1/stats.csv", get(stats_csv::stats_csv))
        .route("/api/v1/node", get(node::status))
        .route("/api/v1/node/drain", post(node::drain))
        .route("/api/v1/node/resume", post(node::resume))
        .route("/api/v1/cluster", get(cluster::status))
        .route("/api/v1/cluster/sync", post(cluster::sync))
        .route("/api/v1/cluster/config", post(cluster::receive))
        .merge(sessions::routes())
        .fallback(not_found)
        .with_state(state);
    let token: Option<Arc<str>> = token.map(Arc::from);
    page.merge(api.layer(axum::middleware::from_fn_with_state(
        token,
        auth::require_token,
    )))
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no such resource: {}", uri.path()),
    )
}

/// Serves the API, the Live Stats page and /metrics until `stop` turns true. Refuses a
/// non-loopback address without a token: the API changes the configuration.
pub async fn serve(
    daemon: Arc<Daemon>,
    listen: SocketAddr,
    token: Option<String>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let listener = bind(listen, token.is_some()).await?;
    serve_on(daemon, listener, token, stop).await
}

/// Binds the API's listener, so that `lb run` can refuse to start without its API rather
/// than run unreachable. Refuses a non-loopback address without a token.
pub async fn bind(listen: SocketAddr, has_token: bool) -> anyhow::Result<TcpListener> {
    if !listen.ip().is_loopback() && !has_token {
        bail!("refusing to serve the API on non-loopback {listen} without api.token");
    }
    TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding the API on {listen} (api.listen)"))
}

/// Serves the API on a listener from [`bind`] until `stop` turns true, following the
/// shared configuration (etcd) as long as it serves.
pub async fn serve_on(
    daemon: Arc<Daemon>,
    listener: TcpListener,
    token: Option<String>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let cluster = Cluster::start(daemon.clone());
    serve_with(daemon, cluster, listener, token, stop).await
}

/// [`serve_on`] with this node's side of the shared configuration started by the caller
/// (`lb run`, which also publishes a SIGHUP reload through it); stops it at the end.
pub async fn serve_with(
    daemon: Arc<Daemon>,
    cluster: Arc<Cluster>,
    listener: TcpListener,
    token: Option<String>,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let listen = listener
        .local_addr()
        .context("the API listener's address")?;
    info!(%listen, auth = token.is_some(), "API, Live Stats and /metrics listening");
    let app = router(daemon, cluster.clone(), token);
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            while !*stop.borrow() {
                if stop.changed().await.is_err() {
                    break;
                }
            }
        })
        .await
        .context("serving the API");
    cluster.stop().await;
    served
}
