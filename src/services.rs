//! The cluster's Services as a container's environment sees them: the Docker-link style
//! variables the kubelet gives every container (`{SVC}_SERVICE_HOST`, `{SVC}_PORT_80_TCP`, ...).
//!
//! The cache keeps only what the variables need: each Service's namespace, name, clusterIP and
//! ports (name, number, protocol), and whether it was ever listed (or loaded from the
//! checkpoint). `cluster::services` fills it by list and watch (feature `apiserver`); a node
//! with no apiserver has none, and its pods get no service variables, as a kubelet without a
//! client.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Why an API pod's container waits while the Services were never read (upstream's words).
pub const NOT_SYNCED: &str =
    "services have not yet been read at least once, cannot construct envvars";

/// The namespace and name of the service every pod sees, whatever its `enableServiceLinks`.
const MASTER_NAMESPACE: &str = "default";
const MASTER_SERVICE: &str = "kubernetes";

/// One port of a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// Empty when unnamed.
    pub name: Box<str>,
    pub port: i32,
    /// `TCP`, `UDP` or `SCTP`; empty means TCP.
    pub protocol: Box<str>,
}

/// What the variables need of a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    pub cluster_ip: Box<str>,
    pub ports: Box<[Port]>,
}

/// The Services known, by (namespace, name).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Services {
    pub by_name: BTreeMap<(Box<str>, Box<str>), Service>,
    /// Listed at least once, or loaded from the checkpoint.
    pub synced: bool,
}

/// The cache, shared by the thread that watches and the runtime manager (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct Shared(Arc<Mutex<Services>>);

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, Services> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many hold the cache (the watching thread stops when it is alone).
    pub fn holders(&self) -> usize {
        Arc::strong_count(&self.0)
    }
}

/// Whether a clusterIP gives variables: set, and not `None` (headless).
pub fn is_ip_set(ip: &str) -> bool {
    !ip.is_empty() && ip != "None"
}

fn var_name(s: &str) -> String {
    s.replace('-', "_").to_uppercase()
}

/// `host:port`, an IPv6 address in brackets.
fn host_port(ip: &str, port: i32) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

/// The variables of `services` (name, Service), in the kubelet's order: for each service its
/// host, its first port and each named port, then the link variables of each port.
pub fn from_services(services: &[(&str, &Service)]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, s) in services {
        if !is_ip_set(&s.cluster_ip) {
            continue;
        }
        let prefix = var_name(name);
        out.push((format!("{prefix}_SERVICE_HOST"), s.cluster_ip.to_string()));
        // The apiserver requires ports of a service with a clusterIP; without any there is
        // nothing more to say.
        let Some(first) = s.ports.first() else {
            continue;
        };
        let port_var = format!("{prefix}_SERVICE_PORT");
        out.push((port_var.clone(), first.port.to_string()));
        for p in s.ports.iter().filter(|p| !p.name.is_empty()) {
            out.push((
                format!("{port_var}_{}", var_name(&p.name)),
                p.port.to_string(),
            ));
        }
        for (i, p) in s.ports.iter().enumerate() {
            let proto = if p.protocol.is_empty() {
                "TCP"
            } else {
                &p.protocol
            };
            let lower = proto.to_lowercase();
            let url = format!("{lower}://{}", host_port(&s.cluster_ip, p.port));
            if i == 0 {
                out.push((format!("{prefix}_PORT"), url.clone()));
            }
            let pp = format!("{prefix}_PORT_{}_{}", p.port, proto.to_uppercase());
            out.push((pp.clone(), url));
            out.push((format!("{pp}_PROTO"), lower));
            out.push((format!("{pp}_PORT"), p.port.to_string()));
            out.push((format!("{pp}_ADDR"), s.cluster_ip.to_string()));
        }
    }
    out
}

