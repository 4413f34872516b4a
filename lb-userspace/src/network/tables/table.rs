//! Reading a VIP's Maglev table back from the kernel, with each entry named by the backend
//! it sends flows to: what two balancers compare to know they hash flows alike (S-CL4).

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use anyhow::{Context, Result, bail};
use lb_common::BackendSlot;
use serde::Serialize;

use crate::network::loading::loader::DataPath;
use crate::network::planning::maglev;

/// One VIP's table as the kernel holds it.
#[derive(Clone, Debug, Serialize)]
pub struct TableDump {
    /// vService name.
    pub vservice: String,
    /// VIP address.
    pub address: String,
    /// Table size (0: no backend takes new flows, no table).
    pub size: u32,
    /// The digest recorded when the table was written (16 hex digits; empty without table).
    pub digest: String,
    /// The digest computed from `entries`: equal to `digest` unless the maps were changed
    /// behind this program's back.
    pub digest_of_entries: String,
    /// Entry `i` is the backend ("address:port") that flows hashing to `i` go to.
    pub entries: Vec<String>,
}

/// A digest as shown to operators: 16 hex digits, or nothing for "no table".
pub fn digest_text(digest: u64) -> String {
    if digest == 0 {
        String::new()
    } else {
        format!("{digest:016x}")
    }
}

impl DataPath {
    /// The tables of the vService's VIPs (one per address and port set), read from the maps.
    pub fn tables(&self, vservice: &str) -> Result<Vec<TableDump>> {
        let vips: Vec<_> = self
            .state
            .vips
            .iter()
            .filter(|v| v.name == vservice)
            .collect();
        if vips.is_empty() {
            bail!("no Network vService named `{vservice}` in the data path");
        }
        let mut backends: HashMap<u32, String> = HashMap::new();
        let mut out = Vec::new();
        for v in vips {
            let mut entries = Vec::with_capacity(v.table_size as usize);
            if v.table_size > 0 {
                let table = self
                    .maps
                    .maglev
                    .get(&v.vip_id, 0)
                    .with_context(|| format!("reading the Maglev table of {}", v.name))?;
                for value in table.iter() {
                    let slot = value.context("reading a Maglev entry")?;
                    let key = match backends.entry(slot) {
                        Entry::Occupied(e) => e.into_mut(),
                        Entry::Vacant(e) => {
                            let entry = self
                                .maps
                                .backends
                                .get(&slot, 0)
                                .with_context(|| format!("reading backend slot {slot}"))?;
                            e.insert(slot_key(&entry))
                        }
                    };
                    entries.push(key.clone());
                }
            }
            let of_entries = if entries.is_empty() {
                0
            } else {
                maglev::digest_of_keys(entries.iter().map(String::as_str))
            };
            out.push(TableDump {
                vservice: v.name.clone(),
                address: v.address.to_string(),
                size: v.table_size,
                digest: digest_text(v.table_digest),
                digest_of_entries: digest_text(of_entries),
                entries,
            });
        }
        Ok(out)
    }
}

/// A slot's Maglev key, "address:port", formatted as the writer formats it.
fn slot_key(s: &BackendSlot) -> String {
    format!("{}:{}", s.addr.to_ip(s.family), s.port)
}
