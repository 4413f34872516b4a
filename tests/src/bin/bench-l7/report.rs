//! The closing report: medians per system, ratios ours / theirs, the Maintenance run, and
//! what could not be measured. Printed as markdown and saved to `target/bench/l7.md`.

use std::fmt::Write as _;
use std::path::Path;

use crate::cases::Case;
use crate::h2load;
use crate::idle;
use crate::maint::MaintReport;
use crate::peers::{MAINT_BACKENDS, WORKERS};
use crate::wrk::{Load, WrkResult};

/// The medians of one system's runs.
pub struct SystemFigures {
    name: &'static str,
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    each_rps: Vec<f64>,
    /// (round, req/s, p99 ms) of each run, to compare systems round by round.
    per_round: Vec<(u64, f64, f64)>,
    failed: u64,
    /// Median CPU microseconds per request of the proxy's processes (None: not measured).
    cpu_us: Option<f64>,
    /// Median RSS growth per idle connection, KiB (the idle case only).
    mem_kib: Option<f64>,
    /// Median whole RSS with the idle connections open, MiB (the idle case only).
    rss_mib: Option<f64>,
}

/// Median of a non-empty list (the mean of the two middle values for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// A ratio ours / theirs over paired rounds: the geometric mean and its 95% confidence
/// interval (Student's t on the logarithms). Rounds on this machine scatter by 15-20%, so a
/// single figure cannot say whether a few percent is a difference or noise; the interval can.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Ratio {
    mean: f64,
    low: f64,
    high: f64,
}

impl Ratio {
    /// From the per-round ratios (all above 0); with one round the interval is unbounded.
    fn of(ratios: impl IntoIterator<Item = f64>) -> Self {
        let logs: Vec<f64> = ratios.into_iter().map(f64::ln).collect();
        let n = logs.len();
        let mean = logs.iter().sum::<f64>() / n as f64;
        if n < 2 {
            return Self {
                mean: mean.exp(),
                low: 0.0,
                high: f64::INFINITY,
            };
        }
        let var = logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let half = t975(n - 1) * (var / n as f64).sqrt();
        Self {
            mean: mean.exp(),
            low: (mean - half).exp(),
            high: (mean + half).exp(),
        }
    }

    /// Where the interval lies against 1, for a figure where lower is better (p99).
    fn lower_is_better(&self) -> &'static str {
        if self.high <= 1.0 {
            "better"
        } else if self.low > 1.0 {
            "worse"
        } else {
            "no difference beyond noise"
        }
    }
}

impl std::fmt::Display for Ratio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.2}x (95% CI {:.2}-{:.2})",
            self.mean, self.low, self.high
        )
    }
}

/// The 97.5th percentile of Student's t with `df` degrees of freedom (two-sided 95%).
fn t975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        // Within 0.003 of the exact value from 31 on (2.040 at 31, 1.960 in the limit).
        _ => 1.96 + 2.4 / df as f64,
    }
}

/// Ours against one peer over the rounds both ran.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Paired {
    rounds: usize,
    rps: Ratio,
    p99: Ratio,
    /// Rounds in which our p99 was lower or equal.
    p99_no_worse: usize,
}

impl SystemFigures {
    /// Medians over `runs` (at least one, made in rounds `rounds`) and over the CPU cost per
    /// request of each run.
    pub fn new(name: &'static str, runs: &[WrkResult], rounds: &[u64], cpu_us: &[f64]) -> Self {
        Self {
            name,
            rps: median(runs.iter().map(|r| r.rps).collect()),
            p50_ms: median(runs.iter().map(|r| r.p50_ms).collect()),
            p99_ms: median(runs.iter().map(|r| r.p99_ms).collect()),
            each_rps: runs.iter().map(|r| r.rps).collect(),
            per_round: rounds
                .iter()
                .zip(runs)
                .map(|(&k, r)| (k, r.rps, r.p99_ms))
                .collect(),
            failed: runs.iter().map(WrkResult::failed).sum(),
            cpu_us: (!cpu_us.is_empty()).then(|| median(cpu_us.to_vec())),
            mem_kib: None,
            rss_mib: None,
        }
    }

    /// Adds the medians of the RSS growth per idle connection (KiB) and of the whole RSS with
    /// them open (MiB) of each run, if any.
    pub fn with_memory(mut self, mem_kib: &[f64], rss_mib: &[f64]) -> Self {
        self.mem_kib = (!mem_kib.is_empty()).then(|| median(mem_kib.to_vec()));
        self.rss_mib = (!rss_mib.is_empty()).then(|| median(rss_mib.to_vec()));
        self
    }
}

