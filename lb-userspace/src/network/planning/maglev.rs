//! Deterministic weighted Maglev lookup tables (Maglev paper, section 3.4).
//!
//! Every balancer node must build the very same table from the same backends, on every run and
//! with every Rust version, so that a flow hashes to the same backend wherever it lands. The
//! hashing is therefore written out here and fixed forever:
//!
//! * `h(tag, key)` = MurmurHash3's 64-bit finalizer (`fmix64`) applied to FNV-1a 64 (standard
//!   offset basis `0xcbf29ce484222325`, prime `0x100000001b3`) of the bytes `tag` followed by the
//!   bytes of `key`;
//! * `offset = h(0x01, key) % size`, `skip = h(0x02, key) % (size - 1) + 1`.
//!
//! Backend `i` prefers the slots `offset, offset + skip, offset + 2*skip, ...` (mod `size`);
//! because `size` is prime, that sequence visits every slot exactly once.
//!
//! Weights use the "one turn per round, in proportion to weight" fill: in round `r` (1-based) a
//! backend of weight `w` takes a turn when the turns it already took, times the largest weight,
//! are below `r * w`. The heaviest backends take a turn every round, a backend of half that
//! weight every other round, and so on, so turns stay interleaved and shares follow weights
//! even when the sum of weights exceeds the table size. Backends are sorted by
//! `(key, weight, value)` first, so the input order never changes the table.
//!
//! A table's digest names what it sends where, not how it is stored: entry `i` contributes
//! `h(0x03, key of the backend in entry i)`, folded in order as `d = fmix64(d.rotate_left(5)
//! ^ e)` from `d = h(0x04, table size in decimal)`. Two balancers whose digests agree send
//! every flow to the same backend, whatever slot numbers their tables hold.

use tracing::error;

/// One backend in the table: a stable identity string used for hashing (e.g. "10.0.1.2:80"),
/// its weight (0 = not in the table), and the value written into table entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaglevBackend<'a> {
    /// Stable identity hashed into the backend's slot preferences; the same on every node.
    pub key: &'a str,
    /// Relative share of the table; 0 leaves the backend out (a drain, S-BK11).
    pub weight: u32,
    /// What the table stores for this backend (e.g. an index into the backend map).
    pub value: u32,
}

