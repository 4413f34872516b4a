//! The load balancer's library: configuration, health, selection and the XDP map writer.
//!
//! Data flows one way: `config` -> `health` -> `selection` -> `network` (XDP maps).

pub mod api;
pub mod config;
pub mod daemon;
pub mod gslb;
pub mod health;
pub mod network;
pub mod proxy;
pub mod selection;
