//! The load balancer's library: configuration, the health engine, selection, the XDP data
//! path's maps, the L7 proxy, DNS vServices and the control plane.
//!
//! Imports run one way: `config` -> `health` -> `selection` -> {`network`, `proxy`, `gslb`}
//! -> `daemon` (the running parts behind one handle) -> `cluster` (the shared configuration)
//! -> `api`; `run` wires the daemon, the cluster and the API together for `lb run`. `stats`
//! (latency histograms), `ebpf_log` (the programs' log records as log lines), `objects`
//! (where the compiled eBPF objects are) and `bpffs` (the filesystem of the pins) stand
//! beside `config` at the bottom: they import nothing of the library. `command_line` (the
//! clap definitions of `lb`) stands beside `run` at the top.

pub mod agent;
pub mod api;
pub mod bpffs;
pub mod cluster;
pub mod command_line;
pub mod config;
pub mod daemon;
pub mod ebpf_log;
pub mod gslb;
pub mod health;
pub mod network;
pub mod objects;
pub mod proxy;
pub mod routing;
pub mod run;
pub mod selection;
pub mod stats;