impl Services {
    /// The service variables of a pod in `namespace`, by name: the master service
    /// (`default/kubernetes`) always, and with `enable_links` every service of the namespace
    /// (one of the namespace named `kubernetes` gives way to the master's).
    pub fn env(&self, namespace: &str, enable_links: bool) -> BTreeMap<String, String> {
        let mut chosen: BTreeMap<&str, &Service> = BTreeMap::new();
        for ((ns, name), s) in &self.by_name {
            if !is_ip_set(&s.cluster_ip) {
                continue;
            }
            let master = &**ns == MASTER_NAMESPACE && &**name == MASTER_SERVICE;
            if master {
                chosen.insert(name, s);
            } else if enable_links && &**ns == namespace {
                chosen.entry(name).or_insert(s);
            }
        }
        let list: Vec<(&str, &Service)> = chosen.into_iter().collect();
        from_services(&list).into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(ip: &str, ports: &[(&str, i32, &str)]) -> Service {
        Service {
            cluster_ip: ip.into(),
            ports: ports
                .iter()
                .map(|(n, p, proto)| Port {
                    name: (*n).into(),
                    port: *p,
                    protocol: (*proto).into(),
                })
                .collect(),
        }
    }

    /// Upstream's TestFromServices (pkg/kubelet/envvars), name for name and value for value.
    #[test]
    fn variables_and_their_order_are_the_kubelets() {
        let list = [
            ("foo-bar", svc("1.2.3.4", &[("", 8080, "TCP")])),
            (
                "abc-123",
                svc("5.6.7.8", &[("u-d-p", 8081, "UDP"), ("t-c-p", 8081, "TCP")]),
            ),
            (
                "q-u-u-x",
                svc("9.8.7.6", &[("", 8082, "TCP"), ("8083", 8083, "TCP")]),
            ),
            ("svrc-clusterip-none", svc("None", &[("", 8082, "TCP")])),
            ("svrc-clusterip-empty", svc("", &[("", 8082, "TCP")])),
            (
                "super-ipv6",
                svc(
                    "2001:DB8::",
                    &[("u-d-p", 8084, "UDP"), ("t-c-p", 8084, "TCP")],
                ),
            ),
            ("sctp-1", svc("1.2.3.4", &[("", 777, "SCTP")])),
        ];
        let refs: Vec<(&str, &Service)> = list.iter().map(|(n, s)| (*n, s)).collect();
        let got = from_services(&refs);
        let want: &[(&str, &str)] = &[
            ("FOO_BAR_SERVICE_HOST", "1.2.3.4"),
            ("FOO_BAR_SERVICE_PORT", "8080"),
            ("FOO_BAR_PORT", "tcp://1.2.3.4:8080"),
            ("FOO_BAR_PORT_8080_TCP", "tcp://1.2.3.4:8080"),
            ("FOO_BAR_PORT_8080_TCP_PROTO", "tcp"),
            ("FOO_BAR_PORT_8080_TCP_PORT", "8080"),
            ("FOO_BAR_PORT_8080_TCP_ADDR", "1.2.3.4"),
            ("ABC_123_SERVICE_HOST", "5.6.7.8"),
            ("ABC_123_SERVICE_PORT", "8081"),
            ("ABC_123_SERVICE_PORT_U_D_P", "8081"),
            ("ABC_123_SERVICE_PORT_T_C_P", "8081"),
            ("ABC_123_PORT", "udp://5.6.7.8:8081"),
            ("ABC_123_PORT_8081_UDP", "udp://5.6.7.8:8081"),
            ("ABC_123_PORT_8081_UDP_PROTO", "udp"),
            ("ABC_123_PORT_8081_UDP_PORT", "8081"),
            ("ABC_123_PORT_8081_UDP_ADDR", "5.6.7.8"),
            ("ABC_123_PORT_8081_TCP", "tcp://5.6.7.8:8081"),
            ("ABC_123_PORT_8081_TCP_PROTO", "tcp"),
            ("ABC_123_PORT_8081_TCP_PORT", "8081"),
            ("ABC_123_PORT_8081_TCP_ADDR", "5.6.7.8"),
            ("Q_U_U_X_SERVICE_HOST", "9.8.7.6"),
            ("Q_U_U_X_SERVICE_PORT", "8082"),
            ("Q_U_U_X_SERVICE_PORT_8083", "8083"),
            ("Q_U_U_X_PORT", "tcp://9.8.7.6:8082"),
            ("Q_U_U_X_PORT_8082_TCP", "tcp://9.8.7.6:8082"),
            ("Q_U_U_X_PORT_8082_TCP_PROTO", "tcp"),
            ("Q_U_U_X_PORT_8082_TCP_PORT", "8082"),
            ("Q_U_U_X_PORT_8082_TCP_ADDR", "9.8.7.6"),
            ("Q_U_U_X_PORT_8083_TCP", "tcp://9.8.7.6:8083"),
            ("Q_U_U_X_PORT_8083_TCP_PROTO", "tcp"),
            ("Q_U_U_X_PORT_8083_TCP_PORT", "8083"),
            ("Q_U_U_X_PORT_8083_TCP_ADDR", "9.8.7.6"),
            ("SUPER_IPV6_SERVICE_HOST", "2001:DB8::"),
            ("SUPER_IPV6_SERVICE_PORT", "8084"),
            ("SUPER_IPV6_SERVICE_PORT_U_D_P", "8084"),
            ("SUPER_IPV6_SERVICE_PORT_T_C_P", "8084"),
            ("SUPER_IPV6_PORT", "udp://[2001:DB8::]:8084"),
            ("SUPER_IPV6_PORT_8084_UDP", "udp://[2001:DB8::]:8084"),
            ("SUPER_IPV6_PORT_8084_UDP_PROTO", "udp"),
            ("SUPER_IPV6_PORT_8084_UDP_PORT", "8084"),
            ("SUPER_IPV6_PORT_8084_UDP_ADDR", "2001:DB8::"),
            ("SUPER_IPV6_PORT_8084_TCP", "tcp://[2001:DB8::]:8084"),
            ("SUPER_IPV6_PORT_8084_TCP_PROTO", "tcp"),
            ("SUPER_IPV6_PORT_8084_TCP_PORT", "8084"),
            ("SUPER_IPV6_PORT_8084_TCP_ADDR", "2001:DB8::"),
            ("SCTP_1_SERVICE_HOST", "1.2.3.4"),
            ("SCTP_1_SERVICE_PORT", "777"),
            ("SCTP_1_PORT", "sctp://1.2.3.4:777"),
            ("SCTP_1_PORT_777_SCTP", "sctp://1.2.3.4:777"),
            ("SCTP_1_PORT_777_SCTP_PROTO", "sctp"),
            ("SCTP_1_PORT_777_SCTP_PORT", "777"),
            ("SCTP_1_PORT_777_SCTP_ADDR", "1.2.3.4"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(got, want);
    }

    fn cache(entries: &[(&str, &str, Service)]) -> Services {
        Services {
            by_name: entries
                .iter()
                .map(|(ns, n, s)| (((*ns).into(), (*n).into()), s.clone()))
                .collect(),
            synced: true,
        }
    }

    /// Upstream's TestMakeEnvironmentVariables service cases: the pod's namespace with links
    /// on, the master service always, never another namespace's.
    #[test]
    fn a_pod_sees_its_namespace_and_the_master_service() {
        let s = cache(&[
            (
                "default",
                "kubernetes",
                svc("1.2.3.1", &[("https", 443, "TCP")]),
            ),
            ("test1", "test", svc("1.2.3.3", &[("", 8083, "TCP")])),
            ("test2", "other", svc("1.2.3.5", &[("", 8085, "TCP")])),
            ("test1", "headless", svc("None", &[("", 8086, "TCP")])),
            // A service of the pod's namespace named like the master one gives way to it.
            ("test1", "kubernetes", svc("1.2.3.9", &[("", 8089, "TCP")])),
        ]);
        let on = s.env("test1", true);
        assert_eq!(on["KUBERNETES_SERVICE_HOST"], "1.2.3.1");
        assert_eq!(on["KUBERNETES_SERVICE_PORT"], "443");
        assert_eq!(on["KUBERNETES_SERVICE_PORT_HTTPS"], "443");
        assert_eq!(on["KUBERNETES_PORT"], "tcp://1.2.3.1:443");
        assert_eq!(on["KUBERNETES_PORT_443_TCP_ADDR"], "1.2.3.1");
        assert_eq!(on["TEST_SERVICE_HOST"], "1.2.3.3");
        assert_eq!(on["TEST_PORT_8083_TCP"], "tcp://1.2.3.3:8083");
        assert!(!on.keys().any(|k| k.starts_with("OTHER_")), "{on:?}");
        assert!(!on.keys().any(|k| k.starts_with("HEADLESS_")), "{on:?}");
        // 8 variables for kubernetes (one named port), 7 for test.
        assert_eq!(on.len(), 15, "{on:?}");
        let off = s.env("test1", false);
        assert_eq!(off.len(), 8, "{off:?}");
        assert!(off.keys().all(|k| k.starts_with("KUBERNETES_")), "{off:?}");
        // A pod of the default namespace with links off still sees the master service only.
        assert_eq!(s.env("default", false), off);
    }
}
