//! Which VIPs need a new Maglev table, and what each new table holds.
//!
//! A table is rebuilt only when its input (size, and each active backend's key, weight and
//! slot) changed. The Maglev computation itself depends on the ordered `(key, weight)` list
//! and the size only, not on the slot numbers written: VIPs over the same backends (1,000
//! VIPs of one farm, all changed by one failing backend) share one computation and one
//! digest, and each writes its own slots into its own table. Distinct computations run
//! on every CPU.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;

use anyhow::Result;
use tracing::error;

use crate::config::FastMap;
use crate::network::planning::maglev;
use crate::network::writing::state::VipState;

/// What one VIP's table is after this apply.
pub(crate) struct Built {
    /// Table size (0: no backend takes new flows, no table).
    pub size: u32,
    /// Fingerprint of the input, to skip the rebuild next time.
    pub fingerprint: u64,
    /// Digest of the table (0 without table).
    pub digest: u64,
    /// The new table when the input changed: `shared` positions mapped through `values`.
    pub new: Option<NewTable>,
}

/// A new table: entry `i` is `values[positions[i]]`.
pub(crate) struct NewTable {
    /// Index into [`Tables::positions`].
    pub shared: usize,
    /// The slot of each live backend, in build order.
    pub values: Vec<u32>,
}

/// Every VIP's outcome (in VIP order) and the distinct computations they point at.
pub(crate) struct Tables {
    pub built: Vec<Built>,
    pub positions: Vec<Vec<u32>>,
}

impl Tables {
    /// Entry `i` of `table`'s contents.
    pub fn entries<'a>(&'a self, table: &'a NewTable) -> impl Iterator<Item = u32> + 'a {
        self.positions[table.shared]
            .iter()
            .map(move |&p| table.values.get(p as usize).copied().unwrap_or(0))
    }
}
/// The Maglev keys of the backends ("address:port", the identity every balancer hashes
/// alike), each formatted once per apply however many VIPs share the backend, into one
/// buffer instead of a string per backend per VIP, and ranked in key order once, so a
/// VIP's backends are put in build order by comparing numbers, not strings.
#[derive(Default)]
pub(crate) struct Keys {
    text: String,
    spans: Vec<(usize, usize)>,
    ids: FastMap<(IpAddr, u16), u32>,
    ranks: Vec<u32>,
}

impl Keys {
    /// The id of the key of `address` and `port`, formatted unless known already.
    pub fn add(&mut self, address: IpAddr, port: u16) -> u32 {
        let (text, spans) = (&mut self.text, &mut self.spans);
        *self.ids.entry((address, port)).or_insert_with(|| {
            use std::fmt::Write as _;
            let start = text.len();
            // Writing into a String cannot fail.
            let _ = write!(text, "{address}:{port}");
            spans.push((start, text.len()));
            // Fewer keys than u32 values: each is a backend slot's, and slots are u32.
            (spans.len() - 1) as u32
        })
    }

    /// Ranks the keys added so far by their text (after the last `add`).
    pub fn rank(&mut self) {
        let mut order: Vec<u32> = (0..self.spans.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| self.text(a).cmp(self.text(b)));
        self.ranks = vec![0; order.len()];
        for (rank, &id) in order.iter().enumerate() {
            self.ranks[id as usize] = rank as u32;
        }
    }

    /// The text of key `id` (empty for an id `add` never gave).
    fn text(&self, id: u32) -> &str {
        self.spans
            .get(id as usize)
            .map_or("", |&(start, end)| &self.text[start..end])
    }

    /// The rank of key `id` among all keys (by text).
    fn rank_of(&self, id: u32) -> u32 {
        self.ranks.get(id as usize).copied().unwrap_or(u32::MAX)
    }
}

