//! Persistence pins: source addresses and persistence cookies, with Rebalance and Clear All
//! (the Session Affinity Manager, S-MT5).
//!
//! Source-IP pins live here only, expiring after the configured idle time (swept lazily while
//! requests arrive, so no background task is needed). Cookie pins live in the clients: the
//! cookie value names the backend by a fixed hash of its name and address (opaque, and still
//! valid after a daemon restart). The pool remembers the cookie values in use only to list
//! them, and voids the values of a backend on Rebalance (or all of them on Clear All) by
//! appending a stamp to the values it issues afterwards: a value older than its backend's
//! stamp no longer pins.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::hash::StableHash;

/// Cookie values not presented for this long are no longer listed (the clients may still
/// hold them; they pin as long as their backend's stamp allows).
const COOKIE_LISTING_IDLE: Duration = Duration::from_secs(3600);

/// Longest time between two sweeps of expired entries.
const MAX_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// One persistence pin, for the Session Affinity Manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    /// The cookie value, or the client's IP address.
    pub key: String,
    /// Backend Service it pins to.
    pub backend: String,
    /// Time since it was last used.
    pub idle: Duration,
}

/// What a presented cookie value says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CookiePin {
    /// It pins to this backend.
    Valid(String),
    /// It named this backend, but that backend's pins were rebalanced away.
    Moved(String),
    /// It pins nowhere (malformed, unknown backend, or cleared).
    Stale,
}

#[derive(Clone, Debug)]
struct Entry {
    backend: String,
    last_used: Instant,
}

/// The pins of one pool.
#[derive(Debug)]
pub(crate) struct Pins {
    ips: HashMap<IpAddr, Entry>,
    cookies: HashMap<String, Entry>,
    /// Per backend: cookie values issued before this stamp were moved away (Rebalance).
    moved: HashMap<String, u64>,
    /// Cookie values issued before this stamp no longer pin (Clear All).
    cleared: u64,
    /// Last stamp handed out, so stamps strictly increase.
    last_stamp: u64,
    /// Source-IP pins unused this long expire.
    ip_idle: Duration,
    last_sweep: Instant,
}

impl Pins {
    /// An empty table whose source-IP pins expire after `ip_idle` unused.
    pub(crate) fn new(ip_idle: Duration) -> Pins {
        Pins {
            ips: HashMap::new(),
            cookies: HashMap::new(),
            moved: HashMap::new(),
            cleared: 0,
            last_stamp: 0,
            ip_idle,
            last_sweep: Instant::now(),
        }
    }

    /// Applies a (possibly changed) idle expiry of source-IP pins.
    pub(crate) fn set_ip_idle(&mut self, ip_idle: Duration) {
        self.ip_idle = ip_idle;
    }

    /// The backend `client` is pinned to, unless its pin expired; refreshes the pin's last
    /// use.
    pub(crate) fn ip_pin(&mut self, client: IpAddr, now: Instant) -> Option<String> {
        self.sweep(now);
        let entry = self.ips.get_mut(&client)?;
        if now.saturating_duration_since(entry.last_used) >= self.ip_idle {
            self.ips.remove(&client);
            return None;
        }
        entry.last_used = now;
        Some(entry.backend.clone())
    }

    /// Pins `client` to `backend` (new pin or re-pin).
    pub(crate) fn pin_ip(&mut self, client: IpAddr, backend: &str, now: Instant) {
        self.ips.insert(
            client,
            Entry {
                backend: backend.to_owned(),
                last_used: now,
            },
        );
    }

    /// The cookie value that pins to `backend` now.
    pub(crate) fn cookie_value(&self, backend: &str, addr: SocketAddr) -> String {
        let token = cookie_token(backend, addr);
        match self.stamp_of(backend) {
            0 => token,
            stamp => format!("{token}-{stamp:x}"),
        }
    }

    /// What a presented cookie value pins to, among `members` (name, address).
    pub(crate) fn cookie_pin<'a>(
        &self,
        value: &str,
        members: impl Iterator<Item = (&'a str, SocketAddr)>,
    ) -> CookiePin {
        let (token, stamp) = match value.split_once('-') {
            Some((token, stamp)) => match u64::from_str_radix(stamp, 16) {
                Ok(stamp) => (token, stamp),
                Err(_) => return CookiePin::Stale,
            },
            None => (value, 0),
        };
        let Some((name, _)) = members
            .into_iter()
            .find(|&(name, addr)| cookie_token(name, addr) == token)
        else {
            return CookiePin::Stale;
        };
        if stamp < self.cleared {
            return CookiePin::Stale;
        }
        if stamp < self.moved.get(name).copied().unwrap_or(0) {
            return CookiePin::Moved(name.to_owned());
        }
        CookiePin::Valid(name.to_owned())
    }

