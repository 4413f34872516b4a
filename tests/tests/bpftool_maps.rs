//! What an operator reads with `bpftool map dump pinned` on every pinned
//! map of a data path, and on each VIP's Maglev table, pinned by VIP id under
//! `<pin dir>/maps/maglev/<vip id>`. Loads the real XDP program (pinned under a bpffs
//! directory of its own, attached nowhere) and runs `bpftool -j`.
//!
//! Also: pins of another map layout are not adopted.
//!
//! Needs root, `bpftool` (Debian package `bpftool`) and the XDP object (`LB_XDP_OBJECT`, or
//! `cargo xtask build`).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, anyhow, bail, ensure};
use lb::network::{self, DataPath, LoadOptions};
use serde_json::Value;

/// Two NAT VIPs, a Port Range VIP and an IPv6 VIP; `web` lists `backends` (weights 1).
fn config(web_backends: &[&str], with_range: bool) -> String {
    let mut s = String::new();
    for (i, name) in ["w1", "w2", "w3"].iter().enumerate() {
        s += &format!(
            "[[backend_service]]\nname = \"{name}\"\naddress = \"10.0.1.{}\"\n\
             address6 = \"2001:db8:1::{}\"\nport = 8080\n\n",
            i + 1,
            i + 1
        );
    }
    let list = |names: &[&str]| {
        names
            .iter()
            .map(|n| format!("\"{n}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    s += &format!(
        "[[vservice]]\nname = \"web\"\nkind = \"tcp-l4\"\naddress = \"198.18.1.10\"\n\
         address6 = \"2001:db8::10\"\nport = 80\nmaglev_size = 251\nbackends = [{}]\n\n",
        list(web_backends)
    );
    s += "[[vservice]]\nname = \"dns\"\nkind = \"udp-l4\"\naddress = \"198.18.1.11\"\n\
          port = 53\nmaglev_size = 251\nbackends = [\"w2\", \"w3\"]\n\n";
    if with_range {
        s += "[[vservice]]\nname = \"range\"\nkind = \"tcp-l4\"\naddress = \"198.18.1.12\"\n\
              port_range = \"1000-1003\"\nmaglev_size = 251\nbackends = [\"w1\"]\n\n";
    }
    s
}

/// A pin directory of this test's own on the host's bpffs, removed (with the data path's
/// bookkeeping) when dropped, also on a failure.
struct PinDir(PathBuf);

impl Drop for PinDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        network::forget_state(&self.0);
    }
}

fn load(dir: &Path) -> Result<DataPath> {
    let object = network::read_object()?;
    DataPath::load(
        &object,
        &LoadOptions {
            pin_dir: Some(dir.to_path_buf()),
            conn_table_size: 1 << 12,
        },
    )
}

fn apply(dp: &mut DataPath, text: &str) -> Result<()> {
    let cfg = lb::config::parse(text, "bpftool_maps").map_err(|e| anyhow!("config: {e}"))?;
    network::apply(dp, &cfg, &Default::default())
}