/// Decides and builds the tables of `states` (the new layout; `table_size` of each is
/// `sizes[i]`; the key of backend `j` of VIP `i` is `key_ids[i][j]` in `keys`), reusing a
/// previous table whose input is unchanged.
pub(crate) fn tables(
    states: &[VipState],
    sizes: &[u32],
    previous: &[Option<&VipState>],
    key_ids: &[Vec<u32>],
    keys: &Keys,
) -> Result<Tables> {
    let mut built = Vec::with_capacity(states.len());
    // Distinct computations by (size, ranks and weights in build order).
    let mut groups: FastMap<(u32, Vec<(u32, u32)>), usize> = FastMap::default();
    let mut work: Vec<(u32, Vec<(&str, u32)>)> = Vec::new();
    for (((state, &size), previous), ids) in states.iter().zip(sizes).zip(previous).zip(key_ids) {
        // (rank, weight, slot, key id) of every active backend, in list order.
        let mut live: Vec<(u32, u32, u32, u32)> = state
            .backends
            .iter()
            .zip(ids)
            .filter(|(s, _)| s.active)
            .map(|(s, &id)| (keys.rank_of(id), s.weight, s.slot, id))
            .collect();
        let fingerprint = fingerprint(
            size,
            live.iter()
                .map(|&(_, weight, slot, id)| (keys.text(id), weight, slot)),
        );
        // A state from before digests is rebuilt once, so every table in use has its digest.
        if let Some(p) = previous.filter(|p| {
            p.table_hash == fingerprint
                && p.name == state.name
                && (p.table_digest != 0 || p.table_size == 0)
        }) {
            built.push(Built {
                size: p.table_size,
                fingerprint,
                digest: p.table_digest,
                new: None,
            });
            continue;
        }
        live.retain(|m| m.1 > 0);
        if !maglev::is_prime(size) {
            // Configuration validation lets only primes through.
            error!(size, vservice = %state.name, "maglev table size is not prime; no table built");
        }
        if live.is_empty() || !maglev::is_prime(size) {
            // No backend may take new flows: the VIP drops packets that have no flow.
            built.push(Built {
                size: 0,
                fingerprint,
                digest: 0,
                new: None,
            });
            continue;
        }
        // Build order: by key, weight, then slot (what `maglev::build` sorts by).
        live.sort_unstable();
        let next = work.len();
        let shared = *groups
            .entry((size, live.iter().map(|m| (m.0, m.1)).collect()))
            .or_insert(next);
        if shared == next {
            work.push((size, live.iter().map(|m| (keys.text(m.3), m.1)).collect()));
        }
        built.push(Built {
            size,
            fingerprint,
            digest: 0,
            new: Some(NewTable {
                shared,
                values: live.iter().map(|m| m.2).collect(),
            }),
        });
    }
    let computed = compute(&work)?;
    for b in &mut built {
        if let Some(t) = &b.new {
            b.digest = computed[t.shared].1;
        }
    }
    Ok(Tables {
        built,
        positions: computed.into_iter().map(|c| c.0).collect(),
    })
}

/// The fingerprint of a table's input: size and every active backend's key, weight and
/// slot, in list order (as written in the state file; rebuilt once when it changes).
fn fingerprint<'a>(size: u32, live: impl Iterator<Item = (&'a str, u32, u32)>) -> u64 {
    let mut h = DefaultHasher::new();
    size.hash(&mut h);
    for m in live {
        m.hash(&mut h);
    }
    h.finish()
}

/// Runs every distinct computation, spread over the CPUs (100 VIPs x 1,000 backends x
/// 65,537 entries: 0.36-0.43 s on one thread, 0.26-0.27 s on two): positions and digest.
fn compute(work: &[(u32, Vec<(&str, u32)>)]) -> Result<Vec<(Vec<u32>, u64)>> {
    let one = |(size, order): &(u32, Vec<(&str, u32)>)| {
        let positions = maglev::build_positions(order, *size).unwrap_or_default();
        let keys: Vec<&str> = order.iter().map(|o| o.0).collect();
        let digest = maglev::digest_of_positions(&positions, &keys);
        (positions, digest)
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if work.len() < 2 || threads < 2 {
        return Ok(work.iter().map(one).collect());
    }
    let chunk = work.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = work
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(one).collect::<Vec<_>>()))
            .collect();
        let mut out = Vec::with_capacity(work.len());
        for worker in workers {
            let part = worker
                .join()
                .map_err(|_| anyhow::anyhow!("building Maglev tables panicked"))?;
            out.extend(part);
        }
        Ok(out)
    })
}
