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
mod history;
mod live;
mod metrics;
mod node;
mod node_cli;
mod read;
mod serve;
mod sessions;
mod stats_csv;
pub mod status;
pub mod table;
pub(crate) mod tls;
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
use tracing::{info, warn};

/// Kept here for callers of the API's write-back (it moved to the configuration module).
pub use crate::config::write_back;
pub use auth::constant_time_eq;
pub use error::ApiError;
pub use serve::{LocalSocket, bind_socket};

use crate::cluster::Cluster;
use crate::config::ApiSettings;
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
    /// The last minutes of rates, sampled every second, for a Live Stats page just opened.
    pub history: Arc<history::History>,
}

/// The router alone: every route, behind the token check when `token` is set; `cluster`
/// is this node's side of the shared configuration ([`Cluster::start`]).
pub fn router(daemon: Arc<Daemon>, cluster: Arc<Cluster>, token: Option<String>) -> Router {
    routes(state(daemon, cluster), token)
}

/// The state every handler shares. Inside a tokio runtime it starts sampling the rates Live
/// Stats shows, once a second for as long as the state lives, so that a page opened later
/// starts with the last minutes.
fn state(daemon: Arc<Daemon>, cluster: Arc<Cluster>) -> ApiState {
    ApiState {
        history: history::start(&daemon),
        daemon,
        cluster,
        pushes: Arc::default(),
    }
}

/// Every route on `state`, behind the token check when `token` is set. The TCP listener and
/// the Unix socket share one state (the last push to each peer, the rates of the last
/// minutes) and differ only in the token.
fn routes(state: ApiState, token: Option<String>) -> Router {
    metrics::start_time();
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
/// non-loopback address without a token, and without TLS unless `api.insecure_plaintext`:
/// the API changes the configuration.
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

/// [`serve_on`] with this node's side of the shared configuration started by the caller;
/// stops it at the end. Makes `[api] socket` too, when configured.
pub async fn serve_with(
    daemon: Arc<Daemon>,
    cluster: Arc<Cluster>,
    listener: TcpListener,
    token: Option<String>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let socket = match &daemon.config().api.socket {
        Some(socket) => Some(bind_socket(socket)?),
        None => None,
    };
    serve_all(daemon, cluster, listener, socket, token, stop).await
}

/// How `lb run` serves its API: makes `[api] socket` (so that a socket it cannot make stops
/// the start, as a TCP listener it cannot bind does), then serves both in a task until
/// `stop` turns true, stopping `cluster` at the end. A failure while serving is logged.
pub fn spawn(
    daemon: Arc<Daemon>,
    cluster: Arc<Cluster>,
    listener: TcpListener,
    settings: ApiSettings,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let socket = match &settings.socket {
        Some(socket) => Some(bind_socket(socket)?),
        None => None,
    };
    Ok(tokio::spawn(async move {
        let serving = serve_all(daemon, cluster, listener, socket, settings.token, stop);
        if let Err(e) = serving.await {
            warn!("the API stopped: {e:#}");
        }
    }))
}

/// Serves the TCP listener (plain or TLS, as the running configuration says) and the Unix
/// socket if any, until `stop` turns true; then stops `cluster`.
async fn serve_all(
    daemon: Arc<Daemon>,
    cluster: Arc<Cluster>,
    listener: TcpListener,
    mut socket: Option<LocalSocket>,
    token: Option<String>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let served = serve_both(&daemon, &cluster, listener, socket.as_mut(), token, stop).await;
    cluster.stop().await;
    drop(socket);
    served
}

async fn serve_both(
    daemon: &Arc<Daemon>,
    cluster: &Arc<Cluster>,
    listener: TcpListener,
    socket: Option<&mut LocalSocket>,
    token: Option<String>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let listen = listener
        .local_addr()
        .context("the API listener's address")?;
    let config = daemon.config();
    let api = &config.api;
    if !listen.ip().is_loopback() && api.tls.is_none() {
        if !api.insecure_plaintext {
            bail!(
                "refusing to serve the API in plain HTTP on non-loopback {listen}: set api.cert \
                 and api.key, or api.insecure_plaintext = true"
            );
        }
        warn!(
            %listen,
            "the API is served in plain HTTP off loopback (api.insecure_plaintext = true): its \
             token and every pushed configuration can be read on the network; set api.cert and \
             api.key"
        );
    }
    let tls = Arc::new(tls::ServerTls::new(daemon.clone()).context("the API's TLS files")?);
    info!(
        %listen,
        auth = token.is_some(),
        tls = tls.is_on(),
        client_certificates = api.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
        "API, Live Stats and /metrics listening"
    );
    let state = state(daemon.clone(), cluster.clone());
    let tcp = axum::serve(
        serve::TcpApiListener::new(listener, tls),
        routes(state.clone(), token),
    )
    .with_graceful_shutdown(stopped(stop.clone()));
    let local = socket.and_then(|socket| {
        info!(path = %socket.path().display(), "API listening on its Unix socket (no token asked)");
        let listener = socket.take()?;
        Some(axum::serve(listener, routes(state, None)).with_graceful_shutdown(stopped(stop)))
    });
    let (tcp, local) = match local {
        Some(local) => tokio::join!(tcp.into_future(), local.into_future()),
        None => (tcp.await, Ok(())),
    };
    tcp.context("serving the API")?;
    local.context("serving the API's Unix socket")
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        if stop.changed().await.is_err() {
            break;
        }
    }
}
