//! The scheduler slice a proxy worker asks the kernel for.
//!
//! A worker is busy in short bursts: a packet arrives, the worker parses, forwards and
//! sleeps again. When it shares CPUs with other busy threads (the backends, the clients, other
//! daemons), the kernel's default slice (a few milliseconds under EEVDF) lets each of them run
//! that long before a woken worker gets the CPU, and that wait lands in the tail latency of
//! every request the worker holds. Since Linux 6.12, a SCHED_OTHER thread may request a shorter
//! slice (`sched_attr.sched_runtime`, 0.1..100 ms): the kernel then gives it an earlier
//! deadline, so it runs soon after a wakeup and, in exchange, is preempted sooner. Older
//! kernels accept the request and ignore it.

use std::io;
use std::time::Duration;

/// The size the kernel expects for the first version of `struct sched_attr`.
const ATTR_SIZE: u32 = 48;

/// Asks the kernel to run the calling thread with slices of `slice`. Leaves real-time and
/// deadline threads alone (their `sched_runtime` means something else) and keeps the thread's
/// policy and nice value.
pub(crate) fn request_slice(slice: Duration) -> io::Result<()> {
    let mut attr = current()?;
    let policy = i32::try_from(attr.sched_policy).unwrap_or(i32::MAX);
    if policy != libc::SCHED_OTHER && policy != libc::SCHED_BATCH {
        return Err(io::Error::other(format!(
            "the thread runs under scheduling policy {policy}, not SCHED_OTHER or SCHED_BATCH"
        )));
    }
    attr.size = ATTR_SIZE;
    attr.sched_flags = 0;
    attr.sched_runtime = u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX);
    // SAFETY: `attr` is a valid, initialised sched_attr of ATTR_SIZE bytes that outlives the
    // call; pid 0 is the calling thread and flags must be 0.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &raw const attr, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The calling thread's scheduling attributes (`sched_runtime` is its custom slice, or 0).
pub(crate) fn current() -> io::Result<libc::sched_attr> {
    let mut attr = libc::sched_attr {
        size: 0,
        sched_policy: 0,
        sched_flags: 0,
        sched_nice: 0,
        sched_priority: 0,
        sched_runtime: 0,
        sched_deadline: 0,
        sched_period: 0,
    };
    // SAFETY: the kernel writes at most ATTR_SIZE bytes into `attr`, which is that large and
    // lives across the call; pid 0 is the calling thread and flags must be 0.
    let rc = unsafe { libc::syscall(libc::SYS_sched_getattr, 0, &raw mut attr, ATTR_SIZE, 0) };
    if rc == 0 {
        Ok(attr)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// No rule of docs/behaviour.md covers scheduling: these check the kernel interface itself.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requested_slice_is_what_the_kernel_reports_back() {
        std::thread::spawn(|| {
            let before = current().expect("sched_getattr");
            // The kernel reports the slice in force: its default (1.4 ms on this project's
            // 6.18 kernel for two CPUs) until a thread asks for another.
            assert_ne!(before.sched_runtime, 100_000);
            request_slice(Duration::from_micros(100)).expect("sched_setattr");
            let after = current().expect("sched_getattr");
            assert_eq!(after.sched_policy, before.sched_policy, "policy kept");
            assert_eq!(after.sched_nice, before.sched_nice, "nice kept");
            // Kernels before 6.12 ignore the request and report 0.
            if kernel_has_custom_slices() {
                assert_eq!(after.sched_runtime, 100_000);
            }
        })
        .join()
        .expect("test thread");
    }

    #[test]
    fn the_nice_value_survives_the_request() {
        std::thread::spawn(|| {
            // SAFETY: plain libc calls on the calling thread's id.
            let tid = unsafe { libc::gettid() } as libc::id_t;
            assert_eq!(unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, 3) }, 0);
            request_slice(Duration::from_micros(250)).expect("sched_setattr");
            assert_eq!(current().expect("sched_getattr").sched_nice, 3);
        })
        .join()
        .expect("test thread");
    }

    /// Custom slices exist from Linux 6.12 on.
    fn kernel_has_custom_slices() -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut parts = release.trim().split(['.', '-']);
        let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        (major, minor) >= (6, 12)
    }
}
