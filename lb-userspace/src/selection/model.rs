//! The selection model: from configuration and health to "who takes new traffic" per list.
//!
//! Choices where SPEC is silent:
//! * Inside a Backend Group the group's Backup flag decides the role of its members ("set on the
//!   group as a whole"); a member's own Backup flag counts only where it is listed directly.
//!   Maintenance is per service and per group: a member is in maintenance when either is on.
//! * A service listed twice in one list (directly and through a group, say) counts once, at its
//!   first position.
//! * Names the model does not know are skipped (validated configurations have none).

use std::collections::{HashMap, HashSet};

use thiserror::Error;

use super::types::{ApplyAdmin, ApplyHealth, Eligible, Health, ListSelection, Policy, Tier};
use crate::config::{BackendGroup, BackendService, Config};

/// Errors of the selection model.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SelectionError {
    /// The vService name is not in the configuration the model was built from.
    #[error("unknown vService `{0}`")]
    UnknownVService(String),
}

/// The configuration facts selection needs, indexed for lookups. Rebuild it on reload.
#[derive(Clone, Debug, Default)]
pub struct Model {
    services: HashMap<String, BackendService>,
    groups: HashMap<String, BackendGroup>,
    vservices: HashMap<String, (Vec<String>, Policy)>,
}

/// One Backend Service as it stands in one list, after group expansion.
struct Member<'a> {
    service: &'a BackendService,
    backup: bool,
    maintenance: bool,
}

impl Model {
    /// Indexes a validated configuration.
    pub fn from_config(cfg: &Config) -> Model {
        Model {
            services: cfg
                .backend_services
                .iter()
                .map(|s| (s.name.clone(), s.clone()))
                .collect(),
            groups: cfg
                .backend_groups
                .iter()
                .map(|g| (g.name.clone(), g.clone()))
                .collect(),
            vservices: cfg
                .vservices
                .iter()
                .map(|v| {
                    (
                        v.name.clone(),
                        (v.backends.clone(), Policy::for_vservice(v)),
                    )
                })
                .collect(),
        }
    }

    /// The Backend Service called `name`, for callers that need its address or port.
    pub fn service(&self, name: &str) -> Option<&BackendService> {
        self.services.get(name)
    }

    /// Selection for a vService's Default list under the policy its configuration implies
    /// (see [`Policy::for_vservice`]). `health(name)` gives each checked Backend Service's
    /// state; services without a check are OK whatever it says (S-HC6).
    pub fn select(
        &self,
        vservice: &str,
        health: &dyn Fn(&str) -> Health,
    ) -> Result<ListSelection, SelectionError> {
        let (list, policy) = self
            .vservices
            .get(vservice)
            .ok_or_else(|| SelectionError::UnknownVService(vservice.to_owned()))?;
        Ok(self.select_list(list, health, *policy))
    }

    /// Selection for any list (a Default list or a Conditional set's) under an explicit policy.
    pub fn select_list(
        &self,
        list: &[String],
        health: &dyn Fn(&str) -> Health,
        policy: Policy,
    ) -> ListSelection {
        let members = self.expand(list, policy.admin);
        let state = |m: &Member<'_>| {
            if policy.health == ApplyHealth::No || m.service.health_check.is_none() {
                Health::Ok
            } else {
                health(&m.service.name)
            }
        };
        // Available for new traffic: healthy, not in maintenance, weight > 0 (S-BK11).
        let available =
            |m: &Member<'_>| state(m) == Health::Ok && !m.maintenance && m.service.weight > 0;

        let mains: Vec<&Member<'_>> = members
            .iter()
            .filter(|m| !m.backup && available(m))
            .collect();
        let (tier, chosen) = if !mains.is_empty() {
            (Tier::Mains, mains)
        } else {
            // The first available backup takes everything; never spread (S-BK2, S-BK3).
            members
                .iter()
                .filter(|m| m.backup)
                .enumerate()
                .find(|(_, m)| available(m))
                .map_or((Tier::None, Vec::new()), |(i, m)| {
                    (Tier::Backup(i), vec![m])
                })
        };

        let chosen_names: HashSet<&str> = chosen.iter().map(|m| m.service.name.as_str()).collect();
        let mut out = ListSelection {
            tier,
            eligible: chosen
                .iter()
                .map(|m| Eligible {
                    name: m.service.name.clone(),
                    weight: m.service.weight,
                })
                .collect(),
            drained: Vec::new(),
            down: Vec::new(),
        };
        for m in &members {
            let name = &m.service.name;
            if chosen_names.contains(name.as_str()) {
                continue;
            }
            if state(m) == Health::Ok {
                out.drained.push(name.clone());
            } else {
                out.down.push(name.clone());
            }
        }
        out
    }

    /// Expands groups into their members in row order, resolving each member's role.
    /// Without admin state every member is a main and nobody is in maintenance.
    fn expand(&self, list: &[String], admin: ApplyAdmin) -> Vec<Member<'_>> {
        let admin = admin == ApplyAdmin::Yes;
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for name in list {
            let entries: Vec<(&BackendService, bool, bool)> =
                if let Some(s) = self.services.get(name) {
                    vec![(s, s.backup, s.maintenance)]
                } else if let Some(g) = self.groups.get(name) {
                    g.members
                        .iter()
                        .filter_map(|n| self.services.get(n))
                        .map(|s| (s, g.backup, s.maintenance || g.maintenance))
                        .collect()
                } else {
                    Vec::new()
                };
            for (service, backup, maintenance) in entries {
                if seen.insert(service.name.as_str()) {
                    out.push(Member {
                        service,
                        backup: admin && backup,
                        maintenance: admin && maintenance,
                    });
                }
            }
        }
        out
    }
}
