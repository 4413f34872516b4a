//! Site statuses (S-GS4) and their transition log: what the pollers write and what the DNS
//! answers, the API and the Live Stats page read.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Transitions kept per DNS vService; older ones are dropped first.
const MAX_TRANSITIONS: usize = 1024;

/// Status of one site service (S-GS4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SiteState {
    /// The site answers, the vService has an available list and its metrics are fresh:
    /// every policy may use it.
    Ok,
    /// The site answers but the vService has no available backend: it cannot serve.
    NoServices,
    /// The site answers but does not report the vService (or its counters): unknown, so
    /// only plain round robin uses it.
    NoMetrics,
    /// The site does not answer (or answers garbage): unknown, so only plain round robin
    /// uses it.
    NoConnection,
}

impl SiteState {
    /// The operator's spelling, as in the API and the Live Stats page.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "OK",
            Self::NoServices => "No Services",
            Self::NoMetrics => "No Metrics",
            Self::NoConnection => "No Connection",
        }
    }
}

impl serde::Serialize for SiteState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl fmt::Display for SiteState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Identifies one site service: the DNS vService, the name (absolute) and the site.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct SiteKey {
    /// DNS vService name.
    pub dns_vservice: String,
    /// Absolute record name (`www.gslb.example.`).
    pub record: String,
    /// Site name within the record.
    pub site: String,
}

/// What one poll found for a site service.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// The status.
    pub state: SiteState,
    /// Why, in words (e.g. "connection refused", "tier none").
    pub reason: String,
    /// Current sessions of the vService at the site, when reported.
    pub sessions: Option<u64>,
}

/// Status of one site service, for the API and the Live Stats page.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SiteStatus {
    /// Which site service.
    pub key: SiteKey,
    /// The vService's name at the site.
    pub vservice: String,
    /// True for a standby site service (S-GS1).
    pub standby: bool,
    /// The status.
    pub state: SiteState,
    /// Why.
    pub reason: String,
    /// Current sessions at the site, when reported.
    pub sessions: Option<u64>,
    /// When the status took its current value (Unix ms).
    pub since_unix_ms: u64,
    /// When the site was last polled (Unix ms); 0 before the first poll.
    pub checked_unix_ms: u64,
    /// Answers that named this site since the DNS vService started (kept across reloads
    /// that keep the site), for `lb_dns_site_answers_total`.
    pub answers: u64,
}

/// One status change of a site service.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SiteTransition {
    /// Which site service.
    pub key: SiteKey,
    /// When (Unix ms).
    pub at_unix_ms: u64,
    /// Previous status.
    pub from: SiteState,
    /// New status.
    pub to: SiteState,
    /// Why the new status.
    pub reason: String,
}

/// The latest status of a site service, as the answer policy reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Latest {
    /// The status.
    pub state: SiteState,
    /// Current sessions, when reported.
    pub sessions: Option<u64>,
    /// When it was last confirmed by a poll (None before the first poll).
    pub checked: Option<Instant>,
}

struct Entry {
    status: SiteStatus,
    checked: Option<Instant>,
}

/// Statuses of every site service of one DNS vService, and their transitions.
pub struct Board {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<SiteKey, Entry>,
    transitions: VecDeque<SiteTransition>,
}

impl Default for Board {
    fn default() -> Self {
        Board {
            inner: Mutex::new(Inner::default()),
        }
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Board {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A poisoned lock only means a panic elsewhere mid-update; the data stays usable.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes the board hold exactly these site services (after a start or a reload): new
    /// ones start as No Connection "not polled yet"; kept ones keep their status when
    /// `same_target` says they still poll the same thing.
    pub fn retain(
        &self,
        wanted: Vec<(SiteKey, String, bool)>,
        same_target: impl Fn(&SiteKey) -> bool,
    ) {
        let mut inner = self.lock();
        let mut next = HashMap::new();
        let now = unix_ms();
        for (key, vservice, standby) in wanted {
            let previous = inner.entries.remove(&key);
            // The answers already given stay counted even when the site's poll target
            // changed: a counter only grows while its site exists.
            let answers = previous.as_ref().map_or(0, |e| e.status.answers);
            let kept = previous.filter(|_| same_target(&key));
            let entry = match kept {
                Some(mut entry) => {
                    entry.status.standby = standby;
                    entry
                }
                None => Entry {
                    status: SiteStatus {
                        key: key.clone(),
                        vservice,
                        standby,
                        state: SiteState::NoConnection,
                        reason: "not polled yet".into(),
                        sessions: None,
                        since_unix_ms: now,
                        checked_unix_ms: 0,
                        answers,
                    },
                    checked: None,
                },
            };
            next.insert(key, entry);
        }
        inner.entries = next;
    }

    /// Records a poll result for `key`; logs and records a transition when the status
    /// changes. Unknown keys (removed by a reload meanwhile) are ignored.
    pub fn observe(&self, key: &SiteKey, seen: Observation) {
        let mut inner = self.lock();
        let now = unix_ms();
        let Some(entry) = inner.entries.get_mut(key) else {
            return;
        };
        entry.checked = Some(Instant::now());
        let status = &mut entry.status;
        status.checked_unix_ms = now;
        status.sessions = seen.sessions;
        let previous = status.state;
        status.reason = seen.reason.clone();
        if previous == seen.state {
            return;
        }
        status.state = seen.state;
        status.since_unix_ms = now;
        tracing::info!(
            dns_vservice = %key.dns_vservice, record = %key.record, site = %key.site,
            from = %previous, to = %seen.state, reason = %seen.reason,
            "site status changed"
        );
        let transition = SiteTransition {
            key: key.clone(),
            at_unix_ms: now,
            from: previous,
            to: seen.state,
            reason: seen.reason,
        };
        if inner.transitions.len() >= MAX_TRANSITIONS {
            inner.transitions.pop_front();
        }
        inner.transitions.push_back(transition);
    }

    /// Counts one answer naming each of `sites` (names within record `record` of DNS
    /// vService `dns_vservice`); sites not on the board (a reload meanwhile) are skipped.
    pub fn count_answers<'a>(
        &self,
        dns_vservice: &str,
        record: &str,
        sites: impl Iterator<Item = &'a str>,
    ) {
        let mut inner = self.lock();
        for site in sites {
            let key = SiteKey {
                dns_vservice: dns_vservice.to_owned(),
                record: record.to_owned(),
                site: site.to_owned(),
            };
            if let Some(entry) = inner.entries.get_mut(&key) {
                entry.status.answers += 1;
            }
        }
    }

    /// The latest status of one site service, if it is on the board.
    pub fn latest(&self, key: &SiteKey) -> Option<Latest> {
        let inner = self.lock();
        inner.entries.get(key).map(|entry| Latest {
            state: entry.status.state,
            sessions: entry.status.sessions,
            checked: entry.checked,
        })
    }

    /// Every status, sorted by key.
    pub fn statuses(&self) -> Vec<SiteStatus> {
        let inner = self.lock();
        let mut all: Vec<SiteStatus> = inner.entries.values().map(|e| e.status.clone()).collect();
        all.sort_by(|a, b| a.key.cmp(&b.key));
        all
    }

    /// Every recorded transition, oldest first.
    pub fn transitions(&self) -> Vec<SiteTransition> {
        self.lock().transitions.iter().cloned().collect()
    }
}
