//! The settings of a run, one row each: the flag, the `KubeletConfiguration` field, how a value
//! of either applies to [`Options`], the help line, and what `/configz` reports. The command
//! line, the config file, `picolet --help` and the `/configz` document (`parse::configz`) all
//! come from [`SETTINGS`] (`parse` walks it), so a new flag is one row here (and its field in
//! `Options`).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use serde_json::{Value, json};

use super::options::{ContentType, Options, parse_labels, parse_log_max_size, parse_taints};
use crate::api::{format_duration, parse_duration};
use crate::eviction::threshold::{Given, Pairs, parse_map};
use crate::nodeshutdown::ByPriority;
use crate::server::settings::{AuthorizationMode, parse_tls_version};

/// What a setting applies to.
pub struct Target<'a> {
    pub o: &'a mut Options,
    /// The eviction settings, checked together once every source is read.
    pub ev: &'a mut crate::eviction::Settings,
    /// The flag (`--eviction-hard`) or field (`evictionHard`) being applied.
    pub origin: &'a str,
}

/// A value that remembers where it came from (`Target::origin`), for errors that name it.
fn given<T>(origin: &str, value: T) -> Option<Given<T>> {
    Some(Given {
        origin: origin.to_owned(),
        value,
    })
}

/// A setting's value applied, or why not (the flag or field and the value are named around it).
pub type Applied = Result<(), String>;

/// A `KubeletConfiguration` field: the type the file gives, and how it applies. A field whose
/// name has dots (`authentication.webhook.enabled`) sits in the sections those dots name.
#[derive(Clone, Copy)]
pub enum Field {
    /// No field: a flag of picolet's own, or one the kubelet takes only as a flag.
    FlagOnly,
    Text(fn(&mut Target, String) -> Applied),
    /// A duration string ("1m30s"), refused by name when it does not parse.
    Duration(fn(&mut Target, std::time::Duration) -> Applied),
    Bool(fn(&mut Target, bool) -> Applied),
    U16(fn(&mut Target, u16) -> Applied),
    U32(fn(&mut Target, u32) -> Applied),
    I32(fn(&mut Target, i32) -> Applied),
    I64(fn(&mut Target, i64) -> Applied),
    Map(fn(&mut Target, BTreeMap<String, String>) -> Applied),
    List(fn(&mut Target, Vec<String>) -> Applied),
    Priorities(fn(&mut Target, Vec<ByPriority>) -> Applied),
}

/// One setting.
#[derive(Clone, Copy)]
pub struct Setting {
    /// The flag's name without dashes (written `-v` when it is one letter, `--name`
    /// otherwise); "" for a field the kubelet takes from the file alone.
    pub flag: &'static str,
    /// The value's placeholder in the help (`PATH`); `[=true|false]` makes the flag a switch:
    /// alone it is true, a value needs `=`, as in Go.
    pub arg: &'static str,
    /// The help text, continued on further lines after `\n`, starting in the help's column (a
    /// text may start with spaces to line up with its neighbours); "" for a flag described on
    /// another row's line (see the row of `--agent-cert`).
    pub help: &'static str,
    /// How the flag's value applies.
    pub parse: fn(&mut Target, &str) -> Applied,
    /// The `KubeletConfiguration` field's name; "" for none.
    pub field: &'static str,
    pub read: Field,
    /// The value `/configz` reports under `field`, given the options and the port served.
    pub configz: Option<fn(&Options, u16) -> Value>,
}

const NONE: Setting = Setting {
    flag: "",
    arg: "",
    help: "",
    parse: |_, _| Ok(()),
    field: "",
    read: Field::FlagOnly,
    configz: None,
};

/// The switch placeholder.
pub const SWITCH: &str = "[=true|false]";

fn set<T>(slot: &mut T, v: T) -> Applied {
    *slot = v;
    Ok(())
}

/// A duration above zero.
fn nonzero(d: std::time::Duration) -> Result<std::time::Duration, String> {
    if d.is_zero() {
        return Err(format!("{}: must be above zero", format_duration(d)));
    }
    Ok(d)
}

fn port(v: &str) -> Result<u16, String> {
    v.parse().map_err(|_| "not a port number".into())
}

fn boolean(v: &str) -> Result<bool, String> {
    v.parse().map_err(|_| "not true or false".into())
}

fn ip(v: &str) -> Result<IpAddr, String> {
    v.parse().map_err(|_| "not an IP address".into())
}

/// A comma-separated list, blanks dropped.
fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A path, none when empty.
fn path(v: impl Into<String>) -> Option<PathBuf> {
    let v = v.into();
    (!v.is_empty()).then(|| v.into())
}

fn show(p: &Option<PathBuf>) -> Value {
    json!(p.as_ref().map(|p| p.display().to_string()))
}

fn eviction_map(origin: &str, v: &str, sep: char) -> Result<Option<Given<Pairs>>, String> {
    Ok(given(origin, parse_map(v, sep)?))
}

use Field::*;

