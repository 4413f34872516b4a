//! The selection model: from configuration and health to "who takes new traffic" per list.
//!
//! Choices where docs/behaviour.md is silent:
//! * Inside a Backend Group the group's Backup flag decides the role of its members ("set on the
//!   group as a whole"); a member's own Backup flag counts only where it is listed directly.
//!   Maintenance is per service and per group: a member is in maintenance when either is on.
//! * A service listed twice in one list (directly and through a group, say) counts once, at its
//!   first position.
//! * Names the model does not know are skipped (validated configurations have none).

use thiserror::Error;

use super::types::{ApplyAdmin, ApplyHealth, Eligible, Health, ListSelection, Policy, Tier};
use crate::config::{BackendGroup, BackendService, Config, FastMap, FastSet};

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
    services: FastMap<String, BackendService>,
    groups: FastMap<String, BackendGroup>,
    vservices: FastMap<String, (Vec<String>, Policy)>,
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
        // Asked once per member: a Network plan asks for every backend of every VIP.
        let states: Vec<Health> = members
            .iter()
            .map(|m| {
                if policy.health == ApplyHealth::No || m.service.health_check.is_none() {
                    Health::Ok
                } else {
                    health(&m.service.name)
                }
            })
            .collect();
        // Available for new traffic: healthy, not in maintenance, weight > 0 (S-BK11).
        let available = |i: usize| {
            let m = &members[i];
            states[i] == Health::Ok && !m.maintenance && m.service.weight > 0
        };
        let mains: Vec<usize> = (0..members.len())
            .filter(|&i| !members[i].backup && available(i))
            .collect();
        let (tier, chosen) = if !mains.is_empty() {
            (Tier::Mains, mains)
        } else {
            // The first available backup takes everything; never spread (S-BK2, S-BK3).
            (0..members.len())
                .filter(|&i| members[i].backup)
                .enumerate()
                .find(|&(_, i)| available(i))
                .map_or((Tier::None, Vec::new()), |(n, i)| {
                    (Tier::Backup(n), vec![i])
                })
        };
        let mut is_chosen = vec![false; members.len()];
        for &i in &chosen {
            is_chosen[i] = true;
        }
        let mut out = ListSelection {
            tier,
            eligible: chosen
                .iter()
                .map(|&i| Eligible {
                    name: members[i].service.name.clone(),
                    weight: members[i].service.weight,
                })
                .collect(),
            drained: Vec::new(),
            down: Vec::new(),
        };
        for (i, m) in members.iter().enumerate() {
            if is_chosen[i] {
                continue;
            }
            let name = m.service.name.clone();
            if states[i] == Health::Ok {
                out.drained.push(name);
            } else {
                out.down.push(name);
            }
        }
        out
    }

    /// The mains of `list` under `policy` (every member when admin state does not apply), in
    /// list order and whatever their health: what passive health's ejection cap is a share
    /// of.
    pub fn mains(&self, list: &[String], policy: Policy) -> Vec<String> {
        self.expand(list, policy.admin)
            .into_iter()
            .filter(|m| !m.backup)
            .map(|m| m.service.name.clone())
            .collect()
    }

    /// Expands groups into their members in row order, resolving each member's role.
    /// Without admin state every member is a main and nobody is in maintenance.
    fn expand(&self, list: &[String], admin: ApplyAdmin) -> Vec<Member<'_>> {
        let admin = admin == ApplyAdmin::Yes;
        let mut seen = FastSet::default();
        let mut out = Vec::with_capacity(list.len());
        for name in list {
            let single = self
                .services
                .get(name.as_str())
                .map(|s| (s, s.backup, s.maintenance));
            let group = single
                .is_none()
                .then(|| self.groups.get(name.as_str()))
                .flatten();
            let grouped = group.into_iter().flat_map(|g| {
                g.members
                    .iter()
                    .filter_map(|n| self.services.get(n.as_str()))
                    .map(move |s| (s, g.backup, s.maintenance || g.maintenance))
            });
            for (service, backup, maintenance) in single.into_iter().chain(grouped) {
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
