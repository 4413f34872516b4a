//! The L4 benchmark's own XDP programs (lb-ebpf `lb-bench-progs`): loading, attaching in a
//! namespace, their maps, and the live-frames traffic source.

use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::thread::JoinHandleExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use aya::Ebpf;
use aya::maps::{Array, PerCpuArray};
use aya::programs::{Xdp, XdpMode, xdp::XdpLinkId};
use lb_tests::netns::ns::Netns;

/// Frame length the generator writes (lb-ebpf `FRAME`).
pub const FRAME: usize = 64;

/// Mirrors lb-ebpf's `GenCfg`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GenCfg {
    pub template: [u8; FRAME],
    pub flows: u32,
    pub tcp: u32,
    pub dst_count: u32,
    pub dst_step: u32,
}
// SAFETY: plain integers and bytes, no padding (64 + 4 * 4).
unsafe impl aya::Pod for GenCfg {}

/// Mirrors lb-ebpf's `FwdTarget`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FwdTarget {
    pub addr: [u8; 4],
    pub ifindex: u32,
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
}
// SAFETY: plain integers and bytes, no padding (4 + 4 + 6 + 6).
unsafe impl aya::Pod for FwdTarget {}

/// The object built by `cargo xtask build` next to the balancer's.
pub fn object_path() -> PathBuf {
    std::env::var_os("LB_BENCH_PROGS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            lb_tests::netns::lbctl::repo_root()
                .join("lb-ebpf/target/bpfel-unknown-none/release/lb-bench-progs")
        })
}

/// The loaded programs (all four loaded once, attached where each run needs them).
pub struct Progs {
    ebpf: Ebpf,
}

impl Progs {
    /// Loads the object and every program in it.
    pub fn load() -> Result<Progs> {
        let path = object_path();
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let mut ebpf = Ebpf::load(&bytes).context("loading lb-bench-progs")?;
        for name in ["bench_gen", "bench_fwd", "bench_sink", "bench_pass"] {
            let prog: &mut Xdp = ebpf
                .program_mut(name)
                .ok_or_else(|| anyhow!("no program {name}"))?
                .try_into()?;
            prog.load().with_context(|| format!("verifying {name}"))?;
        }
        Ok(Progs { ebpf })
    }

    fn xdp(&mut self, name: &str) -> Result<&mut Xdp> {
        Ok(self
            .ebpf
            .program_mut(name)
            .ok_or_else(|| anyhow!("no program {name}"))?
            .try_into()?)
    }

    /// Attaches program `name` in native mode to `dev` inside `ns`.
    pub fn attach(&mut self, name: &str, ns: &Netns, dev: &str) -> Result<XdpLinkId> {
        let prog = self.xdp(name)?;
        ns.run(|| prog.attach(dev, XdpMode::Driver))?
            .with_context(|| format!("attaching {name} to {dev} in {}", ns.name()))
    }

    /// Detaches a link made by [`Progs::attach`].
    pub fn detach(&mut self, name: &str, link: XdpLinkId) -> Result<()> {
        self.xdp(name)?.detach(link)?;
        Ok(())
    }

    /// Sets the generator's template and flow pattern.
    pub fn set_gen(&mut self, cfg: GenCfg) -> Result<()> {
        let mut map: Array<_, GenCfg> =
            Array::try_from(self.ebpf.map_mut("GEN_CFG").context("GEN_CFG")?)?;
        map.set(0, cfg, 0)?;
        Ok(())
    }

    /// Sets the minimal forwarder's VIP (network-order bytes) and targets.
    pub fn set_fwd(&mut self, vip: [u8; 4], targets: &[FwdTarget]) -> Result<()> {
        let mut meta: Array<_, u32> =
            Array::try_from(self.ebpf.map_mut("FWD_META").context("FWD_META")?)?;
        meta.set(0, u32::from_ne_bytes(vip), 0)?;
        meta.set(1, targets.len() as u32, 0)?;
        let mut map: Array<_, FwdTarget> =
            Array::try_from(self.ebpf.map_mut("FWD_TARGETS").context("FWD_TARGETS")?)?;
        for (i, t) in targets.iter().enumerate() {
            map.set(i as u32, *t, 0)?;
        }
        Ok(())
    }