/// Every setting, in the order of `picolet --help`. The config file's fields apply in this order
/// too; flags apply in the order given, after the file. A new setting is a row: its flag (with
/// `arg`, `help` and `parse`), its field (with `read`), and `configz` when `/configz` reports it;
/// the tests below hold every row to the help and to `docs/configuration.md`.
pub static SETTINGS: &[Setting] = &[
    Setting {
        flag: "pod-manifest-path",
        arg: "PATH",
        help: "directory of static pod manifests",
        parse: |t, v| set(&mut t.o.pod_manifest_path, Some(v.into())),
        field: "staticPodPath",
        read: Text(|t, p| {
            if !p.is_empty() {
                t.o.pod_manifest_path = Some(p.into());
            }
            Ok(())
        }),
        configz: Some(|o, _| show(&o.pod_manifest_path)),
    },
    Setting {
        // Read before every other flag, by `options::parse`.
        flag: "config",
        arg: "FILE",
        help: "KubeletConfiguration file (v1beta1 subset)",
        ..NONE
    },
    Setting {
        flag: "container-runtime-endpoint",
        arg: "URL",
        help: "runtime socket (default unix:///run/containerd/containerd.sock)",
        parse: |t, v| set(&mut t.o.container_runtime_endpoint, v.into()),
        field: "containerRuntimeEndpoint",
        read: Text(|t, e| set(&mut t.o.container_runtime_endpoint, e)),
        configz: Some(|o, _| json!(o.container_runtime_endpoint)),
    },
    Setting {
        flag: "image-service-endpoint",
        arg: "URL",
        help: "image service socket (default: the runtime endpoint)",
        parse: |t, v| set(&mut t.o.image_service_endpoint, Some(v.into())),
        field: "imageServiceEndpoint",
        read: Text(|t, e| set(&mut t.o.image_service_endpoint, Some(e))),
        configz: Some(|o, _| json!(o.image_service_endpoint)),
    },
    Setting {
        flag: "runtime-request-timeout",
        arg: "DUR",
        help: "deadline of runtime calls (default 2m0s)",
        parse: |t, v| set(&mut t.o.runtime_request_timeout, parse_duration(v)?),
        field: "runtimeRequestTimeout",
        read: Duration(|t, d| set(&mut t.o.runtime_request_timeout, d)),
        configz: Some(|o, _| json!(format_duration(o.runtime_request_timeout))),
    },
    Setting {
        flag: "root-dir",
        arg: "PATH",
        help: "state directory (default /var/lib/kubelet)",
        parse: |t, v| set(&mut t.o.root_dir, v.into()),
        ..NONE
    },
    Setting {
        flag: "hostname-override",
        arg: "NAME",
        help: "node name (default: the host name, lowercased)",
        parse: |t, v| set(&mut t.o.hostname_override, Some(v.into())),
        ..NONE
    },
    Setting {
        flag: "node-ip",
        arg: "IP",
        help: "node address reported as hostIP",
        parse: |t, v| set(&mut t.o.node_ip, Some(ip(v)?)),
        ..NONE
    },
    Setting {
        flag: "cluster-dns",
        arg: "IP,...",
        help: "the cluster DNS servers, the nameservers of pods with\n\
               dnsPolicy ClusterFirst (default none: the node's resolv.conf)",
        parse: |t, v| {
            let ips = list(v).iter().map(|a| ip(a)).collect::<Result<_, _>>()?;
            set(&mut t.o.cluster_dns, ips)
        },
        field: "clusterDNS",
        read: List(|t, v| {
            let ips = v
                .iter()
                .map(|a| ip(a).map_err(|e| format!("{a:?}: {e}")))
                .collect::<Result<_, _>>()?;
            set(&mut t.o.cluster_dns, ips)
        }),
        configz: Some(|o, _| {
            json!(
                o.cluster_dns
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
            )
        }),
    },
    Setting {
        flag: "cluster-domain",
        arg: "DOMAIN",
        help: "the cluster's DNS domain, in the search paths of those pods",
        parse: |t, v| set(&mut t.o.cluster_domain, v.to_owned()),
        field: "clusterDomain",
        read: Text(|t, v| set(&mut t.o.cluster_domain, v)),
        configz: Some(|o, _| json!(o.cluster_domain)),
    },
    Setting {
        flag: "healthz-port",
        arg: "PORT",
        help: "local API port, 0 disables (default 10248)",
        parse: |t, v| set(&mut t.o.healthz_port, port(v)?),
        field: "healthzPort",
        read: U16(|t, p| set(&mut t.o.healthz_port, p)),
        configz: Some(|o, _| json!(o.healthz_port)),
    },
    Setting {
        flag: "healthz-bind-address",
        arg: "IP",
        help: "local API address (default 127.0.0.1)",
        parse: |t, v| set(&mut t.o.healthz_bind_address, ip(v)?),
        field: "healthzBindAddress",
        read: Text(|t, a| {
            let ip = a.parse().map_err(|_| format!("invalid IP address {a:?}"))?;
            set(&mut t.o.healthz_bind_address, ip)
        }),
        configz: Some(|o, _| json!(o.healthz_bind_address.to_string())),
    },
    Setting {
        flag: "port",
        arg: "PORT",
        help: "node API (HTTPS) port, 0 disables (default 10250 with\n\
               --kubeconfig; without it, off unless set)",
        parse: |t, v| set(&mut t.o.serving.port, Some(port(v)?)),
        field: "port",
        read: U16(|t, p| set(&mut t.o.serving.port, Some(p))),
        configz: Some(|_, port| json!(port)),
    },
    Setting {
        flag: "address",
        arg: "IP",
        help: "node API address (default 0.0.0.0)",
        parse: |t, v| set(&mut t.o.serving.address, ip(v)?),
        field: "address",
        read: Text(|t, a| {
            let ip = a
                .parse()
                .map_err(|_| format!("{a:?} is not an IP address"))?;
            set(&mut t.o.serving.address, ip)
        }),
        configz: Some(|o, _| json!(o.serving.address.to_string())),
    },
    Setting {
        flag: "tls-cert-file",
        arg: "FILE",
        help: "node API serving certificate (PEM; default: a\n\
               self-signed one kept in <root-dir>/pki)",
        parse: |t, v| set(&mut t.o.serving.tls_cert_file, Some(v.into())),
        field: "tlsCertFile",
        read: Text(|t, f| set(&mut t.o.serving.tls_cert_file, Some(f.into()))),
        configz: Some(|o, _| show(&o.serving.tls_cert_file)),
    },
    Setting {
        flag: "tls-private-key-file",
        arg: "FILE",
        help: "its key (PEM)",
        parse: |t, v| set(&mut t.o.serving.tls_private_key_file, Some(v.into())),
        field: "tlsPrivateKeyFile",
        read: Text(|t, f| set(&mut t.o.serving.tls_private_key_file, Some(f.into()))),
        configz: Some(|o, _| show(&o.serving.tls_private_key_file)),
    },
    Setting {
        flag: "tls-min-version",
        arg: "VERSION",
        help: "VersionTLS12 (default) or VersionTLS13",
        parse: |t, v| set(&mut t.o.serving.tls13_only, parse_tls_version(v)?),
        field: "tlsMinVersion",
        read: Text(|t, v| {
            let only13 = parse_tls_version(&v).map_err(|r| format!("{v:?}: {r}"))?;
            set(&mut t.o.serving.tls13_only, only13)
        }),
        configz: Some(|o, _| {
            json!(if o.serving.tls13_only {
                "VersionTLS13"
            } else {
                "VersionTLS12"
            })
        }),
    },
    Setting {
        field: "serverTLSBootstrap",
        read: Bool(|t, b| set(&mut t.o.serving.server_tls_bootstrap, b)),
        configz: Some(|o, _| json!(o.serving.server_tls_bootstrap)),
        ..NONE
    },
    Setting {
        flag: "client-ca-file",
        arg: "FILE",
        help: "CAs whose client certificates authenticate (x509)",
        parse: |t, v| set(&mut t.o.serving.client_ca_file, path(v)),
        field: "authentication.x509.clientCAFile",
        read: Text(|t, f| set(&mut t.o.serving.client_ca_file, path(f))),
        configz: Some(|o, _| show(&o.serving.client_ca_file)),
    },
    Setting {
        flag: "anonymous-auth",
        arg: SWITCH,
        help: "requests without credentials are system:anonymous\n(default false: 401)",
        parse: |t, v| set(&mut t.o.serving.anonymous, boolean(v)?),
        field: "authentication.anonymous.enabled",
        read: Bool(|t, b| set(&mut t.o.serving.anonymous, b)),
        configz: Some(|o, _| json!(o.serving.anonymous)),
    },
    Setting {
        flag: "authentication-token-webhook",
        arg: SWITCH,
        help: "bearer tokens checked by TokenReview\n(default true with --kubeconfig)",
        parse: |t, v| set(&mut t.o.serving.webhook_authn, Some(boolean(v)?)),
        field: "authentication.webhook.enabled",
        read: Bool(|t, b| set(&mut t.o.serving.webhook_authn, Some(b))),
        configz: Some(|o, _| json!(o.serving.webhook_authn.unwrap_or(o.kubeconfig.is_some()))),
    },
    Setting {
        flag: "authentication-token-webhook-cache-ttl",
        arg: "DUR",
        help: "(default 2m0s)",
        parse: |t, v| set(&mut t.o.serving.webhook_cache_ttl, parse_duration(v)?),
        field: "authentication.webhook.cacheTTL",
        read: Duration(|t, d| set(&mut t.o.serving.webhook_cache_ttl, d)),
        configz: Some(|o, _| json!(format_duration(o.serving.webhook_cache_ttl))),
    },
    Setting {
        flag: "authorization-mode",
        arg: "Webhook|AlwaysAllow",
        help: "(default Webhook with --kubeconfig)",
        parse: |t, v| {
            set(
                &mut t.o.serving.authorization,
                Some(AuthorizationMode::parse(v)?),
            )
        },
        field: "authorization.mode",
        read: Text(|t, m| {
            let mode = AuthorizationMode::parse(&m).map_err(|r| format!("{m:?}: {r}"))?;
            set(&mut t.o.serving.authorization, Some(mode))
        }),
        configz: Some(|o, _| {
            let mode =
                AuthorizationMode::or_default(o.serving.authorization, o.kubeconfig.is_some());
            json!(mode.name())
        }),
    },
    Setting {
        flag: "authorization-webhook-cache-authorized-ttl",
        arg: "DUR",
        help: "  (default 5m0s)",
        parse: |t, v| set(&mut t.o.serving.authorized_ttl, parse_duration(v)?),
        field: "authorization.webhook.cacheAuthorizedTTL",
        read: Duration(|t, d| set(&mut t.o.serving.authorized_ttl, d)),
        configz: Some(|o, _| json!(format_duration(o.serving.authorized_ttl))),
    },
    Setting {
        flag: "authorization-webhook-cache-unauthorized-ttl",
        arg: "DUR",
        help: "(default 30s)",
        parse: |t, v| set(&mut t.o.serving.unauthorized_ttl, parse_duration(v)?),
        field: "authorization.webhook.cacheUnauthorizedTTL",
        read: Duration(|t, d| set(&mut t.o.serving.unauthorized_ttl, d)),
        configz: Some(|o, _| json!(format_duration(o.serving.unauthorized_ttl))),
    },
    Setting {
        flag: "proxy-server-host",
        arg: "HOST",
        help: "run the Konnectivity agent: dial this konnectivity-server\n\
               so the apiserver reaches the node API through it (NAT)",
        parse: |t, v| set(&mut t.o.tunnel.host, v.into()),
        ..NONE
    },
    Setting {
        flag: "proxy-server-port",
        arg: "PORT",
        help: "its agent port (default 8091)",
        parse: |t, v| set(&mut t.o.tunnel.port, port(v)?),
        ..NONE
    },
    Setting {
        flag: "ca-cert",
        arg: "FILE",
        help: "CA the server's certificate is verified against",
        parse: |t, v| set(&mut t.o.tunnel.ca_cert, path(v)),
        ..NONE
    },
    Setting {
        flag: "agent-cert",
        arg: "FILE, --agent-key FILE",
        help: "client certificate the agent authenticates with",
        parse: |t, v| set(&mut t.o.tunnel.agent_cert, path(v)),
        ..NONE
    },
    Setting {
        // On the line of --agent-cert.
        flag: "agent-key",
        arg: "FILE",
        parse: |t, v| set(&mut t.o.tunnel.agent_key, path(v)),
        ..NONE
    },
    Setting {
        flag: "service-account-token-path",
        arg: "FILE",
        help: "or a token sent as Authorization: Bearer",
        parse: |t, v| set(&mut t.o.tunnel.token_path, path(v)),
        ..NONE
    },
    Setting {
        flag: "agent-id",
        arg: "ID",
        help: "(default: the node name)",
        parse: |t, v| set(&mut t.o.tunnel.agent_id, (!v.is_empty()).then(|| v.into())),
        ..NONE
    },
    Setting {
        flag: "agent-identifiers",
        arg: "LIST",
        help: "what the server routes by (default\nhost=<node name>&ipv4=<node IP>)",
        parse: |t, v| {
            set(
                &mut t.o.tunnel.agent_identifiers,
                (!v.is_empty()).then(|| v.into()),
            )
        },
        ..NONE
    },
    Setting {
        flag: "keepalive-time",
        arg: "DUR",
        help: "HTTP/2 ping period on the tunnel (default 1m0s)",
        parse: |t, v| {
            let d = parse_duration(v)?;
            if d < std::time::Duration::from_secs(1) {
                return Err("must be at least 1s".into());
            }
            set(&mut t.o.tunnel.keepalive, d)
        },
        ..NONE
    },
    Setting {
        flag: "proxy-allowed-destinations",
        arg: "LIST",
        help: "host:port destinations dialed besides the node API\n(comma-separated; * for any)",
        parse: |t, v| set(&mut t.o.tunnel.allowed, list(v)),
        ..NONE
    },
    Setting {
        flag: "sync-frequency",
        arg: "DUR",
        help: "full resync period of each pod (default 1m0s)",
        parse: |t, v| set(&mut t.o.sync_frequency, parse_duration(v)?),
        field: "syncFrequency",
        read: Duration(|t, d| set(&mut t.o.sync_frequency, d)),
        configz: Some(|o, _| json!(format_duration(o.sync_frequency))),
    },
    Setting {
        flag: "file-check-frequency",
        arg: "DUR",
        help: "manifest directory re-list period (default 20s)",
        parse: |t, v| set(&mut t.o.file_check_frequency, parse_duration(v)?),
        field: "fileCheckFrequency",
        read: Duration(|t, d| set(&mut t.o.file_check_frequency, d)),
        configz: Some(|o, _| json!(format_duration(o.file_check_frequency))),
    },
    Setting {
        flag: "container-log-max-size",
        arg: "SIZE",
        help: "rotate a container's log at this size (default 10Mi;\nnegative: never)",
        parse: |t, v| set(&mut t.o.container_log.max_size, parse_log_max_size(v)?),
        field: "containerLogMaxSize",
        read: Text(|t, v| set(&mut t.o.container_log.max_size, parse_log_max_size(&v)?)),
        configz: None,
    },
    Setting {
        flag: "container-log-max-files",
        arg: "N",
        help: "log files kept per container, the live one included\n(default 5, at least 2)",
        parse: |t, v| {
            let n: i64 = v.parse().map_err(|_| "not an integer")?;
            set(&mut t.o.container_log.max_files, log_max_files(n)?)
        },
        field: "containerLogMaxFiles",
        read: I64(|t, n| {
            let files = log_max_files(n).map_err(|r| format!("invalid value {n}: {r}"))?;
            set(&mut t.o.container_log.max_files, files)
        }),
        configz: Some(|o, _| json!(o.container_log.max_files)),
    },
    Setting {
        field: "podLogsDir",
        read: Text(|t, p| set(&mut t.o.pod_logs_dir, p.into())),
        configz: Some(|o, _| json!(o.pod_logs_dir.display().to_string())),
        ..NONE
    },
    Setting {
        flag: "kubeconfig",
        arg: "FILE",
        help: "join the cluster of this kubeconfig (node identity\n\
               system:node:<name>); without it, static pods only",
        parse: |t, v| set(&mut t.o.kubeconfig, Some(v.into())),
        ..NONE
    },
    Setting {
        flag: "bootstrap-kubeconfig",
        arg: "FILE",
        help: "when --kubeconfig is missing or its certificate expired,\n\
               join with this kubeconfig's bootstrap token: a key made on\n\
               the node, a CSR, then --kubeconfig written",
        parse: |t, v| set(&mut t.o.bootstrap_kubeconfig, path(v)),
        ..NONE
    },
    Setting {
        flag: "rotate-certificates",
        arg: SWITCH,
        help: "renew the client certificate by CSR before it expires\n\
               (default true with --bootstrap-kubeconfig)",
        parse: |t, v| set(&mut t.o.rotate_certificates, Some(boolean(v)?)),
        field: "rotateCertificates",
        read: Bool(|t, b| set(&mut t.o.rotate_certificates, Some(b))),
        configz: Some(|o, _| json!(o.rotation())),
    },
    Setting {
        flag: "image-credential-provider-config",
        arg: "FILE",
        help: "CredentialProviderConfig: registry credential\n\
               plugins (needs --image-credential-provider-bin-dir)",
        parse: |t, v| set(&mut t.o.image_credential_provider_config, Some(v.into())),
        ..NONE
    },
    Setting {
        flag: "image-credential-provider-bin-dir",
        arg: "DIR",
        help: "where those plugins are",
        parse: |t, v| set(&mut t.o.image_credential_provider_bin_dir, Some(v.into())),
        ..NONE
    },
    Setting {
        flag: "image-preload-dir",
        arg: "DIR",
        help: "image archives imported and pinned (default ROOT/images)",
        parse: |t, v| set(&mut t.o.image_preload_dir, Some(v.into())),
        field: "imagePreloadDir",
        read: Text(|t, p| {
            t.o.image_preload_dir = path(p);
            Ok(())
        }),
        ..NONE
    },
    Setting {
        field: "imagePullCredentialsVerificationPolicy",
        read: Text(|t, v| {
            let p = crate::kuberuntime::pullmanager::VerificationPolicy::parse(&v)
                .map_err(|e| format!("{v:?}: {e}"))?;
            set(&mut t.o.image_pull_verification.policy, p)
        }),
        configz: Some(|o, _| json!(o.image_pull_verification.policy.as_str())),
        ..NONE
    },
    Setting {
        field: "preloadedImagesVerificationAllowlist",
        read: List(|t, v| {
            for p in &v {
                crate::kuberuntime::pullmanager::check_allowlist_pattern(p)?;
            }
            set(&mut t.o.image_pull_verification.allowlist, v)
        }),
        configz: Some(|o, _| json!(o.image_pull_verification.allowlist)),
        ..NONE
    },
    Setting {
        flag: "apiserver-poll-interval",
        arg: "DUR",
        help: "list the node's pods this often instead of watching",
        parse: |t, v| {
            let d = parse_duration(v)?;
            set(
                &mut t.o.apiserver_poll_interval,
                (!d.is_zero()).then_some(d),
            )
        },
        ..NONE
    },
    Setting {
        flag: "apiserver-watch-bookmarks",
        arg: SWITCH,
        help: "ask the apiserver for a bookmark a minute on each watch (default\n\
               true); false for a metered link: a dead HTTP/2 connection is\n\
               still found by PING",
        parse: |t, v| set(&mut t.o.apiserver_watch_bookmarks, boolean(v)?),
        ..NONE
    },
    Setting {
        flag: "kube-api-content-type",
        arg: "TYPE",
        help: "the encoding asked of the apiserver for the answers to the\n\
               node's writes: application/vnd.kubernetes.protobuf (default)\n\
               or application/json",
        parse: |t, v| set(&mut t.o.kube_api_content_type, ContentType::parse(v)?),
        field: "contentType",
        read: Text(|t, v| set(&mut t.o.kube_api_content_type, ContentType::parse(&v)?)),
        configz: Some(|o, _| json!(o.kube_api_content_type.as_str())),
    },
    Setting {
        field: "configMapAndSecretChangeDetectionStrategy",
        read: Text(|t, v| {
            let d = crate::objects::ChangeDetection::parse(&v)?;
            set(&mut t.o.config_map_and_secret_change_detection_strategy, d)
        }),
        configz: Some(|o, _| json!(o.config_map_and_secret_change_detection_strategy.as_str())),
        ..NONE
    },
    Setting {
        field: "nodeLeaseDurationSeconds",
        read: I32(|t, n| {
            let n = u32::try_from(n)
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{n}: must be a positive number of seconds"))?;
            set(&mut t.o.node_lease_duration_seconds, n)
        }),
        configz: Some(|o, _| json!(o.node_lease_duration_seconds)),
        ..NONE
    },
    Setting {
        flag: "node-status-update-frequency",
        arg: "DUR",
        help: "how often the node status is computed, and posted\n\
               when it changed (default 10s)",
        parse: |t, v| {
            set(
                &mut t.o.node_status_update_frequency,
                nonzero(parse_duration(v)?)?,
            )
        },
        field: "nodeStatusUpdateFrequency",
        read: Duration(|t, d| set(&mut t.o.node_status_update_frequency, nonzero(d)?)),
        configz: Some(|o, _| json!(format_duration(o.node_status_update_frequency))),
    },
    Setting {
        field: "nodeStatusReportFrequency",
        read: Duration(|t, d| set(&mut t.o.node_status_report_frequency, nonzero(d)?)),
        configz: Some(|o, _| json!(format_duration(o.node_status_report_frequency))),
        ..NONE
    },
    Setting {
        flag: "node-labels",
        arg: "k=v,...",
        help: "the node's labels (admission matches pods against them;\n\
               the Node is registered with them)",
        parse: |t, v| set(&mut t.o.node_labels, parse_labels(v)?),
        ..NONE
    },
    Setting {
        flag: "max-pods",
        arg: "N",
        help: "pods the node admits at most (default 110)",
        parse: |t, v| set(&mut t.o.max_pods, v.parse().map_err(|_| "not a number")?),
        field: "maxPods",
        read: U32(|t, n| set(&mut t.o.max_pods, n)),
        configz: None,
    },
    Setting {
        flag: "register-with-taints",
        arg: "k=v:Effect,...",
        help: "taints to register the Node with",
        parse: |t, v| set(&mut t.o.register_with_taints, parse_taints(v)?),
        ..NONE
    },
    Setting {
        flag: "allowed-unsafe-sysctls",
        arg: "a.b,c.*",
        help: "unsafe sysctls (or prefix* patterns) pods may set",
        parse: |t, v| {
            let list: Vec<String> = v
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            crate::admission::sysctl_allowlist("", &list)?;
            set(&mut t.o.allowed_unsafe_sysctls, list)
        },
        field: "allowedUnsafeSysctls",
        read: List(|t, v| {
            crate::admission::sysctl_allowlist("", &v)?;
            set(&mut t.o.allowed_unsafe_sysctls, v)
        }),
        configz: None,
    },
    Setting {
        flag: "image-gc-high-threshold",
        arg: "PERCENT",
        help: "image filesystem usage that starts image GC (default 85;\n100 turns it off)",
        parse: |t, v| {
            let pct = v.parse().map_err(|_| "not a whole number")?;
            set(&mut t.o.image_gc_high_threshold_percent, pct)
        },
        field: "imageGCHighThresholdPercent",
        read: I32(|t, v| set(&mut t.o.image_gc_high_threshold_percent, v)),
        configz: Some(|o, _| json!(o.image_gc_high_threshold_percent)),
    },
    Setting {
        flag: "image-gc-low-threshold",
        arg: "PERCENT",
        help: "usage image GC frees down to (default 80)",
        parse: |t, v| {
            let pct = v.parse().map_err(|_| "not a whole number")?;
            set(&mut t.o.image_gc_low_threshold_percent, pct)
        },
        field: "imageGCLowThresholdPercent",
        read: I32(|t, v| set(&mut t.o.image_gc_low_threshold_percent, v)),
        configz: Some(|o, _| json!(o.image_gc_low_threshold_percent)),
    },
    Setting {
        flag: "minimum-image-ttl-duration",
        arg: "DUR",
        help: "an unused image younger than this stays (default 2m0s)",
        parse: |t, v| set(&mut t.o.image_minimum_gc_age, parse_duration(v)?),
        field: "imageMinimumGCAge",
        read: Duration(|t, d| set(&mut t.o.image_minimum_gc_age, d)),
        configz: Some(|o, _| json!(format_duration(o.image_minimum_gc_age))),
    },
    Setting {
        field: "imageMaximumGCAge",
        read: Duration(|t, d| set(&mut t.o.image_maximum_gc_age, d)),
        ..NONE
    },
    Setting {
        flag: "pod-infra-container-image",
        arg: "REF",
        help: "sandbox image never collected (default: the runtime's)",
        parse: |t, v| {
            set(
                &mut t.o.pod_infra_container_image,
                (!v.is_empty()).then(|| v.into()),
            )
        },
        ..NONE
    },
    Setting {
        flag: "eviction-hard",
        arg: "SIG<Q,...",
        help: "hard eviction thresholds (default memory.available<100Mi,\n\
               nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%)",
        parse: |t, v| set(&mut t.ev.hard, eviction_map(t.origin, v, '<')?),
        field: "evictionHard",
        read: Map(|t, m| set(&mut t.ev.hard, given(t.origin, m.into_iter().collect()))),
        configz: None,
    },
    Setting {
        flag: "eviction-soft",
        arg: "SIG<Q,...",
        help: "soft eviction thresholds (each needs a grace period)",
        parse: |t, v| set(&mut t.ev.soft, eviction_map(t.origin, v, '<')?),
        field: "evictionSoft",
        read: Map(|t, m| set(&mut t.ev.soft, given(t.origin, m.into_iter().collect()))),
        configz: None,
    },
    Setting {
        flag: "eviction-soft-grace-period",
        arg: "SIG=DUR,...",
        help: "how long a soft threshold must hold",
        parse: |t, v| set(&mut t.ev.soft_grace_period, eviction_map(t.origin, v, '=')?),
        field: "evictionSoftGracePeriod",
        read: Map(|t, m| {
            set(
                &mut t.ev.soft_grace_period,
                given(t.origin, m.into_iter().collect()),
            )
        }),
        configz: None,
    },
    Setting {
        flag: "eviction-minimum-reclaim",
        arg: "SIG=Q,...",
        help: "what must be available beyond a threshold to release it",
        parse: |t, v| set(&mut t.ev.minimum_reclaim, eviction_map(t.origin, v, '=')?),
        field: "evictionMinimumReclaim",
        read: Map(|t, m| {
            set(
                &mut t.ev.minimum_reclaim,
                given(t.origin, m.into_iter().collect()),
            )
        }),
        configz: None,
    },
    Setting {
        flag: "eviction-pressure-transition-period",
        arg: "DUR",
        help: "pressure held after the signal clears (default 5m0s)",
        parse: |t, v| {
            set(
                &mut t.ev.pressure_transition_period,
                given(t.origin, v.into()),
            )
        },
        field: "evictionPressureTransitionPeriod",
        read: Text(|t, v| set(&mut t.ev.pressure_transition_period, given(t.origin, v))),
        configz: None,
    },
    Setting {
        flag: "eviction-max-pod-grace-period",
        arg: "SECONDS",
        help: "most a soft eviction gives a pod (default 0)",
        parse: |t, v| {
            let secs = v.parse().map_err(|_| "not a number of seconds")?;
            set(&mut t.ev.max_pod_grace_period, given(t.origin, secs))
        },
        field: "evictionMaxPodGracePeriod",
        read: I32(|t, v| {
            set(
                &mut t.ev.max_pod_grace_period,
                given(t.origin, i64::from(v)),
            )
        }),
        configz: None,
    },
    Setting {
        // picolet's own.
        flag: "eviction-memory-psi-threshold",
        arg: "PCT",
        help: "evict on memory when the node's memory PSI some avg10\n\
               reaches PCT percent, before memory.available does (0: off)",
        parse: |t, v| set(&mut t.ev.memory_psi_threshold, given(t.origin, v.into())),
        ..NONE
    },
    Setting {
        flag: "cgroup-driver",
        arg: "cgroupfs|systemd",
        help: "how cgroups are named; must match the runtime's\n(default cgroupfs)",
        parse: |t, v| set(&mut t.o.cgroups.driver, crate::cm::Driver::parse(v)?),
        field: "cgroupDriver",
        read: Text(|t, d| {
            let driver = crate::cm::Driver::parse(&d).map_err(|r| format!("{d:?}: {r}"))?;
            set(&mut t.o.cgroups.driver, driver)
        }),
        configz: Some(|o, _| json!(o.cgroups.driver.to_string())),
    },
    Setting {
        flag: "cgroups-per-qos",
        arg: SWITCH,
        help: "the kubepods tree with QoS and pod cgroups (default true)",
        parse: |t, v| set(&mut t.o.cgroups.per_qos, boolean(v)?),
        field: "cgroupsPerQOS",
        read: Bool(|t, b| set(&mut t.o.cgroups.per_qos, b)),
        configz: Some(|o, _| json!(o.cgroups.per_qos)),
    },
    Setting {
        flag: "cgroup-root",
        arg: "PATH",
        help: "where the kubepods tree goes (default /)",
        parse: |t, v| set(&mut t.o.cgroups.root, v.into()),
        field: "cgroupRoot",
        read: Text(|t, r| set(&mut t.o.cgroups.root, r)),
        configz: Some(|o, _| json!(o.cgroups.root)),
    },
    Setting {
        flag: "kube-reserved",
        arg: "cpu=100m,memory=100Mi",
        help: "  kept from pods for picolet and the runtime",
        parse: |t, v| {
            set(
                &mut t.o.cgroups.kube_reserved,
                crate::cm::Reserved::parse_flag(v)?,
            )
        },
        field: "kubeReserved",
        read: Map(|t, m| {
            set(
                &mut t.o.cgroups.kube_reserved,
                crate::cm::Reserved::from_map(&m)?,
            )
        }),
        configz: None,
    },
    Setting {
        flag: "system-reserved",
        arg: "cpu=100m,memory=100Mi",
        help: "kept from pods for the system",
        parse: |t, v| {
            set(
                &mut t.o.cgroups.system_reserved,
                crate::cm::Reserved::parse_flag(v)?,
            )
        },
        field: "systemReserved",
        read: Map(|t, m| {
            set(
                &mut t.o.cgroups.system_reserved,
                crate::cm::Reserved::from_map(&m)?,
            )
        }),
        configz: None,
    },
    Setting {
        flag: "enforce-node-allocatable",
        arg: "pods|none",
        help: "   limit kubepods to node allocatable (default pods)",
        parse: |t, v| set(&mut t.o.cgroups.enforce_node_allocatable, list(v)),
        field: "enforceNodeAllocatable",
        read: List(|t, e| set(&mut t.o.cgroups.enforce_node_allocatable, e)),
        configz: None,
    },
    Setting {
        flag: "pod-max-pids",
        arg: "N",
        help: "pids.max of each pod cgroup (default -1: none)",
        parse: |t, v| {
            set(
                &mut t.o.cgroups.pod_pids_limit,
                v.parse().map_err(|_| "not a number")?,
            )
        },
        field: "podPidsLimit",
        read: I64(|t, n| set(&mut t.o.cgroups.pod_pids_limit, n)),
        configz: Some(|o, _| json!(o.cgroups.pod_pids_limit)),
    },
    Setting {
        field: "singleProcessOOMKill",
        read: Bool(|t, b| set(&mut t.o.cgroups.single_process_oom_kill, Some(b))),
        ..NONE
    },
    Setting {
        flag: "v",
        arg: "LEVEL",
        help: "log verbosity (0-5; 4 and above log debug)",
        parse: |t, v| {
            set(
                &mut t.o.verbosity,
                v.parse().map_err(|_| "not a number from 0 to 10")?,
            )
        },
        ..NONE
    },
    Setting {
        field: "shutdownGracePeriod",
        read: Duration(|t, d| set(&mut t.o.shutdown.grace_period, d)),
        ..NONE
    },
    Setting {
        field: "shutdownGracePeriodCriticalPods",
        read: Duration(|t, d| set(&mut t.o.shutdown.critical_pods, d)),
        ..NONE
    },
    Setting {
        field: "shutdownGracePeriodByPodPriority",
        read: Priorities(|t, v| set(&mut t.o.shutdown.by_priority, v)),
        ..NONE
    },
];

