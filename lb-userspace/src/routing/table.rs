//! The VIP routes in the kernel, over netlink (rtnetlink): read, add, delete, each route
//! marked with [`PROTOCOL`] so that routes of other owners in the same table are never
//! touched, and BIRD's `learn` imports them (it skips `proto kernel` and `proto bird`).

use std::collections::BTreeSet;
use std::net::IpAddr;

use futures_util::TryStreamExt;
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use rtnetlink::{Handle, IpVersion, RouteMessageBuilder};

use super::RoutingError;
use crate::config::BgpSettings;

/// The route protocol number of the VIP routes (`ip route show table T proto 241`): the
/// mark of the routes this daemon owns. Not one of the numbers iproute2 names.
pub const PROTOCOL: u8 = 241;

/// The VIP routes of one table (or device), as this process last left them.
pub struct VipRoutes {
    handle: Handle,
    table: u32,
    /// The device's index when the routes point at a device; blackhole routes otherwise.
    device: Option<u32>,
    /// Routes of ours in the table, as read at the first sync and changed since.
    present: Option<BTreeSet<IpAddr>>,
    connection: tokio::task::JoinHandle<()>,
}

impl Drop for VipRoutes {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

impl VipRoutes {
    /// Opens a netlink connection for `settings`' table; fails when the device does not
    /// exist. Must run inside a Tokio runtime.
    pub async fn open(settings: &BgpSettings) -> Result<Self, RoutingError> {
        let (connection, handle, _) = rtnetlink::new_connection().map_err(RoutingError::Socket)?;
        let connection = tokio::spawn(connection);
        let device = match &settings.device {
            Some(name) => {
                let mut links = handle.link().get().match_name(name.clone()).execute();
                match links.try_next().await {
                    Ok(Some(link)) => Some(link.header.index),
                    _ => {
                        connection.abort();
                        return Err(RoutingError::NoDevice(name.clone()));
                    }
                }
            }
            None => None,
        };
        Ok(VipRoutes {
            handle,
            table: settings.table,
            device,
            present: None,
            connection,
        })
    }

    /// The table the routes are in.
    pub fn table(&self) -> u32 {
        self.table
    }

    /// Makes the table hold exactly `want` among our routes: the first call reads what a
    /// previous `lb run` left (a restart withdraws nothing, S-AN3), then only missing
    /// routes are added and unwanted ones deleted; a route that stays is never touched.
    /// Returns the VIPs added and deleted.
    pub async fn sync(
        &mut self,
        want: &BTreeSet<IpAddr>,
    ) -> Result<(Vec<IpAddr>, Vec<IpAddr>), RoutingError> {
        let present = match self.present.take() {
            Some(p) => p,
            None => self.owned().await?,
        };
        self.present = Some(present);
        let mut added = Vec::new();
        let mut deleted = Vec::new();
        let missing: Vec<IpAddr> = want.difference(self.present_set()).copied().collect();
        let extra: Vec<IpAddr> = self.present_set().difference(want).copied().collect();
        for vip in extra {
            self.delete(vip).await?;
            deleted.push(vip);
        }
        for vip in missing {
            self.add(vip).await?;
            added.push(vip);
        }
        Ok((added, deleted))
    }

    fn present_set(&self) -> &BTreeSet<IpAddr> {
        static EMPTY: BTreeSet<IpAddr> = BTreeSet::new();
        self.present.as_ref().unwrap_or(&EMPTY)
    }

    /// Our routes in the table now (both families).
    pub async fn owned(&self) -> Result<BTreeSet<IpAddr>, RoutingError> {
        let mut out = BTreeSet::new();
        for version in [IpVersion::V4, IpVersion::V6] {
            let query = match version {
                IpVersion::V4 => RouteMessageBuilder::<std::net::Ipv4Addr>::new().build(),
                IpVersion::V6 => RouteMessageBuilder::<std::net::Ipv6Addr>::new().build(),
            };
            let mut routes = self.handle.route().get(query).execute();
            loop {
                let route = routes
                    .try_next()
                    .await
                    .map_err(|source| RoutingError::Dump {
                        table: self.table,
                        source,
                    })?;
                let Some(route) = route else { break };
                if let Some(vip) = self.ours(&route) {
                    out.insert(vip);
                }
            }
        }
        Ok(out)
    }

    /// The VIP of `route` when it is one of ours: this table, our protocol, a host route.
    fn ours(&self, route: &RouteMessage) -> Option<IpAddr> {
        if u8::from(route.header.protocol) != PROTOCOL || table_of(route) != self.table {
            return None;
        }
        let host = match route.header.address_family {
            rtnetlink::packet_route::AddressFamily::Inet => 32,
            rtnetlink::packet_route::AddressFamily::Inet6 => 128,
            _ => return None,
        };
        if route.header.destination_prefix_length != host {
            return None;
        }
        route.attributes.iter().find_map(|a| match a {
            RouteAttribute::Destination(RouteAddress::Inet(v4)) => Some(IpAddr::V4(*v4)),
            RouteAttribute::Destination(RouteAddress::Inet6(v6)) => Some(IpAddr::V6(*v6)),
            _ => None,
        })
    }

    /// The route of `vip` as it is added and deleted.
    fn message(&self, vip: IpAddr) -> RouteMessage {
        let builder = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(vip, if vip.is_ipv4() { 32 } else { 128 })
            .unwrap_or_else(|_| RouteMessageBuilder::<IpAddr>::new())
            .table_id(self.table)
            .protocol(RouteProtocol::Other(PROTOCOL));
        match self.device {
            Some(index) => builder
                .output_interface(index)
                .scope(RouteScope::Link)
                .build(),
            None => builder.kind(RouteType::BlackHole).build(),
        }
    }

    async fn add(&mut self, vip: IpAddr) -> Result<(), RoutingError> {
        let table = self.table;
        self.handle
            .route()
            .add(self.message(vip))
            .replace()
            .execute()
            .await
            .map_err(|source| RoutingError::Add { vip, table, source })?;
        if let Some(p) = self.present.as_mut() {
            p.insert(vip);
        }
        Ok(())
    }

    async fn delete(&mut self, vip: IpAddr) -> Result<(), RoutingError> {
        let table = self.table;
        let result = self.handle.route().del(self.message(vip)).execute().await;
        match result {
            Ok(()) => {}
            // Already gone (deleted by hand): the goal is reached.
            Err(rtnetlink::Error::NetlinkError(e))
                if e.code.map(|c| c.get()) == Some(-libc::ESRCH) => {}
            Err(source) => return Err(RoutingError::Delete { vip, table, source }),
        }
        if let Some(p) = self.present.as_mut() {
            p.remove(&vip);
        }
        Ok(())
    }
}

/// A route's table: the 32-bit attribute when present, else the header's byte.
fn table_of(route: &RouteMessage) -> u32 {
    route
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(route.header.table))
}

/// Deletes every route of ours from `settings`' table (`lb unload`): the data path is
/// gone, so no router may send its traffic here any more. Returns the VIPs withdrawn.
pub async fn withdraw_all(settings: &BgpSettings) -> Result<Vec<IpAddr>, RoutingError> {
    let mut routes = VipRoutes::open(settings).await?;
    let (_, deleted) = routes.sync(&BTreeSet::new()).await?;
    Ok(deleted)
}
