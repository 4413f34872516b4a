//! A Network vService's Maglev table as the kernel holds it, one backend per entry, with its
//! digest: `lb table` reads it from the pins (no daemon needed), `GET
//! /api/v1/vservices/{name}/table` from the daemon's data path. Two balancers behind the same
//! routers agree on every flow exactly when their digests agree.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::ApiState;
use super::error::{ApiError, ApiResult};
use crate::network::{DataPath, LoadOptions, TableDump};

/// `lb table`'s options.
#[derive(clap::Args, Debug)]
pub struct TableArgs {
    /// Network vService whose table to print.
    pub vservice: String,
    /// bpffs directory of the data path's pins (default: `[xdp] pin_dir` of `--config`,
    /// else /sys/fs/bpf/lb).
    #[arg(long)]
    pub pin_dir: Option<PathBuf>,
    /// Configuration file whose `[xdp] pin_dir` names the pins, as the other commands take it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print only each VIP's digest, not the entries.
    #[arg(long)]
    pub digest: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Where the pins are: `--pin-dir`, else the configuration's `[xdp] pin_dir`, else the
/// default of both.
fn pin_dir(args: &TableArgs) -> Result<PathBuf> {
    if let Some(dir) = &args.pin_dir {
        return Ok(dir.clone());
    }
    match &args.config {
        Some(path) => Ok(crate::config::load(path)
            .with_context(|| format!("reading {}", path.display()))?
            .xdp
            .pin_dir),
        None => Ok(PathBuf::from(crate::config::DEFAULT_PIN_DIR)),
    }
}

/// Runs `lb table`.
pub fn run(args: &TableArgs) -> Result<()> {
    let tables = read(&pin_dir(args)?, &args.vservice)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&tables)?);
        return Ok(());
    }
    for t in &tables {
        println!(
            "vService {} VIP {}: {} entries, digest {}",
            t.vservice,
            t.address,
            t.size,
            if t.digest.is_empty() { "-" } else { &t.digest }
        );
        if t.digest != t.digest_of_entries {
            println!(
                "  warning: the entries in the kernel give digest {}: the table was changed \
                 by something other than lb",
                t.digest_of_entries
            );
        }
        if !args.digest {
            for (i, e) in t.entries.iter().enumerate() {
                println!("{i} {e}");
            }
        }
    }
    Ok(())
}

/// The tables of `vservice`, read from the data path pinned under `pin_dir`.
fn read(pin_dir: &std::path::Path, vservice: &str) -> Result<Vec<TableDump>> {
    if !pin_dir.join("prog").exists() {
        bail!("no XDP data path is loaded under {}", pin_dir.display());
    }
    let opts = LoadOptions {
        pin_dir: Some(pin_dir.to_path_buf()),
        conn_table_size: 0,
    };
    DataPath::load(&[], &opts)?.tables(vservice)
}

/// `GET /api/v1/vservices/{name}/table`: the vService's tables, entries included.
pub(crate) async fn table(
    State(st): State<ApiState>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let Some(dir) = st.daemon.pin_dir().map(std::path::Path::to_path_buf) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "this daemon runs without an XDP data path: no Maglev tables",
        ));
    };
    let tables = tokio::task::spawn_blocking(move || read(&dir, &name))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::new(StatusCode::NOT_FOUND, format!("{e:#}")))?;
    Ok(Json(json!({ "tables": tables })))
}