/// `containerLogMaxFiles`, `--container-log-max-files`.
fn log_max_files(n: i64) -> Result<usize, String> {
    match usize::try_from(n) {
        Ok(n) if n >= 2 => Ok(n),
        _ => Err("must be greater than 1".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags a text names: `--name` and `-n` words (not `-1`), without what follows the name.
    fn named(text: &str) -> Vec<&str> {
        text.split(|c: char| {
            c.is_whitespace() || matches!(c, ',' | '`' | '[' | '=' | '(' | ')' | ';')
        })
        .filter(|w| {
            w.starts_with('-')
                && w.trim_start_matches('-')
                    .starts_with(|c: char| c.is_ascii_alphabetic())
        })
        .collect()
    }

    #[test]
    fn every_row_is_one_setting_in_the_help_and_the_reference() {
        let usage = crate::cli::usage();
        let shown = named(&usage);
        let doc = include_str!("../../docs/configuration.md");
        let mut flags = Vec::new();
        let mut fields = Vec::new();
        for s in SETTINGS {
            assert!(
                !s.flag.is_empty() || !s.field.is_empty(),
                "a row with neither flag nor field"
            );
            if !s.flag.is_empty() {
                assert!(!flags.contains(&s.flag), "two rows claim --{}", s.flag);
                flags.push(s.flag);
                let dashed = if s.flag.len() == 1 {
                    format!("-{}", s.flag)
                } else {
                    format!("--{}", s.flag)
                };
                assert!(
                    shown.contains(&dashed.as_str()),
                    "{dashed} is missing from picolet --help"
                );
                assert!(
                    doc.contains(&format!("`{dashed}`")),
                    "{dashed} is missing from docs/configuration.md"
                );
            } else {
                assert!(
                    s.help.is_empty() && s.arg.is_empty(),
                    "{} has a help line but no flag",
                    s.field
                );
            }
            if !s.field.is_empty() {
                assert!(!fields.contains(&s.field), "two rows claim {}", s.field);
                fields.push(s.field);
                assert!(
                    !matches!(s.read, Field::FlagOnly),
                    "{} has no way to be read",
                    s.field
                );
                assert!(
                    doc.contains(&format!("`{}`", s.field)),
                    "{} is missing from docs/configuration.md",
                    s.field
                );
            } else {
                assert!(
                    matches!(s.read, Field::FlagOnly) && s.configz.is_none(),
                    "--{} reads or reports a field it does not name",
                    s.flag
                );
            }
        }
        // And no flag in the table's part of the help that no row parses.
        for f in named(&super::super::parse::flags_usage()) {
            assert!(
                flags.contains(&f.trim_start_matches('-')),
                "picolet --help shows {f}, which no row parses"
            );
        }
        // A section of the file must not also be a field.
        for f in &fields {
            assert!(
                !fields.iter().any(|g| g.starts_with(&format!("{f}."))),
                "{f} is both a field and a section"
            );
        }
    }

    #[test]
    fn the_checks_above_fail_on_a_missing_flag() {
        // The same words the test reads, with one flag left out of the help.
        let usage = crate::cli::usage().replace("--max-pods N", "--max-podz N");
        assert!(!named(&usage).contains(&"--max-pods"));
        assert!(named(&crate::cli::usage()).contains(&"--max-pods"));
        assert!(named("  --agent-cert FILE, --agent-key FILE  x").contains(&"--agent-key"));
        assert!(named("  -v, --v LEVEL  x").contains(&"-v"));
    }
}