/// Builds the lookup table: `size` entries (a prime), each the `value` of a backend; returns
/// None when no backend has weight > 0.
///
/// A `size` that is not prime also gives None (logged as an error): configuration validation
/// only lets primes through, and a non-prime size could leave slots no backend ever prefers.
/// Backends sharing one key hash to the same preferences; they are ordered by weight, then value.
pub fn build(backends: &[MaglevBackend<'_>], size: u32) -> Option<Vec<u32>> {
    let mut live: Vec<&MaglevBackend<'_>> = backends.iter().filter(|b| b.weight > 0).collect();
    live.sort_unstable_by(|a, b| (a.key, a.weight, a.value).cmp(&(b.key, b.weight, b.value)));
    let order: Vec<(&str, u32)> = live.iter().map(|b| (b.key, b.weight)).collect();
    let positions = build_positions(&order, size)?;
    Some(positions.iter().map(|&p| live[p as usize].value).collect())
}

/// The table as positions in `live`: the backends of weight > 0 as `(key, weight)`, in the
/// order `build` uses (sorted by key, weight, then value). Entry `i` of the result is the
/// position of the backend that entry `i` of `build`'s table holds. It depends on nothing
/// else, so VIPs whose ordered lists are equal share one computation and differ only in
/// the values they write. None as for `build`.
pub fn build_positions(live: &[(&str, u32)], size: u32) -> Option<Vec<u32>> {
    if !is_prime(size) {
        error!(size, "maglev table size is not prime; no table built");
        return None;
    }
    if live.is_empty() || live.iter().any(|&(_, w)| w == 0) {
        return None;
    }
    let max_weight = u128::from(live.iter().map(|b| b.1).max().unwrap_or(1));
    let mut cursors: Vec<Cursor> = live.iter().map(|b| Cursor::new(b.0, size)).collect();
    let mut turns = vec![0u128; live.len()];
    let mut table = vec![0u32; size as usize];
    let mut used = vec![false; size as usize];
    let mut filled: u32 = 0;
    let mut round: u128 = 0;
    // Every round fills at least one slot (the heaviest backend always takes its turn), so the
    // loop ends after at most `size` rounds.
    while filled < size {
        round += 1;
        for (i, &(_, weight)) in live.iter().enumerate() {
            if turns[i] * max_weight >= round * u128::from(weight) {
                continue;
            }
            turns[i] += 1;
            let slot = cursors[i].next_free(&used);
            used[slot] = true;
            // Positions fit: a list longer than u32 could not be built in memory.
            table[slot] = i as u32;
            filled += 1;
            if filled == size {
                break;
            }
        }
    }
    Some(table)
}

/// The digest (module docs) of a table given as positions in `keys` (`build_positions`).
pub fn digest_of_positions(positions: &[u32], keys: &[&str]) -> u64 {
    let hashes: Vec<u64> = keys.iter().map(|k| hash(0x03, k)).collect();
    let empty = hash(0x03, "");
    fold(
        positions.len(),
        positions
            .iter()
            .map(|&p| hashes.get(p as usize).copied().unwrap_or(empty)),
    )
}

/// The digest (module docs) of `table`, built from `backends`: entries name backends by
/// their `value`, the digest by their `key`. An entry whose value no backend has (which
/// `build` never writes) counts as the empty key.
pub fn digest(table: &[u32], backends: &[MaglevBackend<'_>]) -> u64 {
    let by_value: crate::config::FastMap<u32, u64> = backends
        .iter()
        .map(|b| (b.value, hash(0x03, b.key)))
        .collect();
    let empty = hash(0x03, "");
    fold(
        table.len(),
        table
            .iter()
            .map(|v| by_value.get(v).copied().unwrap_or(empty)),
    )
}

/// The digest (module docs) of a table given as the key of each entry, in order: what a
/// dump of the maps gives, to check a reported digest against the table the kernel holds.
pub fn digest_of_keys<'a>(keys: impl ExactSizeIterator<Item = &'a str>) -> u64 {
    fold(keys.len(), keys.map(|k| hash(0x03, k)))
}

fn fold(size: usize, entries: impl Iterator<Item = u64>) -> u64 {
    entries.fold(hash(0x04, &size.to_string()), |d, e| {
        fmix64(d.rotate_left(5) ^ e)
    })
}

/// True when `n` is prime; table sizes must be prime so every skip walks the whole table.
pub fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    if n.is_multiple_of(2) {
        return n == 2;
    }
    let n = u64::from(n);
    let mut d: u64 = 3;
    while d * d <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 2;
    }
    true
}

/// A backend's position in its own permutation, advanced incrementally (no per-entry allocation).
struct Cursor {
    pos: u32,
    skip: u32,
    size: u32,
}

impl Cursor {
    fn new(key: &str, size: u32) -> Cursor {
        let size64 = u64::from(size);
        let offset = hash(0x01, key) % size64;
        let skip = if size > 1 {
            hash(0x02, key) % (size64 - 1) + 1
        } else {
            1
        };
        // Both values are below `size`, which is a u32.
        Cursor {
            pos: offset as u32,
            skip: skip as u32,
            size,
        }
    }

    /// Returns the next slot of this backend's permutation that is still free. The caller only
    /// asks while a free slot exists, and the permutation visits every slot, so this ends within
    /// `size` steps.
    fn next_free(&mut self, used: &[bool]) -> usize {
        loop {
            let slot = self.pos as usize;
            self.pos = if self.pos >= self.size - self.skip {
                self.pos - (self.size - self.skip)
            } else {
                self.pos + self.skip
            };
            if !used[slot] {
                return slot;
            }
        }
    }
}

/// The fixed hash described in the module docs: `fmix64(fnv1a64(tag ++ key))`.
fn hash(tag: u8, key: &str) -> u64 {
    fmix64(fnv1a64(std::iter::once(tag).chain(key.bytes())))
}

/// FNV-1a, 64-bit: simple, fixed, and defined byte by byte (no platform or version dependence).
fn fnv1a64(bytes: impl Iterator<Item = u8>) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.fold(FNV_OFFSET, |h, byte| {
        (h ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    })
}

/// MurmurHash3's 64-bit finalizer: spreads FNV's weak low-order mixing over all bits, so keys
/// that differ in one character still get unrelated offsets and skips.
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

#[cfg(test)]
mod tests;
