//! Builds the CRI sandbox and container configs for a pod, as the kubelet fills them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::api::{Container, Pod};
use crate::cri::v1;
use crate::qos;

use super::env::{self, PodFields};
use super::labels;

/// Paths in /proc the runtime hides from unprivileged containers (the kubelet's defaults).
const MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
pub const DEFAULT_GRACE_PERIOD: i64 = 30;
/// The shortest time a container is given between SIGTERM and SIGKILL, whatever the grace
/// period (the kubelet's minimum): `terminationGracePeriodSeconds: 0` still sends SIGTERM first.
pub const MINIMUM_GRACE_PERIOD: i64 = 2;
/// The grace period of a pod the runtime holds and no source defines (the kubelet's override
/// for orphans; the minimum above still applies).
pub const ORPHAN_GRACE_PERIOD: i64 = 1;

/// Node facts the configs need.
#[derive(Debug, Clone, Default)]
pub struct NodeContext {
    pub node_name: String,
    pub node_ip: String,
    pub memory_bytes: i64,
    pub dns: Option<v1::DnsConfig>,
    /// The cluster's DNS (`clusterDNS`, `clusterDomain`), for `ClusterFirst` pods.
    pub cluster_dns: ClusterDns,
    pub pod_logs_dir: PathBuf,
    pub root_dir: PathBuf,
    /// cgroup v2 with `memory.oom.group`: an OOM kill takes the whole container, as upstream
    /// asks for through `LinuxContainerResources.unified`.
    pub memory_oom_group: bool,
}

/// The cluster's DNS as the node is told it: the servers `ClusterFirst` pods ask
/// (`clusterDNS`) and the domain their search paths are made of (`clusterDomain`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterDns {
    pub servers: Vec<String>,
    pub domain: String,
}

/// The options a pod that asks the cluster's DNS gets (upstream's `defaultDNSOptions`).
const CLUSTER_DNS_OPTIONS: &[&str] = &["ndots:5"];

/// A container's CRI log: `<pod log dir>/<container>/<restart count>.log`, as the kubelet
/// names it (the runtime writes it; rotation renames it; `/containerLogs` reads it).
pub fn container_log_path(
    logs: &Path,
    namespace: &str,
    pod: &str,
    uid: &str,
    container: &str,
    restart_count: u32,
) -> PathBuf {
    log_dir_of(logs, namespace, pod, uid)
        .join(container)
        .join(format!("{restart_count}.log"))
}

/// The pod's log directory, as the kubelet names it: `<podLogsDir>/<ns>_<name>_<uid>`.
pub fn pod_log_dir(logs: &Path, pod: &Pod) -> PathBuf {
    let m = &pod.metadata;
    log_dir_of(logs, namespace(pod), &m.name, &m.uid)
}

/// The same directory from the pod's identity alone (for pods known only to the runtime).
pub fn log_dir_of(logs: &Path, namespace: &str, name: &str, uid: &str) -> PathBuf {
    logs.join(format!("{namespace}_{name}_{uid}"))
}

pub fn namespace(pod: &Pod) -> &str {
    if pod.metadata.namespace.is_empty() {
        "default"
    } else {
        &pod.metadata.namespace
    }
}

/// Longest grace period picolet asks for: a year. The runtime turns seconds into a nanosecond
/// count, which larger values would overflow.
pub const MAX_GRACE_PERIOD: i64 = 365 * 24 * 3600;

pub fn grace_period(pod: &Pod) -> i64 {
    // A pod being deleted through the API stops within the grace period of its deletion.
    pod.metadata
        .deletion_grace_period_seconds
        .or(pod.spec.termination_grace_period_seconds)
        .unwrap_or(DEFAULT_GRACE_PERIOD)
        .clamp(0, MAX_GRACE_PERIOD)
}

fn ns_mode(host: bool, otherwise: v1::NamespaceMode) -> i32 {
    if host {
        v1::NamespaceMode::Node as i32
    } else {
        otherwise as i32
    }
}

fn namespace_options(pod: &Pod) -> v1::NamespaceOption {
    // shareProcessNamespace: every container sees the others' processes (the sandbox's PID
    // namespace).
    let pid = if pod.spec.share_process_namespace == Some(true) {
        v1::NamespaceMode::Pod
    } else {
        v1::NamespaceMode::Container
    };
    v1::NamespaceOption {
        network: ns_mode(pod.spec.host_network, v1::NamespaceMode::Pod),
        pid: ns_mode(pod.spec.host_pid, pid),
        ipc: ns_mode(pod.spec.host_ipc, v1::NamespaceMode::Pod),
        target_id: String::new(),
    }
}

/// A container's namespaces: the pod's, except that a container with a target (an ephemeral
/// one) shares the target's PID namespace where it would otherwise have its own.
fn container_namespaces(pod: &Pod, pid_target: Option<&str>) -> v1::NamespaceOption {
    let mut ns = namespace_options(pod);
    if let Some(t) = pid_target
        && ns.pid == v1::NamespaceMode::Container as i32
    {
        ns.pid = v1::NamespaceMode::Target as i32;
        ns.target_id = t.to_owned();
    }
    ns
}

fn protocol(p: Option<&str>) -> i32 {
    match p {
        Some("UDP") => v1::Protocol::Udp as i32,
        Some("SCTP") => v1::Protocol::Sctp as i32,
        _ => v1::Protocol::Tcp as i32,
    }
}

fn privileged(c: &Container) -> bool {
    c.security_context
        .as_ref()
        .and_then(|s| s.privileged)
        .unwrap_or(false)
}