/// How a case is named in the report: its heading, what it runs, and the word its
/// comparison lines carry (`ratio HTTPS keep-alive vs haproxy`).
fn case_text(case: Case, l: Load) -> (&'static str, String, &'static str) {
    match case {
        Case::Https => (
            "HTTPS keep-alive",
            format!(
                "wrk -t{} -c{} on https:// (TLS 1.3, HTTP/1.1: wrk offers no ALPN), \
                 connections kept alive.",
                l.threads, l.connections
            ),
            " HTTPS keep-alive",
        ),
        Case::Handshake => (
            "HTTPS handshakes",
            format!(
                "wrk -t{} -c{} on https:// with `Connection: close`: every request on a new \
                 TLS 1.3 connection (wrk does not resume sessions), so req/s = new TLS \
                 connections per second and CPU per request = CPU per handshake.",
                l.threads, l.connections
            ),
            " handshakes",
        ),
        Case::H2 => (
            "HTTP/2 over TLS",
            format!(
                "h2load -t{} -c{} -m{} (ALPN h2, TLS 1.3); p50/p99 from h2load's per-request \
                 log.",
                l.threads,
                h2load::CONNECTIONS,
                h2load::STREAMS
            ),
            " HTTP/2",
        ),
        Case::Idle => (
            "Idle keep-alive connections",
            format!(
                "The bench opens {} plain HTTP/1.1 keep-alive connections one by one, one \
                 request each, and keeps them open; memory per idle connection = the proxy's \
                 RSS (all its processes) after they are open minus before, / {} (memory a \
                 proxy allocates up front for its connection limit, as nginx does for \
                 `worker_connections`, is in the whole RSS column, not in the growth; kernel \
                 socket buffers are in neither). Then wrk \
                 -t{} -c16 on other connections while they stay open: req/s and p99 of those \
                 active requests.",
                idle::IDLE,
                idle::IDLE,
                l.threads
            ),
            " beside idle connections",
        ),
    }
}

/// Everything the bench has to say.
pub struct Report {
    load: Load,
    rounds: u64,
    /// The pause per connection of the runs below saturation (None: not run).
    think_ms: Option<u64>,
    header: Vec<String>,
    /// Runs with the proxies saturated.
    systems: Vec<SystemFigures>,
    /// Runs below saturation.
    paced: Vec<SystemFigures>,
    /// The TLS, HTTP/2 and idle-connection cases, each with its systems' medians, in [`Case::ALL`] order.
    cases: Vec<(Case, Vec<SystemFigures>)>,
    maintenance: Option<MaintReport>,
    not_measured: Vec<String>,
}

impl Report {
    /// An empty report for this load.
    pub fn new(load: Load, rounds: u64, think_ms: Option<u64>) -> Self {
        Self {
            load,
            rounds,
            think_ms,
            header: Vec::new(),
            systems: Vec::new(),
            paced: Vec::new(),
            cases: Vec::new(),
            maintenance: None,
            not_measured: Vec::new(),
        }
    }

    /// A line of context (versions, machine).
    pub fn header(&mut self, line: String) {
        self.header.push(line);
    }

    /// One system's medians with wrk's connections back to back.
    pub fn system(&mut self, f: SystemFigures) {
        self.systems.push(f);
    }

    /// One system's medians with a pause per connection.
    pub fn paced(&mut self, f: SystemFigures) {
        self.paced.push(f);
    }

    /// One system's medians in one of the TLS, HTTP/2 and idle-connection cases.
    pub fn case(&mut self, case: Case, f: SystemFigures) {
        match self.cases.iter_mut().find(|(c, _)| *c == case) {
            Some((_, systems)) => systems.push(f),
            None => {
                self.cases.push((case, vec![f]));
                self.cases.sort_by_key(|(c, _)| c.index());
            }
        }
    }

    /// The Maintenance run's result.
    pub fn maintenance(&mut self, m: MaintReport) {
        self.maintenance = Some(m);
    }

    /// Something that could not be measured, and why.
    pub fn not_measured(&mut self, what: String) {
        self.not_measured.push(what);
    }

