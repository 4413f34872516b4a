//! The checks, one file per section of the file: each turns raw structs into model values
//! and reports every problem it finds (with its line) into the shared
//! [`Issues`](crate::config::issues::Issues). `vservice/` holds the checks of a
//! `[[vservice]]` and its parts; `names` and `seconds` are the rules shared by sections.

pub(in crate::config) mod backends;
pub(in crate::config) mod bgp;
pub(in crate::config) mod control;
pub(in crate::config) mod dns;
pub(in crate::config) mod etcd;
pub(in crate::config) mod health;
pub(in crate::config) mod names;
pub(in crate::config) mod probe;
pub(in crate::config) mod seconds;
pub(in crate::config) mod settings;
pub(in crate::config) mod vservice;