/// The seccomp profile the runtime applies, as the kubelet picks it: the container's, else the
/// pod's, else Unconfined (the kubelet's default without `seccompDefault`). A Localhost
/// profile is a file under `<root-dir>/seccomp`.
pub fn seccomp_profile(pod: &Pod, c: Option<&Container>, root_dir: &Path) -> v1::SecurityProfile {
    use v1::security_profile::ProfileType;
    let chosen = c
        .and_then(|c| c.security_context.as_ref())
        .and_then(|s| s.seccomp_profile.as_ref())
        .or_else(|| {
            pod.spec
                .security_context
                .as_ref()
                .and_then(|s| s.seccomp_profile.as_ref())
        });
    let (t, localhost_ref) =
        match chosen.map(|s| (s.type_.as_str(), s.localhost_profile.as_deref())) {
            Some(("RuntimeDefault", _)) => (ProfileType::RuntimeDefault, String::new()),
            Some(("Localhost", Some(f))) => (
                ProfileType::Localhost,
                crate::root_dir::RootDir(root_dir)
                    .seccomp()
                    .join(f)
                    .display()
                    .to_string(),
            ),
            _ => (ProfileType::Unconfined, String::new()),
        };
    v1::SecurityProfile {
        profile_type: t as i32,
        localhost_ref,
    }
}

/// Hostname of a pod: its name, cut to 63 characters without a trailing '-' or '.'.
pub(super) fn hostname(pod: &Pod) -> String {
    let h = pod
        .spec
        .hostname
        .as_deref()
        .filter(|h| !h.is_empty())
        .unwrap_or(&pod.metadata.name);
    let mut h: String = h.chars().take(63).collect();
    while h.ends_with(['-', '.']) {
        h.pop();
    }
    h
}

/// A container's port mappings as the kubelet's MakePortMappings lists them: every port, with
/// or without a hostPort (the runtime maps only those with one), a port whose name (or, unnamed,
/// whose family, protocol, host IP and ports) repeats an earlier one left out.
fn port_mappings(c: &Container) -> Vec<v1::PortMapping> {
    let mut names = std::collections::HashSet::new();
    let mut out = Vec::new();
    for p in &c.ports {
        let host_ip = p.host_ip.clone().unwrap_or_default();
        let host_port = p.host_port.unwrap_or(0);
        let proto = p.protocol.as_deref().unwrap_or("TCP");
        let name = match p.name.as_deref().filter(|n| !n.is_empty()) {
            Some(n) => n.to_owned(),
            None => {
                let family = match host_ip.parse::<std::net::IpAddr>() {
                    _ if host_ip.is_empty() => "any",
                    Ok(std::net::IpAddr::V6(_)) => "v6",
                    _ => "v4",
                };
                format!(
                    "{family}-{proto}-{host_ip}:{}:{host_port}",
                    p.container_port
                )
            }
        };
        if !names.insert(name) {
            continue;
        }
        out.push(v1::PortMapping {
            protocol: protocol(p.protocol.as_deref()),
            container_port: p.container_port,
            host_port,
            host_ip,
        });
    }
    out
}

pub fn sandbox_config(pod: &Pod, node: &NodeContext, attempt: u32) -> v1::PodSandboxConfig {
    let m = &pod.metadata;
    let ns = namespace(pod);
    let psc = pod.spec.security_context.as_ref();
    let port_mappings = pod.spec.containers.iter().flat_map(port_mappings).collect();
    v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: m.name.clone(),
            uid: m.uid.clone(),
            namespace: ns.to_owned(),
            attempt,
        }),
        // runc refuses a hostname without its own UTS namespace; upstream sends none either.
        hostname: if pod.spec.host_network {
            String::new()
        } else {
            hostname(pod)
        },
        log_directory: pod_log_dir(&node.pod_logs_dir, pod).display().to_string(),
        dns_config: pod_dns(pod, node.dns.as_ref(), &node.cluster_dns),
        port_mappings,
        labels: labels::sandbox_labels(&m.labels, &m.name, ns, &m.uid, &node.node_name),
        annotations: m
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        linux: Some(v1::LinuxPodSandboxConfig {
            cgroup_parent: String::new(),
            security_context: Some(v1::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                run_as_user: psc
                    .and_then(|s| s.run_as_user)
                    .map(|value| v1::Int64Value { value }),
                run_as_group: psc
                    .and_then(|s| s.run_as_group)
                    .map(|value| v1::Int64Value { value }),
                readonly_rootfs: false,
                supplemental_groups: psc
                    .map(|s| s.supplemental_groups.clone())
                    .unwrap_or_default(),
                privileged: pod
                    .spec
                    .containers
                    .iter()
                    .chain(&pod.spec.init_containers)
                    .any(privileged),
                seccomp: Some(seccomp_profile(pod, None, &node.root_dir)),
            }),
            sysctls: psc
                .map(|s| {
                    s.sysctls
                        .iter()
                        .map(|x| (x.name.clone(), x.value.clone()))
                        .collect()
                })
                .unwrap_or_default(),
        }),
    }
}

/// Everything a container config depends on besides the pod.
#[derive(Debug, Clone)]
pub struct ContainerInputs<'a> {
    pub container: &'a Container,
    pub image_ref: &'a str,
    pub restart_count: u32,
    pub hash: u64,
    pub pod_ip: &'a str,
    /// Volume name → host path.
    pub volumes: &'a HashMap<String, PathBuf>,
    /// Resolved host paths of the mounts with a `subPath`, by mount path.
    pub subpaths: &'a HashMap<String, PathBuf>,
    /// The mounts of image volumes, by mount path: the image, and the path inside it (empty:
    /// its root).
    pub image_mounts: &'a HashMap<String, (v1::ImageSpec, String)>,
    /// Host file backing the termination message.
    pub termination_log: Option<&'a Path>,
    /// The pod's managed hosts file, mounted at /etc/hosts unless the container mounts a
    /// volume there.
    pub etc_hosts: Option<&'a Path>,
    /// Variables from ConfigMaps and Secrets (`envFrom`, `configMapKeyRef`, `secretKeyRef`).
    pub object_env: &'a crate::objects::ObjectEnv,
    /// The runtime id of the container whose process namespace an ephemeral container joins
    /// (its `targetContainerName`).
    pub pid_target: Option<&'a str>,
}

