//! The agent's rare events as log records (aya-log), for `lb decap --follow` to print: a
//! dropped tunnel packet, with why and from where. Only the drop path reaches here, so the
//! frames that are decapsulated or passed pay nothing; records of a level above the one set
//! at load (`AYA_LOG_LEVEL`, from the loading process's log filter) are not even written.

use aya_log_ebpf::debug;
use lb_common::decap::*;
use lb_common::{Addr, FAMILY_V4};

use crate::frame::Frame;
use crate::parse;

/// Logs the drop of a tunnel packet counted under `reason`, naming its outer source.
#[inline(always)]
pub fn dropped<F: Frame>(ctx: &F, gue_port: u16, reason: u32) {
    let why = match reason {
        DECAP_BAD_OUTER => "malformed outer header",
        DECAP_FRAGMENT => "outer fragment",
        DECAP_FOREIGN_SOURCE => "source outside --source",
        DECAP_BAD_INNER => "malformed inner packet",
        DECAP_UNKNOWN_VIP => "inner destination outside --vip",
        _ => "dropped",
    };
    let Some(o) = parse::outer(ctx.start(), ctx.end(), gue_port) else {
        return;
    };
    let family = o.family;
    let o = Addr::from_words(&o.saddr).octets;
    if family == FAMILY_V4 {
        let source = [o[0], o[1], o[2], o[3]];
        debug!(ctx, "tunnel packet from {:i} dropped: {}", source, why);
    } else {
        debug!(ctx, "tunnel packet from {:i} dropped: {}", o, why);
    }
}
