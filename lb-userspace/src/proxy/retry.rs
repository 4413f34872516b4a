//! Whether a failed request or connection may try another server (S-RT1, S-RT2): the
//! vService's `retries` / `retry_on`, the servers already tried, and a vService-wide budget
//! so a failing server cannot turn every request into two.

use std::sync::atomic::{AtomicU64, Ordering};

use super::balance::{Lease, LiveError};
use super::runtime::VsRuntime;
use crate::config::RetryPolicy;

/// Retries in flight a vService always allows, whatever its load (Envoy's minimum retry
/// concurrency): a quiet vService still retries its few requests.
const MIN_IN_FLIGHT: u64 = 3;

/// How a try failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Connecting failed: nothing reached the server.
    Connect,
    /// The connection closed or reset after the request went, before any byte of the answer.
    EmptyResponse,
    /// No answer within the server timeout.
    ResponseTimeout,
}

impl From<Failure> for LiveError {
    fn from(failure: Failure) -> LiveError {
        match failure {
            Failure::Connect => LiveError::Connect,
            Failure::EmptyResponse => LiveError::NoAnswer,
            Failure::ResponseTimeout => LiveError::Timeout,
        }
    }
}

/// The vService-wide share of retries: how many retried requests or connections are under
/// way now, allowed up to `retry_budget` percent of those holding a slot (at least
/// [`MIN_IN_FLIGHT`]). Counting what is in flight rather than a rate means a server that
/// makes each try wait cannot multiply the load. Retries after a failed connect take no
/// share: nothing reached the failed server, so the retry is the request's first work
/// anywhere, not a second copy (four clients on a main that just died must all get
/// through, floor or not).
#[derive(Debug, Default)]
pub(crate) struct RetryBudget {
    in_flight: AtomicU64,
}

impl RetryBudget {
    /// Takes one share when the budget has room.
    fn take(&self, percent: u32, current: u64) -> bool {
        let allowed = (current * u64::from(percent) / 100).max(MIN_IN_FLIGHT);
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < allowed).then_some(n + 1)
            })
            .is_ok()
    }

    fn give_back(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The tries of one request or connection: the servers it failed on (a retry goes to
/// another one of the same list) and whether it holds a share of the budget, given back
/// when it ends.
pub(crate) struct Tries<'r> {
    rt: &'r VsRuntime,
    policy: RetryPolicy,
    failed: Vec<String>,
    holds_share: bool,
}

impl<'r> Tries<'r> {
    /// No try failed yet.
    pub(crate) fn new(rt: &'r VsRuntime, policy: RetryPolicy) -> Self {
        Tries {
            rt,
            policy,
            failed: Vec::new(),
            holds_share: false,
        }
    }

    /// The servers this request or connection failed on, to leave out of the next pick.
    pub(crate) fn failed(&self) -> &[String] {
        &self.failed
    }

    /// Decides after `failure` on `lease`'s server whether to try another server, and if so
    /// records the failed one (count the retry with [`Tries::count`] once another server
    /// took it). `replayable`: the request can be sent again whole (only asked for failures
    /// after it went: it is idempotent and its body, if any, is still held).
    pub(crate) fn again(&mut self, failure: Failure, lease: &Lease, replayable: bool) -> bool {
        let policy = self.policy;
        let wanted = match failure {
            Failure::Connect => policy.on_connect_failure,
            Failure::EmptyResponse => policy.on_empty_response && replayable,
            Failure::ResponseTimeout => policy.on_response_timeout && replayable,
        };
        if !wanted || self.failed.len() >= policy.retries as usize {
            return false;
        }
        if !self.holds_share && failure != Failure::Connect {
            let current = self.rt.pool.current();
            if !self.rt.retry_budget.take(policy.budget_percent, current) {
                tracing::debug!(vservice = %self.rt.name, "retry budget spent: not retrying");
                self.rt.counters.count_retry_refused();
                return false;
            }
            self.holds_share = true;
        }
        self.failed.push(lease.backend().to_owned());
        true
    }

    /// Counts the retry away from `failed_on` (on the vService and that backend).
    pub(crate) fn count(&self, failed_on: &Lease) {
        failed_on.count_retry(true);
        self.rt.counters.count_retry();
    }
}

impl Drop for Tries<'_> {
    fn drop(&mut self) {
        if self.holds_share {
            self.rt.retry_budget.give_back();
        }
    }
}

/// GET, HEAD, PUT, DELETE, OPTIONS and TRACE: sending them twice has the effect of once
/// (RFC 9110 §9.2.2), so one that may have reached a server can go to another.
pub(crate) fn idempotent(method: &str) -> bool {
    matches!(
        method,
        "GET" | "HEAD" | "PUT" | "DELETE" | "OPTIONS" | "TRACE"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_a_share_of_what_is_in_flight_with_a_floor() {
        let budget = RetryBudget::default();
        // Idle vService: the floor allows three at once.
        assert!(budget.take(20, 0));
        assert!(budget.take(20, 0));
        assert!(budget.take(20, 0));
        assert!(!budget.take(20, 0));
        // 100 requests under way: 20 retries may be.
        for _ in 3..20 {
            assert!(budget.take(20, 100));
        }
        assert!(!budget.take(20, 100));
        budget.give_back();
        assert!(budget.take(20, 100));
    }

    #[test]
    fn only_idempotent_methods_are_sent_twice() {
        for method in ["GET", "HEAD", "PUT", "DELETE", "OPTIONS"] {
            assert!(idempotent(method), "{method}");
        }
        for method in ["POST", "PATCH", "CONNECT", "get"] {
            assert!(!idempotent(method), "{method}");
        }
    }
}
