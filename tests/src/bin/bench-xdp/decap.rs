//! The backend agent's program (`lb-decap`) per packet, on an IPIP and an IP6IP6 frame as the
//! balancer sends them, beside two references on the same frames in the same rounds:
//!
//! - `bench_pass` of lb-bench-progs, which only returns XDP_PASS: the floor of any XDP
//!   program. What a program costs above it is its own work.
//! - Katran's decapsulation program (`xdpdecap`, katran/decap/bpf/decap.bpf.c), compiled at
//!   bench time in a scratch directory from the Katran source that `KATRAN_SRC` names (a
//!   checkout, or a git directory whose HEAD is used), with clang. Without either, the line
//!   `Katran decap: not built (reason)` says why. It is built in its default flavour (no
//!   GUE, no check of the outer destination), with `-DDECAP_TPR_STATS`, which only declares
//!   a TCP-option helper that an unused function refers to: without it that source does not
//!   compile. Nothing of it is kept.
//!
//! The agent and Katran decapsulate the frame in place, so each call runs a program once.
//! The kernel's clock for a call moves in steps of about 10 ns on the project's VMs, close to
//! the figures themselves, so a round's figure is the mean of the middle half of its calls'
//! times (the interquartile mean: as robust to stray slow calls as the median, finer than
//! one step); the result is the median of the rounds, and "above pass" is a program's
//! figure less the pass program's in the same round.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, anyhow, bail};
use aya::programs::Xdp;
use aya::{Ebpf, EbpfLoader};
use lb::agent::{Agent, Settings};
use lb::network::run_xdp;
use lb_tests::bench::{Scratch, workspace};
use lb_tests::packet::checksum::internet_checksum;
use lb_tests::packet::{ETH_P_IPV4, ETH_P_IPV6, Frame, Mac};

use super::versus::pin_to_cpu0;
use super::{TCP_ACK, median};

/// Rounds; every round times each frame on every program in turn.
const ROUNDS: usize = 5;
/// Single calls per frame, program and round.
const CALLS: usize = 10_000;
const XDP_PASS: u32 = 2;

/// The router's MAC and the backend's.
const ROUTER_MAC: Mac = [0x02, 0, 0, 0, 0xaa, 0x01];
const HOST_MAC: Mac = [0x02, 0, 0, 0, 0xbb, 0x01];
/// This backend's addresses (the outer destinations).
const HOST4: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 7);
const HOST6: Ipv6Addr = Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, 7);
/// A balancer's outer sources, in the prefixes of `[xdp] tunnel_source_v4` / `_v6`.
const LB4: Ipv4Addr = Ipv4Addr::new(10, 255, 0, 77);
const LB6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x255, 0, 0, 0, 0, 0, 0x77);
/// The client and the VIPs (inner source and destinations).
const CLIENT4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 7);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 7);
const VIP4: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 1);

/// One timed frame: the tunnel packet and the inner packet it carries.
struct Case {
    name: &'static str,
    frame: Vec<u8>,
    inner: Vec<u8>,
    inner_ethertype: u16,
}

/// A client's TCP ACK to the VIP inside IPIP (as the balancer builds it: DF, TTL 64,
/// identification 0, the inner TOS).
fn ipip() -> Case {
    let inner = Frame::tcp(
        (ROUTER_MAC, HOST_MAC),
        (CLIENT4, 40000),
        (VIP4, 80),
        TCP_ACK,
    )
    .to_bytes()[14..]
        .to_vec();
    let mut ip = vec![0x45, inner[1]];
    ip.extend_from_slice(&((20 + inner.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 4, 0, 0]);
    ip.extend_from_slice(&LB4.octets());
    ip.extend_from_slice(&HOST4.octets());
    let c = internet_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip.extend_from_slice(&inner);
    Case {
        name: "ipip",
        frame: Frame::raw((ROUTER_MAC, HOST_MAC), ETH_P_IPV4, ip).to_bytes(),
        inner,
        inner_ethertype: ETH_P_IPV4,
    }
}

/// The same in IPv6 inside IP6IP6 (a flow label, hop limit 64, next header 41).
fn ip6ip6() -> Case {
    let inner = Frame::tcp6(
        (ROUTER_MAC, HOST_MAC),
        (CLIENT6, 40000),
        (VIP6, 80),
        TCP_ACK,
    )
    .to_bytes()[14..]
        .to_vec();
    let mut ip = (0x6000_0000u32 | 0x1_2345).to_be_bytes().to_vec();
    ip.extend_from_slice(&(inner.len() as u16).to_be_bytes());
    ip.extend_from_slice(&[41, 64]);
    ip.extend_from_slice(&LB6.octets());
    ip.extend_from_slice(&HOST6.octets());
    ip.extend_from_slice(&inner);
    Case {
        name: "ip6ip6",
        frame: Frame::raw((ROUTER_MAC, HOST_MAC), ETH_P_IPV6, ip).to_bytes(),
        inner,
        inner_ethertype: ETH_P_IPV6,
    }
}

/// The agent with this host's addresses; with `filters`, also the balancers' prefixes and
/// the VIPs (`lb decap --source ... --vip ...`).
fn agent(object: &[u8], filters: bool) -> Result<Agent> {
    let mut agent = Agent::load(object, None).context("loading lb-decap")?;
    let settings = Settings {
        local: vec![HOST4.into(), HOST6.into()],
        sources: if filters {
            vec![
                "10.255.0.0/24".parse().map_err(|e| anyhow!("{e}"))?,
                "fd00:255::/64".parse().map_err(|e| anyhow!("{e}"))?,
            ]
        } else {
            Vec::new()
        },
        vips: if filters {
            vec![VIP4.into(), VIP6.into()]
        } else {
            Vec::new()
        },
        gue_port: None,
    };
    agent
        .maps
        .write(&settings)
        .context("writing lb-decap's maps")?;
    Ok(agent)
}

/// Loads program `name` of the object at `path`.
fn load_program(path: &Path, name: &str) -> Result<Ebpf> {
    let mut ebpf = EbpfLoader::new()
        .load_file(path)
        .with_context(|| format!("loading {}", path.display()))?;
    let prog: &mut Xdp = ebpf
        .program_mut(name)
        .ok_or_else(|| anyhow!("{} has no program {name}", path.display()))?
        .try_into()?;
    prog.load()
        .with_context(|| format!("verifying {name} of {}", path.display()))?;
    Ok(ebpf)
}

fn xdp<'a>(ebpf: &'a Ebpf, name: &str) -> Result<&'a Xdp> {
    Ok(ebpf
        .program(name)
        .ok_or_else(|| anyhow!("no program {name}"))?
        .try_into()?)
}

