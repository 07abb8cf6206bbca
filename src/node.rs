//! Facts about the node: name, address, CPUs, memory, disk, DNS, what it runs, read once at
//! start; and what of it pods may use (node allocatable), which admission weighs pods against
//! and the Node's status reports.

use std::net::IpAddr;
use std::path::Path;

use crate::cm::{Allocatable, CgroupConfig, Reserved};
use crate::cri::v1;

/// What the node is, gathered once at start.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Facts {
    pub name: String,
    pub ip: String,
    pub cpus: usize,
    pub memory_bytes: i64,
    /// The size of the filesystem under `--root-dir`; `None` when it could not be read.
    pub disk_bytes: Option<i64>,
    /// The host's resolv.conf, for pods with `dnsPolicy: Default`.
    pub dns: Option<v1::DnsConfig>,
    pub machine_id: String,
    pub boot_id: String,
    pub kernel: String,
    pub os_image: String,
    pub architecture: String,
}

impl Facts {
    /// Reads the facts from the host: the name is `--hostname-override` or the host's, the
    /// address `--node-ip` or the host's (see [`node_ip`]); `root_dir` must exist, for its
    /// filesystem's size.
    pub fn gather(
        hostname_override: Option<&str>,
        given_ip: Option<IpAddr>,
        root_dir: &Path,
    ) -> Result<Facts, String> {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        #[allow(
            clippy::useless_conversion,
            reason = "statvfs counts are u32 on 32-bit targets (armv7)"
        )]
        let disk = nix::sys::statvfs::statvfs(root_dir)
            .ok()
            .map(|s| u64::from(s.blocks()).saturating_mul(u64::from(s.fragment_size())))
            .and_then(|b| i64::try_from(b).ok());
        Ok(Facts {
            name: node_name(hostname_override)?,
            ip: node_ip(given_ip).to_string(),
            cpus: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            memory_bytes: mem_total(&meminfo).unwrap_or(0),
            disk_bytes: disk,
            dns: std::fs::read_to_string("/etc/resolv.conf")
                .ok()
                .map(|t| crate::kuberuntime::config::parse_resolv_conf(&t)),
            machine_id: first_line("/etc/machine-id"),
            boot_id: first_line("/proc/sys/kernel/random/boot_id"),
            kernel: first_line("/proc/sys/kernel/osrelease"),
            os_image: os_image(&std::fs::read_to_string("/etc/os-release").unwrap_or_default()),
            architecture: goarch().to_owned(),
        })
    }

    /// CPUs, memory and disk (0 when unknown).
    pub fn capacity(&self) -> Allocatable {
        Allocatable {
            milli_cpu: i64::try_from(self.cpus)
                .unwrap_or(i64::MAX)
                .saturating_mul(1000),
            memory: self.memory_bytes.max(0),
            ephemeral_storage: self.disk_bytes.unwrap_or(0),
        }
    }

    /// Node allocatable, as upstream's: capacity less `kubeReserved`, `systemReserved` and the
    /// hard `memory.available` and `nodefs.available` eviction thresholds. Admission weighs
    /// pods against it and the Node's status reports it. (The kubepods cgroup's limit and the
    /// downward API's default limits leave the thresholds in: `CgroupConfig::allocatable`.)
    pub fn allocatable(
        &self,
        cgroups: &CgroupConfig,
        eviction: &crate::eviction::Config,
    ) -> Allocatable {
        let capacity = self.capacity();
        let (memory, nodefs) = eviction.hard_reserved(capacity.memory, capacity.ephemeral_storage);
        let reserved = cgroups.reserved().plus(&Reserved {
            memory,
            ephemeral_storage: nodefs,
            ..Reserved::default()
        });
        capacity.less(&reserved)
    }
}

fn first_line(path: &str) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.lines().next().map(|l| l.trim().to_owned()))
        .unwrap_or_default()
}

/// `PRETTY_NAME` of os-release text.
pub fn os_image(os_release: &str) -> String {
    os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_owned())
        .unwrap_or_else(|| "Linux".into())
}

/// The node name: `--hostname-override`, else the host name, lowercased as the kubelet does.
pub fn node_name(hostname_override: Option<&str>) -> Result<String, String> {
    let name = match hostname_override {
        Some(n) => n.to_owned(),
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
pub fn node_ip(given: Option<IpAddr>) -> IpAddr {
    if let Some(ip) = given {
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
    fn os_release() {
        assert_eq!(
            os_image("NAME=x\nPRETTY_NAME=\"Raspbian GNU/Linux 12\"\n"),
            "Raspbian GNU/Linux 12"
        );
        assert_eq!(os_image(""), "Linux");
    }

    #[test]
    fn allocatable_leaves_out_both_reservations_and_the_hard_thresholds() {
        let f = Facts {
            cpus: 4,
            memory_bytes: 4 << 30,
            disk_bytes: Some(100 << 30),
            ..Facts::default()
        };
        let mut cg = CgroupConfig {
            kube_reserved: Reserved::parse_flag("cpu=500m,memory=1Gi").unwrap(),
            system_reserved: Reserved::parse_flag("ephemeral-storage=10Gi").unwrap(),
            ..CgroupConfig::default()
        };
        // The defaults: memory.available<100Mi, nodefs.available<10%.
        let ev = crate::eviction::Config::default();
        let a = f.allocatable(&cg, &ev);
        assert_eq!(a.milli_cpu, 3500);
        assert_eq!(a.memory, (3 << 30) - (100 << 20));
        assert_eq!(a.ephemeral_storage, (90 << 30) - (10 << 30));
        // The kubepods cgroup's limit keeps the thresholds; both are the one subtraction.
        let k = cg.allocatable(f.capacity());
        assert_eq!((k.milli_cpu, k.memory), (3500, 3 << 30));
        assert_eq!(k.ephemeral_storage, 90 << 30);
        // Never below zero.
        cg.kube_reserved = Reserved::parse_flag("cpu=8,memory=8Gi").unwrap();
        assert_eq!(f.allocatable(&cg, &ev).milli_cpu, 0);
        assert_eq!(f.allocatable(&cg, &ev).memory, 0);
    }

    #[test]
    fn names_are_lowercased() {
        assert_eq!(node_name(Some("Edge-GW-01")).unwrap(), "edge-gw-01");
        assert!(node_name(Some("  ")).is_err());
    }
}