pub(super) fn resources(
    pod: &Pod,
    c: &Container,
    node: &NodeContext,
) -> v1::LinuxContainerResources {
    let r = &c.resources;
    // Requests default to limits, as the API server defaults them; a zero request counts as
    // none (the kubelet takes CPU shares from the limit then).
    let req = |k: &str| {
        r.requests
            .get(k)
            .filter(|q| !q.is_zero())
            .or_else(|| r.limits.get(k))
    };
    let cpu_req = req("cpu").map_or(0, |q| q.milli_value());
    let cpu_lim = r.limits.get("cpu").map_or(0, |q| q.milli_value());
    let mem_lim = r.limits.get("memory").map_or(0, |q| q.value());
    let quota = qos::milli_cpu_to_quota(cpu_lim, qos::QUOTA_PERIOD_US);
    v1::LinuxContainerResources {
        // The period is set with or without a quota, as the kubelet sets it.
        cpu_period: qos::QUOTA_PERIOD_US,
        cpu_quota: quota,
        cpu_shares: i64::try_from(qos::milli_cpu_to_shares(cpu_req)).unwrap_or(2),
        memory_limit_in_bytes: mem_lim,
        oom_score_adj: qos::oom_score_adj(pod, c, node.memory_bytes),
        unified: if node.memory_oom_group {
            HashMap::from([("memory.oom.group".to_owned(), "1".to_owned())])
        } else {
            HashMap::new()
        },
        ..Default::default()
    }
}

/// A container's resolved environment (fieldRefs, objects, `$(VAR)` expansion).
pub fn container_env(
    pod: &Pod,
    node: &NodeContext,
    c: &Container,
    pod_ip: &str,
    object_env: &crate::objects::ObjectEnv,
) -> Vec<(String, String)> {
    let m = &pod.metadata;
    let fields = PodFields {
        name: &m.name,
        namespace: namespace(pod),
        uid: &m.uid,
        node_name: &node.node_name,
        service_account: pod.spec.service_account_name.as_deref().unwrap_or_default(),
        pod_ip,
        host_ip: &node.node_ip,
        labels: Some(&m.labels),
        annotations: Some(&m.annotations),
    };
    env::resolve(c, &fields, object_env)
}

/// The sub path a mount uses: `subPath`, or `subPathExpr` with the container's variables
/// expanded (as the kubelet, a reference to an unknown variable stays as written). The result
/// must stay a relative path without `..`.
pub fn mount_sub_path(
    vm: &crate::api::VolumeMount,
    env: &[(String, String)],
) -> Result<Option<String>, String> {
    if let Some(sub) = vm.sub_path.as_deref().filter(|s| !s.is_empty()) {
        return Ok(Some(sub.to_owned()));
    }
    let Some(expr) = vm.sub_path_expr.as_deref().filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let vars: HashMap<&str, String> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let sub = env::expand(expr, &vars);
    if sub.starts_with('/') {
        return Err(format!(
            "subPathExpr {expr:?} expands to {sub:?}, which must be a relative path"
        ));
    }
    if sub.split('/').any(|p| p == "..") {
        return Err(format!(
            "subPathExpr {expr:?} expands to {sub:?}, which must not contain '..'"
        ));
    }
    Ok(Some(sub))
}

/// Where a container sees the pod's hosts file.
pub const ETC_HOSTS: &str = "/etc/hosts";

/// The pod's managed /etc/hosts, as the kubelet writes it: localhost lines, the pod's IP with
/// its hostname (and `<hostname>.<subdomain>.<namespace>.svc.<cluster domain>` with a
/// subdomain; without a `clusterDomain`, the name ends at `svc`), then the hostAliases; for a
/// host-network pod, the node's own file with the hostAliases after it.
pub fn hosts_file(
    pod: &Pod,
    pod_ip: &str,
    node_hosts: Option<&str>,
    cluster_domain: &str,
) -> String {
    let mut out = String::new();
    if pod.spec.host_network {
        out.push_str("# Kubernetes-managed hosts file (host network).\n");
        out.push_str(node_hosts.unwrap_or_default());
    } else {
        out.push_str("# Kubernetes-managed hosts file.\n");
        out.push_str("127.0.0.1\tlocalhost\n");
        out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
        out.push_str("fe00::0\tip6-localnet\n");
        out.push_str("fe00::0\tip6-mcastprefix\n");
        out.push_str("fe00::1\tip6-allnodes\n");
        out.push_str("fe00::2\tip6-allrouters\n");
        let host = hostname(pod);
        match pod.spec.subdomain.as_deref().filter(|s| !s.is_empty()) {
            Some(sub) if cluster_domain.is_empty() => out.push_str(&format!(
                "{pod_ip}\t{host}.{sub}.{}.svc\t{host}\n",
                namespace(pod)
            )),
            Some(sub) => out.push_str(&format!(
                "{pod_ip}\t{host}.{sub}.{}.svc.{cluster_domain}\t{host}\n",
                namespace(pod)
            )),
            None => out.push_str(&format!("{pod_ip}\t{host}\n")),
        }
    }
    if !pod.spec.host_aliases.is_empty() {
        out.push_str("\n# Entries added by HostAliases.\n");
        for a in &pod.spec.host_aliases {
            out.push_str(&format!("{}\t{}\n", a.ip, a.hostnames.join("\t")));
        }
    }
    out
}

