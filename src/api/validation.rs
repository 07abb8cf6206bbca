//! Pod validation: the checks the apiserver would make for the fields
//! picolet models, plus refusals for features picolet does not implement.
//!
//! Defaults the apiserver would fill in are treated as such: an unset
//! `protocol` is TCP, an unset probe `successThreshold` is 1, and so on.

use std::collections::BTreeSet;
use std::fmt;

use super::pod::{
    Container, ContainerPort, HttpGetAction, IntOrString, LifecycleHandler, ObjectMeta, Pod,
    PodDnsConfig, PodSecurityContext, PodSpec, Probe, ResourceRequirements, SeccompProfile,
    SecurityContext,
};

/// One validation failure: the field, its offending value ("" when the
/// field is missing) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// e.g. `spec.containers[1].ports[0].containerPort`
    pub path: String,
    pub value: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)?;
        if !self.value.is_empty() {
            write!(f, ": {:?}", self.value)?;
        }
        Ok(())
    }
}

impl std::error::Error for FieldError {}

const REQUIRED: &str = "required value";
const DUPLICATE: &str = "duplicate value";
const NEGATIVE: &str = "must be greater than or equal to 0";
const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";
const ID_RANGE: &str = "must be between 0 and 4294967295, inclusive";
const ABSOLUTE: &str = "must be an absolute path";
const BACKSTEPS: &str = "must not contain '..'";
const DNS_LABEL: &str = "must be a lowercase RFC 1123 label: at most 63 characters, only lowercase alphanumerics or '-', starting and ending with an alphanumeric (e.g. 'my-name')";
const DNS_SUBDOMAIN: &str = "must be a lowercase RFC 1123 subdomain: at most 253 characters, only lowercase alphanumerics, '-' or '.', each part starting and ending with an alphanumeric (e.g. 'example.com')";
const PORT_NAME: &str = "must be an IANA service name: at most 15 characters, only lowercase alphanumerics or '-', with at least one letter, no leading, trailing or double '-'";
const ENV_NAME: &str = "must consist only of printable ascii characters other than '='";
const LABEL_VALUE: &str = "must be empty or at most 63 characters, only alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric";
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;
/// The apiserver's limits of `dnsConfig` (and the kubelet's of the resolv.conf it writes).
pub const MAX_DNS_NAMESERVERS: usize = 3;
pub const MAX_DNS_SEARCH_PATHS: usize = 32;
pub const MAX_DNS_SEARCH_LIST_CHARS: usize = 2048;
const SELINUX_REFUSED: &str = "is not supported by picolet: it passes no SELinux labels to the runtime (remove it, or run the pod under a kubelet on an SELinux host)";
const APPARMOR_REFUSED: &str = "is not supported by picolet: only type RuntimeDefault, what the runtime applies anyway, is accepted";

const UNSUPPORTED_VOLUME: &str = "volume type is not supported by picolet (only hostPath, emptyDir, image, downwardAPI and projected downwardAPI sources are)";

/// `fieldRef` paths a downwardAPI volume item may name (besides `metadata.labels['KEY']` and
/// `metadata.annotations['KEY']`).
const VOLUME_FIELD_PATHS: [&str; 5] = [
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "metadata.labels",
    "metadata.annotations",
];

/// The resources a `resourceFieldRef` may name.
const RESOURCE_FIELDS: [&str; 6] = [
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
];

fn volume_field_path(path: &str) -> bool {
    VOLUME_FIELD_PATHS.contains(&path)
        || ["metadata.labels", "metadata.annotations"].iter().any(|m| {
            path.strip_prefix(m)
                .and_then(|r| r.strip_prefix("['"))
                .and_then(|r| r.strip_suffix("']"))
                .is_some_and(|k| !k.is_empty())
        })
}

/// The API objects a volume kind (or projected source) names, which a static pod may not.
fn api_objects(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "configMap" => "ConfigMaps",
        "secret" => "Secrets",
        "persistentVolumeClaim" | "ephemeral" => "PersistentVolumeClaims",
        "serviceAccountToken" => "ServiceAccounts (tokens)",
        "clusterTrustBundle" => "ClusterTrustBundles",
        "podCertificate" => "PodCertificateRequests",
        _ => return None,
    })
}

fn static_refers_to(what: &str) -> String {
    format!("a static pod may not reference API objects ({what}), as with the kubelet")
}

/// Env `fieldRef` paths picolet can fill in (upstream's list for env), besides
/// `metadata.labels['KEY']` and `metadata.annotations['KEY']`.
pub const SUPPORTED_FIELD_PATHS: [&str; 9] = [
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "status.podIP",
    "status.podIPs",
    "status.hostIP",
    "status.hostIPs",
    "spec.nodeName",
    "spec.serviceAccountName",
];

fn env_field_path(path: &str) -> bool {
    SUPPORTED_FIELD_PATHS.contains(&path)
        || (path != "metadata.labels" && path != "metadata.annotations" && volume_field_path(path))
}

/// Validates a decoded pod; an empty result means it is acceptable.
pub fn validate_pod(pod: &Pod) -> Vec<FieldError> {
    let mut e = Errors(Vec::new());
    e.meta(&pod.metadata);
    e.spec(&pod.spec);
    e.apparmor_annotations(pod);
    e.0
}

/// The per-container AppArmor annotation the kubelet still honours (for static pods, whose
/// annotations the apiserver never turns into fields).
const APPARMOR_ANNOTATION: &str = "container.apparmor.security.beta.kubernetes.io/";

struct Errors(Vec<FieldError>);

