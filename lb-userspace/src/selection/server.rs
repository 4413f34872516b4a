//! Server versus service failure (S-SF): one address, several Backend Services.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::types::Health;

/// State of a whole server (one address), derived from the health of its services.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerState {
    /// At least one service is OK (S-SF2: back as soon as the first service is healthy).
    Ok,
    /// Every service is Error (S-SF2: failed only when all have failed).
    Failed,
    /// No service is OK and at least one is still Preparing: not decided yet.
    Preparing,
}

/// Derives each address's state from `(address, health)` pairs, one per Backend Service.
/// Services fail on their own (S-SF1); the server fails only when all of them have (S-SF2).
/// The map is ordered by address so reports and stats are stable.
pub fn server_state(services: &[(IpAddr, Health)]) -> BTreeMap<IpAddr, ServerState> {
    let mut out: BTreeMap<IpAddr, ServerState> = BTreeMap::new();
    for &(addr, health) in services {
        let next = match (out.get(&addr), health) {
            (_, Health::Ok) | (Some(ServerState::Ok), _) => ServerState::Ok,
            (_, Health::Preparing) | (Some(ServerState::Preparing), _) => ServerState::Preparing,
            (None | Some(ServerState::Failed), Health::Error) => ServerState::Failed,
        };
        out.insert(addr, next);
    }
    out
}