    /// Ours / theirs within each round both ran (neighbours in time, so a slow phase of the
    /// machine weighs on both). None without a common round.
    fn same_round(ours: &SystemFigures, peer: &SystemFigures) -> Option<Paired> {
        let pairs: Vec<(f64, f64)> = ours
            .per_round
            .iter()
            .filter_map(|&(k, rps, p99)| {
                let &(_, prps, pp99) = peer.per_round.iter().find(|r| r.0 == k)?;
                Some((rps / prps, p99 / pp99))
            })
            .collect();
        if pairs.is_empty() {
            return None;
        }
        Some(Paired {
            rounds: pairs.len(),
            rps: Ratio::of(pairs.iter().map(|p| p.0)),
            p99: Ratio::of(pairs.iter().map(|p| p.1)),
            p99_no_worse: pairs.iter().filter(|p| p.1 <= 1.0).count(),
        })
    }

    /// The whole report as markdown.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let l = self.load;
        let _ = writeln!(o, "## L7 proxy benchmark\n");
        let _ = writeln!(
            o,
            "Machine: {} CPUs, load average at the end {}; kernel {}.",
            std::thread::available_parallelism().map_or(0, usize::from),
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
            std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim(),
        );
        for h in &self.header {
            let _ = writeln!(o, "{h}.");
        }
        let _ = writeln!(
            o,
            "Load: wrk -t{} -c{} -d{}s --latency, {} rounds alternating the systems (medians); \
             each round restarts and warms up every proxy, so its upstream connections are \
             spread over the backend's workers afresh. Every proxy has {WORKERS} workers, keeps upstream connections alive, logs off; \
             backend: nginx `return 200` on 127.0.0.1. All processes share the same CPUs; \
             proxy CPU per request = user + system time of the proxy's processes during a \
             run / its requests (median), which other load on the machine disturbs less than \
             req/s.\n",
            l.threads,
            l.connections,
            l.duration.as_secs(),
            self.rounds
        );
        if !self.paced.is_empty() {
            let _ = writeln!(o, "### Saturated: connections back to back\n");
        }
        table(&mut o, &self.systems);
        comparisons(&mut o, &self.systems, "");
        if let Some(think) = self.think_ms.filter(|_| !self.paced.is_empty()) {
            let _ = writeln!(
                o,
                "### Below saturation\n\nThe same load, except that each connection pauses \
                 {think} ms after every response (a wrk `delay` script), run on the same \
                 process right after the run above. Back to back, every proxy is saturated and \
                 its latency is mostly the queue in front of the slowest process on the \
                 machine; with the pause, the request rate stays below what the machine can \
                 carry, so latency compares the proxies at about the same rate (a faster proxy \
                 gets a little more of it).\n"
            );
            table(&mut o, &self.paced);
            comparisons(&mut o, &self.paced, " below saturation");
        }
        for (case, systems) in &self.cases {
            let (title, what, kind) = case_text(*case, l);
            let _ = writeln!(o, "### {title}\n\n{what}\n");
            table(&mut o, systems);
            comparisons(&mut o, systems, kind);
        }
        if let Some(m) = &self.maintenance {
            let _ = writeln!(
                o,
                "Maintenance moved between {a} and {b} every second through the API during a \
                 {d} s wrk run (-t{t} -c{c}) on our proxy:\n\n\
                 | requests | failed | non-2xx | socket errors | API calls ok / failed | \
                 slowest call | served {a} / {b} | late |\n\
                 |---:|---:|---:|---:|---|---:|---|---:|\n\
                 | {req} | {failed} | {non} | {sock} | {ok} / {bad} | {slow:.0} ms | \
                 {sa} / {sb} | {late} |\n\n\
                 failed requests during maintenance toggling: {failed}\n",
                a = MAINT_BACKENDS[0],
                b = MAINT_BACKENDS[1],
                d = m.duration.as_secs(),
                t = l.threads,
                c = l.connections,
                req = m.wrk.requests,
                failed = m.wrk.failed(),
                non = m.wrk.non_2xx,
                sock = m.wrk.socket_errors,
                ok = m.calls_ok,
                bad = m.calls_failed.len(),
                slow = m.slowest_call.as_secs_f64() * 1e3,
                sa = m.served[0],
                sb = m.served[1],
                late = m.late,
            );
            let _ = writeln!(
                o,
                "(late = requests a backend served more than 100 ms after its Maintenance call \
                 returned.)\n"
            );
            for e in &m.calls_failed {
                let _ = writeln!(o, "- API call failed: {e}");
            }
        }
        if !self.not_measured.is_empty() {
            let _ = writeln!(o, "Not measured:\n");
            for n in &self.not_measured {
                let _ = writeln!(o, "- {}", n.replace('\n', "\n  "));
            }
        }
        o
    }

    /// Prints the report and writes it to `<workspace>/target/bench/l7.md`.
    pub fn print_and_save(&self, workspace: &Path) {
        let text = self.render();
        println!("\n{text}");
        let dir = workspace.join("target/bench");
        let saved =
            std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(dir.join("l7.md"), &text));
        match saved {
            Ok(()) => println!("(saved to {})", dir.join("l7.md").display()),
            Err(e) => println!("(could not save to {}: {e})", dir.display()),
        }
    }
}