/// `bpftool -j ARGS`, parsed.
fn bpftool(args: &[&str]) -> Result<Value> {
    let out = Command::new("bpftool")
        .arg("-j")
        .args(args)
        .output()
        .context("running bpftool (Debian package `bpftool`)")?;
    ensure!(
        out.status.success(),
        "bpftool {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).with_context(|| format!("bpftool {}", args.join(" ")))
}

fn dump(path: &Path) -> Result<Vec<Value>> {
    let path = path.to_str().context("pin path")?;
    match bpftool(&["map", "dump", "pinned", path])? {
        Value::Array(entries) => Ok(entries),
        other => bail!("dump of {path} is not a list: {other}"),
    }
}

/// The kernel id of the map pinned at `path`.
fn map_id(path: &Path) -> Result<u64> {
    let info = bpftool(&["map", "show", "pinned", path.to_str().context("pin path")?])?;
    info["id"].as_u64().context("map id")
}

/// A little-endian number from bpftool's raw bytes (`["0x41", "0xec", ...]`).
fn raw_number(bytes: &Value) -> Result<u64> {
    let bytes = bytes.as_array().context("raw bytes")?;
    let mut n = 0u64;
    for (i, b) in bytes.iter().enumerate().take(8) {
        let text = b.as_str().context("raw byte")?;
        let byte = u64::from_str_radix(text.trim_start_matches("0x"), 16)?;
        n |= byte << (8 * i);
    }
    Ok(n)
}

/// Fills an empty hash-type map (the connection tables, which only the program writes, and
/// the NAT backends when the configuration has none) with one entry of zeros but a first byte of 1, so its dump has an
/// entry to decode.
fn add_one_entry(path: &Path) -> Result<()> {
    let info = bpftool(&["map", "show", "pinned", path.to_str().context("pin path")?])?;
    let bytes = |field: &str| -> Result<Vec<String>> {
        let n = info[field].as_u64().context("map sizes")?;
        Ok((0..n)
            .map(|i| if i == 0 { "1" } else { "0" }.to_string())
            .collect())
    };
    let (key, value) = (bytes("bytes_key")?, bytes("bytes_value")?);
    let mut cmd = Command::new("bpftool");
    cmd.args(["map", "update", "pinned"]).arg(path).arg("key");
    cmd.args(&key).arg("value").args(&value);
    let out = cmd.output().context("bpftool map update")?;
    ensure!(
        out.status.success(),
        "bpftool map update {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Every entry of `entries` carries BTF-decoded key and value (`formatted`), and `fields`
/// name the members the decoded value (or key, for `key_fields`) must show.
fn assert_decoded(
    name: &str,
    entries: &[Value],
    key_fields: &[&str],
    value_fields: &[&str],
) -> Result<()> {
    ensure!(!entries.is_empty(), "{name}: no entry to check");
    for e in entries {
        let f = e
            .get("formatted")
            .with_context(|| format!("{name}: entry printed as raw bytes only: {e}"))?;
        let key = f
            .get("key")
            .with_context(|| format!("{name}: no key in {f}"))?;
        let value = match (f.get("value"), f.get("values")) {
            (Some(v), _) => v.clone(),
            // Per-CPU maps: one decoded value per CPU.
            (None, Some(Value::Array(per_cpu))) => per_cpu
                .first()
                .and_then(|c| c.get("value"))
                .cloned()
                .with_context(|| format!("{name}: no per-CPU value in {f}"))?,
            _ => bail!("{name}: no decoded value in {f}"),
        };
        for field in key_fields {
            ensure!(
                key.get(field).is_some(),
                "{name}: key has no `{field}`: {key}"
            );
        }
        for field in value_fields {
            ensure!(
                value.get(field).is_some(),
                "{name}: value has no `{field}`: {value}"
            );
        }
        if key_fields.is_empty() {
            ensure!(key.is_u64(), "{name}: key is not a number: {key}");
        }
        if value_fields.is_empty() {
            ensure!(value.is_u64(), "{name}: value is not a number: {value}");
        }
    }
    Ok(())
}

/// The decoded `part` ("key" or "value") of every entry.
fn formatted(entries: &[Value], part: &str) -> Result<Vec<Value>> {
    entries
        .iter()
        .map(|e| {
            e["formatted"]
                .get(part)
                .cloned()
                .with_context(|| format!("no decoded {part} in {e}"))
        })
        .collect()
}

/// The bytes of a decoded address (`{"octets": [198, 18, 1, 10, 0, ...]}`); empty when it
/// is not printed that way.
fn octets(addr: &Value) -> Vec<u64> {
    addr["octets"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

/// MAGLEV's entries by VIP id: the kernel id of each table in use.
fn maglev_tables(maps: &Path) -> Result<BTreeMap<u64, u64>> {
    let mut out = BTreeMap::new();
    for e in dump(&maps.join("MAGLEV"))? {
        let id = raw_number(&e["key"])?;
        // bpftool shows an array of maps' values as the inner map id, raw or decoded.
        let inner = match e.get("inner_map_id") {
            Some(v) => v.as_u64().context("inner_map_id")?,
            None => raw_number(&e["value"])?,
        };
        out.insert(id, inner);
    }
    Ok(out)
}

/// The per-VIP pins: each names the table MAGLEV holds for its VIP id (same kernel map),
/// no other file is there, every entry is decoded and names a slot, and the pins are
/// exactly `expected` VIP ids.
fn check_table_pins(maps: &Path, expected: usize) -> Result<()> {
    let in_use = maglev_tables(maps)?;
    let dir = maps.join("maglev");
    let mut pinned = HashSet::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("{}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let vip_id: u64 = name
            .parse()
            .map_err(|_| anyhow!("a stray file in {}: {name}", dir.display()))?;
        let pin_id = map_id(&entry.path())?;
        ensure!(
            in_use.get(&vip_id) == Some(&pin_id),
            "maglev/{vip_id} is map {pin_id}, MAGLEV holds {:?} for that VIP",
            in_use.get(&vip_id)
        );
        let entries = dump(&entry.path())?;
        ensure!(
            entries.len() == 251,
            "maglev/{vip_id}: {} entries",
            entries.len()
        );
        assert_decoded(&format!("maglev/{vip_id}"), &entries, &[], &[])?;
        pinned.insert(vip_id);
    }
    ensure!(
        pinned.len() == expected && pinned.len() == in_use.len(),
        "pinned tables {pinned:?}, MAGLEV holds {in_use:?}, expected {expected}"
    );
    Ok(())
}

#[test]
fn every_pinned_map_and_maglev_table_dumps_decoded() -> Result<()> {
    let dir = PinDir(PathBuf::from(format!(
        "/sys/fs/bpf/lb-test-bpftool-{}",
        std::process::id()
    )));
    let maps = dir.0.join("maps");
    let mut dp = load(&dir.0)?;
    apply(&mut dp, &config(&["w1", "w2", "w3"], true))?;
    // web (IPv4 and IPv6), dns, range: four VIPs, four tables.
    check_table_pins(&maps, 4)?;
    for name in ["CONNS", "CONNS_CLASH", "NAT_BACKENDS"] {
        if dump(&maps.join(name))?.is_empty() {
            add_one_entry(&maps.join(name))?;
        }
    }
    let addr = ["addr", "family"];
    let checks: [(&str, &[&str], &[&str]); 18] = [
        ("ADDRS", &addr, &[]),
        (
            "VIPS",
            &["addr", "port", "proto", "family"],
            &["vip_id", "table_size"],
        ),
        ("RANGES", &["prefix_len", "data"], &["vip_id", "table_size"]),
        ("VIP_BY_ID", &[], &["key", "meta"]),
        (
            "BACKENDS",
            &[],
            &["addr", "port", "flags", "family", "vip_id", "hop"],
        ),
        (
            "CONNS",
            &["addr", "port", "proto", "family"],
            &["slot", "vip_id", "vip_addr", "vip_port", "addr", "port"],
        ),
        (
            "CONNS_CLASH",
            &["src", "dst", "sport", "dport", "proto", "dir"],
            &["slot", "vip_id", "vip_addr", "vip_port"],
        ),
        (
            "NEXTHOPS",
            &[],
            &["addr", "ifindex", "smac", "dmac", "expires"],
        ),
        ("HOPS", &[], &["addr", "ifindex", "smac", "dmac", "expires"]),
        ("NEXTHOP_GEN", &[], &[]),
        ("LAYOUT", &[], &[]),
        (
            "NAT_BACKENDS",
            &["addr", "port", "family"],
            &["len", "targets"],
        ),
        ("ADDR_FILTER", &[], &[]),
        (
            "VIP_STATS",
            &[],
            &["packets", "bytes", "new_flows", "drops"],
        ),
        (
            "BACKEND_STATS",
            &[],
            &["packets", "bytes", "new_flows", "drops"],
        ),
        ("GLOBAL_STATS", &[], &[]),
        ("FLOOD_GUARD", &[], &["limit", "count", "second"]),
        ("PROGS", &[], &[]),
    ];
    for (name, key_fields, value_fields) in checks {
        assert_decoded(name, &dump(&maps.join(name))?, key_fields, value_fields)?;
    }
    // Addresses and ports as an operator reads them: 198.18.1.10 port 80, not 167842502
    // and 20480.
    let vips = formatted(&dump(&maps.join("VIPS"))?, "key")?;
    for (addr, port) in [
        (&[198, 18, 1, 10][..], 80),
        (&[0x20, 0x01, 0x0d, 0xb8][..], 80),
    ] {
        ensure!(
            vips.iter()
                .any(|k| octets(&k["addr"]).starts_with(addr) && k["port"] == port),
            "VIPS has no key {addr:?} port {port}: {vips:?}"
        );
    }
    let backends = formatted(&dump(&maps.join("BACKENDS"))?, "value")?;
    ensure!(
        backends.iter().any(|b| octets(&b["addr"])
            == [10, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
            && b["port"] == 8080),
        "BACKENDS has no 10.0.1.1 port 8080: {backends:?}"
    );
    // MAGLEV, the array of tables, cannot carry BTF (the kernel refuses type information
    // on arrays of maps with ENOTSUPP): bpftool shows each VIP id with its table's map id
    // raw (checked against the pins above); each table is read at its pin.
    ensure!(maglev_tables(&maps)?.len() == 4);

    // A new process adopts the pins: the tables of a changed VIP are re-pinned, a removed
    // VIP's pin goes, and nothing else is left behind.
    drop(dp);
    let mut dp = load(&dir.0)?;
    ensure!(
        dp.adopted(),
        "the second load did not adopt the pinned data path"
    );
    // Stale pins, as a process that died mid-write could leave them.
    for stale in ["new_9", "7"] {
        let out = Command::new("bpftool")
            .args(["map", "pin", "pinned"])
            .arg(maps.join("GLOBAL_STATS"))
            .arg(maps.join("maglev").join(stale))
            .output()?;
        ensure!(out.status.success(), "pinning a stale file: {out:?}");
    }
    apply(&mut dp, &config(&["w1", "w2"], false))?;
    check_table_pins(&maps, 3)?;
    // web's tables change again in this process (w2 removed), then return.
    apply(&mut dp, &config(&["w1"], false))?;
    check_table_pins(&maps, 3)?;
    apply(&mut dp, &config(&["w1", "w2", "w3"], true))?;
    check_table_pins(&maps, 4)?;

    // Pins whose maps have another layout (as an earlier lb wrote them) are not adopted:
    // the error says to unload first.
    drop(dp);
    let out = Command::new("bpftool")
        .args(["map", "update", "pinned"])
        .arg(maps.join("LAYOUT"))
        .args(["key", "0", "0", "0", "0", "value", "1", "0", "0", "0"])
        .output()?;
    ensure!(out.status.success(), "bpftool map update LAYOUT: {out:?}");
    let err = match load(&dir.0) {
        Ok(_) => bail!("pins of layout 1 were adopted"),
        Err(e) => format!("{e:#}"),
    };
    ensure!(
        err.contains("layout version 1") && err.contains("lb unload"),
        "unclear refusal: {err}"
    );
    Ok(())
}

/// The walk docs/data-path.md gives an operator ("Which backend a Maglev entry names"), with
/// exactly its commands: a VIP's id from `VIPS`, its table at `maglev/<id>` (index -> slot),
/// each slot's backend from `BACKENDS` by `map lookup ... key <4 bytes>`; and the same table
/// reached from `MAGLEV`'s raw entry (the map id) with `bpftool map dump id`. Every entry
/// must end at a configured backend of the VIP, and every backend must be reached.
#[test]
fn maglev_entries_lead_to_their_backends_with_bpftool_alone() -> Result<()> {
    let dir = PinDir(PathBuf::from(format!(
        "/sys/fs/bpf/lb-test-bpftool-walk-{}",
        std::process::id()
    )));
    let maps = dir.0.join("maps");
    let mut dp = load(&dir.0)?;
    apply(&mut dp, &config(&["w1", "w2", "w3"], false))?;

    // 1. The VIP's id.
    let vip_id = dump(&maps.join("VIPS"))?
        .iter()
        .find(|e| {
            let key = &e["formatted"]["key"];
            octets(&key["addr"]).starts_with(&[198, 18, 1, 10]) && key["port"] == 80
        })
        .and_then(|e| e["formatted"]["value"]["vip_id"].as_u64())
        .context("VIPS has no decoded entry for 198.18.1.10:80")?;
    // 2. Its table, by pin.
    let table = dump(&maps.join("maglev").join(vip_id.to_string()))?;
    ensure!(table.len() == 251, "{} entries in the table", table.len());
    let slots: HashSet<u64> = formatted(&table, "value")?
        .iter()
        .map(|v| v.as_u64().context("a slot number"))
        .collect::<Result<_>>()?;
    // 3. Each slot's backend.
    let mut reached = HashSet::new();
    for slot in &slots {
        let key: Vec<String> = (*slot as u32)
            .to_le_bytes()
            .iter()
            .map(u8::to_string)
            .collect();
        let mut args = vec!["map", "lookup", "pinned"];
        let backends = maps.join("BACKENDS");
        args.push(backends.to_str().context("pin path")?);
        args.push("key");
        args.extend(key.iter().map(String::as_str));
        let entry = bpftool(&args)?;
        let value = entry
            .get("formatted")
            .map_or(&entry["value"], |f| &f["value"]);
        let addr = octets(&value["addr"]);
        ensure!(
            value["port"] == 8080 && addr.len() == 16 && addr[..3] == [10, 0, 1],
            "slot {slot} names {value}, no configured backend"
        );
        reached.insert(addr[3]);
    }
    ensure!(
        reached == HashSet::from([1, 2, 3]),
        "the table reaches backends {reached:?} of 10.0.1.1-3"
    );
    // The same table from MAGLEV's raw entry: the map id, dumped by id.
    let inner = *maglev_tables(&maps)?
        .get(&vip_id)
        .with_context(|| format!("MAGLEV has no entry for VIP id {vip_id}"))?;
    let by_id = match bpftool(&["map", "dump", "id", &inner.to_string()])? {
        Value::Array(entries) => entries,
        other => bail!("dump of map {inner} is not a list: {other}"),
    };
    ensure!(
        formatted(&by_id, "value")? == formatted(&table, "value")?,
        "map id {inner} from MAGLEV is not the table pinned for VIP id {vip_id}"
    );
    drop(dp);
    Ok(())
}