/// lb-bench-progs, built by `cargo xtask build` next to the balancer (or `LB_BENCH_PROGS`).
fn bench_progs_path() -> PathBuf {
    std::env::var_os("LB_BENCH_PROGS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            workspace().join("lb-ebpf/target/bpfel-unknown-none/release/lb-bench-progs")
        })
}

/// Runs `cmd`, failing with the first lines of its stderr.
fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let first: Vec<&str> = err.lines().filter(|l| !l.is_empty()).take(3).collect();
        return Err(format!(
            "{} failed: {}",
            cmd.get_program().to_string_lossy(),
            first.join(" / ")
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Katran's files the decapsulation program includes.
const KATRAN_PATHS: [&str; 3] = [
    "katran/decap/bpf",
    "katran/lib/bpf",
    "katran/lib/linux_includes",
];

/// Compiles Katran's decapsulation program from `KATRAN_SRC` into `scratch`: the object's
/// path and the source's commit, or why it could not be built.
fn build_katran_decap(scratch: &Scratch) -> Result<(PathBuf, String), String> {
    let src = std::env::var_os("KATRAN_SRC")
        .map(PathBuf::from)
        .ok_or("KATRAN_SRC is not set (a checkout or git directory of facebookincubator/katran)")?;
    let clang = ["clang-19", "clang"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
        .ok_or("no clang-19 or clang on PATH")?;
    let dir = scratch.dir("katran").map_err(|e| e.to_string())?;
    let commit;
    if src.join("katran/decap/bpf/decap.bpf.c").exists() {
        for p in KATRAN_PATHS {
            let to = dir.join(p);
            let parent = to.parent().ok_or("a path with no parent")?;
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
            run(Command::new("cp").arg("-r").arg(src.join(p)).arg(&to))?;
        }
        commit = run(Command::new("git")
            .arg("-C")
            .arg(&src)
            .args(["rev-parse", "HEAD"]))
        .unwrap_or_else(|_| "unknown commit".into());
    } else if src.join("HEAD").exists() {
        let tar = dir.join("src.tar");
        run(Command::new("git")
            .arg("--git-dir")
            .arg(&src)
            .args(["archive", "--format=tar", "-o"])
            .arg(&tar)
            .arg("HEAD")
            .args(KATRAN_PATHS))?;
        run(Command::new("tar").arg("-xf").arg(&tar).arg("-C").arg(&dir))?;
        commit = run(Command::new("git")
            .arg("--git-dir")
            .arg(&src)
            .args(["rev-parse", "HEAD"]))?;
    } else {
        return Err(format!(
            "{} holds no katran/decap/bpf/decap.bpf.c and is no git directory",
            src.display()
        ));
    }
    let object = dir.join("decap.bpf.o");
    run(Command::new(clang)
        .current_dir(&dir)
        .args([
            "-O2",
            "-g",
            "-target",
            "bpf",
            "-I.",
            "-Ikatran/lib/linux_includes",
            "-I/usr/include/x86_64-linux-gnu",
            "-D__x86_64__",
            "-D__KERNEL__",
            "-DDECAP_TPR_STATS",
            "-Wno-unused-value",
            "-Wno-pointer-sign",
            "-Wno-compare-distinct-pointer-types",
            "-c",
            "katran/decap/bpf/decap.bpf.c",
            "-o",
        ])
        .arg(&object))?;
    Ok((object, format!("{clang}, Katran {commit:.8}")))
}

/// Checks that `prog` passes the frame decapsulated: the Ethernet header kept with the
/// inner family's type, then the inner packet byte for byte (`exact`), or at least the
/// inner packet after 14 bytes.
fn check(what: &str, prog: &Xdp, case: &Case, exact: bool) -> Result<()> {
    let run = run_xdp(prog, &case.frame, 1, None)?;
    if run.verdict != XDP_PASS || run.output.len() != 14 + case.inner.len() {
        bail!(
            "{what} {}: verdict {} and {} bytes out, expected a pass of {} bytes",
            case.name,
            run.verdict,
            run.output.len(),
            14 + case.inner.len()
        );
    }
    let mut want = case.frame[..12].to_vec();
    want.extend_from_slice(&case.inner_ethertype.to_be_bytes());
    want.extend_from_slice(&case.inner);
    let same = if exact {
        run.output == want
    } else {
        run.output[12..] == want[12..]
    };
    if !same {
        bail!("{what} {}: not the inner packet", case.name);
    }
    Ok(())
}

/// The interquartile mean of `CALLS` single runs of `prog` on `frame`, in ns.
fn iqm_single(prog: &Xdp, frame: &[u8]) -> Result<f64> {
    let mut samples = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        samples.push(run_xdp(prog, frame, 1, None)?.per_run.as_nanos() as f64);
    }
    samples.sort_by(f64::total_cmp);
    let middle = &samples[CALLS / 4..CALLS * 3 / 4];
    Ok(middle.iter().sum::<f64>() / middle.len() as f64)
}

/// Times the agent against the pass program and Katran's decapsulation, and prints one line
/// per frame and program.
pub fn run_decap() -> Result<()> {
    pin_to_cpu0()?;
    let object = lb::agent::read_object()?;
    let plain = agent(&object, false)?;
    let filtered = agent(&object, true)?;
    let progs_path = bench_progs_path();
    let pass = load_program(&progs_path, "bench_pass")?;
    let scratch = Scratch::new("bench-xdp-decap")?;
    let katran = match build_katran_decap(&scratch) {
        Ok((path, how)) => match load_program(&path, "xdpdecap") {
            Ok(ebpf) => {
                println!("Katran decap: built ({how})");
                Some(ebpf)
            }
            Err(e) => {
                println!("Katran decap: not built (it does not load: {e:#})");
                None
            }
        },
        Err(why) => {
            println!("Katran decap: not built ({why})");
            None
        }
    };
    // The programs in their order on every line; the pass program first.
    let mut progs: Vec<(&str, &Xdp)> = vec![
        ("pass", xdp(&pass, "bench_pass")?),
        ("lb-decap", plain.program()?),
        ("lb-decap, filters", filtered.program()?),
    ];
    if let Some(k) = &katran {
        progs.push(("katran", xdp(k, "xdpdecap")?));
    }
    let cases = [ipip(), ip6ip6()];
    for case in &cases {
        let pass_out = run_xdp(progs[0].1, &case.frame, 1, None)?;
        if pass_out.verdict != XDP_PASS || pass_out.output != case.frame {
            bail!("pass {}: expected the frame passed untouched", case.name);
        }
        for (name, prog) in &progs[1..] {
            check(name, prog, case, name.starts_with("lb-decap"))?;
        }
    }
    for (name, agent) in [("lb-decap", &plain), ("lb-decap, filters", &filtered)] {
        let snap = agent.maps.read()?;
        if snap.counter("decapsulated") != cases.len() as u64 {
            bail!(
                "{name}: {} packets counted decapsulated, expected {}",
                snap.counter("decapsulated"),
                cases.len()
            );
        }
    }
    // (case, program) -> per-round figures of a single call.
    let mut times = vec![vec![Vec::new(); progs.len()]; cases.len()];
    for _ in 0..ROUNDS {
        for (c, case) in cases.iter().enumerate() {
            for (p, (_, prog)) in progs.iter().enumerate() {
                times[c][p].push(iqm_single(prog, &case.frame)?);
            }
        }
    }
    println!(
        "\nBackend agent per packet (a single call's interquartile mean, median of {ROUNDS} rounds; \"above pass\": less the pass program's):"
    );
    for (c, case) in cases.iter().enumerate() {
        // Per round, each program less the pass program of that round.
        let above = |p: usize| {
            let v: Vec<f64> = times[c][p]
                .iter()
                .zip(&times[c][0])
                .map(|(t, floor)| t - floor)
                .collect();
            median(&v)
        };
        let katran = (progs.len() > 3).then(|| above(3));
        for (p, (name, _)) in progs.iter().enumerate() {
            let mut line = format!(
                "decap {} {name}: {:.0} ns per call, {:.0} ns above pass",
                case.name,
                median(&times[c][p]),
                above(p)
            );
            if name.starts_with("lb-decap")
                && let Some(k) = katran
            {
                line += &format!(", ratio vs katran: {:.2}", above(p) / k.max(1.0));
            }
            println!("{line}");
        }
        if katran.is_none() {
            println!("decap {} katran: not built", case.name);
        }
    }
    Ok(())
}
