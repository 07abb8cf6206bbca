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

/// Node facts the configs need.
#[derive(Debug, Clone, Default)]
pub struct NodeContext {
    pub node_name: String,
    pub node_ip: String,
    pub memory_bytes: i64,
    pub dns: Option<v1::DnsConfig>,
    pub pod_logs_dir: PathBuf,
    pub root_dir: PathBuf,
    /// cgroup v2 with `memory.oom.group`: an OOM kill takes the whole container, as upstream
    /// asks for through `LinuxContainerResources.unified`.
    pub memory_oom_group: bool,
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

/// Hostname of a pod: its name, cut to 63 characters without a trailing '-' or '.'.
fn hostname(pod: &Pod) -> String {
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

pub fn sandbox_config(pod: &Pod, node: &NodeContext, attempt: u32) -> v1::PodSandboxConfig {
    let m = &pod.metadata;
    let ns = namespace(pod);
    let psc = pod.spec.security_context.as_ref();
    let port_mappings = pod
        .spec
        .containers
        .iter()
        .flat_map(|c| &c.ports)
        .filter_map(|p| {
            let host = p.host_port.filter(|&h| h > 0)?;
            Some(v1::PortMapping {
                protocol: protocol(p.protocol.as_deref()),
                container_port: p.container_port,
                host_port: host,
                host_ip: p.host_ip.clone().unwrap_or_default(),
            })
        })
        .collect();
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
        dns_config: node.dns.clone(),
        port_mappings,
        labels: labels::sandbox_labels(&m.labels, &m.name, ns, &m.uid),
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
    /// Host file backing the termination message.
    pub termination_log: Option<&'a Path>,
    /// Variables from ConfigMaps and Secrets (`envFrom`, `configMapKeyRef`, `secretKeyRef`).
    pub object_env: &'a crate::objects::ObjectEnv,
}

fn resources(pod: &Pod, c: &Container, node: &NodeContext) -> v1::LinuxContainerResources {
    let r = &c.resources;
    // Requests default to limits, as the API server defaults them.
    let req = |k: &str| r.requests.get(k).or_else(|| r.limits.get(k));
    let cpu_req = req("cpu").map_or(0, |q| q.milli_value());
    let cpu_lim = r.limits.get("cpu").map_or(0, |q| q.milli_value());
    let mem_lim = r.limits.get("memory").map_or(0, |q| q.value());
    let quota = qos::milli_cpu_to_quota(cpu_lim, qos::QUOTA_PERIOD_US);
    v1::LinuxContainerResources {
        cpu_period: if quota > 0 { qos::QUOTA_PERIOD_US } else { 0 },
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

pub fn container_config(
    pod: &Pod,
    node: &NodeContext,
    i: &ContainerInputs<'_>,
) -> v1::ContainerConfig {
    let c = i.container;
    let m = &pod.metadata;
    let ns = namespace(pod);
    let fields = PodFields {
        name: &m.name,
        namespace: ns,
        uid: &m.uid,
        node_name: &node.node_name,
        service_account: pod.spec.service_account_name.as_deref().unwrap_or_default(),
        pod_ip: i.pod_ip,
        host_ip: &node.node_ip,
    };
    let envs = env::resolve(c, &fields, i.object_env);
    let (command, args) = env::command_and_args(c, &envs);

    let mut mounts: Vec<v1::Mount> = c
        .volume_mounts
        .iter()
        .filter_map(|vm| {
            let host = i.volumes.get(&vm.name)?;
            let host = match vm.sub_path.as_deref().filter(|s| !s.is_empty()) {
                Some(sub) => i
                    .subpaths
                    .get(&vm.mount_path)
                    .cloned()
                    .unwrap_or_else(|| host.join(sub)),
                None => host.clone(),
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
            annotations: HashMap::new(),
        }),
        command,
        args,
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: envs
            .into_iter()
            .map(|(key, value)| v1::KeyValue { key, value })
            .collect(),
        mounts,
        labels: labels::container_labels(&c.name, &m.name, ns, &m.uid),
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
                namespace_options: Some(namespace_options(pod)),
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
            }),
        }),
    }
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
                termination_log: None,
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
                termination_log: Some(&log),
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
    fn resolv_conf() {
        let d = parse_resolv_conf(
            "# c\nnameserver 1.1.1.1\nnameserver 9.9.9.9 ; x\nsearch a.b c.d\noptions ndots:2 edns0\n",
        );
        assert_eq!(d.servers, vec!["1.1.1.1", "9.9.9.9"]);
        assert_eq!(d.searches, vec!["a.b", "c.d"]);
        assert_eq!(d.options, vec!["ndots:2", "edns0"]);
    }
}
