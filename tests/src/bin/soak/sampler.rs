//! Once a second: the serving `lb run`'s resident memory (VmRSS, and its heap: RssAnon) and
//! open file descriptors
//! (entries of /proc/PID/fd); every fifth second the occupancy of the XDP connection table
//! (entries of the pinned CONNS map, counted by `bpftool map dump`). Written to
//! `samples.csv`, summarised after warm-up, and drawn as a PNG.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};

use lb_tests::netns::status::pinned_map_entries;

use crate::events::now_ms;

/// One sample.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Ms since the start.
    pub at: u64,
    /// The serving daemon's pid.
    pub pid: u32,
    /// VmRSS in KiB.
    pub rss_kb: u64,
    /// RssAnon in KiB: the heap and stacks, what a leak grows (VmRSS also counts the pages
    /// of the binary's code, which grow as code runs for the first time).
    pub anon_kb: u64,
    /// Open file descriptors.
    pub fds: u64,
    /// Connection-table entries, when counted this second.
    pub conns: Option<u64>,
}

/// The sampling thread; [`Sampler::finish`] stops it and returns the samples.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Samples the process whose pid `pid` holds; the CONNS map under `pin_dir`.
    pub fn start(pid: Arc<AtomicU32>, pin_dir: &Path) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let conns = pin_dir.join("maps/CONNS");
        let (s, out) = (stop.clone(), samples.clone());
        let thread = std::thread::spawn(move || {
            let mut n = 0u64;
            while !s.load(Ordering::SeqCst) {
                let p = pid.load(Ordering::SeqCst);
                if let (Some((rss_kb, anon_kb)), Some(fds)) = (rss(p), fds(p)) {
                    let conns = n
                        .is_multiple_of(5)
                        .then(|| pinned_map_entries(&conns))
                        .flatten();
                    if let Ok(mut v) = out.lock() {
                        v.push(Sample {
                            at: now_ms(),
                            pid: p,
                            rss_kb,
                            anon_kb,
                            fds,
                            conns,
                        });
                    }
                }
                n += 1;
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        Sampler {
            stop,
            samples,
            thread: Some(thread),
        }
    }

    /// Stops sampling; the samples in order.
    pub fn finish(mut self) -> Vec<Sample> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.samples.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// (VmRSS, RssAnon) in KiB.
fn rss(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some((field("VmRSS:")?, field("RssAnon:")?))
}

fn fds(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

/// Writes `samples.csv` in `dir`.
pub fn write_csv(dir: &Path, samples: &[Sample]) -> Result<PathBuf> {
    let mut text = String::from("seconds,pid,rss_kib,rss_anon_kib,fds,conn_table_entries\n");
    for s in samples {
        text += &format!(
            "{:.1},{},{},{},{},{}\n",
            s.at as f64 / 1000.0,
            s.pid,
            s.rss_kb,
            s.anon_kb,
            s.fds,
            s.conns.map(|c| c.to_string()).unwrap_or_default()
        );
    }
    let path = dir.join("samples.csv");
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Growth over one daemon lifetime after warm-up. Its first and last figures are medians
/// of 10 samples taken outside the hostile clients' bursts (100 slowloris connections hold
/// memory and fds while they are open, which the daemon gives back once they are closed).
pub struct Growth {
    /// The process.
    pub pid: u32,
    /// Seconds of it after warm-up that were sampled.
    pub seconds: f64,
    /// Median RSS (KiB) of its first 10 samples after warm-up.
    pub rss_first: u64,
    /// Median RSS (KiB) of its last 10 samples.
    pub rss_last: u64,
    /// Median RssAnon (KiB) of the same first and last samples.
    pub anon_first_last: (u64, u64),
    /// Highest RSS (KiB) after warm-up, bursts included.
    pub rss_peak: u64,
    /// Fewest and most fds after warm-up.
    pub fds: (u64, u64),
    /// Median fds of the first and last 10 samples.
    pub fds_first_last: (u64, u64),
    /// Median RSS (KiB) of the 10 samples at the middle of the measured span: growth from
    /// there to the end is growth that continues once the process has settled.
    pub rss_middle: u64,
}

impl Growth {
    /// RSS growth in percent.
    pub fn rss_percent(&self) -> f64 {
        (self.rss_last as f64 - self.rss_first as f64) * 100.0 / self.rss_first.max(1) as f64
    }

    /// Heap (RssAnon) growth in percent.
    pub fn anon_percent(&self) -> f64 {
        let (first, last) = self.anon_first_last;
        (last as f64 - first as f64) * 100.0 / first.max(1) as f64
    }

    /// RSS growth over the second half of the measured span, in percent.
    pub fn rss_second_half_percent(&self) -> f64 {
        (self.rss_last as f64 - self.rss_middle as f64) * 100.0 / self.rss_middle.max(1) as f64
    }
}

/// The highest RSS (KiB) of each daemon process, in the order they ran: a leak shows as
/// peaks that climb from one process to the next as well as within one.
pub fn peaks(samples: &[Sample]) -> Vec<(u32, u64)> {
    let mut out: Vec<(u32, u64)> = Vec::new();
    for s in samples {
        match out.last_mut() {
            Some((pid, peak)) if *pid == s.pid => *peak = (*peak).max(s.rss_kb),
            _ => out.push((s.pid, s.rss_kb)),
        }
    }
    out
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// The growth of the longest-lived daemon process after warm-up: a process is measured from
/// `warm_at` (the run's warm-up end) or, when it started later (an upgrade, a restart after
/// kill -9), from `warm_len` after its own start: a new process fills its buffer pools and
/// idle lists under the load first. `burst` tells the moments a
/// hostile burst was open, left out of the first and last figures.
pub fn growth(
    samples: &[Sample],
    warm_at: u64,
    warm_len: u64,
    burst: &dyn Fn(u64) -> bool,
) -> Option<Growth> {
    let mut pids: Vec<u32> = samples.iter().map(|s| s.pid).collect();
    pids.dedup();
    pids.sort_unstable();
    pids.dedup();
    let mut best: Option<Growth> = None;
    for pid in pids {
        let mine: Vec<&Sample> = samples.iter().filter(|s| s.pid == pid).collect();
        let first_at = mine.first()?.at;
        let from = warm_at.max(first_at + warm_len);
        let after: Vec<&Sample> = mine.into_iter().filter(|s| s.at >= from).collect();
        if after.len() < 20 {
            continue;
        }
        let seconds = (after[after.len() - 1].at - after[0].at) as f64 / 1000.0;
        if best.as_ref().is_some_and(|b| b.seconds >= seconds) {
            continue;
        }
        let calm: Vec<&Sample> = after.iter().copied().filter(|s| !burst(s.at)).collect();
        if calm.len() < 20 {
            continue;
        }
        let head: Vec<&Sample> = calm.iter().take(10).copied().collect();
        let middle: Vec<&Sample> = calm.iter().skip(calm.len() / 2).take(10).copied().collect();
        let tail: Vec<&Sample> = calm.iter().rev().take(10).copied().collect();
        best = Some(Growth {
            pid,
            seconds,
            rss_first: median(head.iter().map(|s| s.rss_kb).collect()),
            rss_last: median(tail.iter().map(|s| s.rss_kb).collect()),
            rss_middle: median(middle.iter().map(|s| s.rss_kb).collect()),
            anon_first_last: (
                median(head.iter().map(|s| s.anon_kb).collect()),
                median(tail.iter().map(|s| s.anon_kb).collect()),
            ),
            rss_peak: after.iter().map(|s| s.rss_kb).max().unwrap_or(0),
            fds: (
                after.iter().map(|s| s.fds).min().unwrap_or(0),
                after.iter().map(|s| s.fds).max().unwrap_or(0),
            ),
            fds_first_last: (
                median(head.iter().map(|s| s.fds).collect()),
                median(tail.iter().map(|s| s.fds).collect()),
            ),
        });
    }
    best
}

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Draws RSS (MiB), open fds and connection-table entries over time into `soak.png`,
/// with the faults that restart the daemon marked. Needs DejaVu Sans (fonts-dejavu-core).
pub fn plot(dir: &Path, samples: &[Sample], restarts: &[u64], title: &str) -> Result<PathBuf> {
    use plotters::prelude::*;
    use plotters::style::{FontStyle, register_font};
    let bytes = std::fs::read(FONT).with_context(|| format!("reading {FONT}"))?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow!("{FONT} is not a usable font"))?;
    let path = dir.join("soak.png");
    let root = BitMapBackend::new(&path, (1000, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let root = root
        .titled(title, ("sans-serif", 20))
        .map_err(|e| anyhow!("{e}"))?;
    let areas = root.split_evenly((3, 1));
    let end = samples
        .last()
        .map_or(1.0, |s| s.at as f64 / 1000.0)
        .max(1.0);
    type Series<'a> = (&'a str, Vec<(f64, f64)>, RGBColor);
    let series: [Series<'_>; 3] = [
        (
            "lb run RSS (MiB)",
            samples
                .iter()
                .map(|s| (s.at as f64 / 1000.0, s.rss_kb as f64 / 1024.0))
                .collect(),
            BLUE,
        ),
        (
            "lb run open fds",
            samples
                .iter()
                .map(|s| (s.at as f64 / 1000.0, s.fds as f64))
                .collect(),
            RED,
        ),
        (
            "XDP connection-table entries",
            samples
                .iter()
                .filter_map(|s| Some((s.at as f64 / 1000.0, s.conns? as f64)))
                .collect(),
            GREEN,
        ),
    ];
    for (area, (name, points, color)) in areas.iter().zip(series) {
        let max = points.iter().map(|p| p.1).fold(0.0, f64::max).max(1.0) * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(name, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..end, 0.0..max)
            .map_err(|e| anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
        for r in restarts {
            let x = *r as f64 / 1000.0;
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x, 0.0), (x, max)],
                    RGBColor(200, 200, 200),
                )))
                .map_err(|e| anyhow!("{e}"))?;
        }
        chart
            .draw_series(std::iter::once(PathElement::new(
                points,
                color.stroke_width(2),
            )))
            .map_err(|e| anyhow!("{e}"))?;
    }
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(dir.join("soak.png"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_s: u64, pid: u32, rss_kb: u64) -> Sample {
        Sample {
            at: at_s * 1000,
            pid,
            rss_kb,
            anon_kb: rss_kb / 2,
            fds: 60,
            conns: None,
        }
    }

    /// The longest-lived process is measured; a step early in its life shows in the whole
    /// span's growth, not in the second half's, so start-up is not taken for a leak.
    #[test]
    fn growth_is_measured_on_the_longest_process_and_its_second_half() {
        let mut v: Vec<Sample> = (0..40).map(|t| sample(t, 1, 30_000)).collect();
        v.extend((40..140).map(|t| sample(t, 2, if t < 70 { 30_000 } else { 36_000 })));
        let g = growth(&v, 20_000, 10_000, &|_| false).expect("a process past warm-up");
        assert_eq!(g.pid, 2);
        assert!((g.rss_percent() - 20.0).abs() < 0.01, "{}", g.rss_percent());
        assert!(
            (g.anon_percent() - 20.0).abs() < 0.01,
            "{}",
            g.anon_percent()
        );
        assert!(g.rss_second_half_percent().abs() < 0.01);
        assert_eq!(peaks(&v), vec![(1, 30_000), (2, 36_000)]);
    }

    /// A process that ends during a burst of slow clients is measured on the samples
    /// before it: the burst's memory is reported as the peak, not as growth.
    #[test]
    fn the_last_figure_leaves_out_a_burst() {
        let v: Vec<Sample> = (0..100)
            .map(|t| sample(t, 1, if t >= 90 { 34_000 } else { 30_000 }))
            .collect();
        let burst = |at: u64| at >= 90_000;
        let g = growth(&v, 20_000, 10_000, &burst).expect("a process past warm-up");
        assert!(g.rss_percent().abs() < 0.01, "{}", g.rss_percent());
        assert_eq!(g.rss_peak, 34_000);
        let g = growth(&v, 20_000, 10_000, &|_| false).expect("a process past warm-up");
        assert!(g.rss_percent() > 10.0);
    }
}
