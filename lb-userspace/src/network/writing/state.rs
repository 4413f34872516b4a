//! What the writer last wrote, kept beside the pins so a restarted daemon keeps the same
//! VIP ids and backend slots (flows in the connection table point at slots) and so
//! `lb status` can show names.

use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// The written layout of every VIP.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct State {
    pub vips: Vec<VipState>,
    /// Next backend slot to try when allocating (slots are reused last).
    pub next_slot: u32,
    /// The epoch the next VIP whose slots change gets (`VipMeta.epoch`): one counter for
    /// every VIP, so a VIP id given to a new VIP never repeats an epoch its old flows hold.
    #[serde(default)]
    pub next_epoch: u32,
}

/// One VIP as written.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct VipState {
    pub name: String,
    pub vip_id: u32,
    pub address: IpAddr,
    /// 6, 17, or 0 for ANY-L3.
    pub proto: u8,
    /// Inclusive port range; (0, 0) for ANY-L3.
    pub ports: (u16, u16),
    pub dsr: bool,
    /// Delivered by tunnel (`VIP_F_TUNNEL`); `dsr` is set too.
    #[serde(default)]
    pub tunnel: bool,
    /// The tunnel is GUE (`VIP_F_GUE`), with `tunnel`.
    #[serde(default)]
    pub gue: bool,
    pub table_size: u32,
    /// Fingerprint of the Maglev input, to skip rebuilding an unchanged table.
    pub table_hash: u64,
    /// Digest of the table in use, by backend address (`maglev::digest`; 0: no table, or a
    /// state written before digests existed, rebuilt at the next apply).
    #[serde(default)]
    pub table_digest: u64,
    /// New flows may go unrecorded under a flood (`VIP_F_FLOOD_GUARD`).
    #[serde(default)]
    pub flood_guard: bool,
    /// `VipMeta.epoch`: changed whenever one of its slots is written or its slots change.
    #[serde(default)]
    pub epoch: u32,
    pub backends: Vec<SlotState>,
}

/// One backend slot as written.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct SlotState {
    /// Shared with the plan (1,000 VIPs over one farm hold 100 names, not 100,000).
    #[serde(with = "shared_str")]
    pub name: Arc<str>,
    pub slot: u32,
    pub address: IpAddr,
    pub port: u16,
    pub weight: u32,
    pub active: bool,
    /// Index of the address's next hop in `HOPS` (0 in states written before it existed,
    /// whose slots are written again).
    #[serde(default)]
    pub hop: u32,
    /// Index of the Backend Service's counters in `BACKEND_STATS` (`counters::CounterIds`).
    #[serde(default)]
    pub counters: u32,
}

/// A shared string written and read as a plain one.
mod shared_str {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(s: &Arc<str>, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
        Ok(String::deserialize(d)?.into())
    }
}

/// A file of this machine's runtime state for `key` (a pin directory, a configuration
/// path): `/run/lb/<key with / as ->.<suffix>`, so two data paths or daemons never share one.
pub(crate) fn run_file(key: &Path, suffix: &str) -> PathBuf {
    let flat: String = key
        .to_string_lossy()
        .trim_matches('/')
        .chars()
        .map(|c| if c == '/' { '-' } else { c })
        .collect();
    Path::new("/run/lb").join(format!("{flat}.{suffix}"))
}

/// Writes `bytes` to `path` atomically (a sibling file renamed over it): a reader sees the
/// old contents or the new, never a part. The sibling's name is unique to this process and
/// call: during an upgrade the old and the new `lb run` save the same files every second,
/// and with one shared name one's rename could take the other's file away (ENOENT).
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}-{n}.tmp", std::process::id()));
    let tmp = path.with_file_name(name);
    fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

/// The state file of a pin directory.
fn path_for(pin_dir: &Path) -> PathBuf {
    run_file(pin_dir, "json")
}

impl State {
    /// Reads the state of `pin_dir`; a missing file is an empty state.
    pub fn read(pin_dir: &Path) -> Result<State> {
        let path = path_for(pin_dir);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .with_context(|| format!("reading data-path state {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// The state file's bytes, as compact JSON: 1,000 VIPs x 100 backends are 100,000
    /// slots, saved after every change. Encoded apart from [`State::write_encoded`] so that
    /// the writer encodes them (about 40 ms at 100,000 slots) while it writes the maps.
    pub fn encode(&self) -> Result<Vec<u8>> {
        Ok(serde_json::to_vec(self)?)
    }

    /// Saves bytes from [`State::encode`] atomically (write + rename) as the state file of
    /// `pin_dir`.
    pub fn write_encoded(pin_dir: &Path, bytes: &[u8]) -> Result<()> {
        write_atomically(&path_for(pin_dir), bytes)
    }

    /// Forgets the state of an unloaded data path.
    pub fn remove(pin_dir: &Path) {
        let _ = fs::remove_file(path_for(pin_dir));
    }
}

/// A written VIP for the unit tests of the writers that derive maps from the state: `vip_id`
/// at `address`, its protocol, ports and mode, and backends by (address, port).
#[cfg(test)]
pub(crate) fn test_vip(
    vip_id: u32,
    address: &str,
    (proto, ports, dsr): (u8, (u16, u16), bool),
    backends: &[(&str, u16)],
) -> VipState {
    VipState {
        name: format!("v{vip_id}"),
        vip_id,
        address: address.parse().expect("ip"),
        proto,
        ports,
        dsr,
        tunnel: false,
        gue: false,
        table_size: 0,
        table_hash: 0,
        table_digest: 0,
        flood_guard: false,
        epoch: 0,
        backends: backends
            .iter()
            .map(|(a, p)| SlotState {
                name: (*a).into(),
                slot: 0,
                address: a.parse().expect("ip"),
                port: *p,
                weight: 1,
                active: true,
                hop: 0,
                counters: 0,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::write_atomically;

    /// As in an upgrade under load (the soak's upgrades), writers saving the same file at
    /// the same time (the old and the new `lb run` save the health states every second) all
    /// succeed, and the file always holds one whole write.
    #[test]
    fn concurrent_atomic_writes_of_one_file_all_succeed() {
        let dir = std::env::temp_dir().join(format!("lb-atomic-{}", std::process::id()));
        let path = dir.join("states.json");
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for i in 0..300 {
                        let body = format!("{{\"writer\":{w},\"i\":{i}}}");
                        write_atomically(&path, body.as_bytes()).expect("write");
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().expect("a writer failed");
        }
        let last = std::fs::read_to_string(&path).expect("read");
        assert!(
            serde_json::from_str::<serde_json::Value>(&last).is_ok(),
            "{last}"
        );
        let left: Vec<_> = std::fs::read_dir(&dir).expect("dir").flatten().collect();
        assert_eq!(left.len(), 1, "temporary files left behind: {left:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