pub fn container_config(
    pod: &Pod,
    node: &NodeContext,
    i: &ContainerInputs<'_>,
) -> v1::ContainerConfig {
    let c = i.container;
    let m = &pod.metadata;
    let ns = namespace(pod);
    let envs = container_env(pod, node, c, i.pod_ip, i.object_env);
    let (command, args) = env::command_and_args(c, &envs);

    let mut mounts: Vec<v1::Mount> = c
        .volume_mounts
        .iter()
        .filter_map(|vm| {
            if let Some((image, sub)) = i.image_mounts.get(&vm.mount_path) {
                // Read-only whatever the mount says, as upstream's image volume plugin is.
                return Some(v1::Mount {
                    container_path: vm.mount_path.clone(),
                    readonly: true,
                    image: Some(image.clone()),
                    image_sub_path: sub.clone(),
                    ..Default::default()
                });
            }
            let host = i.volumes.get(&vm.name)?;
            // subPath or subPathExpr, resolved by the caller
            let host = match i.subpaths.get(&vm.mount_path) {
                Some(p) => p.clone(),
                None => match vm.sub_path.as_deref().filter(|s| !s.is_empty()) {
                    Some(sub) => host.join(sub),
                    None => host.clone(),
                },
            };
            let propagation = match vm.mount_propagation.as_deref() {
                Some("HostToContainer") => v1::MountPropagation::PropagationHostToContainer,
                Some("Bidirectional") => v1::MountPropagation::PropagationBidirectional,
                _ => v1::MountPropagation::PropagationPrivate,
            };
            Some(v1::Mount {
                container_path: vm.mount_path.clone(),
                host_path: host.display().to_string(),
                // API data is never writable by the container, whatever the mount says.
                readonly: vm.read_only || crate::projection::is_api_data(pod, &vm.name),
                selinux_relabel: false,
                propagation: propagation as i32,
                ..Default::default()
            })
        })
        .collect();
    let tmp = c
        .termination_message_path
        .as_deref()
        .unwrap_or(DEFAULT_TERMINATION_MESSAGE_PATH);
    if let Some(log) = i.termination_log {
        mounts.push(v1::Mount {
            container_path: tmp.to_owned(),
            host_path: log.display().to_string(),
            ..Default::default()
        });
    }
    if let Some(hosts) = i.etc_hosts
        && !c.volume_mounts.iter().any(|vm| vm.mount_path == ETC_HOSTS)
    {
        mounts.push(v1::Mount {
            container_path: ETC_HOSTS.to_owned(),
            host_path: hosts.display().to_string(),
            ..Default::default()
        });
    }

    let mut annotations = HashMap::new();
    annotations.insert(
        labels::CONTAINER_HASH.to_owned(),
        labels::format_hash(i.hash),
    );
    annotations.insert(
        labels::CONTAINER_RESTART_COUNT.to_owned(),
        i.restart_count.to_string(),
    );
    annotations.insert(labels::TERMINATION_MESSAGE_PATH.to_owned(), tmp.to_owned());
    annotations.insert(
        labels::TERMINATION_MESSAGE_POLICY.to_owned(),
        c.termination_message_policy
            .clone()
            .unwrap_or_else(|| "File".to_owned()),
    );
    annotations.insert(
        labels::TERMINATION_GRACE_PERIOD.to_owned(),
        grace_period(pod).to_string(),
    );
    if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref())
        && let Ok(j) = serde_json::to_string(h)
    {
        annotations.insert(labels::PRE_STOP_HANDLER.to_owned(), j);
    }
    if !c.ports.is_empty() {
        let ports: Vec<serde_json::Value> = c
            .ports
            .iter()
            .map(|p| {
                let mut o = serde_json::json!({
                    "containerPort": p.container_port,
                    "protocol": p.protocol.as_deref().unwrap_or("TCP"),
                });
                if let Some(n) = p.name.as_deref().filter(|n| !n.is_empty()) {
                    o["name"] = n.into();
                }
                o
            })
            .collect();
        annotations.insert(
            labels::CONTAINER_PORTS.to_owned(),
            serde_json::Value::from(ports).to_string(),
        );
    }

    let psc = pod.spec.security_context.as_ref();
    let sc = c.security_context.as_ref();
    let privileged = privileged(c);
    let caps = sc.and_then(|s| s.capabilities.as_ref());
    v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata {
            name: c.name.clone(),
            attempt: i.restart_count,
        }),
        image: Some(v1::ImageSpec {
            image: i.image_ref.to_owned(),
            ..Default::default()
        }),
        command,
        args,
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: envs
            .into_iter()
            .map(|(key, value)| v1::KeyValue { key, value })
            .collect(),
        mounts,
        labels: labels::container_labels(&c.name, &m.name, ns, &m.uid, &node.node_name),
        annotations,
        log_path: format!("{}/{}.log", c.name, i.restart_count),
        stdin: c.stdin,
        stdin_once: false,
        tty: c.tty,
        linux: Some(v1::LinuxContainerConfig {
            resources: Some(resources(pod, c, node)),
            security_context: Some(v1::LinuxContainerSecurityContext {
                capabilities: caps.map(|c| v1::Capability {
                    add_capabilities: c.add.clone(),
                    drop_capabilities: c.drop.clone(),
                    add_ambient_capabilities: Vec::new(),
                }),
                privileged,
                namespace_options: Some(container_namespaces(pod, i.pid_target)),
                run_as_user: sc
                    .and_then(|s| s.run_as_user)
                    .or_else(|| psc.and_then(|s| s.run_as_user))
                    .map(|value| v1::Int64Value { value }),
                run_as_group: sc
                    .and_then(|s| s.run_as_group)
                    .or_else(|| psc.and_then(|s| s.run_as_group))
                    .map(|value| v1::Int64Value { value }),
                run_as_username: String::new(),
                readonly_rootfs: sc
                    .and_then(|s| s.read_only_root_filesystem)
                    .unwrap_or(false),
                supplemental_groups: psc
                    .map(|s| {
                        s.supplemental_groups
                            .iter()
                            .copied()
                            .chain(s.fs_group)
                            .collect()
                    })
                    .unwrap_or_default(),
                no_new_privs: sc.and_then(|s| s.allow_privilege_escalation) == Some(false),
                masked_paths: if privileged {
                    Vec::new()
                } else {
                    MASKED_PATHS.iter().map(|s| (*s).to_owned()).collect()
                },
                readonly_paths: if privileged {
                    Vec::new()
                } else {
                    READONLY_PATHS.iter().map(|s| (*s).to_owned()).collect()
                },
                seccomp: Some(seccomp_profile(pod, Some(c), &node.root_dir)),
            }),
        }),
    }
}

