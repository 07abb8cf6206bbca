//! The Konnectivity agent (`--proxy-server-host`): the node's own addresses at the node API's
//! port are dialed on this host.

use std::rc::Rc;

use crate::agent::Parts;
use crate::cli::options::Options;
use crate::{konnectivity, rt};

/// Nothing when the node API is off.
pub(super) fn start(
    o: &Options,
    port: Option<u16>,
    parts: &Parts,
) -> Result<Option<rt::Task<()>>, String> {
    let Some(port) = port else {
        return Ok(None);
    };
    let t = &o.tunnel;
    let tls = konnectivity::tls_config(t)?;
    let node = parts.rm.node();
    let node_ip: Option<std::net::IpAddr> = node.node_ip.parse().ok();
    let local_ip = match o.serving.address {
        a if a.is_unspecified() && a.is_ipv6() => {
            std::net::IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1])
        }
        a if a.is_unspecified() => std::net::IpAddr::from([127, 0, 0, 1]),
        a => a,
    };
    let mut addresses = vec![node.node_name.clone()];
    addresses.extend(node_ip.map(|ip| ip.to_string()));
    let agent = Rc::new(konnectivity::Agent {
        routes: konnectivity::Routes {
            node_addresses: addresses,
            node_api_port: port,
            local: std::net::SocketAddr::new(local_ip, port),
            allowed: t.allowed.clone(),
        },
        tls,
        agent_id: t.agent_id.clone().unwrap_or_else(|| node.node_name.clone()),
        agent_identifiers: t
            .agent_identifiers
            .clone()
            .unwrap_or_else(|| konnectivity::default_identifiers(&node.node_name, node_ip)),
        settings: t.clone(),
        stats: Rc::default(),
    });
    log::info!(
        "konnectivity agent: dialing {}:{} as {:?} ({})",
        t.host,
        t.port,
        agent.agent_id,
        agent.agent_identifiers
    );
    Ok(Some(rt::spawn(agent.run())))
}
