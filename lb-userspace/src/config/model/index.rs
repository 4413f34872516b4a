//! Backend Services and Groups by name, built once per configuration: the model keeps them
//! as ordered lists (the file's order, which the API and pages show), and resolving a list
//! of 10,000 names by scanning those would cost 10,000 x 10,000 comparisons per reload.

use std::collections::{HashMap, HashSet};

use super::{BackendGroup, BackendService, Config, HealthCheck};

/// A hash map with a fast, non-cryptographic hasher, for keys taken from the operator's own
/// configuration (names, addresses): nobody picks them to collide, and planning 1,000 VIPs
/// looks names up about a million times.
pub type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
/// The set form of [`FastMap`].
pub type FastSet<K> = HashSet<K, foldhash::fast::RandomState>;

/// Name lookups into one [`Config`]; build it where many names are resolved, not per name.
#[derive(Debug)]
pub struct ByName<'a> {
    services: FastMap<&'a str, &'a BackendService>,
    groups: FastMap<&'a str, &'a BackendGroup>,
    checks: &'a [HealthCheck],
}

impl<'a> ByName<'a> {
    /// Indexes `cfg`'s Backend Services and Groups.
    pub fn new(cfg: &'a Config) -> Self {
        Self {
            services: cfg
                .backend_services
                .iter()
                .map(|s| (s.name.as_str(), s))
                .collect(),
            groups: cfg
                .backend_groups
                .iter()
                .map(|g| (g.name.as_str(), g))
                .collect(),
            checks: &cfg.health_checks,
        }
    }

    /// The Backend Service called `name`.
    pub fn service(&self, name: &str) -> Option<&'a BackendService> {
        self.services.get(name).copied()
    }

    /// The health check profile called `name` (profiles are few: a scan).
    pub fn health_check(&self, name: &str) -> Option<&'a HealthCheck> {
        self.checks.iter().find(|c| c.name == name)
    }

    /// The Backend Group called `name`.
    pub fn group(&self, name: &str) -> Option<&'a BackendGroup> {
        self.groups.get(name).copied()
    }
}