/// One row per system: medians of its runs.
fn table(o: &mut String, systems: &[SystemFigures]) {
    if systems.is_empty() {
        return;
    }
    let memory = systems.iter().any(|s| s.mem_kib.is_some());
    let _ = writeln!(
        o,
        "| system | req/s (median) | p50 latency | p99 latency | proxy CPU per request | \
         req/s per round | failed requests |{}\n|---|---:|---:|---:|---:|---|---:|{}",
        if memory {
            " memory per idle connection | RSS with them open |"
        } else {
            ""
        },
        if memory { "---:|---:|" } else { "" },
    );
    for s in systems {
        let each: Vec<String> = s.each_rps.iter().map(|r| format!("{r:.0}")).collect();
        let mem = match (memory, s.mem_kib, s.rss_mib) {
            (false, ..) => String::new(),
            (true, Some(k), Some(m)) => format!(" {k:.2} KiB | {m:.1} MiB |"),
            (true, ..) => " not measured | not measured |".into(),
        };
        let _ = writeln!(
            o,
            "| {} | {:.0} | {:.3} ms | {:.3} ms | {} | {} | {} |{mem}",
            s.name,
            s.rps,
            s.p50_ms,
            s.p99_ms,
            s.cpu_us
                .map_or("not measured".into(), |c| format!("{c:.1} us")),
            each.join(" / "),
            s.failed
        );
    }
    let _ = writeln!(o);
}

/// Ours against each peer: ratios of the medians, then within each round with the p99
/// verdict. `kind` names the runs (empty for the saturated ones, whose lines keep the
/// plain `ratio vs <peer>` form).
fn comparisons(o: &mut String, systems: &[SystemFigures], kind: &str) {
    let find = |name: &str| systems.iter().find(|s| s.name == name);
    let Some(ours) = find("lb") else {
        return;
    };
    for peer in ["haproxy", "nginx"] {
        let Some(p) = find(peer) else {
            continue;
        };
        let _ = writeln!(o, "ratio{kind} vs {peer}: {:.2}  ", ours.rps / p.rps);
        if let (Some(a), Some(b)) = (ours.mem_kib, p.mem_kib) {
            let _ = writeln!(
                o,
                "memory per idle connection vs {peer}: {a:.2} KiB vs {b:.2} KiB (RSS growth)  "
            );
        }
        if let (Some(a), Some(b)) = (ours.rss_mib, p.rss_mib) {
            let _ = writeln!(
                o,
                "RSS with the idle connections open vs {peer}: {a:.1} MiB vs {b:.1} MiB \
                 ({:.2}x)  ",
                a / b
            );
        }
        if let (Some(a), Some(b)) = (ours.cpu_us, p.cpu_us) {
            let _ = writeln!(
                o,
                "CPU per request{kind} vs {peer}: {a:.1} us vs {b:.1} us ({:.2}x)  ",
                a / b
            );
        }
        let _ = writeln!(
            o,
            "p99{kind} vs {peer}: {:.3} ms vs {:.3} ms ({:.2}x, medians)  ",
            ours.p99_ms,
            p.p99_ms,
            ours.p99_ms / p.p99_ms,
        );
        if let Some(r) = Report::same_round(ours, p) {
            let _ = writeln!(
                o,
                "same-round ratios{kind} vs {peer} ({n} rounds, geometric means): req/s \
                 {rps}, p99 {p99}; our p99 no worse in {k} of {n}  \n\
                 p99 verdict{kind} vs {peer}: {verdict}  ",
                n = r.rounds,
                rps = r.rps,
                p99 = r.p99,
                k = r.p99_no_worse,
                verdict = r.p99.lower_is_better(),
            );
        }
    }
    let _ = writeln!(o);
}

/// No rule of docs/behaviour.md covers the bench's statistics: these check its same-round
/// ratios, confidence intervals and verdicts.
#[cfg(test)]
mod tests {
    use super::*;

    fn run(rps: f64, p99_ms: f64) -> WrkResult {
        WrkResult {
            rps,
            p99_ms,
            ..WrkResult::default()
        }
    }