// ---- syntax helpers ----

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` with no length limit.
fn label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && b.iter().all(|c| alnum(c) || *c == b'-')
        }
        _ => false,
    }
}

pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= 63 && label_chars(s)
}

pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(label_chars)
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters.
fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            b.len() <= 63
                && first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
        }
        _ => false,
    }
}

/// Checks a qualified name (`[prefix/]name`, as used for label and
/// annotation keys); returns what is wrong with it.
fn qualified_name_error(s: &str) -> Option<&'static str> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if name.contains('/') {
        return Some(
            "a qualified name must be a name with an optional dns subdomain prefix and '/' (e.g. 'example.com/my-name')",
        );
    }
    if let Some(p) = prefix {
        if p.is_empty() {
            return Some("prefix part must be non-empty");
        }
        if !is_dns1123_subdomain(p) {
            return Some("prefix part must be a lowercase RFC 1123 subdomain");
        }
    }
    if name.is_empty() {
        return Some("name part must be non-empty");
    }
    if !is_name_part(name) {
        return Some(
            "name part must be at most 63 characters, only alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
        );
    }
    None
}

fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_name_part(s)
}

/// IANA_SVC_NAME as Kubernetes checks it.
pub fn is_port_name(s: &str) -> bool {
    s.len() <= 15
        && label_chars(s)
        && s.bytes().any(|c| c.is_ascii_lowercase())
        && !s.contains("--")
}

/// Upstream's current (relaxed) rule: printable ASCII except '='.
fn is_env_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| (b' '..=b'~').contains(&c) && c != b'=')
}

fn has_backsteps(path: &str) -> bool {
    path.split('/').any(|part| part == "..")
}

fn is_http_header_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
}

/// Kernel sysctl name: parts of `[a-z0-9]([-_a-z0-9]*[a-z0-9])?` joined by '.' or '/'.
fn is_sysctl_name(s: &str) -> bool {
    s.len() <= 253
        && s.split(['.', '/']).all(|part| {
            let b = part.as_bytes();
            let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
            match (b.first(), b.last()) {
                (Some(f), Some(l)) => {
                    alnum(f) && alnum(l) && b.iter().all(|c| alnum(c) || *c == b'-' || *c == b'_')
                }
                _ => false,
            }
        })
}

fn supported(values: &[&str]) -> String {
    let list: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!("supported values: {}", list.join(", "))
}

/// Resource names whose requests may be below their limits.
fn is_overcommittable(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage") || is_native_prefixed(name)
}

fn is_native_prefixed(name: &str) -> bool {
    name.split_once('/')
        .is_some_and(|(p, _)| p == "kubernetes.io" || p.ends_with(".kubernetes.io"))
}

fn is_extended_resource(name: &str) -> bool {
    name.contains('/') && !is_native_prefixed(name)
}

impl Errors {
    fn add(&mut self, path: &str, value: &str, message: &str) {
        self.0.push(FieldError {
            path: path.to_owned(),
            value: value.to_owned(),
            message: message.to_owned(),
        });
    }

    fn required(&mut self, path: &str) {
        self.add(path, "", REQUIRED);
    }

    fn dns_label(&mut self, path: &str, value: &str) {
        if value.is_empty() {
            self.required(path);
        } else if !is_dns1123_label(value) {
            self.add(path, value, DNS_LABEL);
        }
    }

    fn dns_subdomain(&mut self, path: &str, value: &str) {
        if value.is_empty() {
            self.required(path);
        } else if !is_dns1123_subdomain(value) {
            self.add(path, value, DNS_SUBDOMAIN);
        }
    }

    /// Validates an optional name: unset and "" are both fine.
    fn opt_name(&mut self, path: &str, value: Option<&String>, subdomain: bool) {
        match value {
            Some(v) if !v.is_empty() && subdomain => self.dns_subdomain(path, v),
            Some(v) if !v.is_empty() => self.dns_label(path, v),
            _ => {}
        }
    }

    fn non_negative(&mut self, path: &str, value: Option<i64>) {
        if let Some(v) = value.filter(|v| *v < 0) {
            self.add(path, &v.to_string(), NEGATIVE);
        }
    }

    fn unix_id(&mut self, path: &str, value: Option<i64>) {
        if let Some(v) = value.filter(|v| !(0..=0xffff_ffff).contains(v)) {
            self.add(path, &v.to_string(), ID_RANGE);
        }
    }

    fn port_number(&mut self, path: &str, port: i32) {
        if !(1..=65535).contains(&port) {
            self.add(path, &port.to_string(), PORT_RANGE);
        }
    }

    fn string_map(&mut self, path: &str, map: &std::collections::BTreeMap<String, String>) {
        for (k, v) in map {
            if let Some(msg) = qualified_name_error(k) {
                self.add(path, k, msg);
            }
            if !is_label_value(v) {
                self.add(&format!("{path}[{k}]"), v, LABEL_VALUE);
            }
        }
    }

    // ---- metadata ----

    fn meta(&mut self, m: &ObjectMeta) {
        self.dns_subdomain("metadata.name", &m.name);
        if !m.namespace.is_empty() {
            self.dns_label("metadata.namespace", &m.namespace);
        }
        self.string_map("metadata.labels", &m.labels);
        let mut total = 0;
        for (k, v) in &m.annotations {
            if let Some(msg) = qualified_name_error(&k.to_ascii_lowercase()) {
                self.add("metadata.annotations", k, msg);
            }
            total += k.len() + v.len();
        }
        if total > MAX_ANNOTATIONS_BYTES {
            self.add(
                "metadata.annotations",
                "",
                &format!("must have at most {MAX_ANNOTATIONS_BYTES} bytes in total, found {total}"),
            );
        }
    }

    // ---- spec ----

    fn spec(&mut self, s: &PodSpec) {
        let volumes = self.volumes(s);
        if s.resources.is_some() {
            self.add(
                "spec.resources",
                "",
                "pod-level resources are not supported by picolet (set each container's resources)",
            );
        }

        if s.containers.is_empty() {
            self.required("spec.containers");
        }
        if !s.ephemeral_containers.is_empty() {
            self.add(
                "spec.ephemeralContainers",
                "",
                "not supported: ephemeral containers are added to a running pod through the API, never written in a manifest",
            );
        }
        for (i, c) in s.containers.iter().chain(&s.init_containers).enumerate() {
            if let Some(t) = &c.target_container_name {
                let p = if i < s.containers.len() {
                    format!("spec.containers[{i}].targetContainerName")
                } else {
                    format!(
                        "spec.initContainers[{}].targetContainerName",
                        i - s.containers.len()
                    )
                };
                self.add(
                    &p,
                    t,
                    "not supported: only an ephemeral container has a target",
                );
            }
        }
        let mut names = BTreeSet::new();
        let mut host_ports = BTreeSet::new();
        let grace = s.termination_grace_period_seconds.unwrap_or(30);
        for (i, c) in s.containers.iter().enumerate() {
            let p = format!("spec.containers[{i}]");
            self.container(c, &p, false, &volumes, grace);
            if !c.name.is_empty() && !names.insert(c.name.as_str()) {
                self.add(&format!("{p}.name"), &c.name, DUPLICATE);
            }
            self.host_ports(c, &p, s.host_network, &mut host_ports);
        }
        for (i, c) in s.init_containers.iter().enumerate() {
            let p = format!("spec.initContainers[{i}]");
            self.container(c, &p, true, &volumes, grace);
            if !c.name.is_empty() && !names.insert(c.name.as_str()) {
                self.add(&format!("{p}.name"), &c.name, DUPLICATE);
            }
            if c.is_sidecar() {
                // sidecars run beside the app containers and each other
                self.host_ports(c, &p, s.host_network, &mut host_ports);
            } else {
                // init containers run one at a time, so only conflicts within one count
                self.host_ports(c, &p, s.host_network, &mut BTreeSet::new());
            }
        }

        let containers = [
            ("containers", &s.containers),
            ("initContainers", &s.init_containers),
        ];
        for (list, cs) in containers {
            for (i, c) in cs.iter().enumerate() {
                for (j, e) in c.env.iter().enumerate() {
                    let Some(r) = e
                        .value_from
                        .as_ref()
                        .and_then(|f| f.resource_field_ref.as_ref())
                    else {
                        continue;
                    };
                    let rp = format!("spec.{list}[{i}].env[{j}].valueFrom.resourceFieldRef");
                    match serde_json::from_value(r.clone()) {
                        Ok(r) => self.resource_field(&r, &rp, s),
                        Err(err) => self.add(&rp, "", &err.to_string()),
                    }
                }
            }
        }

        self.non_negative(
            "spec.terminationGracePeriodSeconds",
            s.termination_grace_period_seconds,
        );
        self.opt_name("spec.nodeName", s.node_name.as_ref(), true);
        self.opt_name("spec.hostname", s.hostname.as_ref(), false);
        self.opt_name("spec.subdomain", s.subdomain.as_ref(), false);
        self.opt_name(
            "spec.serviceAccountName",
            s.service_account_name.as_ref(),
            true,
        );
        self.opt_name(
            "spec.priorityClassName",
            s.priority_class_name.as_ref(),
            true,
        );
        match s.dns_policy.as_deref() {
            None | Some("ClusterFirst" | "ClusterFirstWithHostNet" | "Default") => {}
            Some("None") => match &s.dns_config {
                None => self.add(
                    "spec.dnsConfig",
                    "",
                    "must provide `dnsConfig` when `dnsPolicy` is None",
                ),
                Some(d) if d.nameservers.is_empty() => self.add(
                    "spec.dnsConfig.nameservers",
                    "",
                    "must provide at least one DNS nameserver when `dnsPolicy` is None",
                ),
                Some(_) => {}
            },
            Some(v) => self.add(
                "spec.dnsPolicy",
                v,
                &supported(&["ClusterFirst", "ClusterFirstWithHostNet", "Default"]),
            ),
        }
        self.string_map("spec.nodeSelector", &s.node_selector);
        if let Some(d) = &s.dns_config {
            self.dns_config(d);
        }
        for (i, a) in s.host_aliases.iter().enumerate() {
            let p = format!("spec.hostAliases[{i}]");
            if a.ip.parse::<std::net::IpAddr>().is_err() {
                self.add(&format!("{p}.ip"), &a.ip, "must be a valid IP address");
            }
            for (j, h) in a.hostnames.iter().enumerate() {
                self.dns_subdomain(&format!("{p}.hostnames[{j}]"), h);
            }
        }
        if let Some(v) = s.active_deadline_seconds
            && !(1..=i64::from(i32::MAX)).contains(&v)
        {
            self.add(
                "spec.activeDeadlineSeconds",
                &v.to_string(),
                "must be between 1 and 2147483647, inclusive",
            );
        }
        // Fields that would change what the pod does, which picolet does not apply.
        if let Some(v) = s.runtime_class_name.as_deref() {
            self.add(
                "spec.runtimeClassName",
                v,
                "is not supported by picolet: every pod runs with the runtime's default handler",
            );
        }
        if s.host_users == Some(false) {
            self.add(
                "spec.hostUsers",
                "false",
                "is not supported by picolet: it creates no user namespaces",
            );
        }
        if s.set_hostname_as_fqdn == Some(true) {
            self.add(
                "spec.setHostnameAsFQDN",
                "true",
                "is not supported by picolet: it has no cluster domain to make the name of",
            );
        }
        for (i, g) in s.readiness_gates.iter().enumerate() {
            let p = format!("spec.readinessGates[{i}].conditionType");
            let t = g.condition_type.as_str();
            if t.is_empty() {
                self.required(&p);
            } else if let Some(msg) = qualified_name_error(t) {
                self.add(&p, t, msg);
            }
        }
        self.tolerations(s);
        self.node_affinity(s);
        if let Some(sc) = &s.security_context {
            self.pod_security_context(sc);
        }
    }

    fn dns_config(&mut self, d: &PodDnsConfig) {
        let p = "spec.dnsConfig";
        if d.nameservers.len() > MAX_DNS_NAMESERVERS {
            self.add(
                &format!("{p}.nameservers"),
                &d.nameservers.join(" "),
                &format!("must not have more than {MAX_DNS_NAMESERVERS} nameservers"),
            );
        }
        for (i, ns) in d.nameservers.iter().enumerate() {
            if ns.parse::<std::net::IpAddr>().is_err() {
                self.add(
                    &format!("{p}.nameservers[{i}]"),
                    ns,
                    "must be a valid IP address",
                );
            }
        }
        if d.searches.len() > MAX_DNS_SEARCH_PATHS {
            self.add(
                &format!("{p}.searches"),
                &d.searches.len().to_string(),
                &format!("must not have more than {MAX_DNS_SEARCH_PATHS} search paths"),
            );
        }
        let chars =
            d.searches.iter().map(String::len).sum::<usize>() + d.searches.len().saturating_sub(1);
        if chars > MAX_DNS_SEARCH_LIST_CHARS {
            self.add(
                &format!("{p}.searches"),
                &chars.to_string(),
                &format!("must not have more than {MAX_DNS_SEARCH_LIST_CHARS} characters (including spaces) in the search list"),
            );
        }
        for (i, s) in d.searches.iter().enumerate() {
            // a trailing dot (a fully qualified name) is allowed
            let name = s.strip_suffix('.').unwrap_or(s);
            self.dns_subdomain(&format!("{p}.searches[{i}]"), name);
        }
        for (i, o) in d.options.iter().enumerate() {
            if o.name.is_empty() {
                self.required(&format!("{p}.options[{i}].name"));
            }
        }
    }

    /// `seccompProfile` as the apiserver checks it; every type is applied.
    fn seccomp(&mut self, sp: &SeccompProfile, p: &str) {
        let local = sp.localhost_profile.as_deref();
        match sp.type_.as_str() {
            "RuntimeDefault" | "Unconfined" => {
                if let Some(l) = local {
                    self.add(
                        &format!("{p}.localhostProfile"),
                        l,
                        "can only be set if seccomp type is Localhost",
                    );
                }
            }
            "Localhost" => match local {
                None | Some("") => self.required(&format!("{p}.localhostProfile")),
                Some(l) if l.starts_with('/') => self.add(
                    &format!("{p}.localhostProfile"),
                    l,
                    "must be a relative path",
                ),
                Some(l) if has_backsteps(l) => {
                    self.add(&format!("{p}.localhostProfile"), l, BACKSTEPS)
                }
                Some(_) => {}
            },
            "" => self.required(&format!("{p}.type")),
            v => self.add(
                &format!("{p}.type"),
                v,
                &supported(&["Localhost", "RuntimeDefault", "Unconfined"]),
            ),
        }
    }

    /// appArmorProfile and seLinuxOptions, which picolet cannot apply: refused by name.
    fn lsm(
        &mut self,
        apparmor: Option<&serde_json::Value>,
        selinux: Option<&serde_json::Value>,
        p: &str,
    ) {
        if let Some(a) = apparmor {
            let t = a.get("type").and_then(|t| t.as_str()).unwrap_or_default();
            if t != "RuntimeDefault" {
                self.add(&format!("{p}.appArmorProfile"), t, APPARMOR_REFUSED);
            }
        }
        if selinux.is_some() {
            self.add(&format!("{p}.seLinuxOptions"), "", SELINUX_REFUSED);
        }
    }

    /// `container.apparmor.security.beta.kubernetes.io/<container>`: read as the field it stands
    /// for (`runtime/default` is RuntimeDefault, `localhost/<profile>` Localhost, `unconfined`
    /// Unconfined), refused as the field would be.
    fn apparmor_annotations(&mut self, pod: &Pod) {
        for (k, v) in &pod.metadata.annotations {
            let Some(name) = k.strip_prefix(APPARMOR_ANNOTATION) else {
                continue;
            };
            let path = format!("metadata.annotations[{k}]");
            let known = pod
                .spec
                .containers
                .iter()
                .chain(&pod.spec.init_containers)
                .any(|c| c.name == name);
            if !known {
                self.add(&path, name, "must name a container of the pod");
                continue;
            }
            let kind = match v.as_str() {
                "runtime/default" => continue,
                "unconfined" => "Unconfined",
                l if l.starts_with("localhost/") => "Localhost",
                other => {
                    self.add(
                        &path,
                        other,
                        &supported(&["runtime/default", "localhost/<profile>", "unconfined"]),
                    );
                    continue;
                }
            };
            self.add(
                &path,
                v,
                &format!("(AppArmor type {kind}) {APPARMOR_REFUSED}"),
            );
        }
    }

    fn host_ports<'a>(
        &mut self,
        c: &'a Container,
        p: &str,
        host_network: bool,
        seen: &mut BTreeSet<(&'a str, &'a str, i32)>,
    ) {
        for (j, port) in c.ports.iter().enumerate() {
            let Some(host_port) = port.host_port.filter(|h| *h != 0) else {
                continue;
            };
            let path = format!("{p}.ports[{j}].hostPort");
            if host_network && host_port != port.container_port {
                self.add(
                    &path,
                    &host_port.to_string(),
                    "must match containerPort when hostNetwork is true",
                );
            }
            let protocol = port.protocol.as_deref().unwrap_or("TCP");
            let ip = port.host_ip.as_deref().unwrap_or("");
            if !seen.insert((protocol, ip, host_port)) {
                self.add(&path, &format!("{protocol}/{ip}/{host_port}"), DUPLICATE);
            }
        }
    }

    /// The required node affinity's terms, as the apiserver checks them (the preferred terms
    /// and pod affinities are the scheduler's and are not read).
    fn node_affinity(&mut self, s: &PodSpec) {
        let Some(sel) = s
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
        else {
            return;
        };
        let p = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";
        if sel.node_selector_terms.is_empty() {
            self.add(p, "", "must have at least one node selector term");
        }
        for (i, t) in sel.node_selector_terms.iter().enumerate() {
            for (j, r) in t.match_expressions.iter().enumerate() {
                let rp = format!("{p}[{i}].matchExpressions[{j}]");
                if r.key.is_empty() {
                    self.required(&format!("{rp}.key"));
                }
                self.selector_values(r, &rp);
            }
            for (j, r) in t.match_fields.iter().enumerate() {
                let rp = format!("{p}[{i}].matchFields[{j}]");
                if r.key != "metadata.name" {
                    self.add(&format!("{rp}.key"), &r.key, &supported(&["metadata.name"]));
                }
                if !matches!(r.operator.as_str(), "In" | "NotIn") {
                    self.add(
                        &format!("{rp}.operator"),
                        &r.operator,
                        &supported(&["In", "NotIn"]),
                    );
                } else if r.values.len() != 1 {
                    self.add(&format!("{rp}.values"), "", "must have exactly one value");
                }
            }
        }
    }

    fn selector_values(&mut self, r: &crate::api::NodeSelectorRequirement, rp: &str) {
        let vp = format!("{rp}.values");
        match r.operator.as_str() {
            "In" | "NotIn" if r.values.is_empty() => {
                self.add(
                    &vp,
                    "",
                    "must be specified when `operator` is 'In' or 'NotIn'",
                );
            }
            "Exists" | "DoesNotExist" if !r.values.is_empty() => {
                self.add(
                    &vp,
                    "",
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                );
            }
            "Gt" | "Lt" => {
                if r.values.len() != 1 {
                    self.add(
                        &vp,
                        "",
                        "must be specified single value when `operator` is 'Lt' or 'Gt'",
                    );
                } else if r.values[0].parse::<i64>().is_err() {
                    self.add(&format!("{vp}[0]"), &r.values[0], "must be an integer");
                }
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            op => self.add(
                &format!("{rp}.operator"),
                op,
                &supported(&["DoesNotExist", "Exists", "Gt", "In", "Lt", "NotIn"]),
            ),
        }
    }

    fn tolerations(&mut self, s: &PodSpec) {
        for (i, t) in s.tolerations.iter().enumerate() {
            let p = format!("spec.tolerations[{i}]");
            let key = t.key.as_deref().unwrap_or("");
            if let Some(msg) = qualified_name_error(key).filter(|_| !key.is_empty()) {
                self.add(&format!("{p}.key"), key, msg);
            }
            let value = t.value.as_deref().unwrap_or("");
            let op = t.operator.as_deref().unwrap_or("");
            match op {
                "" | "Equal" => {
                    if key.is_empty() {
                        self.add(
                            &format!("{p}.operator"),
                            op,
                            "must be Exists when key is empty, which means \"match all values and all keys\"",
                        );
                    }
                    if !is_label_value(value) {
                        self.add(&format!("{p}.value"), value, LABEL_VALUE);
                    }
                }
                "Exists" => {
                    if !value.is_empty() {
                        self.add(
                            &format!("{p}.operator"),
                            op,
                            "value must be empty when operator is Exists",
                        );
                    }
                }
                _ => self.add(
                    &format!("{p}.operator"),
                    op,
                    &supported(&["Equal", "Exists"]),
                ),
            }
            let effect = t.effect.as_deref().unwrap_or("");
            if !matches!(effect, "" | "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
                self.add(
                    &format!("{p}.effect"),
                    effect,
                    &supported(&["NoSchedule", "PreferNoSchedule", "NoExecute"]),
                );
            }
            if t.toleration_seconds.is_some() && effect != "NoExecute" {
                self.add(
                    &format!("{p}.effect"),
                    effect,
                    "must be NoExecute when tolerationSeconds is set",
                );
            }
        }
    }

    fn pod_security_context(&mut self, sc: &PodSecurityContext) {
        let p = "spec.securityContext";
        if let Some(sp) = &sc.seccomp_profile {
            self.seccomp(sp, &format!("{p}.seccompProfile"));
        }
        self.lsm(
            sc.app_armor_profile.as_ref(),
            sc.se_linux_options.as_ref(),
            p,
        );
        self.unix_id(&format!("{p}.runAsUser"), sc.run_as_user);
        self.unix_id(&format!("{p}.runAsGroup"), sc.run_as_group);
        self.unix_id(&format!("{p}.fsGroup"), sc.fs_group);
        match sc.supplemental_groups_policy.as_deref() {
            None | Some("Merge") => {}
            Some("Strict") => self.add(
                &format!("{p}.supplementalGroupsPolicy"),
                "Strict",
                "is not supported by picolet: the runtime adds the groups the image's /etc/group gives the user (Merge)",
            ),
            Some(v) => self.add(
                &format!("{p}.supplementalGroupsPolicy"),
                v,
                &supported(&["Merge", "Strict"]),
            ),
        }
        if let Some(v) = sc
            .fs_group_change_policy
            .as_deref()
            .filter(|v| !["Always", "OnRootMismatch"].contains(v))
        {
            self.add(
                &format!("{p}.fsGroupChangePolicy"),
                v,
                &supported(&["Always", "OnRootMismatch"]),
            );
        }
        for (k, g) in sc.supplemental_groups.iter().enumerate() {
            self.unix_id(&format!("{p}.supplementalGroups[{k}]"), Some(*g));
        }
        let mut names = BTreeSet::new();
        for (k, s) in sc.sysctls.iter().enumerate() {
            let path = format!("{p}.sysctls[{k}].name");
            if s.name.is_empty() {
                self.required(&path);
            } else if !is_sysctl_name(&s.name) {
                self.add(
                    &path,
                    &s.name,
                    "must be a valid sysctl name, e.g. 'net.ipv4.ip_forward'",
                );
            } else if !names.insert(s.name.as_str()) {
                self.add(&path, &s.name, DUPLICATE);
            }
        }
    }

    // ---- volumes ----

    /// Returns the names containers may mount.
    fn volumes<'a>(&mut self, spec: &'a PodSpec) -> BTreeSet<&'a str> {
        let mut names = BTreeSet::new();
        for (i, v) in spec.volumes.iter().enumerate() {
            let p = format!("spec.volumes[{i}]");
            self.dns_label(&format!("{p}.name"), &v.name);
            if !v.name.is_empty() && !names.insert(v.name.as_str()) {
                self.add(&format!("{p}.name"), &v.name, DUPLICATE);
            }

            let sources = usize::from(v.host_path.is_some())
                + usize::from(v.empty_dir.is_some())
                + usize::from(v.image.is_some())
                + v.other.len();
            if sources == 0 {
                self.add(&p, "", "must specify a volume type");
            } else if sources > 1 {
                self.add(&p, "", "may not specify more than 1 volume type");
            }
            for (kind, value) in &v.other {
                let path = format!("{p}.{kind}");
                match kind.as_str() {
                    "downwardAPI" => self.downward_volume(value, &path, spec),
                    "projected" => self.projected_volume(value, &path, spec),
                    _ => match api_objects(kind) {
                        Some(what) => self.add(&path, kind, &static_refers_to(what)),
                        None => self.add(&path, kind, UNSUPPORTED_VOLUME),
                    },
                }
            }
            if let Some(hp) = &v.host_path {
                let path = format!("{p}.hostPath.path");
                if hp.path.is_empty() {
                    self.required(&path);
                } else if !hp.path.starts_with('/') {
                    self.add(&path, &hp.path, ABSOLUTE);
                } else if has_backsteps(&hp.path) {
                    self.add(&path, &hp.path, BACKSTEPS);
                }
                const TYPES: [&str; 8] = [
                    "",
                    "DirectoryOrCreate",
                    "Directory",
                    "FileOrCreate",
                    "File",
                    "Socket",
                    "CharDevice",
                    "BlockDevice",
                ];
                if let Some(t) = hp.type_.as_deref().filter(|t| !TYPES.contains(t)) {
                    self.add(&format!("{p}.hostPath.type"), t, &supported(&TYPES[1..]));
                }
            }
            if let Some(im) = &v.image {
                let path = format!("{p}.image.reference");
                if im.reference.is_empty() {
                    self.required(&path);
                } else if im.reference.trim() != im.reference {
                    self.add(
                        &path,
                        &im.reference,
                        "must not have leading or trailing whitespace",
                    );
                }
            }
            if let Some(ed) = &v.empty_dir {
                match ed.medium.as_deref() {
                    None | Some("" | "Memory") => {}
                    Some(m) if m.starts_with("HugePages") => self.add(
                        &format!("{p}.emptyDir.medium"),
                        m,
                        "hugepages medium is not supported by picolet",
                    ),
                    Some(m) => self.add(
                        &format!("{p}.emptyDir.medium"),
                        m,
                        &supported(&["", "Memory"]),
                    ),
                }
                if let Some(q) = ed.size_limit.as_ref().filter(|q| q.is_negative()) {
                    self.add(&format!("{p}.emptyDir.sizeLimit"), q.as_str(), NEGATIVE);
                }
            }
        }
        names
    }

    /// A downwardAPI volume: what the node can fill in from the pod itself.
    fn downward_volume(&mut self, value: &serde_json::Value, p: &str, spec: &PodSpec) {
        self.file_owners(value, p);
        let v: crate::objects::DownwardApiVolume = match serde_json::from_value(value.clone()) {
            Ok(v) => v,
            Err(e) => return self.add(p, "", &e.to_string()),
        };
        self.file_mode(v.default_mode, &format!("{p}.defaultMode"));
        self.downward_items(&v.items, &format!("{p}.items"), spec);
    }

    /// `defaultUser` and each item's `user`: picolet gives the files to root (or the fsGroup).
    fn file_owners(&mut self, value: &serde_json::Value, p: &str) {
        const OWNERS: &str =
            "is not supported by picolet: the files belong to root (or the fsGroup)";
        let set = |v: &serde_json::Value, k: &str| v.get(k).is_some_and(|x| !x.is_null());
        if set(value, "defaultUser") {
            self.add(&format!("{p}.defaultUser"), "", OWNERS);
        }
        let items = |v: &serde_json::Value| v.get("items").and_then(|i| i.as_array()).cloned();
        for (j, it) in items(value).unwrap_or_default().iter().enumerate() {
            if set(it, "user") {
                self.add(&format!("{p}.items[{j}].user"), "", OWNERS);
            }
        }
        let sources = value.get("sources").and_then(|s| s.as_array());
        for (j, src) in sources.into_iter().flatten().enumerate() {
            if let Some(d) = src.get("downwardAPI") {
                self.file_owners(d, &format!("{p}.sources[{j}].downwardAPI"));
            }
        }
    }

    fn downward_items(
        &mut self,
        items: &[crate::objects::DownwardApiFile],
        p: &str,
        spec: &PodSpec,
    ) {
        let mut paths = BTreeSet::new();
        for (j, it) in items.iter().enumerate() {
            let ip = format!("{p}[{j}]");
            self.projected_path(&it.path, &format!("{ip}.path"));
            if !it.path.is_empty() && !paths.insert(it.path.as_str()) {
                self.add(&format!("{ip}.path"), &it.path, DUPLICATE);
            }
            self.file_mode(it.mode, &format!("{ip}.mode"));
            match (&it.field_ref, &it.resource_field_ref) {
                (Some(f), None) => {
                    let fp = format!("{ip}.fieldRef.fieldPath");
                    if f.field_path.is_empty() {
                        self.required(&fp);
                    } else if !volume_field_path(&f.field_path) {
                        self.add(
                            &fp,
                            &f.field_path,
                            &format!(
                                "is not supported in a downwardAPI volume; {} or metadata.labels['KEY'] / metadata.annotations['KEY']",
                                supported(&VOLUME_FIELD_PATHS)
                            ),
                        );
                    }
                }
                (None, Some(r)) => {
                    let rp = format!("{ip}.resourceFieldRef");
                    if r.container_name.is_empty() {
                        self.required(&format!("{rp}.containerName"));
                    }
                    self.resource_field(r, &rp, spec);
                }
                _ => self.add(
                    &ip,
                    "",
                    "must specify exactly one of: fieldRef, resourceFieldRef",
                ),
            }
        }
    }

    /// A projected volume: downwardAPI sources only, every other source naming an API object.
    fn projected_volume(&mut self, value: &serde_json::Value, p: &str, spec: &PodSpec) {
        self.file_owners(value, p);
        let v: crate::objects::ProjectedVolume = match serde_json::from_value(value.clone()) {
            Ok(v) => v,
            Err(e) => return self.add(p, "", &e.to_string()),
        };
        self.file_mode(v.default_mode, &format!("{p}.defaultMode"));
        for (j, src) in v.sources.iter().enumerate() {
            let sp = format!("{p}.sources[{j}]");
            let refs = [
                ("configMap", src.config_map.is_some()),
                ("secret", src.secret.is_some()),
                ("serviceAccountToken", src.service_account_token.is_some()),
                ("clusterTrustBundle", src.cluster_trust_bundle.is_some()),
                ("podCertificate", src.pod_certificate.is_some()),
            ];
            for (kind, set) in refs {
                if set {
                    let what = api_objects(kind).unwrap_or("API objects");
                    self.add(&format!("{sp}.{kind}"), kind, &static_refers_to(what));
                }
            }
            if let Some(d) = &src.downward_api {
                self.downward_items(&d.items, &format!("{sp}.downwardAPI.items"), spec);
            }
        }
    }

    /// A `resourceFieldRef` (volume item or env): a resource the downward API exposes, of a
    /// container of the pod, with a divisor upstream accepts for it.
    fn resource_field(
        &mut self,
        r: &crate::objects::ResourceFieldSelector,
        p: &str,
        spec: &PodSpec,
    ) {
        if !r.container_name.is_empty()
            && !spec
                .containers
                .iter()
                .chain(&spec.init_containers)
                .any(|c| c.name == r.container_name)
        {
            self.add(
                &format!("{p}.containerName"),
                &r.container_name,
                "must be the name of a container of the pod",
            );
        }
        let rp = format!("{p}.resource");
        let cpu = match r.resource.as_str() {
            "" => return self.required(&rp),
            "limits.cpu" | "requests.cpu" => true,
            res if RESOURCE_FIELDS.contains(&res) => false,
            other => return self.add(&rp, other, &supported(&RESOURCE_FIELDS)),
        };
        let Some(d) = r.divisor.as_ref().filter(|d| !d.is_zero()) else {
            // Unset, or "0" as the apiserver writes an unset one: 1.
            return;
        };
        let ok: &[&str] = if cpu {
            &["1m", "1"]
        } else {
            &[
                "1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei",
            ]
        };
        if !ok
            .iter()
            .any(|v| super::Quantity::parse(v).is_ok_and(|q| q.nanos() == d.nanos()))
        {
            self.add(&format!("{p}.divisor"), d.as_str(), &supported(ok));
        }
    }

    fn projected_path(&mut self, path: &str, p: &str) {
        if path.is_empty() {
            self.required(p);
        } else if path.starts_with('/') {
            self.add(p, path, "must be a relative path");
        } else if has_backsteps(path) {
            self.add(p, path, BACKSTEPS);
        }
    }

    fn file_mode(&mut self, mode: Option<i32>, p: &str) {
        if let Some(m) = mode.filter(|m| !(0..=0o777).contains(m)) {
            self.add(
                p,
                &m.to_string(),
                "must be a number between 0 and 0777 (octal), both inclusive",
            );
        }
    }

    // ---- containers ----

    /// A container's `restartPolicy` and `restartPolicyRules` (the ContainerRestartRules
    /// feature, on by default from v1.35): rules need a policy; a sidecar (an init container
    /// with `Always`) may have no rules.
    fn restart_policy(&mut self, c: &Container, p: &str, init: bool) {
        let policy_path = format!("{p}.restartPolicy");
        let rules_path = format!("{p}.restartPolicyRules");
        match c.restart_policy.as_deref() {
            None if c.restart_policy_rules.is_empty() => return,
            None => {
                self.add(
                    &policy_path,
                    "",
                    "must specify restartPolicy when restart rules are used",
                );
            }
            Some("Always") if init => {
                if !c.restart_policy_rules.is_empty() {
                    self.add(
                        &rules_path,
                        "",
                        "restartPolicyRules are not allowed for init containers with restart policy Always",
                    );
                }
                return;
            }
            Some("Always" | "OnFailure" | "Never") => {}
            Some(v) => self.add(
                &policy_path,
                v,
                &supported(&["Always", "Never", "OnFailure"]),
            ),
        }
        let rules = &c.restart_policy_rules;
        if rules.len() > 20 {
            self.add(
                &rules_path,
                &rules.len().to_string(),
                "must have at most 20 items",
            );
        }
        for (i, r) in rules.iter().enumerate() {
            let rp = format!("{rules_path}[{i}]");
            if r.action != "Restart" {
                self.add(&format!("{rp}.action"), &r.action, &supported(&["Restart"]));
            }
            let Some(e) = &r.exit_codes else {
                self.add(&format!("{rp}.exitCodes"), "", "must be specified");
                continue;
            };
            if !matches!(e.operator.as_str(), "In" | "NotIn") {
                self.add(
                    &format!("{rp}.exitCodes.operator"),
                    &e.operator,
                    &supported(&["In", "NotIn"]),
                );
            }
            if e.values.len() > 255 {
                self.add(
                    &format!("{rp}.exitCodes.values"),
                    &e.values.len().to_string(),
                    "must have at most 255 items",
                );
            }
        }
    }

    fn container(
        &mut self,
        c: &Container,
        p: &str,
        init: bool,
        volumes: &BTreeSet<&str>,
        grace: i64,
    ) {
        self.dns_label(&format!("{p}.name"), &c.name);
        if c.image.is_empty() {
            self.required(&format!("{p}.image"));
        } else if c.image.trim() != c.image {
            self.add(
                &format!("{p}.image"),
                &c.image,
                "must not have leading or trailing whitespace",
            );
        }
        self.ports(&c.ports, p);
        self.env(c, p);
        self.resources(&c.resources, &format!("{p}.resources"));
        self.volume_mounts(c, p, volumes);

        let probes = [
            ("livenessProbe", &c.liveness_probe),
            ("readinessProbe", &c.readiness_probe),
            ("startupProbe", &c.startup_probe),
        ];
        for (name, probe) in probes {
            let Some(probe) = probe else { continue };
            let path = format!("{p}.{name}");
            if init && !c.is_sidecar() {
                self.add(&path, "", "may not be set for init containers");
            } else {
                self.probe(probe, &path, name, c);
            }
        }
        self.restart_policy(c, p, init);
        if let Some(l) = &c.lifecycle {
            let path = format!("{p}.lifecycle");
            if init && !c.is_sidecar() {
                self.add(&path, "", "may not be set for init containers");
            } else {
                let hooks = [("postStart", &l.post_start), ("preStop", &l.pre_stop)];
                for (name, h) in hooks {
                    if let Some(h) = h {
                        self.lifecycle_handler(h, &format!("{path}.{name}"), c, grace);
                    }
                }
            }
        }

        if let Some(sc) = &c.security_context {
            self.security_context(sc, &format!("{p}.securityContext"));
        }
        if let Some(v) = c
            .termination_message_policy
            .as_deref()
            .filter(|v| !matches!(*v, "File" | "FallbackToLogsOnError"))
        {
            self.add(
                &format!("{p}.terminationMessagePolicy"),
                v,
                &supported(&["File", "FallbackToLogsOnError"]),
            );
        }
    }

    fn ports(&mut self, ports: &[ContainerPort], p: &str) {
        let mut names = BTreeSet::new();
        for (j, port) in ports.iter().enumerate() {
            let pp = format!("{p}.ports[{j}]");
            if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
                if !is_port_name(name) {
                    self.add(&format!("{pp}.name"), name, PORT_NAME);
                } else if !names.insert(name) {
                    self.add(&format!("{pp}.name"), name, DUPLICATE);
                }
            }
            if port.container_port == 0 {
                self.required(&format!("{pp}.containerPort"));
            } else {
                self.port_number(&format!("{pp}.containerPort"), port.container_port);
            }
            if let Some(h) = port.host_port.filter(|h| *h != 0) {
                self.port_number(&format!("{pp}.hostPort"), h);
            }
            if let Some(proto) = port
                .protocol
                .as_deref()
                .filter(|v| !matches!(*v, "TCP" | "UDP" | "SCTP"))
            {
                self.add(
                    &format!("{pp}.protocol"),
                    proto,
                    &supported(&["SCTP", "TCP", "UDP"]),
                );
            }
        }
    }

    fn env(&mut self, c: &Container, p: &str) {
        if !c.env_from.is_empty() {
            // A static pod may not reference API objects (as upstream refuses it).
            self.add(
                &format!("{p}.envFrom"),
                "",
                &static_refers_to("ConfigMaps, Secrets"),
            );
        }
        for (j, ev) in c.env.iter().enumerate() {
            let ep = format!("{p}.env[{j}]");
            if ev.name.is_empty() {
                self.required(&format!("{ep}.name"));
            } else if !is_env_name(&ev.name) {
                self.add(&format!("{ep}.name"), &ev.name, ENV_NAME);
            }
            let Some(from) = &ev.value_from else { continue };
            let vp = format!("{ep}.valueFrom");
            let sources = usize::from(from.field_ref.is_some())
                + usize::from(from.resource_field_ref.is_some())
                + usize::from(from.config_map_key_ref.is_some())
                + usize::from(from.secret_key_ref.is_some());
            if sources == 0 {
                self.add(
                    &vp,
                    "",
                    "must specify one of: fieldRef, resourceFieldRef, configMapKeyRef or secretKeyRef",
                );
            } else if ev.value.as_deref().is_some_and(|v| !v.is_empty()) {
                self.add(&vp, "", "may not be specified when value is not empty");
            } else if sources > 1 {
                self.add(
                    &vp,
                    "",
                    "may not have more than one field specified at a time",
                );
            }
            if let Some(f) = &from.field_ref {
                let fp = format!("{vp}.fieldRef");
                if let Some(api) = f
                    .api_version
                    .as_deref()
                    .filter(|a| !a.is_empty() && *a != "v1")
                {
                    self.add(&format!("{fp}.apiVersion"), api, &supported(&["v1"]));
                }
                if f.field_path.is_empty() {
                    self.required(&format!("{fp}.fieldPath"));
                } else if !env_field_path(&f.field_path) {
                    self.add(
                        &format!("{fp}.fieldPath"),
                        &f.field_path,
                        &format!(
                            "is not supported by picolet; {} or metadata.labels['KEY'] / metadata.annotations['KEY']",
                            supported(&SUPPORTED_FIELD_PATHS)
                        ),
                    );
                }
            }
            let objects = [
                (
                    "configMapKeyRef",
                    "ConfigMaps",
                    from.config_map_key_ref.is_some(),
                ),
                ("secretKeyRef", "Secrets", from.secret_key_ref.is_some()),
            ];
            for (name, what, set) in objects {
                if set {
                    self.add(&format!("{vp}.{name}"), "", &static_refers_to(what));
                }
            }
        }
    }

    fn resource_name(&mut self, path: &str, name: &str) {
        if name.contains('/') {
            if let Some(msg) = qualified_name_error(name) {
                self.add(path, name, msg);
            }
            return;
        }
        let ok = match name {
            "cpu" | "memory" | "ephemeral-storage" => true,
            _ => name
                .strip_prefix("hugepages-")
                .and_then(|size| size.parse::<super::quantity::Quantity>().ok())
                .is_some_and(|q| q.nanos() > 0),
        };
        if !ok {
            self.add(
                path,
                name,
                "must be a standard resource for containers (cpu, memory, ephemeral-storage, hugepages-<size>) or a fully qualified extended resource name",
            );
        }
    }

    fn resources(&mut self, r: &ResourceRequirements, p: &str) {
        for (kind, list) in [("limits", &r.limits), ("requests", &r.requests)] {
            for (name, q) in list {
                let path = format!("{p}.{kind}[{name}]");
                self.resource_name(&path, name);
                if q.is_negative() {
                    self.add(&path, q.as_str(), NEGATIVE);
                } else if is_extended_resource(name) && q.nanos() % 1_000_000_000 != 0 {
                    self.add(&path, q.as_str(), "must be an integer");
                }
            }
        }
        for (name, req) in &r.requests {
            let path = format!("{p}.requests[{name}]");
            match r.limits.get(name) {
                Some(lim) if !is_overcommittable(name) && req.nanos() != lim.nanos() => self.add(
                    &path,
                    req.as_str(),
                    &format!("must be equal to {name} limit of {lim}"),
                ),
                Some(lim) if req.nanos() > lim.nanos() => self.add(
                    &path,
                    req.as_str(),
                    &format!("must be less than or equal to {name} limit of {lim}"),
                ),
                None if !is_overcommittable(name) => self.add(
                    &format!("{p}.limits[{name}]"),
                    "",
                    "must be set for resources that cannot be overcommitted",
                ),
                _ => {}
            }
        }
        let has =
            |pred: &dyn Fn(&str) -> bool| r.limits.keys().chain(r.requests.keys()).any(|k| pred(k));
        if has(&|k| k.starts_with("hugepages-")) && !has(&|k| k == "cpu" || k == "memory") {
            self.add(p, "", "hugepages require cpu or memory");
        }
    }

    fn volume_mounts(&mut self, c: &Container, p: &str, volumes: &BTreeSet<&str>) {
        let mut paths = BTreeSet::new();
        let privileged = c
            .security_context
            .as_ref()
            .and_then(|s| s.privileged)
            .unwrap_or(false);
        for (j, m) in c.volume_mounts.iter().enumerate() {
            let mp = format!("{p}.volumeMounts[{j}]");
            if m.name.is_empty() {
                self.required(&format!("{mp}.name"));
            } else if !volumes.contains(m.name.as_str()) {
                self.add(
                    &format!("{mp}.name"),
                    &m.name,
                    "must be the name of a volume in spec.volumes",
                );
            }
            let path = format!("{mp}.mountPath");
            if m.mount_path.is_empty() {
                self.required(&path);
            } else if !m.mount_path.starts_with('/') {
                self.add(&path, &m.mount_path, ABSOLUTE);
            } else if !paths.insert(m.mount_path.as_str()) {
                self.add(&path, &m.mount_path, "must be unique");
            }
            let sub = m.sub_path.as_deref().filter(|s| !s.is_empty());
            let expr = m.sub_path_expr.as_deref().filter(|s| !s.is_empty());
            if sub.is_some() && expr.is_some() {
                self.add(
                    &format!("{mp}.subPathExpr"),
                    expr.unwrap_or_default(),
                    "subPathExpr and subPath are mutually exclusive",
                );
            }
            for (field, v) in [("subPath", sub), ("subPathExpr", expr)] {
                let Some(v) = v else { continue };
                let path = format!("{mp}.{field}");
                if v.starts_with('/') {
                    self.add(&path, v, "must be a relative path");
                } else if has_backsteps(v) {
                    self.add(&path, v, BACKSTEPS);
                }
            }
            match m.mount_propagation.as_deref() {
                None | Some("None" | "HostToContainer") => {}
                Some("Bidirectional") if !privileged => self.add(
                    &format!("{mp}.mountPropagation"),
                    "Bidirectional",
                    "Bidirectional mount propagation is available only to privileged containers",
                ),
                Some("Bidirectional") => {}
                Some(v) => self.add(
                    &format!("{mp}.mountPropagation"),
                    v,
                    &supported(&["Bidirectional", "HostToContainer", "None"]),
                ),
            }
        }
    }

    /// A probe port: a number, or the name of one of the container's ports.
    fn probe_port(&mut self, path: &str, port: &IntOrString, c: &Container) {
        match port {
            IntOrString::Int(n) => self.port_number(path, *n),
            IntOrString::String(name) if !is_port_name(name) => self.add(path, name, PORT_NAME),
            IntOrString::String(name) => {
                if !c.ports.iter().any(|p| p.name.as_deref() == Some(name)) {
                    self.add(
                        path,
                        name,
                        "must be the name of one of the container's ports",
                    );
                }
            }
        }
    }

    fn probe(&mut self, pr: &Probe, p: &str, kind: &str, c: &Container) {
        let handlers = [
            ("exec", pr.exec.is_some()),
            ("httpGet", pr.http_get.is_some()),
            ("tcpSocket", pr.tcp_socket.is_some()),
            ("grpc", pr.grpc.is_some()),
        ];
        let mut count = 0;
        for (name, set) in handlers {
            if set {
                count += 1;
                if count > 1 {
                    self.add(
                        &format!("{p}.{name}"),
                        "",
                        "may not specify more than 1 handler type",
                    );
                }
            }
        }
        if count == 0 {
            self.add(
                p,
                "",
                "must specify a handler type (exec, httpGet, tcpSocket or grpc)",
            );
        }
        if pr.exec.as_ref().is_some_and(|x| x.command.is_empty()) {
            self.required(&format!("{p}.exec.command"));
        }
        if let Some(h) = &pr.http_get {
            self.http_get(h, &format!("{p}.httpGet"), c);
        }
        if let Some(t) = &pr.tcp_socket {
            self.probe_port(&format!("{p}.tcpSocket.port"), &t.port, c);
        }
        if let Some(g) = &pr.grpc {
            self.port_number(&format!("{p}.grpc.port"), g.port);
        }

        let numbers = [
            ("initialDelaySeconds", pr.initial_delay_seconds, 0),
            ("timeoutSeconds", pr.timeout_seconds, 0),
            ("periodSeconds", pr.period_seconds, 1),
            ("successThreshold", pr.success_threshold, 0),
            ("failureThreshold", pr.failure_threshold, 0),
        ];
        for (name, value, min) in numbers {
            if let Some(v) = value.filter(|v| *v < min) {
                let msg = if min == 0 {
                    NEGATIVE
                } else {
                    "must be greater than or equal to 1"
                };
                self.add(&format!("{p}.{name}"), &v.to_string(), msg);
            }
        }
        let liveness_like = kind != "readinessProbe";
        if let Some(v) = pr.success_threshold.filter(|v| *v > 1 && liveness_like) {
            self.add(
                &format!("{p}.successThreshold"),
                &v.to_string(),
                "must be 1",
            );
        }
        if let Some(v) = pr.termination_grace_period_seconds {
            let path = format!("{p}.terminationGracePeriodSeconds");
            if kind == "readinessProbe" {
                self.add(&path, &v.to_string(), "must not be set for readinessProbes");
            } else if v <= 0 {
                self.add(&path, &v.to_string(), "must be greater than 0");
            }
        }
    }

    fn http_get(&mut self, h: &HttpGetAction, p: &str, c: &Container) {
        self.probe_port(&format!("{p}.port"), &h.port, c);
        match h.scheme.as_deref() {
            None | Some("HTTP") => {}
            Some("HTTPS") if cfg!(feature = "https-probes") => {}
            Some("HTTPS") => self.add(
                &format!("{p}.scheme"),
                "HTTPS",
                "needs a picolet built with the cargo feature https-probes (this one has no TLS)",
            ),
            Some(s) => self.add(&format!("{p}.scheme"), s, &supported(&["HTTP", "HTTPS"])),
        }
        for (k, hdr) in h.http_headers.iter().enumerate() {
            if !is_http_header_name(&hdr.name) {
                self.add(
                    &format!("{p}.httpHeaders[{k}].name"),
                    &hdr.name,
                    "must consist of alphanumeric characters or '-'",
                );
            }
        }
    }

    /// A postStart or preStop hook: exactly one of exec, httpGet and sleep.
    fn lifecycle_handler(&mut self, h: &LifecycleHandler, p: &str, c: &Container, grace: i64) {
        let set = [
            ("exec", h.exec.is_some()),
            ("httpGet", h.http_get.is_some()),
            ("tcpSocket", h.tcp_socket.is_some()),
            ("sleep", h.sleep.is_some()),
        ];
        let mut count = 0;
        for (name, on) in set {
            if on {
                count += 1;
                if count > 1 {
                    self.add(
                        &format!("{p}.{name}"),
                        "",
                        "may not specify more than 1 handler type",
                    );
                }
            }
        }
        if count == 0 {
            self.add(
                p,
                "",
                "must specify a handler type (exec, httpGet or sleep)",
            );
        }
        if h.exec.as_ref().is_some_and(|x| x.command.is_empty()) {
            self.required(&format!("{p}.exec.command"));
        }
        if let Some(g) = &h.http_get {
            self.http_get(g, &format!("{p}.httpGet"), c);
        }
        if h.tcp_socket.is_some() {
            // The API still accepts it for old manifests; the kubelet never runs it.
            self.add(
                &format!("{p}.tcpSocket"),
                "",
                "is not supported as a lifecycle hook (the kubelet does not run it); use exec, httpGet or sleep",
            );
        }
        if let Some(s) = &h.sleep
            && !(0..=grace).contains(&s.seconds)
        {
            self.add(
                &format!("{p}.sleep.seconds"),
                &s.seconds.to_string(),
                &format!(
                    "must be non-negative and less than terminationGracePeriodSeconds ({grace})"
                ),
            );
        }
    }

    fn security_context(&mut self, sc: &SecurityContext, p: &str) {
        if let Some(sp) = &sc.seccomp_profile {
            self.seccomp(sp, &format!("{p}.seccompProfile"));
        }
        self.lsm(
            sc.app_armor_profile.as_ref(),
            sc.se_linux_options.as_ref(),
            p,
        );
        self.unix_id(&format!("{p}.runAsUser"), sc.run_as_user);
        self.unix_id(&format!("{p}.runAsGroup"), sc.run_as_group);
        if sc.allow_privilege_escalation == Some(false) {
            if sc.privileged == Some(true) {
                self.add(
                    p,
                    "",
                    "cannot set allowPrivilegeEscalation to false and privileged to true",
                );
            }
            let caps = sc.capabilities.as_ref().map_or(&[][..], |c| &c.add[..]);
            if caps
                .iter()
                .any(|c| c == "CAP_SYS_ADMIN" || c == "SYS_ADMIN")
            {
                self.add(
                    p,
                    "",
                    "cannot set allowPrivilegeEscalation to false and add capability SYS_ADMIN",
                );
            }
        }
        if let Some(caps) = &sc.capabilities {
            for (kind, list) in [("add", &caps.add), ("drop", &caps.drop)] {
                for (k, cap) in list.iter().enumerate() {
                    if cap.is_empty() {
                        self.required(&format!("{p}.capabilities.{kind}[{k}]"));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::decode::{Format, decode_pod};
    use crate::api::pod::{
        Capabilities, EmptyDirVolumeSource, EnvVar, EnvVarSource, ExecAction, GrpcAction,
        HostPathVolumeSource, HttpGetAction, HttpHeader, ObjectFieldSelector, SeccompProfile,
        Sysctl, TcpSocketAction, Toleration, Volume, VolumeMount,
    };
    use crate::api::quantity::Quantity;
    use serde_json::json;

    fn yaml(s: &str) -> Pod {
        decode_pod(s.as_bytes(), Format::Yaml).unwrap().pod
    }

    /// A minimal valid pod to mutate.
    fn base() -> Pod {
        yaml(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: app\nspec:\n  containers:\n  - name: main\n    image: busybox:1.36\n",
        )
    }

    fn c0(p: &mut Pod) -> &mut Container {
        &mut p.spec.containers[0]
    }

    fn assert_valid(p: &Pod) {
        let errs = validate_pod(p);
        assert!(errs.is_empty(), "unexpected errors: {:#?}", errs);
    }

    /// Asserts there is exactly one error, at `path`, whose message contains `msg`
    /// and whose value is `value`.
    #[track_caller]
    fn assert_one(p: &Pod, path: &str, value: &str, msg: &str) {
        let errs = validate_pod(p);
        assert_eq!(errs.len(), 1, "expected one error at {path}, got {errs:#?}");
        let e = &errs[0];
        assert_eq!(e.path, path, "{e}");
        assert_eq!(e.value, value, "{e}");
        assert!(
            e.message.contains(msg),
            "message {:?} lacks {msg:?}",
            e.message
        );
    }

    /// Asserts some error is at `path` with a message containing `msg`.
    #[track_caller]
    fn assert_has(p: &Pod, path: &str, msg: &str) {
        let errs = validate_pod(p);
        assert!(
            errs.iter()
                .any(|e| e.path == path && e.message.contains(msg)),
            "no error at {path} containing {msg:?} in {errs:#?}"
        );
    }

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    // ---- documentation manifests ----

    #[test]
    fn docs_manifests_are_valid() {
        assert_valid(&base());
        assert_valid(&yaml(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: nginx\nspec:\n  containers:\n  - name: nginx\n    image: nginx:1.14.2\n    ports:\n    - containerPort: 80\n",
        ));
        // init containers (concepts/workloads/pods/init-containers)
        assert_valid(&yaml(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: myapp-pod\n  labels:\n    app.kubernetes.io/name: MyApp\nspec:\n  containers:\n  - name: myapp-container\n    image: busybox:1.28\n    command: ['sh', '-c', 'echo The app is running! && sleep 3600']\n  initContainers:\n  - name: init-myservice\n    image: busybox:1.28\n    command: ['sh', '-c', 'until nslookup myservice; do sleep 2; done']\n  - name: init-mydb\n    image: busybox:1.28\n    command: ['sh', '-c', 'until nslookup mydb; do sleep 2; done']\n",
        ));
        // resources (concepts/configuration/manage-resources-containers)
        assert_valid(&yaml(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: frontend\nspec:\n  containers:\n  - name: app\n    image: images.my-company.example/app:v4\n    resources:\n      requests:\n        memory: \"64Mi\"\n        cpu: \"250m\"\n      limits:\n        memory: \"128Mi\"\n        cpu: \"500m\"\n  - name: log-aggregator\n    image: images.my-company.example/log-aggregator:v6\n    resources:\n      requests:\n        memory: \"64Mi\"\n        cpu: \"250m\"\n      limits:\n        memory: \"128Mi\"\n        cpu: \"500m\"\n",
        ));
        // named liveness port (configure-liveness-readiness-startup-probes)
        assert_valid(&yaml(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: liveness-http\nspec:\n  containers:\n  - name: liveness\n    image: registry.k8s.io/e2e-test-images/agnhost:2.40\n    args: [liveness]\n    ports:\n    - name: liveness-port\n      containerPort: 8080\n    livenessProbe:\n      httpGet:\n        path: /healthz\n        port: liveness-port\n        httpHeaders:\n        - name: Custom-Header\n          value: Awesome\n      initialDelaySeconds: 3\n      periodSeconds: 3\n    startupProbe:\n      httpGet:\n        path: /healthz\n        port: liveness-port\n      failureThreshold: 30\n      periodSeconds: 10\n    readinessProbe:\n      tcpSocket:\n        port: 8080\n      initialDelaySeconds: 15\n",
        ));
        // hostPath + emptyDir + downward API env (a typical static pod)
        assert_valid(&yaml(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\n  annotations:\n    kubeadm.kubernetes.io/etcd.advertise-client-urls: https://10.0.0.1:2379\nspec:\n  hostNetwork: true\n  priorityClassName: system-node-critical\n  priority: 2000001000\n  securityContext:\n    seccompProfile: {type: RuntimeDefault}\n  containers:\n  - name: etcd\n    image: registry.k8s.io/etcd:3.5.12-0\n    command: [etcd, --data-dir=/var/lib/etcd]\n    env:\n    - name: POD_IP\n      valueFrom:\n        fieldRef: {apiVersion: v1, fieldPath: status.podIP}\n    - {name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}\n    ports:\n    - {name: client, containerPort: 2379, hostPort: 2379}\n    resources:\n      requests: {cpu: 100m, memory: 100Mi}\n    livenessProbe:\n      httpGet: {host: 127.0.0.1, path: /health, port: 2381, scheme: HTTP}\n      failureThreshold: 8\n      periodSeconds: 10\n      timeoutSeconds: 15\n    volumeMounts:\n    - {name: etcd-data, mountPath: /var/lib/etcd}\n    - {name: tmp, mountPath: /tmp, readOnly: false}\n  volumes:\n  - name: etcd-data\n    hostPath: {path: /var/lib/etcd, type: DirectoryOrCreate}\n  - name: tmp\n    emptyDir: {medium: Memory, sizeLimit: 64Mi}\n",
        ));
    }

    #[test]
    fn display_format() {
        let e = FieldError {
            path: "spec.containers[1].ports[0].containerPort".into(),
            value: "70000".into(),
            message: PORT_RANGE.into(),
        };
        assert_eq!(
            e.to_string(),
            "spec.containers[1].ports[0].containerPort: must be between 1 and 65535, inclusive: \"70000\""
        );
        let e = FieldError {
            path: "metadata.name".into(),
            value: String::new(),
            message: REQUIRED.into(),
        };
        assert_eq!(e.to_string(), "metadata.name: required value");
    }

    // ---- metadata ----

    #[test]
    fn pod_name() {
        let mut p = base();
        p.metadata.name.clear();
        assert_one(&p, "metadata.name", "", "required");
        for bad in [
            "App",
            "-app",
            "app-",
            "a_b",
            "a..b",
            ".a",
            "a b",
            &"a".repeat(254),
        ] {
            p.metadata.name = bad.into();
            assert_one(&p, "metadata.name", bad, "RFC 1123 subdomain");
        }
        for good in [
            "a",
            "0",
            "app.example.com",
            "a-b.c-d",
            &"a".repeat(253),
            &format!("{}.b", "a".repeat(100)),
        ] {
            p.metadata.name = good.into();
            assert_valid(&p);
        }
    }

    #[test]
    fn namespace() {
        let mut p = base();
        p.metadata.namespace = "kube-system".into();
        assert_valid(&p);
        p.metadata.namespace = "a.b".into();
        assert_one(&p, "metadata.namespace", "a.b", "RFC 1123 label");
        p.metadata.namespace = "a".repeat(64);
        assert_one(&p, "metadata.namespace", &"a".repeat(64), "at most 63");
        p.metadata.namespace = "a".repeat(63);
        assert_valid(&p);
    }

    #[test]
    fn labels() {
        let mut p = base();
        for k in ["app", "app.kubernetes.io/name", "a_b.c-d", "A", "x/y", "9"] {
            p.metadata.labels = [(k.to_owned(), "v".to_owned())].into();
            assert_valid(&p);
        }
        for (k, msg) in [
            ("/app", "prefix part must be non-empty"),
            ("Example.com/app", "prefix part"),
            ("a/b/c", "qualified name"),
            ("app.io/", "name part must be non-empty"),
            ("-app", "name part"),
            ("app_", "name part"),
            ("a b", "name part"),
        ] {
            p.metadata.labels = [(k.to_owned(), "v".to_owned())].into();
            assert_one(&p, "metadata.labels", k, msg);
        }
        let long = "a".repeat(64);
        p.metadata.labels = [(long.clone(), "v".to_owned())].into();
        assert_one(&p, "metadata.labels", &long, "63");
        p.metadata.labels = [(format!("{}/a", "b".repeat(254)), "v".to_owned())].into();
        assert_has(&p, "metadata.labels", "prefix part");

        for v in ["", "MyApp", "v1.2_3-x", &"a".repeat(63)] {
            p.metadata.labels = [("k".to_owned(), v.to_owned())].into();
            assert_valid(&p);
        }
        for v in ["-a", "a-", "a b", "a/b", &"a".repeat(64)] {
            p.metadata.labels = [("k".to_owned(), v.to_owned())].into();
            assert_one(&p, "metadata.labels[k]", v, "at most 63 characters");
        }
    }

    #[test]
    fn annotations() {
        let mut p = base();
        // keys are checked case-insensitively, values are free-form
        p.metadata.annotations =
            [("Example.COM/Key".to_owned(), "any value: {}!\n".to_owned())].into();
        assert_valid(&p);
        p.metadata.annotations = [("bad key".to_owned(), String::new())].into();
        assert_one(&p, "metadata.annotations", "bad key", "name part");
        // total size limit is 256 KiB of keys plus values
        p.metadata.annotations = [("k".to_owned(), "x".repeat(MAX_ANNOTATIONS_BYTES - 1))].into();
        assert_valid(&p);
        p.metadata.annotations = [("k".to_owned(), "x".repeat(MAX_ANNOTATIONS_BYTES))].into();
        assert_one(
            &p,
            "metadata.annotations",
            "",
            "at most 262144 bytes in total, found 262145",
        );
    }

    // ---- containers ----

    #[test]
    fn containers_required() {
        let mut p = base();
        p.spec.containers.clear();
        assert_one(&p, "spec.containers", "", "required");
    }

    #[test]
    fn container_names() {
        let mut p = base();
        c0(&mut p).name = "Main".into();
        assert_one(&p, "spec.containers[0].name", "Main", "RFC 1123 label");
        c0(&mut p).name = "a.b".into();
        assert_one(&p, "spec.containers[0].name", "a.b", "RFC 1123 label");
        c0(&mut p).name = String::new();
        assert_one(&p, "spec.containers[0].name", "", "required");

        let mut p = base();
        let dup = p.spec.containers[0].clone();
        p.spec.containers.push(dup.clone());
        assert_one(&p, "spec.containers[1].name", "main", "duplicate");
        p.spec.containers.pop();
        p.spec.init_containers.push(dup);
        assert_one(&p, "spec.initContainers[0].name", "main", "duplicate");
        p.spec.init_containers[0].name = "init".into();
        assert_valid(&p);
        let init = p.spec.init_containers[0].clone();
        p.spec.init_containers.push(init);
        assert_one(&p, "spec.initContainers[1].name", "init", "duplicate");
    }

    #[test]
    fn image() {
        let mut p = base();
        c0(&mut p).image = String::new();
        assert_one(&p, "spec.containers[0].image", "", "required");
        c0(&mut p).image = " nginx".into();
        assert_one(&p, "spec.containers[0].image", " nginx", "whitespace");
        c0(&mut p).image = "nginx\n".into();
        assert_one(&p, "spec.containers[0].image", "nginx\n", "whitespace");
    }

    #[test]
    fn restart_policy_is_enforced_at_decode() {
        let r = decode_pod(
            b"apiVersion: v1\nkind: Pod\nspec:\n  restartPolicy: Sometimes\n",
            Format::Yaml,
        );
        assert!(r.is_err());
        let mut p = base();
        p.spec.restart_policy = Some(crate::api::pod::RestartPolicy::Never);
        assert_valid(&p);
    }

    #[test]
    fn termination_grace_period() {
        let mut p = base();
        p.spec.termination_grace_period_seconds = Some(0);
        assert_valid(&p);
        p.spec.termination_grace_period_seconds = Some(-1);
        assert_one(
            &p,
            "spec.terminationGracePeriodSeconds",
            "-1",
            "greater than or equal to 0",
        );
    }

    #[test]
    fn ports() {
        let port = |name: Option<&str>, cp: i32| ContainerPort {
            name: name.map(str::to_owned),
            container_port: cp,
            ..Default::default()
        };
        let mut p = base();
        c0(&mut p).ports = vec![
            port(Some("http"), 80),
            port(Some("metrics-2"), 9090),
            port(None, 65535),
        ];
        assert_valid(&p);

        c0(&mut p).ports = vec![port(None, 0)];
        assert_one(
            &p,
            "spec.containers[0].ports[0].containerPort",
            "",
            "required",
        );
        c0(&mut p).ports = vec![port(None, 65536)];
        assert_one(
            &p,
            "spec.containers[0].ports[0].containerPort",
            "65536",
            "between 1 and 65535",
        );
        c0(&mut p).ports = vec![port(None, -1)];
        assert_one(
            &p,
            "spec.containers[0].ports[0].containerPort",
            "-1",
            "between 1 and 65535",
        );

        for bad in [
            "HTTP",
            "8080",
            "-http",
            "http-",
            "ht--tp",
            "a-very-long-port-name",
            "h_t",
        ] {
            c0(&mut p).ports = vec![port(Some(bad), 80)];
            assert_one(
                &p,
                "spec.containers[0].ports[0].name",
                bad,
                "IANA service name",
            );
        }
        c0(&mut p).ports = vec![port(Some("a1234567890bcde"), 80)]; // exactly 15
        assert_valid(&p);
        c0(&mut p).ports = vec![port(Some("http"), 80), port(Some("http"), 81)];
        assert_one(&p, "spec.containers[0].ports[1].name", "http", "duplicate");

        let mut pp = port(None, 80);
        pp.host_port = Some(70000);
        c0(&mut p).ports = vec![pp.clone()];
        assert_one(
            &p,
            "spec.containers[0].ports[0].hostPort",
            "70000",
            "between 1 and 65535",
        );
        pp.host_port = Some(0); // 0 means unset
        c0(&mut p).ports = vec![pp.clone()];
        assert_valid(&p);

        pp.protocol = Some("UDP".into());
        c0(&mut p).ports = vec![pp.clone()];
        assert_valid(&p);
        pp.protocol = Some("tcp".into());
        c0(&mut p).ports = vec![pp];
        assert_one(
            &p,
            "spec.containers[0].ports[0].protocol",
            "tcp",
            "\"SCTP\", \"TCP\", \"UDP\"",
        );
    }

    #[test]
    fn host_ports() {
        let hp = |cp: i32, h: i32, proto: Option<&str>| ContainerPort {
            container_port: cp,
            host_port: Some(h),
            protocol: proto.map(str::to_owned),
            ..Default::default()
        };
        let mut p = base();
        let mut second = p.spec.containers[0].clone();
        second.name = "second".into();
        p.spec.containers.push(second);
        p.spec.containers[0].ports = vec![hp(80, 8080, None)];
        p.spec.containers[1].ports = vec![hp(81, 8080, Some("TCP"))];
        assert_one(
            &p,
            "spec.containers[1].ports[0].hostPort",
            "TCP//8080",
            "duplicate",
        );
        p.spec.containers[1].ports = vec![hp(81, 8080, Some("UDP"))];
        assert_valid(&p);

        // hostNetwork needs hostPort == containerPort
        p.spec.host_network = true;
        assert_has(
            &p,
            "spec.containers[0].ports[0].hostPort",
            "must match containerPort",
        );
        p.spec.containers[0].ports = vec![hp(8080, 8080, None)];
        p.spec.containers[1].ports = vec![ContainerPort {
            container_port: 9090,
            ..Default::default()
        }];
        assert_valid(&p);
    }

    #[test]
    fn env_names_and_values() {
        let mut p = base();
        let var = |n: &str| EnvVar {
            name: n.into(),
            value: Some("x".into()),
            value_from: None,
        };
        // relaxed rule: any printable ASCII except '='
        c0(&mut p).env = ["PATH", "my.var-1", "1ABC", "a b", "-", "%x", "$HOME"]
            .map(var)
            .to_vec();
        assert_valid(&p);
        for bad in ["A=B", "tab\there", "é", "\u{7f}"] {
            c0(&mut p).env = vec![var(bad)];
            assert_one(&p, "spec.containers[0].env[0].name", bad, "printable ascii");
        }
        c0(&mut p).env = vec![var("")];
        assert_one(&p, "spec.containers[0].env[0].name", "", "required");
    }

    #[test]
    fn env_value_from() {
        let mut p = base();
        let field = |path: &str| EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: None,
                field_path: path.into(),
            }),
            ..Default::default()
        };
        let var = |value: Option<&str>, from: EnvVarSource| EnvVar {
            name: "X".into(),
            value: value.map(str::to_owned),
            value_from: Some(from),
        };
        for path in SUPPORTED_FIELD_PATHS {
            c0(&mut p).env = vec![var(None, field(path))];
            assert_valid(&p);
        }
        // an empty value next to valueFrom is allowed, as upstream
        c0(&mut p).env = vec![var(Some(""), field("metadata.name"))];
        assert_valid(&p);
        c0(&mut p).env = vec![var(Some("x"), field("metadata.name"))];
        assert_one(
            &p,
            "spec.containers[0].env[0].valueFrom",
            "",
            "may not be specified when value is not empty",
        );

        for path in ["metadata.labels['app']", "metadata.annotations['a']"] {
            c0(&mut p).env = vec![var(None, field(path))];
            assert_valid(&p);
        }
        for path in [
            "metadata.labels",
            "metadata.annotations",
            "metadata.annotations['']",
            "spec.serviceAccount",
            "bogus",
        ] {
            c0(&mut p).env = vec![var(None, field(path))];
            assert_one(
                &p,
                "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath",
                path,
                "is not supported by picolet",
            );
        }
        c0(&mut p).env = vec![var(None, field(""))];
        assert_one(
            &p,
            "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath",
            "",
            "required",
        );
        let mut f = field("metadata.name");
        f.field_ref.as_mut().unwrap().api_version = Some("v2".into());
        c0(&mut p).env = vec![var(None, f)];
        assert_one(
            &p,
            "spec.containers[0].env[0].valueFrom.fieldRef.apiVersion",
            "v2",
            "\"v1\"",
        );

        let secret = EnvVarSource {
            secret_key_ref: Some(json!({"name": "db", "key": "password"})),
            ..Default::default()
        };
        c0(&mut p).env = vec![var(None, secret)];
        assert_one(
            &p,
            "spec.containers[0].env[0].valueFrom.secretKeyRef",
            "",
            "a static pod may not reference API objects (Secrets)",
        );
        let cm = EnvVarSource {
            config_map_key_ref: Some(json!({"name": "c", "key": "k"})),
            ..Default::default()
        };
        c0(&mut p).env = vec![var(None, cm)];
        assert_one(
            &p,
            "spec.containers[0].env[0].valueFrom.configMapKeyRef",
            "",
            "a static pod may not reference API objects (ConfigMaps)",
        );
        c0(&mut p).env = Vec::new();
        c0(&mut p).env_from = vec![json!({"configMapRef": {"name": "c"}})];
        assert_one(
            &p,
            "spec.containers[0].envFrom",
            "",
            "a static pod may not reference API objects",
        );
        c0(&mut p).env_from = Vec::new();
        // resourceFieldRef names nothing outside the pod: allowed, as upstream.
        let rf = |v: serde_json::Value| EnvVarSource {
            resource_field_ref: Some(v),
            ..Default::default()
        };
        for ok in [
            json!({"resource": "limits.cpu"}),
            json!({"resource": "requests.cpu", "divisor": "1m"}),
            json!({"resource": "limits.memory", "divisor": "0"}),
            json!({"containerName": "main", "resource": "limits.memory", "divisor": "1Mi"}),
        ] {
            c0(&mut p).env = vec![var(None, rf(ok))];
            assert_valid(&p);
        }
        let rp = "spec.containers[0].env[0].valueFrom.resourceFieldRef";
        c0(&mut p).env = vec![var(
            None,
            rf(json!({"resource": "limits.cpu", "divisor": "1Mi"})),
        )];
        assert_one(&p, &format!("{rp}.divisor"), "1Mi", "\"1m\", \"1\"");
        c0(&mut p).env = vec![var(None, rf(json!({"resource": "limits.gpu"})))];
        assert_one(
            &p,
            &format!("{rp}.resource"),
            "limits.gpu",
            "supported values",
        );
        c0(&mut p).env = vec![var(
            None,
            rf(json!({"containerName": "nope", "resource": "limits.memory"})),
        )];
        assert_one(
            &p,
            &format!("{rp}.containerName"),
            "nope",
            "a container of the pod",
        );

        c0(&mut p).env = vec![var(None, EnvVarSource::default())];
        assert_one(
            &p,
            "spec.containers[0].env[0].valueFrom",
            "",
            "must specify one of",
        );
        let mut both = field("metadata.name");
        both.secret_key_ref = Some(json!({}));
        c0(&mut p).env = vec![var(None, both)];
        assert_has(
            &p,
            "spec.containers[0].env[0].valueFrom",
            "more than one field",
        );
    }

    #[test]
    fn resources() {
        let mut p = base();
        let set = |p: &mut Pod, req: &[(&str, &str)], lim: &[(&str, &str)]| {
            let r = &mut p.spec.containers[0].resources;
            r.requests = req.iter().map(|(k, v)| (k.to_string(), q(v))).collect();
            r.limits = lim.iter().map(|(k, v)| (k.to_string(), q(v))).collect();
        };
        set(
            &mut p,
            &[("cpu", "250m"), ("memory", "64Mi")],
            &[("cpu", "500m"), ("memory", "128Mi")],
        );
        assert_valid(&p);
        set(&mut p, &[("cpu", "0.5")], &[("cpu", "500m")]); // equal
        assert_valid(&p);
        set(&mut p, &[("cpu", "1")], &[("cpu", "500m")]);
        assert_one(
            &p,
            "spec.containers[0].resources.requests[cpu]",
            "1",
            "must be less than or equal to cpu limit of 500m",
        );
        set(&mut p, &[("memory", "1Gi")], &[("memory", "1G")]);
        assert_one(
            &p,
            "spec.containers[0].resources.requests[memory]",
            "1Gi",
            "limit of 1G",
        );
        set(&mut p, &[("memory", "-1")], &[]);
        assert_one(
            &p,
            "spec.containers[0].resources.requests[memory]",
            "-1",
            "greater than or equal to 0",
        );
        set(&mut p, &[], &[("cpu", "-100m")]);
        assert_one(
            &p,
            "spec.containers[0].resources.limits[cpu]",
            "-100m",
            "greater than or equal to 0",
        );
        set(&mut p, &[("ephemeral-storage", "2Gi")], &[]);
        assert_valid(&p);

        set(&mut p, &[], &[("gpu", "1")]);
        assert_one(
            &p,
            "spec.containers[0].resources.limits[gpu]",
            "gpu",
            "standard resource",
        );
        set(&mut p, &[], &[("hugepages-2Mi", "4Mi"), ("memory", "1Gi")]);
        assert_valid(&p);
        set(&mut p, &[], &[("hugepages-2Mi", "4Mi")]);
        assert_one(
            &p,
            "spec.containers[0].resources",
            "",
            "hugepages require cpu or memory",
        );
        set(&mut p, &[], &[("hugepages-xyz", "4Mi"), ("cpu", "1")]);
        assert_one(
            &p,
            "spec.containers[0].resources.limits[hugepages-xyz]",
            "hugepages-xyz",
            "standard resource",
        );

        // extended resources: integers, requests equal to limits
        set(
            &mut p,
            &[("example.com/foo", "2")],
            &[("example.com/foo", "2")],
        );
        assert_valid(&p);
        set(
            &mut p,
            &[("example.com/foo", "1")],
            &[("example.com/foo", "2")],
        );
        assert_one(
            &p,
            "spec.containers[0].resources.requests[example.com/foo]",
            "1",
            "must be equal to example.com/foo limit of 2",
        );
        set(&mut p, &[("example.com/foo", "1")], &[]);
        assert_one(
            &p,
            "spec.containers[0].resources.limits[example.com/foo]",
            "",
            "cannot be overcommitted",
        );
        set(&mut p, &[], &[("example.com/foo", "500m")]);
        assert_one(
            &p,
            "spec.containers[0].resources.limits[example.com/foo]",
            "500m",
            "must be an integer",
        );
        set(&mut p, &[], &[("Bad Name/x", "1")]);
        assert_one(
            &p,
            "spec.containers[0].resources.limits[Bad Name/x]",
            "Bad Name/x",
            "prefix part",
        );
    }

    // ---- volumes ----

    fn host_vol(name: &str, path: &str) -> Volume {
        Volume {
            name: name.into(),
            host_path: Some(HostPathVolumeSource {
                path: path.into(),
                type_: None,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn image_volumes() {
        let d = crate::api::decode_pod(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - name: c\n    image: i\n    volumeMounts:\n    - {name: m, mountPath: /m, subPath: w}\n  volumes:\n  - name: m\n    image: {reference: 'reg.local/model:1', pullPolicy: IfNotPresent}\n".as_bytes(),
            crate::api::Format::Yaml,
        )
        .unwrap();
        assert!(d.unknown_fields.is_empty(), "{:?}", d.unknown_fields);
        let mut p = d.pod;
        let im = p.spec.volumes[0].image.clone().unwrap();
        assert_eq!(im.reference, "reg.local/model:1");
        assert_eq!(im.pull_policy, Some(crate::api::PullPolicy::IfNotPresent));
        assert_valid(&p);
        p.spec.volumes[0].image.as_mut().unwrap().reference = String::new();
        assert_one(&p, "spec.volumes[0].image.reference", "", "required");
        p.spec.volumes[0].image.as_mut().unwrap().reference = "m:1 ".into();
        assert_one(&p, "spec.volumes[0].image.reference", "m:1 ", "whitespace");
        p.spec.volumes[0].image.as_mut().unwrap().reference = "m:1".into();
        p.spec.volumes[0].empty_dir = Some(Default::default());
        assert_one(&p, "spec.volumes[0]", "", "more than 1 volume type");
    }

    #[test]
    fn volume_names() {
        let mut p = base();
        p.spec.volumes = vec![host_vol("data", "/srv/data"), host_vol("Data", "/x")];
        assert_one(&p, "spec.volumes[1].name", "Data", "RFC 1123 label");
        p.spec.volumes = vec![host_vol("data", "/a"), host_vol("data", "/b")];
        assert_one(&p, "spec.volumes[1].name", "data", "duplicate");
        p.spec.volumes = vec![host_vol("", "/a")];
        assert_one(&p, "spec.volumes[0].name", "", "required");
    }

    #[test]
    fn host_path_volumes() {
        let mut p = base();
        p.spec.volumes = vec![host_vol("v", "/var/log")];
        assert_valid(&p);
        p.spec.volumes = vec![host_vol("v", "var/log")];
        assert_one(&p, "spec.volumes[0].hostPath.path", "var/log", "absolute");
        p.spec.volumes = vec![host_vol("v", "/var/../etc")];
        assert_one(&p, "spec.volumes[0].hostPath.path", "/var/../etc", "'..'");
        p.spec.volumes = vec![host_vol("v", "/var/..data")]; // not a backstep
        assert_valid(&p);
        p.spec.volumes = vec![host_vol("v", "")];
        assert_one(&p, "spec.volumes[0].hostPath.path", "", "required");
        for t in [
            "",
            "Directory",
            "DirectoryOrCreate",
            "File",
            "FileOrCreate",
            "Socket",
            "CharDevice",
            "BlockDevice",
        ] {
            p.spec.volumes = vec![host_vol("v", "/x")];
            p.spec.volumes[0].host_path.as_mut().unwrap().type_ = Some(t.into());
            assert_valid(&p);
        }
        p.spec.volumes[0].host_path.as_mut().unwrap().type_ = Some("directory".into());
        assert_one(
            &p,
            "spec.volumes[0].hostPath.type",
            "directory",
            "supported values",
        );
    }

    #[test]
    fn empty_dir_volumes() {
        let mut p = base();
        let ed = |medium: Option<&str>, limit: Option<&str>| Volume {
            name: "v".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: medium.map(str::to_owned),
                size_limit: limit.map(q),
            }),
            ..Default::default()
        };
        for v in [
            ed(None, None),
            ed(Some(""), Some("1Gi")),
            ed(Some("Memory"), Some("0")),
        ] {
            p.spec.volumes = vec![v];
            assert_valid(&p);
        }
        p.spec.volumes = vec![ed(Some("HugePages-2Mi"), None)];
        assert_one(
            &p,
            "spec.volumes[0].emptyDir.medium",
            "HugePages-2Mi",
            "not supported by picolet",
        );
        p.spec.volumes = vec![ed(Some("memory"), None)];
        assert_one(
            &p,
            "spec.volumes[0].emptyDir.medium",
            "memory",
            "supported values",
        );
        p.spec.volumes = vec![ed(None, Some("-1Gi"))];
        assert_one(
            &p,
            "spec.volumes[0].emptyDir.sizeLimit",
            "-1Gi",
            "greater than or equal to 0",
        );
    }

    #[test]
    fn a_manifest_may_not_have_ephemeral_containers_nor_targets() {
        let p = yaml(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - {name: c, image: i, targetContainerName: x}\n  ephemeralContainers:\n  - {name: d, image: i, targetContainerName: c}\n",
        );
        let got: Vec<String> = validate_pod(&p).iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "spec.ephemeralContainers: not supported: ephemeral containers are added to a running pod through the API, never written in a manifest",
                "spec.containers[0].targetContainerName: not supported: only an ephemeral container has a target: \"x\"",
            ]
        );
    }

    #[test]
    fn required_node_affinity_is_checked_as_the_apiserver_does() {
        let p = yaml(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - {name: c, image: i}\n  affinity:\n    podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: []}\n    nodeAffinity:\n      preferredDuringSchedulingIgnoredDuringExecution: [{weight: 1, preference: {}}]\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchExpressions: [{key: disktype, operator: In, values: [ssd]}, {key: cores, operator: Gt, values: ['2']}]\n          matchFields: [{key: metadata.name, operator: NotIn, values: [n1]}]\n",
        );
        assert_eq!(validate_pod(&p), vec![]);
        let p = yaml(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - {name: c, image: i}\n  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchExpressions: [{key: a, operator: In}, {key: b, operator: Exists, values: [x]}, {key: c, operator: Gt, values: [two]}, {key: d, operator: Equals, values: [x]}]\n          matchFields: [{key: metadata.uid, operator: In, values: [x]}]\n",
        );
        let got: Vec<String> = validate_pod(&p).iter().map(|e| e.path.clone()).collect();
        let t = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]";
        assert_eq!(
            got,
            [
                format!("{t}.matchExpressions[0].values"),
                format!("{t}.matchExpressions[1].values"),
                format!("{t}.matchExpressions[2].values[0]"),
                format!("{t}.matchExpressions[3].operator"),
                format!("{t}.matchFields[0].key"),
            ]
        );
    }

    #[test]
    fn yaml_octal_modes_are_octal() {
        let p = yaml(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - {name: c, image: i}\n  volumes:\n  - name: d\n    downwardAPI: {defaultMode: 0644, items: [{path: n, mode: 0400, fieldRef: {fieldPath: metadata.name}}]}\n",
        );
        assert_eq!(validate_pod(&p), vec![]);
        let v = crate::objects::ApiVolume::of(&p.spec.volumes[0])
            .unwrap()
            .unwrap();
        let crate::objects::ApiVolume::DownwardApi(d) = v else {
            panic!("{v:?}")
        };
        assert_eq!(
            (d.default_mode, d.items[0].mode),
            (Some(0o644), Some(0o400))
        );
        assert_eq!(crate::objects::octal("0"), None);
        assert_eq!(crate::objects::octal("0777"), Some(511));
        assert_eq!(crate::objects::octal("0648"), None);
        assert_eq!(crate::objects::octal("644"), None);
        let p = yaml(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - {name: c, image: i}\n  volumes:\n  - name: d\n    downwardAPI: {defaultMode: rw}\n",
        );
        let errs = validate_pod(&p);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].message.contains("invalid file mode \"rw\""),
            "{errs:?}"
        );
    }

    #[test]
    fn downward_files_owned_by_a_user_are_refused() {
        let p = yaml(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - {name: c, image: i}\n  volumes:\n  - name: d\n    downwardAPI: {defaultUser: 1000, items: [{path: n, user: 7, fieldRef: {fieldPath: metadata.name}}]}\n  - name: p\n    projected: {sources: [{downwardAPI: {items: [{path: n, user: 7, fieldRef: {fieldPath: metadata.name}}]}}]}\n",
        );
        let got: Vec<String> = validate_pod(&p).iter().map(|e| e.path.clone()).collect();
        assert_eq!(
            got,
            [
                "spec.volumes[0].downwardAPI.defaultUser",
                "spec.volumes[0].downwardAPI.items[0].user",
                "spec.volumes[1].projected.sources[0].downwardAPI.items[0].user",
            ]
        );
    }

    #[test]
    fn volumes_naming_api_objects_are_refused_for_that_reason() {
        let p = yaml(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - name: c\n    image: i\n    volumeMounts:\n    - {name: cfg, mountPath: /etc/cfg}\n  volumes:\n  - name: cfg\n    configMap: {name: my-config}\n  - name: claim\n    persistentVolumeClaim: {claimName: data}\n  - name: token\n    projected: {sources: [{serviceAccountToken: {path: t}}, {downwardAPI: {items: [{path: n, fieldRef: {fieldPath: metadata.name}}]}}, {secret: {name: s}}, {clusterTrustBundle: {signerName: x.io/s, labelSelector: {}, path: b.crt}}]}\n  - name: nfs\n    nfs: {server: h, path: /x}\n",
        );
        let errs = validate_pod(&p);
        let got: Vec<(&str, &str)> = errs
            .iter()
            .map(|e| (e.path.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("spec.volumes[0].configMap", "configMap"),
                (
                    "spec.volumes[1].persistentVolumeClaim",
                    "persistentVolumeClaim"
                ),
                (
                    "spec.volumes[2].projected.sources[0].serviceAccountToken",
                    "serviceAccountToken"
                ),
                ("spec.volumes[2].projected.sources[2].secret", "secret"),
                (
                    "spec.volumes[2].projected.sources[3].clusterTrustBundle",
                    "clusterTrustBundle"
                ),
                ("spec.volumes[3].nfs", "nfs"),
            ]
        );
        assert!(
            errs[4].message.contains("(ClusterTrustBundles)"),
            "{errs:#?}"
        );
        assert!(
            errs[..5].iter().all(|e| e
                .message
                .starts_with("a static pod may not reference API objects")),
            "{errs:#?}"
        );
        assert_eq!(
            errs[0].to_string(),
            "spec.volumes[0].configMap: a static pod may not reference API objects (ConfigMaps), as with the kubelet: \"configMap\""
        );
        assert_eq!(
            errs[5].to_string(),
            "spec.volumes[3].nfs: volume type is not supported by picolet (only hostPath, emptyDir, image, downwardAPI and projected downwardAPI sources are): \"nfs\""
        );
    }

    #[test]
    fn downward_api_volumes_are_allowed_and_checked() {
        let ok = yaml(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - name: c\n    image: i\n    volumeMounts:\n    - {name: info, mountPath: /etc/info}\n  volumes:\n  - name: info\n    downwardAPI:\n      defaultMode: 420\n      items:\n      - {path: labels, fieldRef: {fieldPath: metadata.labels}}\n      - {path: app, fieldRef: {fieldPath: \"metadata.labels['app']\"}}\n      - {path: mem, resourceFieldRef: {containerName: c, resource: limits.memory, divisor: 1Mi}}\n      - {path: cpu, resourceFieldRef: {containerName: c, resource: requests.cpu, divisor: \"0\"}}\n  - name: pinfo\n    projected: {sources: [{downwardAPI: {items: [{path: ns, fieldRef: {fieldPath: metadata.namespace}}]}}]}\n",
        );
        assert_valid(&ok);
        let bad = yaml(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - name: c\n    image: i\n  volumes:\n  - name: info\n    downwardAPI:\n      items:\n      - {path: ip, fieldRef: {fieldPath: status.podIP}}\n      - {path: ../up, fieldRef: {fieldPath: metadata.name}}\n      - {path: mem, resourceFieldRef: {resource: limits.memory}}\n      - {path: x, mode: 4096, resourceFieldRef: {containerName: other, resource: limits.cpu}}\n      - {path: both}\n",
        );
        let errs = validate_pod(&bad);
        let got: Vec<(&str, &str)> = errs
            .iter()
            .map(|e| (e.path.as_str(), e.value.as_str()))
            .collect();
        let it = "spec.volumes[0].downwardAPI.items";
        assert_eq!(
            got,
            [
                (
                    format!("{it}[0].fieldRef.fieldPath").as_str(),
                    "status.podIP"
                ),
                (format!("{it}[1].path").as_str(), "../up"),
                (
                    format!("{it}[2].resourceFieldRef.containerName").as_str(),
                    ""
                ),
                (format!("{it}[3].mode").as_str(), "4096"),
                (
                    format!("{it}[3].resourceFieldRef.containerName").as_str(),
                    "other"
                ),
                (format!("{it}[4]").as_str(), ""),
            ],
            "{errs:#?}"
        );
    }

    #[test]
    fn exactly_one_volume_source() {
        let mut p = base();
        p.spec.volumes = vec![Volume {
            name: "v".into(),
            ..Default::default()
        }];
        assert_one(&p, "spec.volumes[0]", "", "must specify a volume type");
        let mut both = host_vol("v", "/x");
        both.empty_dir = Some(EmptyDirVolumeSource::default());
        p.spec.volumes = vec![both];
        assert_one(&p, "spec.volumes[0]", "", "more than 1 volume type");
        let mut mixed = host_vol("v", "/x");
        mixed
            .other
            .insert("secret".into(), json!({"secretName": "s"}));
        p.spec.volumes = vec![mixed];
        assert_has(&p, "spec.volumes[0]", "more than 1 volume type");
        assert_has(
            &p,
            "spec.volumes[0].secret",
            "may not reference API objects",
        );
    }

    #[test]
    fn volume_mounts() {
        let mount = |name: &str, path: &str| VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            ..Default::default()
        };
        let mut p = base();
        p.spec.volumes = vec![host_vol("data", "/srv")];
        c0(&mut p).volume_mounts = vec![mount("data", "/data")];
        assert_valid(&p);
        c0(&mut p).volume_mounts = vec![mount("nope", "/data")];
        assert_one(
            &p,
            "spec.containers[0].volumeMounts[0].name",
            "nope",
            "volume in spec.volumes",
        );
        c0(&mut p).volume_mounts = vec![mount("data", "data")];
        assert_one(
            &p,
            "spec.containers[0].volumeMounts[0].mountPath",
            "data",
            "absolute",
        );
        c0(&mut p).volume_mounts = vec![mount("data", "")];
        assert_one(
            &p,
            "spec.containers[0].volumeMounts[0].mountPath",
            "",
            "required",
        );
        c0(&mut p).volume_mounts = vec![mount("data", "/d"), mount("data", "/d")];
        assert_one(
            &p,
            "spec.containers[0].volumeMounts[1].mountPath",
            "/d",
            "unique",
        );
        // the same path in different containers is fine
        c0(&mut p).volume_mounts = vec![mount("data", "/d")];
        let mut other = p.spec.containers[0].clone();
        other.name = "other".into();
        p.spec.containers.push(other);
        assert_valid(&p);
        p.spec.containers.pop();

        let mut m = mount("data", "/d");
        m.sub_path = Some("logs/app".into());
        c0(&mut p).volume_mounts = vec![m.clone()];
        assert_valid(&p);
        m.sub_path = Some("/abs".into());
        c0(&mut p).volume_mounts = vec![m.clone()];
        assert_one(
            &p,
            "spec.containers[0].volumeMounts[0].subPath",
            "/abs",
            "relative",
        );
        m.sub_path = Some("a/../../etc".into());
        c0(&mut p).volume_mounts = vec![m.clone()];
        assert_one(
            &p,
            "spec.containers[0].volumeMounts[0].subPath",
            "a/../../etc",
            "'..'",
        );
        m.sub_path = None;

        m.mount_propagation = Some("HostToContainer".into());
        c0(&mut p).volume_mounts = vec![m.clone()];
        assert_valid(&p);
        m.mount_propagation = Some("Bidirectional".into());
        c0(&mut p).volume_mounts = vec![m.clone()];
        assert_one(
            &p,
            "spec.containers[0].volumeMounts[0].mountPropagation",
            "Bidirectional",
            "privileged",
        );
        c0(&mut p).security_context = Some(SecurityContext {
            privileged: Some(true),
            ..Default::default()
        });
        assert_valid(&p);
        m.mount_propagation = Some("Shared".into());
        c0(&mut p).volume_mounts = vec![m];
        assert_one(
            &p,
            "spec.containers[0].volumeMounts[0].mountPropagation",
            "Shared",
            "supported values",
        );
    }

    #[test]
    fn mounts_of_refused_volumes_report_only_the_volume() {
        let p = yaml(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - name: c\n    image: i\n    volumeMounts: [{name: s, mountPath: /s}]\n  volumes:\n  - {name: s, secret: {secretName: x}}\n",
        );
        assert_one(
            &p,
            "spec.volumes[0].secret",
            "secret",
            "may not reference API objects",
        );
    }

    // ---- probes ----

    fn http_probe(port: IntOrString) -> Probe {
        Probe {
            http_get: Some(HttpGetAction {
                path: Some("/healthz".into()),
                port,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn probe_handlers() {
        let mut p = base();
        c0(&mut p).liveness_probe = Some(Probe::default());
        assert_one(
            &p,
            "spec.containers[0].livenessProbe",
            "",
            "must specify a handler type",
        );

        let mut two = http_probe(IntOrString::Int(80));
        two.exec = Some(ExecAction {
            command: vec!["true".into()],
        });
        c0(&mut p).liveness_probe = Some(two);
        assert_one(
            &p,
            "spec.containers[0].livenessProbe.httpGet",
            "",
            "more than 1 handler type",
        );

        c0(&mut p).liveness_probe = Some(Probe {
            exec: Some(ExecAction::default()),
            ..Default::default()
        });
        assert_one(
            &p,
            "spec.containers[0].livenessProbe.exec.command",
            "",
            "required",
        );

        c0(&mut p).liveness_probe = Some(Probe {
            grpc: Some(GrpcAction {
                port: 0,
                service: None,
            }),
            ..Default::default()
        });
        assert_one(
            &p,
            "spec.containers[0].livenessProbe.grpc.port",
            "0",
            "between 1 and 65535",
        );

        c0(&mut p).readiness_probe = None;
        c0(&mut p).liveness_probe = Some(Probe {
            tcp_socket: Some(TcpSocketAction {
                port: IntOrString::Int(5432),
                host: None,
            }),
            ..Default::default()
        });
        assert_valid(&p);
    }

    #[test]
    fn probe_ports() {
        let mut p = base();
        c0(&mut p).ports = vec![ContainerPort {
            name: Some("http".into()),
            container_port: 8080,
            ..Default::default()
        }];
        c0(&mut p).readiness_probe = Some(http_probe(IntOrString::String("http".into())));
        assert_valid(&p);
        c0(&mut p).readiness_probe = Some(http_probe(IntOrString::String("metrics".into())));
        assert_one(
            &p,
            "spec.containers[0].readinessProbe.httpGet.port",
            "metrics",
            "name of one of the container's ports",
        );
        c0(&mut p).readiness_probe = Some(http_probe(IntOrString::String("8080".into())));
        assert_one(
            &p,
            "spec.containers[0].readinessProbe.httpGet.port",
            "8080",
            "IANA service name",
        );
        c0(&mut p).readiness_probe = Some(http_probe(IntOrString::Int(0)));
        assert_one(
            &p,
            "spec.containers[0].readinessProbe.httpGet.port",
            "0",
            "between 1 and 65535",
        );
        c0(&mut p).readiness_probe = Some(Probe {
            tcp_socket: Some(TcpSocketAction {
                port: IntOrString::Int(70000),
                host: None,
            }),
            ..Default::default()
        });
        assert_one(
            &p,
            "spec.containers[0].readinessProbe.tcpSocket.port",
            "70000",
            "between 1 and 65535",
        );

        let mut h = http_probe(IntOrString::Int(80));
        h.http_get.as_mut().unwrap().scheme = Some("https".into());
        c0(&mut p).readiness_probe = Some(h.clone());
        assert_one(
            &p,
            "spec.containers[0].readinessProbe.httpGet.scheme",
            "https",
            "\"HTTP\", \"HTTPS\"",
        );
        h.http_get.as_mut().unwrap().scheme = Some("HTTPS".into());
        c0(&mut p).readiness_probe = Some(h.clone());
        if cfg!(feature = "https-probes") {
            assert_valid(&p);
        } else {
            assert_one(
                &p,
                "spec.containers[0].readinessProbe.httpGet.scheme",
                "HTTPS",
                "cargo feature https-probes",
            );
        }
        h.http_get.as_mut().unwrap().scheme = Some("HTTP".into());
        h.http_get.as_mut().unwrap().http_headers = vec![HttpHeader {
            name: "X Bad".into(),
            value: "v".into(),
        }];
        c0(&mut p).readiness_probe = Some(h);
        assert_one(
            &p,
            "spec.containers[0].readinessProbe.httpGet.httpHeaders[0].name",
            "X Bad",
            "alphanumeric",
        );
    }

    #[test]
    fn container_restart_policies_and_rules() {
        let p = yaml(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  restartPolicy: Never\n  \
             containers:\n  - name: app\n    image: busybox\n    restartPolicy: Never\n    \
             restartPolicyRules:\n    - action: Restart\n      exitCodes: {operator: In, values: [42]}\n",
        );
        assert_valid(&p);
        let mut bad = p.clone();
        bad.spec.containers[0].restart_policy = Some("Sometimes".into());
        assert_one(
            &bad,
            "spec.containers[0].restartPolicy",
            "Sometimes",
            "supported values: \"Always\", \"Never\", \"OnFailure\"",
        );
        let mut bad = p.clone();
        bad.spec.containers[0].restart_policy = None;
        assert_one(
            &bad,
            "spec.containers[0].restartPolicy",
            "",
            "must specify restartPolicy when restart rules are used",
        );
        let mut bad = p.clone();
        bad.spec.containers[0].restart_policy_rules[0].action = "RestartAllContainers".into();
        assert_one(
            &bad,
            "spec.containers[0].restartPolicyRules[0].action",
            "RestartAllContainers",
            "supported values: \"Restart\"",
        );
        let mut bad = p.clone();
        let rule = &mut bad.spec.containers[0].restart_policy_rules[0];
        rule.exit_codes.as_mut().unwrap().operator = "Is".into();
        assert_one(
            &bad,
            "spec.containers[0].restartPolicyRules[0].exitCodes.operator",
            "Is",
            "supported values: \"In\", \"NotIn\"",
        );
        bad.spec.containers[0].restart_policy_rules[0].exit_codes = None;
        assert_one(
            &bad,
            "spec.containers[0].restartPolicyRules[0].exitCodes",
            "",
            "must be specified",
        );
        let mut bad = p.clone();
        let rule = bad.spec.containers[0].restart_policy_rules[0].clone();
        bad.spec.containers[0].restart_policy_rules = vec![rule; 21];
        assert_one(
            &bad,
            "spec.containers[0].restartPolicyRules",
            "21",
            "must have at most 20 items",
        );
        // A sidecar takes no rules.
        let mut bad = p.clone();
        let mut side = bad.spec.containers[0].clone();
        side.name = "side".into();
        side.restart_policy = Some("Always".into());
        bad.spec.init_containers.push(side);
        assert_one(
            &bad,
            "spec.initContainers[0].restartPolicyRules",
            "",
            "not allowed for init containers with restart policy Always",
        );
    }

    #[test]
    fn lifecycle_hooks_and_sidecars() {
        let p = yaml(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  terminationGracePeriodSeconds: 10\n  \
             initContainers:\n  - name: side\n    image: busybox\n    restartPolicy: Always\n    \
             readinessProbe: {exec: {command: [\"true\"]}}\n    lifecycle: {preStop: {sleep: {seconds: 3}}}\n  \
             containers:\n  - name: app\n    image: busybox\n    lifecycle:\n      \
             postStart: {exec: {command: [touch, /tmp/x]}}\n      preStop: {httpGet: {path: /quit, port: 8080}}\n",
        );
        assert_valid(&p);
        let mut bad = p.clone();
        bad.spec.init_containers[0].restart_policy = Some("Sometimes".into());
        let errs = validate_pod(&bad);
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.initContainers[0].readinessProbe",
                "spec.initContainers[0].restartPolicy",
                "spec.initContainers[0].lifecycle",
            ],
            "{errs:?}"
        );
        // A regular init container may have Never (a plain init container, its own policy).
        let mut ok = p.clone();
        ok.spec.init_containers[0].restart_policy = Some("Never".into());
        ok.spec.init_containers[0].readiness_probe = None;
        ok.spec.init_containers[0].lifecycle = None;
        assert_valid(&ok);
        let mut bad = p.clone();
        bad.spec.init_containers[0]
            .lifecycle
            .as_mut()
            .unwrap()
            .pre_stop
            .as_mut()
            .unwrap()
            .sleep
            .as_mut()
            .unwrap()
            .seconds = 11;
        assert_one(
            &bad,
            "spec.initContainers[0].lifecycle.preStop.sleep.seconds",
            "11",
            "less than terminationGracePeriodSeconds (10)",
        );
        let mut bad = p.clone();
        let l = c0(&mut bad).lifecycle.as_mut().unwrap();
        l.post_start = Some(crate::api::LifecycleHandler::default());
        l.pre_stop = Some(crate::api::LifecycleHandler {
            tcp_socket: Some(TcpSocketAction {
                port: IntOrString::Int(80),
                host: None,
            }),
            ..Default::default()
        });
        let errs = validate_pod(&bad);
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert_eq!(errs[0].path, "spec.containers[0].lifecycle.postStart");
        assert!(errs[0].message.contains("must specify a handler type"));
        assert_eq!(
            errs[1].path,
            "spec.containers[0].lifecycle.preStop.tcpSocket"
        );
    }

    #[test]
    fn probe_numbers() {
        let mut p = base();
        let mut pr = http_probe(IntOrString::Int(80));
        pr.initial_delay_seconds = Some(0);
        pr.timeout_seconds = Some(1);
        pr.period_seconds = Some(1);
        pr.success_threshold = Some(1);
        pr.failure_threshold = Some(3);
        pr.termination_grace_period_seconds = Some(5);
        c0(&mut p).liveness_probe = Some(pr.clone());
        assert_valid(&p);

        for (field, value) in [
            ("initialDelaySeconds", -1),
            ("timeoutSeconds", -1),
            ("successThreshold", -1),
            ("failureThreshold", -1),
        ] {
            let mut bad = pr.clone();
            match field {
                "initialDelaySeconds" => bad.initial_delay_seconds = Some(value),
                "timeoutSeconds" => bad.timeout_seconds = Some(value),
                "successThreshold" => bad.success_threshold = Some(value),
                _ => bad.failure_threshold = Some(value),
            }
            c0(&mut p).liveness_probe = Some(bad);
            assert_one(
                &p,
                &format!("spec.containers[0].livenessProbe.{field}"),
                "-1",
                "greater than or equal to 0",
            );
        }
        let mut bad = pr.clone();
        bad.period_seconds = Some(0);
        c0(&mut p).liveness_probe = Some(bad);
        assert_one(
            &p,
            "spec.containers[0].livenessProbe.periodSeconds",
            "0",
            "greater than or equal to 1",
        );

        // liveness and startup probes need successThreshold 1
        let mut bad = pr.clone();
        bad.success_threshold = Some(2);
        c0(&mut p).liveness_probe = Some(bad.clone());
        assert_one(
            &p,
            "spec.containers[0].livenessProbe.successThreshold",
            "2",
            "must be 1",
        );
        c0(&mut p).liveness_probe = None;
        c0(&mut p).startup_probe = Some(bad.clone());
        assert_one(
            &p,
            "spec.containers[0].startupProbe.successThreshold",
            "2",
            "must be 1",
        );
        c0(&mut p).startup_probe = None;
        // ... but readiness probes may use more, and may not set a grace period
        bad.termination_grace_period_seconds = None;
        c0(&mut p).readiness_probe = Some(bad.clone());
        assert_valid(&p);
        bad.termination_grace_period_seconds = Some(10);
        c0(&mut p).readiness_probe = Some(bad);
        assert_one(
            &p,
            "spec.containers[0].readinessProbe.terminationGracePeriodSeconds",
            "10",
            "must not be set for readinessProbes",
        );
        c0(&mut p).readiness_probe = None;
        let mut bad = pr;
        bad.termination_grace_period_seconds = Some(0);
        c0(&mut p).liveness_probe = Some(bad);
        assert_one(
            &p,
            "spec.containers[0].livenessProbe.terminationGracePeriodSeconds",
            "0",
            "greater than 0",
        );
    }

    #[test]
    fn security_profiles_and_dns_and_aliases() {
        let p = yaml(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: s}\nspec:\n  dnsPolicy: None\n  dnsConfig:\n    nameservers: [10.0.0.10]\n    searches: [a.example, b.example.]\n    options: [{name: ndots, value: '2'}, {name: edns0}]\n  hostAliases:\n  - {ip: 10.1.2.3, hostnames: [foo.local, bar]}\n  readinessGates: [{conditionType: example.com/ready}]\n  securityContext:\n    seccompProfile: {type: RuntimeDefault}\n    appArmorProfile: {type: RuntimeDefault}\n  containers:\n  - name: a\n    image: busybox\n    securityContext:\n      seccompProfile: {type: Localhost, localhostProfile: profiles/audit.json}\n",
        );
        assert_valid(&p);

        let mut q = p.clone();
        q.spec.dns_config = None;
        assert_one(
            &q,
            "spec.dnsConfig",
            "",
            "must provide `dnsConfig` when `dnsPolicy` is None",
        );
        let mut q = p.clone();
        let d = q.spec.dns_config.as_mut().unwrap();
        d.nameservers = vec![
            "1.1.1.1".into(),
            "8.8.8.8".into(),
            "9.9.9.9".into(),
            "x".into(),
        ];
        let errs = validate_pod(&q);
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert_eq!(errs[0].path, "spec.dnsConfig.nameservers");
        assert!(errs[0].message.contains("more than 3"), "{errs:?}");
        assert_eq!(errs[1].path, "spec.dnsConfig.nameservers[3]");
        let mut q = p.clone();
        q.spec.dns_config.as_mut().unwrap().searches = (0..33).map(|i| format!("s{i}")).collect();
        assert_has(&q, "spec.dnsConfig.searches", "more than 32 search paths");
        let mut q = p.clone();
        q.spec.host_aliases[0].ip = "10.1.2".into();
        assert_one(
            &q,
            "spec.hostAliases[0].ip",
            "10.1.2",
            "must be a valid IP address",
        );
        let mut q = p.clone();
        q.spec.readiness_gates[0].condition_type = String::new();
        assert_one(&q, "spec.readinessGates[0].conditionType", "", REQUIRED);

        // seccomp: the types the apiserver knows, a relative Localhost profile
        let mut q = p.clone();
        c0(&mut q)
            .security_context
            .as_mut()
            .unwrap()
            .seccomp_profile
            .as_mut()
            .unwrap()
            .localhost_profile = Some("/etc/x.json".into());
        assert_one(
            &q,
            "spec.containers[0].securityContext.seccompProfile.localhostProfile",
            "/etc/x.json",
            "must be a relative path",
        );
        let mut q = p.clone();
        q.spec.security_context.as_mut().unwrap().seccomp_profile = Some(SeccompProfile {
            type_: "Strict".into(),
            localhost_profile: None,
        });
        assert_has(
            &q,
            "spec.securityContext.seccompProfile.type",
            "supported values",
        );
        let mut q = p.clone();
        q.spec.security_context.as_mut().unwrap().seccomp_profile = Some(SeccompProfile {
            type_: "Localhost".into(),
            localhost_profile: None,
        });
        assert_one(
            &q,
            "spec.securityContext.seccompProfile.localhostProfile",
            "",
            REQUIRED,
        );

        // what picolet cannot apply is refused by name
        let mut q = p.clone();
        q.spec.security_context.as_mut().unwrap().app_armor_profile =
            Some(json!({"type": "Localhost", "localhostProfile": "k8s-nginx"}));
        assert_one(
            &q,
            "spec.securityContext.appArmorProfile",
            "Localhost",
            APPARMOR_REFUSED,
        );
        let mut q = p.clone();
        c0(&mut q)
            .security_context
            .as_mut()
            .unwrap()
            .se_linux_options = Some(json!({"level": "s0:c123,c456"}));
        assert_one(
            &q,
            "spec.containers[0].securityContext.seLinuxOptions",
            "",
            SELINUX_REFUSED,
        );
    }

    #[test]
    fn fields_picolet_does_not_apply_are_refused_by_name() {
        let mut p = base();
        p.spec.host_users = Some(true);
        p.spec.set_hostname_as_fqdn = Some(false);
        assert_valid(&p);
        let mut q = p.clone();
        q.spec.active_deadline_seconds = Some(60);
        assert_valid(&q);
        q.spec.active_deadline_seconds = Some(0);
        assert_one(
            &q,
            "spec.activeDeadlineSeconds",
            "0",
            "must be between 1 and 2147483647",
        );
        let mut q = p.clone();
        q.spec.runtime_class_name = Some("kata".into());
        assert_one(
            &q,
            "spec.runtimeClassName",
            "kata",
            "not supported by picolet",
        );
        let mut q = p.clone();
        q.spec.host_users = Some(false);
        assert_one(&q, "spec.hostUsers", "false", "no user namespaces");
        let mut q = p.clone();
        q.spec.set_hostname_as_fqdn = Some(true);
        assert_one(
            &q,
            "spec.setHostnameAsFQDN",
            "true",
            "not supported by picolet",
        );
    }

    #[test]
    fn sub_path_expr() {
        let mut p = base();
        p.spec.volumes.push(host_vol("data", "/srv"));
        c0(&mut p).volume_mounts.push(VolumeMount {
            name: "data".into(),
            mount_path: "/data".into(),
            sub_path_expr: Some("$(POD_NAME)/logs".into()),
            ..Default::default()
        });
        assert_valid(&p);
        let mut q = p.clone();
        c0(&mut q).volume_mounts[0].sub_path = Some("x".into());
        assert_one(
            &q,
            "spec.containers[0].volumeMounts[0].subPathExpr",
            "$(POD_NAME)/logs",
            "subPathExpr and subPath are mutually exclusive",
        );
        let mut q = p.clone();
        c0(&mut q).volume_mounts[0].sub_path_expr = Some("$(A)/../x".into());
        assert_one(
            &q,
            "spec.containers[0].volumeMounts[0].subPathExpr",
            "$(A)/../x",
            BACKSTEPS,
        );
    }

    #[test]
    fn init_containers_may_not_have_probes() {
        let mut p = base();
        let mut init = p.spec.containers[0].clone();
        init.name = "init".into();
        init.readiness_probe = Some(http_probe(IntOrString::Int(80)));
        p.spec.init_containers.push(init);
        assert_one(
            &p,
            "spec.initContainers[0].readinessProbe",
            "",
            "may not be set for init containers",
        );
    }

    // ---- security ----

    #[test]
    fn container_security_context() {
        let mut p = base();
        c0(&mut p).security_context = Some(SecurityContext {
            run_as_user: Some(1000),
            run_as_group: Some(0),
            run_as_non_root: Some(true),
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                add: vec!["NET_BIND_SERVICE".into()],
                drop: vec!["ALL".into()],
            }),
            privileged: Some(false),
            ..Default::default()
        });
        assert_valid(&p);
        let sc = c0(&mut p).security_context.as_mut().unwrap();
        sc.run_as_user = Some(-1);
        assert_one(
            &p,
            "spec.containers[0].securityContext.runAsUser",
            "-1",
            "between 0 and 4294967295",
        );
        let sc = c0(&mut p).security_context.as_mut().unwrap();
        sc.run_as_user = Some(4_294_967_296);
        assert_one(
            &p,
            "spec.containers[0].securityContext.runAsUser",
            "4294967296",
            "between 0 and 4294967295",
        );
        let sc = c0(&mut p).security_context.as_mut().unwrap();
        sc.run_as_user = None;
        sc.privileged = Some(true);
        assert_one(
            &p,
            "spec.containers[0].securityContext",
            "",
            "allowPrivilegeEscalation to false and privileged",
        );
        let sc = c0(&mut p).security_context.as_mut().unwrap();
        sc.privileged = None;
        sc.capabilities.as_mut().unwrap().add = vec!["CAP_SYS_ADMIN".into()];
        assert_one(&p, "spec.containers[0].securityContext", "", "SYS_ADMIN");
        let sc = c0(&mut p).security_context.as_mut().unwrap();
        sc.capabilities.as_mut().unwrap().add = vec![String::new()];
        assert_one(
            &p,
            "spec.containers[0].securityContext.capabilities.add[0]",
            "",
            "required",
        );
    }

    #[test]
    fn apparmor_annotations_are_read_as_the_field() {
        let mut p = base();
        let key = "container.apparmor.security.beta.kubernetes.io/main";
        let set = |p: &mut Pod, k: &str, v: &str| {
            p.metadata.annotations.clear();
            p.metadata.annotations.insert(k.into(), v.into());
        };
        set(&mut p, key, "runtime/default");
        assert_valid(&p);
        set(&mut p, key, "localhost/k8s-apparmor-example-deny-write");
        assert_one(
            &p,
            &format!("metadata.annotations[{key}]"),
            "localhost/k8s-apparmor-example-deny-write",
            "(AppArmor type Localhost) is not supported by picolet",
        );
        set(&mut p, key, "unconfined");
        assert_one(
            &p,
            &format!("metadata.annotations[{key}]"),
            "unconfined",
            "(AppArmor type Unconfined)",
        );
        set(&mut p, key, "bogus");
        assert_one(
            &p,
            &format!("metadata.annotations[{key}]"),
            "bogus",
            "supported values",
        );
        let other = "container.apparmor.security.beta.kubernetes.io/nope";
        set(&mut p, other, "runtime/default");
        assert_one(
            &p,
            &format!("metadata.annotations[{other}]"),
            "nope",
            "a container of the pod",
        );
    }

    #[test]
    fn pod_security_context() {
        let mut p = base();
        p.spec.security_context = Some(PodSecurityContext {
            run_as_user: Some(1000),
            run_as_group: Some(3000),
            run_as_non_root: Some(true),
            fs_group: Some(2000),
            supplemental_groups: vec![4000],
            sysctls: vec![
                Sysctl {
                    name: "net.ipv4.ip_local_port_range".into(),
                    value: "1024 65535".into(),
                },
                Sysctl {
                    name: "kernel/shm_rmid_forced".into(),
                    value: "1".into(),
                },
            ],
            ..Default::default()
        });
        assert_valid(&p);
        let policy = |p: &mut Pod, v: Option<&str>| {
            p.spec
                .security_context
                .as_mut()
                .unwrap()
                .fs_group_change_policy = v.map(Into::into);
        };
        policy(&mut p, Some("OnRootMismatch"));
        assert_valid(&p);
        policy(&mut p, Some("Sometimes"));
        assert_one(
            &p,
            "spec.securityContext.fsGroupChangePolicy",
            "Sometimes",
            "supported values",
        );
        policy(&mut p, None);
        let groups = |p: &mut Pod, v: Option<&str>| {
            p.spec
                .security_context
                .as_mut()
                .unwrap()
                .supplemental_groups_policy = v.map(Into::into);
        };
        groups(&mut p, Some("Merge"));
        assert_valid(&p);
        groups(&mut p, Some("Strict"));
        assert_one(
            &p,
            "spec.securityContext.supplementalGroupsPolicy",
            "Strict",
            "not supported by picolet",
        );
        groups(&mut p, None);
        p.spec.resources = Some(json!({"limits": {"cpu": "1"}}));
        assert_one(
            &p,
            "spec.resources",
            "",
            "pod-level resources are not supported",
        );
        p.spec.resources = None;
        let sc = p.spec.security_context.as_mut().unwrap();
        sc.fs_group = Some(-5);
        assert_one(
            &p,
            "spec.securityContext.fsGroup",
            "-5",
            "between 0 and 4294967295",
        );
        let sc = p.spec.security_context.as_mut().unwrap();
        sc.fs_group = None;
        sc.supplemental_groups = vec![1, -2];
        assert_one(
            &p,
            "spec.securityContext.supplementalGroups[1]",
            "-2",
            "between 0",
        );
        let sc = p.spec.security_context.as_mut().unwrap();
        sc.supplemental_groups.clear();
        sc.sysctls[1].name = "Net.Bad".into();
        assert_one(
            &p,
            "spec.securityContext.sysctls[1].name",
            "Net.Bad",
            "sysctl name",
        );
        let sc = p.spec.security_context.as_mut().unwrap();
        sc.sysctls[1].name = sc.sysctls[0].name.clone();
        assert_one(
            &p,
            "spec.securityContext.sysctls[1].name",
            "net.ipv4.ip_local_port_range",
            "duplicate",
        );
    }

    // ---- other pod fields ----

    #[test]
    fn pod_level_names() {
        let mut p = base();
        p.spec.node_name = Some("edge-01.example.com".into());
        p.spec.hostname = Some("web-0".into());
        p.spec.subdomain = Some("web".into());
        p.spec.service_account_name = Some("default".into());
        p.spec.priority_class_name = Some("system-node-critical".into());
        assert_valid(&p);
        p.spec.node_name = Some("Edge_01".into());
        assert_one(&p, "spec.nodeName", "Edge_01", "RFC 1123 subdomain");
        p.spec.node_name = None;
        p.spec.hostname = Some("web.0".into());
        assert_one(&p, "spec.hostname", "web.0", "RFC 1123 label");
        p.spec.hostname = None;
        p.spec.subdomain = Some("-x".into());
        assert_one(&p, "spec.subdomain", "-x", "RFC 1123 label");
        p.spec.subdomain = Some(String::new()); // empty means unset
        assert_valid(&p);
    }

    #[test]
    fn dns_policy() {
        let mut p = base();
        for v in ["ClusterFirst", "ClusterFirstWithHostNet", "Default"] {
            p.spec.dns_policy = Some(v.into());
            assert_valid(&p);
        }
        p.spec.dns_policy = Some("None".into());
        assert_one(&p, "spec.dnsConfig", "", "when `dnsPolicy` is None");
        p.spec.dns_config = Some(crate::api::PodDnsConfig::default());
        assert_one(
            &p,
            "spec.dnsConfig.nameservers",
            "",
            "at least one DNS nameserver",
        );
        p.spec.dns_config = None;
        p.spec.dns_policy = Some("clusterfirst".into());
        assert_one(&p, "spec.dnsPolicy", "clusterfirst", "supported values");
    }

    #[test]
    fn tolerations_and_node_selector() {
        let tol = |key: Option<&str>,
                   op: Option<&str>,
                   value: Option<&str>,
                   effect: Option<&str>| Toleration {
            key: key.map(str::to_owned),
            operator: op.map(str::to_owned),
            value: value.map(str::to_owned),
            effect: effect.map(str::to_owned),
            toleration_seconds: None,
        };
        let mut p = base();
        p.spec.tolerations = vec![
            tol(
                Some("node-role.kubernetes.io/control-plane"),
                Some("Exists"),
                None,
                Some("NoSchedule"),
            ),
            tol(None, Some("Exists"), None, None),
            tol(
                Some("dedicated"),
                Some("Equal"),
                Some("edge"),
                Some("NoExecute"),
            ),
            tol(Some("k"), None, Some("v"), None),
        ];
        p.spec.tolerations[2].toleration_seconds = Some(300);
        assert_valid(&p);

        p.spec.tolerations = vec![tol(None, None, None, None)];
        assert_one(
            &p,
            "spec.tolerations[0].operator",
            "",
            "must be Exists when key is empty",
        );
        p.spec.tolerations = vec![tol(Some("k"), Some("Exists"), Some("v"), None)];
        assert_one(
            &p,
            "spec.tolerations[0].operator",
            "Exists",
            "value must be empty",
        );
        p.spec.tolerations = vec![tol(Some("k"), Some("In"), None, None)];
        assert_one(&p, "spec.tolerations[0].operator", "In", "supported values");
        p.spec.tolerations = vec![tol(Some("k"), Some("Exists"), None, Some("NoRun"))];
        assert_one(
            &p,
            "spec.tolerations[0].effect",
            "NoRun",
            "supported values",
        );
        p.spec.tolerations = vec![tol(Some("k"), Some("Exists"), None, Some("NoSchedule"))];
        p.spec.tolerations[0].toleration_seconds = Some(1);
        assert_one(
            &p,
            "spec.tolerations[0].effect",
            "NoSchedule",
            "must be NoExecute",
        );
        p.spec.tolerations = vec![tol(Some("bad key"), Some("Exists"), None, None)];
        assert_one(&p, "spec.tolerations[0].key", "bad key", "name part");

        p.spec.tolerations.clear();
        p.spec.node_selector = [("kubernetes.io/arch".to_owned(), "arm64".to_owned())].into();
        assert_valid(&p);
        p.spec.node_selector = [("kubernetes.io/arch".to_owned(), "arm 64".to_owned())].into();
        assert_one(
            &p,
            "spec.nodeSelector[kubernetes.io/arch]",
            "arm 64",
            "at most 63 characters",
        );
    }

    #[test]
    fn termination_message_policy() {
        let mut p = base();
        c0(&mut p).termination_message_policy = Some("FallbackToLogsOnError".into());
        assert_valid(&p);
        c0(&mut p).termination_message_policy = Some("Logs".into());
        assert_one(
            &p,
            "spec.containers[0].terminationMessagePolicy",
            "Logs",
            "supported values",
        );
    }

    #[test]
    fn many_errors_are_all_reported() {
        let p = yaml(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: Bad_Name\nspec:\n  terminationGracePeriodSeconds: -5\n  containers:\n  - name: web\n    image: ''\n    ports:\n    - containerPort: 0\n    - {containerPort: 80, protocol: HTTP}\n  - name: web\n    image: nginx\n",
        );
        let paths: Vec<String> = validate_pod(&p).into_iter().map(|e| e.path).collect();
        assert_eq!(
            paths,
            [
                "metadata.name",
                "spec.containers[0].image",
                "spec.containers[0].ports[0].containerPort",
                "spec.containers[0].ports[1].protocol",
                "spec.containers[1].name",
                "spec.terminationGracePeriodSeconds",
            ]
        );
    }

    #[test]
    fn syntax_helpers() {
        assert!(is_dns1123_label("a-1"));
        assert!(!is_dns1123_label(""));
        assert!(!is_dns1123_label("a.b"));
        assert!(is_dns1123_subdomain("a.b-c.d"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(!is_dns1123_subdomain("a."));
        assert!(is_port_name("h2c"));
        assert!(!is_port_name("123"));
        assert!(!is_port_name(""));
        assert!(is_sysctl_name("net.core.somaxconn"));
        assert!(is_sysctl_name("net/ipv4/conf/eth0.100/forwarding"));
        assert!(!is_sysctl_name("net..core"));
        assert!(!is_sysctl_name(""));
    }
}