    /// Frames every sink has counted so far (all backends together).
    pub fn sunk(&self) -> Result<u64> {
        let map: PerCpuArray<_, u64> =
            PerCpuArray::try_from(self.ebpf.map("SINK_COUNT").context("SINK_COUNT")?)?;
        Ok(map.get(&0, 0)?.iter().sum())
    }

    /// The generator's fd, for the live-frames test run.
    pub fn gen_fd(&mut self) -> Result<i32> {
        Ok(self.xdp("bench_gen")?.fd()?.as_fd().as_raw_fd())
    }
}

/// `BPF_PROG_TEST_RUN` attributes (uapi `union bpf_attr`, the `test` member).
#[repr(C)]
#[derive(Default)]
struct TestAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
/// Page pool size = batch; 256 works far better than 64 (notes/l4-bench.md).
const BATCH: u32 = 256;
/// Upper bound of frames in one run, whatever happens to the stop signal.
const MAX_FRAMES: u32 = 400_000_000;

extern "C" fn on_stop(_: libc::c_int) {}

/// Installs a no-op SIGUSR1 handler: the signal only interrupts the test run.
pub fn install_stop_handler() {
    // SAFETY: a plain handler that does nothing; no SA_RESTART so the syscall returns.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_stop as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
    }
}

fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t with one bit set, applied to the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// A running live-frames source; [`Sender::stop`] ends it.
pub struct Sender {
    handle: std::thread::JoinHandle<Result<()>>,
}

impl Sender {
    /// Starts one long live-frames test run of `fd` on CPU 0, transmitting out of `ifindex`
    /// in `ns` (XDP_TX of the generator).
    pub fn start(fd: i32, ns: &Netns, ifindex: u32) -> Result<Sender> {
        let path = ns.path();
        let handle = std::thread::spawn(move || -> Result<()> {
            lb_tests::netns::ns::enter_path(&path)?;
            pin_to_cpu(0);
            let frame = [0u8; FRAME];
            // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress.
            let ctx: [u32; 6] = [0, FRAME as u32, 0, ifindex, 0, 0];
            let attr = TestAttr {
                prog_fd: fd as u32,
                data_size_in: FRAME as u32,
                data_in: frame.as_ptr() as u64,
                repeat: MAX_FRAMES,
                ctx_size_in: std::mem::size_of_val(&ctx) as u32,
                ctx_in: ctx.as_ptr() as u64,
                flags: BPF_F_TEST_XDP_LIVE_FRAMES,
                batch_size: BATCH,
                ..Default::default()
            };
            // SAFETY: attr and the buffers it points to outlive the call.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_bpf,
                    BPF_PROG_TEST_RUN,
                    &attr as *const TestAttr,
                    std::mem::size_of::<TestAttr>(),
                )
            };
            let err = std::io::Error::last_os_error();
            if rc < 0 && err.raw_os_error() != Some(libc::EINTR) {
                bail!("live-frames test run: {err}");
            }
            Ok(())
        });
        Ok(Sender { handle })
    }

    /// True while the run goes on.
    pub fn running(&self) -> bool {
        !self.handle.is_finished()
    }

    /// Interrupts the run (signal, repeated until it ends; bounded to 10 s) and returns its
    /// result.
    pub fn stop(self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.handle.is_finished() && Instant::now() < deadline {
            // SAFETY: the thread is alive (not finished) and owned by this handle.
            unsafe { libc::pthread_kill(self.handle.as_pthread_t(), libc::SIGUSR1) };
            std::thread::sleep(Duration::from_millis(20));
        }
        if !self.handle.is_finished() {
            bail!("the live-frames sender did not stop within 10 s");
        }
        self.handle
            .join()
            .map_err(|_| anyhow!("the sender thread panicked"))?
    }
}