/// The pod's resolv.conf, as the kubelet forms it: the cluster's DNS for `ClusterFirst` (not
/// on the host network) and `ClusterFirstWithHostNet` when the node has `clusterDNS` (its
/// servers; the search paths `<namespace>.svc.<domain>`, `svc.<domain>`, `<domain>` before the
/// node's; `ndots:5`), otherwise the node's (`Default`, and `ClusterFirst` without `clusterDNS`,
/// as the kubelet falls back), or nothing with `dnsPolicy: None`; then `dnsConfig` appended
/// (duplicates dropped, options by name overridden); then cut to 3 nameservers and to 32 search
/// domains of at most 253 characters within 2048 characters in all. `None` leaves the
/// runtime's default (the node's file).
pub fn pod_dns(
    pod: &Pod,
    node: Option<&v1::DnsConfig>,
    cluster: &ClusterDns,
) -> Option<v1::DnsConfig> {
    use crate::api::validation::{
        MAX_DNS_NAMESERVERS, MAX_DNS_SEARCH_LIST_CHARS, MAX_DNS_SEARCH_PATHS,
    };
    let policy = pod.spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    let none = policy == "None";
    let cluster_first = match policy {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !pod.spec.host_network,
        _ => false,
    };
    let mut d = if none {
        v1::DnsConfig::default()
    } else if cluster_first && !cluster.servers.is_empty() {
        let mut searches = Vec::new();
        if !cluster.domain.is_empty() {
            let domain = &cluster.domain;
            searches.push(format!("{}.svc.{domain}", namespace(pod)));
            searches.push(format!("svc.{domain}"));
            searches.push(domain.clone());
        }
        for s in node.map(|n| n.searches.as_slice()).unwrap_or_default() {
            if !searches.contains(s) {
                searches.push(s.clone());
            }
        }
        v1::DnsConfig {
            servers: cluster.servers.clone(),
            searches,
            options: CLUSTER_DNS_OPTIONS
                .iter()
                .map(|o| (*o).to_owned())
                .collect(),
        }
    } else {
        match (node, &pod.spec.dns_config) {
            (Some(n), _) => n.clone(),
            (None, Some(_)) => v1::DnsConfig::default(),
            (None, None) => return None,
        }
    };
    if let Some(extra) = &pod.spec.dns_config {
        fn push_new(list: &mut Vec<String>, more: &[String]) {
            for m in more {
                if !list.contains(m) {
                    list.push(m.clone());
                }
            }
        }
        push_new(&mut d.servers, &extra.nameservers);
        push_new(&mut d.searches, &extra.searches);
        for o in &extra.options {
            let new = match o.value.as_deref() {
                Some(v) if !v.is_empty() => format!("{}:{v}", o.name),
                _ => o.name.clone(),
            };
            let name_of = |x: &str| x.split(':').next().unwrap_or_default().to_owned();
            match d.options.iter_mut().find(|x| name_of(x) == o.name) {
                Some(slot) => *slot = new,
                None => d.options.push(new),
            }
        }
    }
    let who = || format!("pod {}/{}", namespace(pod), pod.metadata.name);
    if d.servers.len() > MAX_DNS_NAMESERVERS {
        d.servers.truncate(MAX_DNS_NAMESERVERS);
        log::warn!(
            "{}: nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: {}",
            who(),
            d.servers.join(" ")
        );
    }
    let before = d.searches.len();
    d.searches.truncate(MAX_DNS_SEARCH_PATHS);
    d.searches.retain(|s| s.len() <= 253);
    while !d.searches.is_empty() && d.searches.join(" ").len() > MAX_DNS_SEARCH_LIST_CHARS {
        d.searches.pop();
    }
    if d.searches.len() != before {
        log::warn!(
            "{}: search line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
            who(),
            d.searches.join(" ")
        );
    }
    Some(d)
}

