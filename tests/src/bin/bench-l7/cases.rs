//! The cases a run measures (`LB_BENCH_CASES`, default all): plain HTTP/1.1 (saturated,
//! below saturation, then the Maintenance run) and four more over TLS and with idle
//! connections.

use anyhow::{Result, bail};

/// One of the TLS, HTTP/2 and idle-connection cases (plain HTTP/1.1 is handled on its own:
/// it has two kinds of run and the Maintenance run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    /// HTTP/1.1 over TLS 1.3 with keep-alive (wrk on https://).
    Https,
    /// One request per TLS connection (wrk with `Connection: close`): full handshakes.
    Handshake,
    /// HTTP/2 over TLS, 100 streams per connection (h2load).
    H2,
    /// 10,000 idle keep-alive connections beside a steady wrk load.
    Idle,
}

impl Case {
    /// Every case, in the order a round runs them. The idle connections come first, on a
    /// proxy that has carried only the plain and warm-up loads: after the HTTP/2 case's
    /// 1,600 streams, a proxy that keeps freed memory in pools (HAProxy) has room for the
    /// idle connections already, and its growth no longer tells what one costs (0.06 KiB
    /// measured that way against 0.85 KiB on its own).
    pub const ALL: [Case; 4] = [Case::Idle, Case::Https, Case::Handshake, Case::H2];

    /// The name in `LB_BENCH_CASES` and in the progress lines.
    pub fn name(self) -> &'static str {
        match self {
            Case::Https => "https",
            Case::Handshake => "handshake",
            Case::H2 => "h2",
            Case::Idle => "idle",
        }
    }

    /// The position in [`Case::ALL`].
    pub fn index(self) -> usize {
        Case::ALL.iter().position(|&c| c == self).unwrap_or(0)
    }
}

/// What `LB_BENCH_CASES` asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// Plain HTTP/1.1 (and the Maintenance run).
    pub plain: bool,
    /// The TLS, HTTP/2 and idle-connection cases, in [`Case::ALL`] order.
    pub cases: Vec<Case>,
}

impl Selection {
    /// From a comma-separated list of `plain`, `https`, `handshake`, `h2`, `idle`; None (the
    /// variable unset) selects them all.
    pub fn parse(list: Option<&str>) -> Result<Self> {
        let Some(list) = list else {
            return Ok(Self {
                plain: true,
                cases: Case::ALL.to_vec(),
            });
        };
        let mut plain = false;
        let mut picked = Vec::new();
        for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            if word == "plain" {
                plain = true;
            } else if let Some(&c) = Case::ALL.iter().find(|c| c.name() == word) {
                picked.push(c);
            } else {
                bail!(
                    "LB_BENCH_CASES: unknown case {word:?} (known: plain, https, handshake, h2, idle)"
                );
            }
        }
        if !plain && picked.is_empty() {
            bail!("LB_BENCH_CASES={list:?} selects no case");
        }
        let cases = Case::ALL
            .into_iter()
            .filter(|c| picked.contains(c))
            .collect();
        Ok(Self { plain, cases })
    }
}

/// No rule of docs/behaviour.md covers the bench's case list: these check how
/// `LB_BENCH_CASES` is read.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_selects_everything_and_a_list_keeps_the_round_order() {
        let all = Selection::parse(None).unwrap();
        assert!(all.plain);
        assert_eq!(all.cases, Case::ALL);
        let some = Selection::parse(Some("idle, h2")).unwrap();
        assert!(!some.plain);
        assert_eq!(some.cases, [Case::Idle, Case::H2]);
    }

    #[test]
    fn an_unknown_or_empty_list_is_refused_by_name() {
        let e = Selection::parse(Some("https,tls")).unwrap_err().to_string();
        assert!(e.contains("\"tls\""), "{e}");
        assert!(Selection::parse(Some(" , ")).is_err());
    }
}
