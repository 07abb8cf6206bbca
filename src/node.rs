//! Facts about the node: name, address, memory, DNS, paths.

use std::net::IpAddr;

use crate::kuberuntime::NodeContext;
use crate::options::Options;

/// The node name: `--hostname-override`, else the host name, lowercased as the kubelet does.
pub fn node_name(o: &Options) -> Result<String, String> {
    let name = match &o.hostname_override {
        Some(n) => n.clone(),
        None => nix::unistd::gethostname()
            .map_err(|e| format!("reading the host name: {e}"))?
            .to_string_lossy()
            .into_owned(),
    };
    let name = name.trim().to_lowercase();
    if name.is_empty() {
        return Err("the node name is empty: set --hostname-override".into());
    }
    Ok(name)
}

/// The interface of the default IPv4 route, from /proc/net/route text.
pub fn default_route_iface(route: &str) -> Option<String> {
    route.lines().skip(1).find_map(|l| {
        let mut f = l.split_whitespace();
        let iface = f.next()?;
        (f.next()? == "00000000").then(|| iface.to_owned())
    })
}

/// The node address: `--node-ip`, else the first IPv4 address of the default-route interface,
/// else any non-loopback IPv4 address, else 127.0.0.1 (a device with no network at all).
pub fn node_ip(o: &Options) -> IpAddr {
    if let Some(ip) = o.node_ip {
        return ip;
    }
    let route = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    let iface = default_route_iface(&route);
    let addrs: Vec<(String, IpAddr)> = nix::ifaddrs::getifaddrs()
        .map(|it| {
            it.filter_map(|a| {
                let sin = a.address?.as_sockaddr_in().copied()?;
                Some((a.interface_name, IpAddr::V4(sin.ip())))
            })
            .filter(|(_, ip)| !ip.is_loopback())
            .collect()
        })
        .unwrap_or_default();
    addrs
        .iter()
        .find(|(n, _)| Some(n) == iface.as_ref())
        .or_else(|| addrs.first())
        .map_or(IpAddr::from([127, 0, 0, 1]), |(_, ip)| *ip)
}

/// MemTotal from /proc/meminfo text, in bytes.
pub fn mem_total(meminfo: &str) -> Option<i64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

pub fn detect(o: &Options) -> Result<NodeContext, String> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let dns = std::fs::read_to_string("/etc/resolv.conf")
        .ok()
        .map(|t| crate::kuberuntime::config::parse_resolv_conf(&t));
    Ok(NodeContext {
        node_name: node_name(o)?,
        node_ip: node_ip(o).to_string(),
        memory_bytes: mem_total(&meminfo).unwrap_or(0),
        dns,
        pod_logs_dir: o.pod_logs_dir.clone(),
        root_dir: o.root_dir.clone(),
        memory_oom_group: false,
    })
}

/// Go's GOARCH for this build, as `kubernetes.io/arch` wants it.
pub fn goarch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "x86" => "386",
        "riscv64" => "riscv64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_and_meminfo() {
        let route = "Iface\tDestination\tGateway\tFlags\nwlan0\t0000A8C0\t00000000\t0001\neth0\t00000000\t0100A8C0\t0003\n";
        assert_eq!(default_route_iface(route).as_deref(), Some("eth0"));
        assert_eq!(default_route_iface("Iface\tDestination\n"), None);
        assert_eq!(
            mem_total("MemTotal:       1000 kB\nMemFree: 3 kB\n"),
            Some(1_024_000)
        );
        assert_eq!(mem_total(""), None);
    }

    #[test]
    fn names_are_lowercased() {
        let o = Options {
            hostname_override: Some("Edge-GW-01".into()),
            ..Options::default()
        };
        assert_eq!(node_name(&o).unwrap(), "edge-gw-01");
        let o = Options {
            hostname_override: Some("  ".into()),
            ..Options::default()
        };
        assert!(node_name(&o).is_err());
    }
}