    #[test]
    fn same_round_ratios_pair_only_rounds_both_systems_ran() {
        let ours = SystemFigures::new(
            "lb",
            &[run(100.0, 2.0), run(120.0, 3.0), run(90.0, 4.0)],
            &[1, 2, 3],
            &[],
        );
        // The peer missed round 1.
        let peer = SystemFigures::new("haproxy", &[run(100.0, 2.0), run(100.0, 5.0)], &[2, 3], &[]);
        let r = Report::same_round(&ours, &peer).expect("common rounds");
        assert_eq!(r.rounds, 2);
        assert!(
            (r.rps.mean - (1.2f64 * 0.9).sqrt()).abs() < 1e-9,
            "{:?}",
            r.rps
        );
        assert!(
            (r.p99.mean - (1.5f64 * 0.8).sqrt()).abs() < 1e-9,
            "{:?}",
            r.p99
        );
        assert_eq!(r.p99_no_worse, 1);
    }

    #[test]
    fn the_interval_matches_a_hand_computed_t_interval() {
        // Logs -0.1, 0.0, 0.1: mean 0, sd 0.1, n 3, t(2) = 4.303.
        let r = Ratio::of([(-0.1f64).exp(), 1.0, 0.1f64.exp()]);
        let half = 4.303 * 0.1 / 3f64.sqrt();
        assert!((r.mean - 1.0).abs() < 1e-12, "{r:?}");
        assert!((r.low - (-half).exp()).abs() < 1e-9, "{r:?}");
        assert!((r.high - half.exp()).abs() < 1e-9, "{r:?}");
        assert_eq!(r.lower_is_better(), "no difference beyond noise");
    }

    #[test]
    fn the_verdict_needs_the_whole_interval_on_one_side_of_1() {
        let better = Ratio::of([0.90, 0.92, 0.88, 0.91, 0.89]);
        assert_eq!(better.lower_is_better(), "better");
        let worse = Ratio::of([1.10, 1.12, 1.08, 1.11, 1.09]);
        assert_eq!(worse.lower_is_better(), "worse");
        // Mostly below 1, but scattered as this machine's rounds are: not a finding.
        let noisy = Ratio::of([0.80, 1.15, 0.90, 1.05, 0.85]);
        assert!(noisy.mean < 1.0, "{noisy:?}");
        assert_eq!(noisy.lower_is_better(), "no difference beyond noise");
        // One round says nothing.
        let one = Ratio::of([0.5]);
        assert_eq!(one.lower_is_better(), "no difference beyond noise");
    }

    #[test]
    fn paced_runs_get_their_own_section_and_the_saturated_lines_keep_their_form() {
        let load = Load {
            threads: 2,
            connections: 64,
            duration: std::time::Duration::from_secs(6),
        };
        let mut report = Report::new(load, 2, Some(1));
        let figures = |name, rps: [f64; 2], p99: [f64; 2]| {
            SystemFigures::new(
                name,
                &[run(rps[0], p99[0]), run(rps[1], p99[1])],
                &[1, 2],
                &[],
            )
        };
        report.system(figures("lb", [110.0, 110.0], [4.0, 4.0]));
        report.system(figures("haproxy", [100.0, 100.0], [4.0, 4.0]));
        report.paced(figures("lb", [90.0, 90.0], [2.0, 2.2]));
        report.paced(figures("haproxy", [80.0, 80.0], [2.5, 2.75]));
        let text = report.render();
        assert!(text.contains("ratio vs haproxy: 1.10"), "{text}");
        assert!(
            text.contains("ratio below saturation vs haproxy: 1.12"),
            "{text}"
        );
        assert!(
            text.contains("p99 below saturation vs haproxy: 2.100 ms vs 2.625 ms (0.80x"),
            "{text}"
        );
        // Both rounds at exactly 0.8: an interval of zero width, below 1.
        assert!(
            text.contains("p99 verdict below saturation vs haproxy: better"),
            "{text}"
        );
        assert!(
            text.find("### Saturated") < text.find("### Below saturation"),
            "{text}"
        );
        // No paced runs: no section.
        let mut plain = Report::new(load, 2, None);
        plain.system(figures("lb", [110.0, 110.0], [4.0, 4.0]));
        assert!(!plain.render().contains("Below saturation"));
    }

    #[test]
    fn t_quantiles_follow_the_table_and_its_tail() {
        assert!((t975(1) - 12.706).abs() < 1e-9);
        assert!((t975(30) - 2.042).abs() < 1e-9);
        // Exact: df 31 -> 2.040, df 40 -> 2.021, df 120 -> 1.980.
        assert!((t975(31) - 2.040).abs() < 0.003);
        assert!((t975(40) - 2.021).abs() < 0.002);
        assert!((t975(120) - 1.980).abs() < 0.002);
    }
}
