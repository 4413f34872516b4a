//! Finding the XDP object, loading or adopting it, attaching it, and the lab settings that would stop it forwarding.

pub(in crate::network) mod loader;
pub(in crate::network) mod object;
pub(in crate::network) mod veth;