/// Parses the node's resolv.conf into the sandbox DNS config.
pub fn parse_resolv_conf(text: &str) -> v1::DnsConfig {
    let mut d = v1::DnsConfig::default();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("");
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => d.servers.extend(words.next().map(str::to_owned)),
            Some("search") | Some("domain") => d.searches = words.map(str::to_owned).collect(),
            Some("options") => d.options.extend(words.map(str::to_owned)),
            _ => {}
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ContainerPort, Quantity, VolumeMount};

    fn pod() -> Pod {
        let mut p = Pod::default();
        p.metadata.name = "web-node1".into();
        p.metadata.uid = "abc".into();
        p.metadata.labels.insert("app".into(), "web".into());
        p.spec.containers.push(Container {
            name: "nginx".into(),
            image: "nginx:1.25".into(),
            ports: vec![ContainerPort {
                name: Some("http".into()),
                container_port: 80,
                host_port: Some(8080),
                ..Default::default()
            }],
            volume_mounts: vec![VolumeMount {
                name: "data".into(),
                mount_path: "/data".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    }

    fn node() -> NodeContext {
        NodeContext {
            node_name: "node1".into(),
            node_ip: "192.0.2.1".into(),
            memory_bytes: 1 << 32,
            pod_logs_dir: "/var/log/pods".into(),
            root_dir: "/var/lib/picolet".into(),
            dns: None,
            cluster_dns: ClusterDns::default(),
            memory_oom_group: false,
        }
    }

    #[test]
    fn sandbox_carries_identity_ports_and_log_dir() {
        let s = sandbox_config(&pod(), &node(), 2);
        let md = s.metadata.unwrap();
        assert_eq!(
            (
                md.name.as_str(),
                md.namespace.as_str(),
                md.uid.as_str(),
                md.attempt
            ),
            ("web-node1", "default", "abc", 2)
        );
        assert_eq!(s.hostname, "web-node1");
        assert_eq!(s.log_directory, "/var/log/pods/default_web-node1_abc");
        assert_eq!(s.port_mappings.len(), 1);
        assert_eq!(s.port_mappings[0].host_port, 8080);
        assert_eq!(s.labels[labels::POD_UID], "abc");
        assert_eq!(s.labels["app"], "web");
        let ns = s
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns.network, v1::NamespaceMode::Pod as i32);
        assert_eq!(ns.pid, v1::NamespaceMode::Container as i32);
    }

    #[test]
    fn host_network_sandbox_has_no_hostname() {
        let mut p = pod();
        p.spec.host_network = true;
        let s = sandbox_config(&p, &node(), 0);
        assert_eq!(s.hostname, "");
        let ns = s
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns.network, v1::NamespaceMode::Node as i32);
    }

    #[test]
    fn long_hostname_is_cut_cleanly() {
        let mut p = pod();
        p.metadata.name = format!("{}-{}", "a".repeat(62), "b");
        assert_eq!(hostname(&p), "a".repeat(62));
    }

    #[test]
    fn share_process_namespace_and_the_pre_stop_annotation() {
        let mut p = pod();
        let pid = |p: &Pod| {
            sandbox_config(p, &node(), 0)
                .linux
                .unwrap()
                .security_context
                .unwrap()
                .namespace_options
                .unwrap()
                .pid
        };
        assert_eq!(pid(&p), v1::NamespaceMode::Container as i32);
        p.spec.share_process_namespace = Some(true);
        assert_eq!(pid(&p), v1::NamespaceMode::Pod as i32);
        p.spec.host_pid = true;
        assert_eq!(pid(&p), v1::NamespaceMode::Node as i32, "hostPID wins");
        p.spec.host_pid = false;
        let hook: crate::api::Lifecycle =
            serde_json::from_str(r#"{"preStop": {"exec": {"command": ["sleep", "5"]}}}"#).unwrap();
        p.spec.containers[0].lifecycle = Some(hook);
        let c = p.spec.containers[0].clone();
        let cfg = container_config(
            &p,
            &node(),
            &ContainerInputs {
                object_env: &Default::default(),
                container: &c,
                image_ref: "sha256:1",
                restart_count: 0,
                hash: 1,
                pod_ip: "10.0.0.2",
                volumes: &HashMap::new(),
                subpaths: &HashMap::new(),
                image_mounts: &HashMap::new(),
                termination_log: None,
                etc_hosts: None,
                pid_target: None,
            },
        );
        assert_eq!(
            cfg.annotations[labels::PRE_STOP_HANDLER],
            r#"{"exec":{"command":["sleep","5"]}}"#
        );
        let ns = cfg
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns.pid, v1::NamespaceMode::Pod as i32);
    }

    #[test]
    fn container_config_mounts_labels_and_resources() {
        let mut p = pod();
        let c = &mut p.spec.containers[0];
        c.resources
            .limits
            .insert("cpu".into(), Quantity::parse("500m").unwrap());
        c.resources
            .limits
            .insert("memory".into(), Quantity::parse("128Mi").unwrap());
        let c = p.spec.containers[0].clone();
        let mut vols = HashMap::new();
        vols.insert("data".to_owned(), PathBuf::from("/host/data"));
        let log = PathBuf::from("/var/lib/picolet/pods/abc/containers/nginx/tl");
        let cfg = container_config(
            &p,
            &node(),
            &ContainerInputs {
                object_env: &Default::default(),
                container: &c,
                image_ref: "sha256:feed",
                restart_count: 3,
                hash: 0xabc,
                pod_ip: "10.0.0.9",
                volumes: &vols,
                subpaths: &HashMap::new(),
                image_mounts: &HashMap::new(),
                termination_log: Some(&log),
                etc_hosts: None,
                pid_target: None,
            },
        );
        assert_eq!(cfg.metadata.unwrap().attempt, 3);
        assert_eq!(cfg.image.unwrap().image, "sha256:feed");
        assert_eq!(cfg.log_path, "nginx/3.log");
        assert_eq!(cfg.mounts[0].host_path, "/host/data");
        assert_eq!(cfg.mounts[1].container_path, "/dev/termination-log");
        assert_eq!(cfg.annotations[labels::CONTAINER_HASH], "abc");
        assert_eq!(cfg.annotations[labels::CONTAINER_RESTART_COUNT], "3");
        assert_eq!(
            cfg.annotations[labels::CONTAINER_PORTS],
            r#"[{"containerPort":80,"name":"http","protocol":"TCP"}]"#
        );
        assert_eq!(cfg.labels[labels::CONTAINER_NAME], "nginx");
        let linux = cfg.linux.unwrap();
        let r = linux.resources.unwrap();
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.cpu_period),
            (512, 50_000, 100_000)
        );
        assert_eq!(r.memory_limit_in_bytes, 128 << 20);
        assert_eq!(r.oom_score_adj, -997);
        assert!(r.unified.is_empty(), "v1: no memory.oom.group");
        let sc = linux.security_context.unwrap();
        assert!(!sc.privileged);
        assert!(sc.masked_paths.contains(&"/proc/kcore".to_owned()));

        // On cgroup v2 the whole container is killed on OOM, as upstream asks.
        let v2 = NodeContext {
            memory_oom_group: true,
            ..node()
        };
        let r = resources(&p, &c, &v2);
        assert_eq!(r.unified.len(), 1);
        assert_eq!(r.unified["memory.oom.group"], "1");
    }

    #[test]
    fn a_zero_cpu_request_takes_shares_from_the_limit_and_the_period_is_always_set() {
        let q = |s: &str| Quantity::parse(s).unwrap();
        let mut c = pod().spec.containers[0].clone();
        let shares_period = |c: &Container| {
            let mut p = pod();
            p.spec.containers = vec![c.clone()];
            let r = resources(&p, c, &node());
            (r.cpu_shares, r.cpu_quota, r.cpu_period)
        };
        // nothing set: the minimum shares, no quota, the period all the same
        assert_eq!(shares_period(&c), (2, 0, 100_000));
        c.resources.requests.insert("cpu".into(), q("0"));
        c.resources.limits.insert("cpu".into(), q("250m"));
        assert_eq!(shares_period(&c), (256, 25_000, 100_000));
        c.resources.requests.insert("cpu".into(), q("100m"));
        assert_eq!(shares_period(&c), (102, 25_000, 100_000));
    }

    #[test]
    fn seccomp_profiles_as_the_kubelet_picks_them() {
        use crate::api::{PodSecurityContext, SeccompProfile, SecurityContext};
        use v1::security_profile::ProfileType;
        let n = node();
        let mut p = pod();
        let get = |p: &Pod| {
            let s = seccomp_profile(p, Some(&p.spec.containers[0]), &n.root_dir);
            (s.profile_type, s.localhost_ref)
        };
        // nothing set: Unconfined, said explicitly
        assert_eq!(get(&p), (ProfileType::Unconfined as i32, String::new()));
        p.spec.security_context = Some(PodSecurityContext {
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        });
        assert_eq!(get(&p), (ProfileType::RuntimeDefault as i32, String::new()));
        let sb = sandbox_config(&p, &n, 0);
        let sb_sc = sb.linux.unwrap().security_context.unwrap();
        assert_eq!(
            sb_sc.seccomp.unwrap().profile_type,
            ProfileType::RuntimeDefault as i32
        );
        // the container's own wins over the pod's
        p.spec.containers[0].security_context = Some(SecurityContext {
            seccomp_profile: Some(SeccompProfile {
                type_: "Localhost".into(),
                localhost_profile: Some("profiles/audit.json".into()),
            }),
            ..Default::default()
        });
        assert_eq!(
            get(&p),
            (
                ProfileType::Localhost as i32,
                "/var/lib/picolet/seccomp/profiles/audit.json".to_owned()
            )
        );
    }

    #[test]
    fn pod_dns_appends_dns_config_and_keeps_the_limits() {
        use crate::api::{PodDnsConfig, PodDnsConfigOption};
        let host = parse_resolv_conf(
            "nameserver 1.1.1.1\nnameserver 9.9.9.9\nsearch lan\noptions ndots:2 edns0\n",
        );
        let no_cluster = ClusterDns::default();
        let mut p = pod();
        // no dnsConfig: the node's, as it is
        assert_eq!(pod_dns(&p, Some(&host), &no_cluster), Some(host.clone()));
        assert_eq!(pod_dns(&p, None, &no_cluster), None);
        p.spec.dns_config = Some(PodDnsConfig {
            nameservers: vec!["10.0.0.10".into(), "1.1.1.1".into(), "10.0.0.11".into()],
            searches: vec!["svc.example".into(), "lan".into()],
            options: vec![
                PodDnsConfigOption {
                    name: "ndots".into(),
                    value: Some("5".into()),
                },
                PodDnsConfigOption {
                    name: "single-request".into(),
                    value: None,
                },
            ],
        });
        let d = pod_dns(&p, Some(&host), &no_cluster).unwrap();
        // duplicates dropped, then cut to three nameservers
        assert_eq!(d.servers, ["1.1.1.1", "9.9.9.9", "10.0.0.10"]);
        assert_eq!(d.searches, ["lan", "svc.example"]);
        assert_eq!(d.options, ["ndots:5", "edns0", "single-request"]);
        // dnsPolicy None: only the pod's own
        p.spec.dns_policy = Some("None".into());
        let d = pod_dns(&p, Some(&host), &no_cluster).unwrap();
        assert_eq!(d.servers, ["10.0.0.10", "1.1.1.1", "10.0.0.11"]);
        assert_eq!(d.searches, ["svc.example", "lan"]);
        // search limits: 32 paths, each at most 253 characters, 2048 in all
        let dc = p.spec.dns_config.as_mut().unwrap();
        dc.searches = (0..40).map(|i| format!("d{i}.example")).collect();
        assert_eq!(pod_dns(&p, None, &no_cluster).unwrap().searches.len(), 32);
        let dc = p.spec.dns_config.as_mut().unwrap();
        dc.searches = vec!["a".repeat(254), "b".repeat(200)];
        assert_eq!(
            pod_dns(&p, None, &no_cluster).unwrap().searches,
            ["b".repeat(200)]
        );
        let dc = p.spec.dns_config.as_mut().unwrap();
        dc.searches = (0..12).map(|i| format!("{i:0>200}")).collect();
        let s = pod_dns(&p, None, &no_cluster).unwrap().searches;
        assert_eq!(s.len(), 10, "10 x 200 + 9 spaces fit in 2048, 11 do not");
    }

    #[test]
    fn pod_dns_asks_the_clusters_dns_for_cluster_first() {
        let host =
            parse_resolv_conf("nameserver 1.1.1.1\nsearch lan cluster.local\noptions edns0\n");
        let cluster = ClusterDns {
            servers: vec!["10.96.0.10".into()],
            domain: "cluster.local".into(),
        };
        let mut p = pod();
        p.metadata.namespace = "web".into();
        // ClusterFirst (the default): the cluster's servers, its search paths before the
        // node's (a duplicate dropped), ndots:5 and none of the node's options
        let want = v1::DnsConfig {
            servers: vec!["10.96.0.10".into()],
            searches: vec![
                "web.svc.cluster.local".into(),
                "svc.cluster.local".into(),
                "cluster.local".into(),
                "lan".into(),
            ],
            options: vec!["ndots:5".into()],
        };
        assert_eq!(pod_dns(&p, Some(&host), &cluster), Some(want.clone()));
        p.spec.dns_policy = Some("ClusterFirst".into());
        assert_eq!(pod_dns(&p, Some(&host), &cluster), Some(want.clone()));
        // on the host network, ClusterFirst is the node's; ClusterFirstWithHostNet the cluster's
        p.spec.host_network = true;
        assert_eq!(pod_dns(&p, Some(&host), &cluster), Some(host.clone()));
        p.spec.dns_policy = Some("ClusterFirstWithHostNet".into());
        assert_eq!(pod_dns(&p, Some(&host), &cluster), Some(want.clone()));
        // Default: the node's
        p.spec.host_network = false;
        p.spec.dns_policy = Some("Default".into());
        assert_eq!(pod_dns(&p, Some(&host), &cluster), Some(host.clone()));
        // no clusterDNS: ClusterFirst falls back to the node's
        p.spec.dns_policy = None;
        assert_eq!(
            pod_dns(&p, Some(&host), &ClusterDns::default()),
            Some(host.clone())
        );
        // no clusterDomain: the node's search paths alone
        let no_domain = ClusterDns {
            servers: vec!["10.96.0.10".into()],
            domain: String::new(),
        };
        let d = pod_dns(&p, Some(&host), &no_domain).unwrap();
        assert_eq!(d.searches, ["lan", "cluster.local"]);
        assert_eq!(d.servers, ["10.96.0.10"]);
    }

    #[test]
    fn hosts_file_as_the_kubelet_writes_it() {
        use crate::api::HostAlias;
        let mut p = pod();
        p.spec.host_aliases = vec![
            HostAlias {
                ip: "10.1.2.3".into(),
                hostnames: vec!["foo.local".into(), "bar".into()],
            },
            HostAlias {
                ip: "fd00::1".into(),
                hostnames: vec!["six".into()],
            },
        ];
        assert_eq!(
            hosts_file(&p, "10.88.0.7", None, ""),
            "# Kubernetes-managed hosts file.\n\
             127.0.0.1\tlocalhost\n\
             ::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\n\
             fe00::0\tip6-mcastprefix\n\
             fe00::1\tip6-allnodes\n\
             fe00::2\tip6-allrouters\n\
             10.88.0.7\tweb-node1\n\
             \n\
             # Entries added by HostAliases.\n\
             10.1.2.3\tfoo.local\tbar\n\
             fd00::1\tsix\n"
        );
        p.spec.hostname = Some("web".into());
        p.spec.subdomain = Some("front".into());
        p.spec.host_aliases.clear();
        let t = hosts_file(&p, "10.88.0.7", None, "");
        assert!(
            t.ends_with("fe00::2\tip6-allrouters\n10.88.0.7\tweb.front.default.svc\tweb\n"),
            "{t}"
        );
        // with a cluster domain, the name the cluster's DNS gives the pod
        let t = hosts_file(&p, "10.88.0.7", None, "cluster.local");
        assert!(
            t.ends_with("10.88.0.7\tweb.front.default.svc.cluster.local\tweb\n"),
            "{t}"
        );
        // host network: the node's file, then the aliases
        p.spec.host_network = true;
        p.spec.host_aliases = vec![HostAlias {
            ip: "10.1.2.3".into(),
            hostnames: vec!["foo".into()],
        }];
        assert_eq!(
            hosts_file(
                &p,
                "192.0.2.1",
                Some("127.0.0.1 localhost\n"),
                "cluster.local"
            ),
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo\n"
        );
    }

    #[test]
    fn etc_hosts_is_mounted_unless_a_volume_is_mounted_there() {
        let p = pod();
        let hosts = PathBuf::from("/var/lib/picolet/pods/abc/etc-hosts");
        let mut vols = HashMap::new();
        vols.insert("data".to_owned(), PathBuf::from("/host/data"));
        let cfg = |c: &Container| {
            container_config(
                &p,
                &node(),
                &ContainerInputs {
                    object_env: &Default::default(),
                    container: c,
                    image_ref: "sha256:feed",
                    restart_count: 0,
                    hash: 1,
                    pod_ip: "10.0.0.9",
                    volumes: &vols,
                    subpaths: &HashMap::new(),
                    image_mounts: &HashMap::new(),
                    termination_log: None,
                    etc_hosts: Some(&hosts),
                    pid_target: None,
                },
            )
        };
        let mut c = p.spec.containers[0].clone();
        let m = cfg(&c).mounts;
        let h = m.iter().find(|m| m.container_path == "/etc/hosts").unwrap();
        assert_eq!(h.host_path, "/var/lib/picolet/pods/abc/etc-hosts");
        assert!(!h.readonly);
        c.volume_mounts[0].mount_path = "/etc/hosts".into();
        let m = cfg(&c).mounts;
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].host_path, "/host/data");
    }

    #[test]
    fn sub_path_expr_expands_the_containers_variables() {
        let vm = |sub: Option<&str>, expr: Option<&str>| VolumeMount {
            name: "data".into(),
            mount_path: "/data".into(),
            sub_path: sub.map(Into::into),
            sub_path_expr: expr.map(Into::into),
            ..Default::default()
        };
        let env = vec![
            ("POD_NAME".to_owned(), "web-0".to_owned()),
            ("UP".to_owned(), "..".to_owned()),
            ("ROOT".to_owned(), "/etc".to_owned()),
        ];
        assert_eq!(mount_sub_path(&vm(None, None), &env), Ok(None));
        assert_eq!(
            mount_sub_path(&vm(Some("fixed"), None), &env),
            Ok(Some("fixed".into()))
        );
        assert_eq!(
            mount_sub_path(&vm(None, Some("logs/$(POD_NAME)")), &env),
            Ok(Some("logs/web-0".into()))
        );
        // unknown references stay as written, $$ escapes
        assert_eq!(
            mount_sub_path(&vm(None, Some("$(NOPE)/$$(POD_NAME)")), &env),
            Ok(Some("$(NOPE)/$(POD_NAME)".into()))
        );
        let e = mount_sub_path(&vm(None, Some("$(UP)/x")), &env).unwrap_err();
        assert!(e.contains("must not contain '..'"), "{e}");
        let e = mount_sub_path(&vm(None, Some("$(ROOT)")), &env).unwrap_err();
        assert!(e.contains("must be a relative path"), "{e}");
    }

    #[test]
    fn every_container_port_is_mapped_once() {
        let mut p = pod();
        p.spec.containers[0].ports.push(ContainerPort {
            container_port: 9090,
            ..Default::default()
        });
        // the same unnamed port twice, and a name used twice
        p.spec.containers[0].ports.push(ContainerPort {
            container_port: 9090,
            ..Default::default()
        });
        p.spec.containers[0].ports.push(ContainerPort {
            name: Some("http".into()),
            container_port: 81,
            ..Default::default()
        });
        let m = sandbox_config(&p, &node(), 0).port_mappings;
        let got: Vec<_> = m.iter().map(|m| (m.container_port, m.host_port)).collect();
        assert_eq!(got, [(80, 8080), (9090, 0)]);
    }

    #[test]
    fn resolv_conf() {
        let d = parse_resolv_conf(
            "# c\nnameserver 1.1.1.1\nnameserver 9.9.9.9 ; x\nsearch a.b c.d\noptions ndots:2 edns0\n",
        );
        assert_eq!(d.servers, vec!["1.1.1.1", "9.9.9.9"]);
        assert_eq!(d.searches, vec!["a.b", "c.d"]);
        assert_eq!(d.options, vec!["ndots:2", "edns0"]);
    }
}