    /// Records that `value` (pinning to `backend`) is in use, for the listing.
    pub(crate) fn note_cookie(&mut self, value: &str, backend: &str, now: Instant) {
        self.sweep(now);
        match self.cookies.get_mut(value) {
            Some(entry) => entry.last_used = now,
            None => {
                let entry = Entry {
                    backend: backend.to_owned(),
                    last_used: now,
                };
                self.cookies.insert(value.to_owned(), entry);
            }
        }
    }

    /// Every live pin (expired source-IP pins left out), sorted by key.
    pub(crate) fn list(&self, now: Instant) -> Vec<Pin> {
        let ip_idle = self.ip_idle;
        let ips = self.ips.iter().map(|(ip, e)| (ip.to_string(), e));
        let cookies = self.cookies.iter().map(|(v, e)| (v.clone(), e));
        let mut pins: Vec<Pin> = ips
            .filter(|(_, e)| now.saturating_duration_since(e.last_used) < ip_idle)
            .chain(cookies)
            .map(|(key, e)| Pin {
                key,
                backend: e.backend.clone(),
                idle: now.saturating_duration_since(e.last_used),
            })
            .collect();
        pins.sort_by(|a, b| a.key.cmp(&b.key));
        pins
    }

    /// Rebalance: moves the source-IP pins of `backend` to the backends `next` hands out, and
    /// voids its cookie values (their clients are re-pinned elsewhere on their next request).
    /// Returns how many pins moved.
    pub(crate) fn rebalance(&mut self, backend: &str, next: &mut dyn FnMut() -> String) -> usize {
        let mut moved = 0;
        for entry in self.ips.values_mut().filter(|e| e.backend == backend) {
            entry.backend = next();
            moved += 1;
        }
        let before = self.cookies.len();
        self.cookies.retain(|_, e| e.backend != backend);
        moved += before - self.cookies.len();
        let stamp = self.new_stamp();
        self.moved.insert(backend.to_owned(), stamp);
        moved
    }

    /// Clear All: drops every pin and voids every cookie value issued so far. Returns how
    /// many pins were dropped.
    pub(crate) fn clear(&mut self) -> usize {
        let dropped = self.ips.len() + self.cookies.len();
        self.ips.clear();
        self.cookies.clear();
        self.cleared = self.new_stamp();
        dropped
    }

    /// Drops the pins of the kinds not in use (after a reload changed persistence).
    pub(crate) fn keep_kinds(&mut self, ips: bool, cookies: bool) {
        if !ips {
            self.ips.clear();
        }
        if !cookies {
            self.cookies.clear();
        }
    }

    /// Drops the pins of backends `keep` rejects (removed from the configuration).
    pub(crate) fn retain_backends(&mut self, keep: &dyn Fn(&str) -> bool) {
        self.ips.retain(|_, e| keep(&e.backend));
        self.cookies.retain(|_, e| keep(&e.backend));
        self.moved.retain(|name, _| keep(name));
    }

    /// The stamp cookie values of `backend` must carry at least.
    fn stamp_of(&self, backend: &str) -> u64 {
        self.cleared
            .max(self.moved.get(backend).copied().unwrap_or(0))
    }

    /// A stamp above every earlier one: the wall clock in seconds (so stamps keep growing
    /// across restarts), bumped when several voids happen within one second.
    fn new_stamp(&mut self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.last_stamp = now.max(self.last_stamp + 1);
        self.last_stamp
    }

    /// Removes expired source-IP pins and long-unused cookie listings, at most once per
    /// `min(ip_idle, 60 s)`.
    fn sweep(&mut self, now: Instant) {
        let idle = self.ip_idle;
        if now.saturating_duration_since(self.last_sweep) < idle.min(MAX_SWEEP_INTERVAL) {
            return;
        }
        self.last_sweep = now;
        self.ips
            .retain(|_, e| now.saturating_duration_since(e.last_used) < idle);
        self.cookies
            .retain(|_, e| now.saturating_duration_since(e.last_used) < COOKIE_LISTING_IDLE);
    }
}

/// The stable, opaque part of a backend's cookie value: 16 hex digits of a fixed hash of its
/// name and address (the address itself is never revealed).
pub(crate) fn cookie_token(backend: &str, addr: SocketAddr) -> String {
    let hash = StableHash::new()
        .bytes(b"lb-cookie")
        .bytes(backend.as_bytes())
        .socket(addr)
        .finish();
    format!("{hash:016x}")
}
