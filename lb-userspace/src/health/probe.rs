//! The probe seam: one trait every check type implements, so the scheduler can drive real
//! network probes in production and scripted targets on a paused clock in tests.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{BackendService, HealthCheck, HealthKind};

use super::{dns::DnsProbe, http::HttpProbe, ping::PingProbe, tcp::TcpProbe};

/// A boxed, sendable future: lets `Probe` be a trait object without an extra crate.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The outcome of one check, kept small so it can be logged and plotted (S-HC8, S-OB3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeResult {
    /// True when the backend answered as the profile requires.
    pub ok: bool,
    /// Human-readable cause, shown in the transition log (e.g. "connection refused").
    pub reason: String,
    /// How long the check lasted; the scheduler overwrites it with its own measurement.
    pub duration: Duration,
}

impl ProbeResult {
    /// A successful check, so probes do not repeat the struct literal.
    pub fn success(reason: impl Into<String>, duration: Duration) -> Self {
        Self {
            ok: true,
            reason: reason.into(),
            duration,
        }
    }

    /// A failed check with its cause.
    pub fn failure(reason: impl Into<String>, duration: Duration) -> Self {
        Self {
            ok: false,
            reason: reason.into(),
            duration,
        }
    }
}

/// One health check target. Implementations bound their own work by the profile's Timeout;
/// the scheduler also cuts every check at T (S-HC3), so a probe that never returns still ends.
pub trait Probe: Send + Sync {
    /// Runs one check against the target.
    fn check(&self) -> BoxFuture<'_, ProbeResult>;
}

/// Builds the probe for a Backend Service and its profile; a seam so tests can plug scripted
/// targets into the real scheduler and engine.
pub trait ProbeFactory: Send + Sync {
    /// Returns the probe that checks `service` as `check` describes; None for a profile
    /// with no active check (`type = "passive"`).
    fn build(&self, service: &BackendService, check: &HealthCheck) -> Option<Arc<dyn Probe>>;

    /// True when the engine may run this factory's TCP checks on the process's TCP check
    /// thread (real sockets, real time) instead of through `build`'s probe, one task each.
    fn tcp_on_driver(&self) -> bool {
        false
    }
}

/// The production factory: real ICMP, TCP, HTTP(S) and DNS probes.
#[derive(Clone, Copy, Debug, Default)]
pub struct NetworkProbes;

impl ProbeFactory for NetworkProbes {
    fn build(&self, service: &BackendService, check: &HealthCheck) -> Option<Arc<dyn Probe>> {
        // A server behind a tunnel is checked at the VIP, through the tunnel (S-TN4).
        let (to, mark) = service.check_route(service.address);
        let addr = SocketAddr::new(to, service.port);
        let timeout = check.timeout;
        Some(match &check.kind {
            HealthKind::Ping => Arc::new(PingProbe::new(to, timeout).with_mark(mark)),
            HealthKind::Tcp(handshake) => {
                Arc::new(TcpProbe::new(addr, timeout, *handshake).with_mark(mark))
            }
            HealthKind::Http(http) => {
                Arc::new(HttpProbe::plain(addr, http.clone(), timeout).with_mark(mark))
            }
            HealthKind::Https(http) => {
                Arc::new(HttpProbe::tls(addr, http.clone(), timeout).with_mark(mark))
            }
            HealthKind::Dns(dns) => {
                Arc::new(DnsProbe::new(addr, dns.clone(), timeout).with_mark(mark))
            }
            HealthKind::Passive { .. } => return None,
        })
    }

    fn tcp_on_driver(&self) -> bool {
        true
    }
}

/// Formats a duration for reasons: milliseconds with one decimal, which reads well for both
/// loopback (0.1 ms) and slow backends (1000.0 ms).
pub(crate) fn fmt_ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}
