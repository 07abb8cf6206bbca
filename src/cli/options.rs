//! Command line and configuration file, with the kubelet's flag names and
//! `KubeletConfiguration` (kubelet.config.k8s.io/v1beta1) field names. Flags override the file.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::api::{Taint, format_duration, parse_duration};
/// Where the tests name it.
pub use crate::konnectivity::Tunnel;
use crate::limits::{self, Limits, Syntax};

pub const USAGE: &str = "\
usage: picolet [flags]
       picolet validate FILE...
       picolet check [flags]   (preflight: cgroups, runtime, overlayfs, directories, clock)
       picolet logs POD [CONTAINER] [flags]   (a container's log; picolet logs --help)
       picolet exec POD [-c C] [-it] -- CMD   (a command in a container; picolet exec --help)

Runs static pods from a manifest directory, and the pods an apiserver binds to the node,
on a CRI runtime (containerd).

flags:
  --pod-manifest-path PATH           directory of static pod manifests
  --config FILE                      KubeletConfiguration file (v1beta1 subset)
  --container-runtime-endpoint URL   runtime socket (default unix:///run/containerd/containerd.sock)
  --image-service-endpoint URL       image service socket (default: the runtime endpoint)
  --runtime-request-timeout DUR      deadline of runtime calls (default 2m0s)
  --root-dir PATH                    state directory (default /var/lib/kubelet)
  --hostname-override NAME           node name (default: the host name, lowercased)
  --node-ip IP                       node address reported as hostIP
  --healthz-port PORT                local API port, 0 disables (default 10248)
  --healthz-bind-address IP          local API address (default 127.0.0.1)
  --port PORT                        node API (HTTPS) port, 0 disables (default 10250 with
                                     --kubeconfig; without it, off unless set)
  --address IP                       node API address (default 0.0.0.0)
  --tls-cert-file FILE               node API serving certificate (PEM; default: a
                                     self-signed one kept in <root-dir>/pki)
  --tls-private-key-file FILE        its key (PEM)
  --tls-min-version VERSION          VersionTLS12 (default) or VersionTLS13
  --client-ca-file FILE              CAs whose client certificates authenticate (x509)
  --anonymous-auth[=true|false]      requests without credentials are system:anonymous
                                     (default false: 401)
  --authentication-token-webhook[=true|false]  bearer tokens checked by TokenReview
                                     (default true with --kubeconfig)
  --authentication-token-webhook-cache-ttl DUR  (default 2m0s)
  --authorization-mode Webhook|AlwaysAllow  (default Webhook with --kubeconfig)
  --authorization-webhook-cache-authorized-ttl DUR    (default 5m0s)
  --authorization-webhook-cache-unauthorized-ttl DUR  (default 30s)
  --proxy-server-host HOST           run the Konnectivity agent: dial this konnectivity-server
                                     so the apiserver reaches the node API through it (NAT)
  --proxy-server-port PORT           its agent port (default 8091)
  --ca-cert FILE                     CA the server's certificate is verified against
  --agent-cert FILE, --agent-key FILE  client certificate the agent authenticates with
  --service-account-token-path FILE  or a token sent as Authorization: Bearer
  --agent-id ID                      (default: the node name)
  --agent-identifiers LIST           what the server routes by (default
                                     host=<node name>&ipv4=<node IP>)
  --keepalive-time DUR               HTTP/2 ping period on the tunnel (default 1m0s)
  --proxy-allowed-destinations LIST  host:port destinations dialed besides the node API
                                     (comma-separated; * for any)
  --sync-frequency DUR               full resync period of each pod (default 1m0s)
  --file-check-frequency DUR         manifest directory re-list period (default 20s)
  --container-log-max-size SIZE      rotate a container's log at this size (default 10Mi;
                                     negative: never)
  --container-log-max-files N        log files kept per container, the live one included
                                     (default 5, at least 2)
  --kubeconfig FILE                  join the cluster of this kubeconfig (node identity
                                     system:node:<name>); without it, static pods only
  --bootstrap-kubeconfig FILE        when --kubeconfig is missing or its certificate expired,
                                     join with this kubeconfig's bootstrap token: a key made on
                                     the node, a CSR, then --kubeconfig written
  --rotate-certificates[=true|false] renew the client certificate by CSR before it expires
                                     (default true with --bootstrap-kubeconfig)
  --image-credential-provider-config FILE  CredentialProviderConfig: registry credential
                                     plugins (needs --image-credential-provider-bin-dir)
  --image-credential-provider-bin-dir DIR  where those plugins are
  --image-preload-dir DIR            image archives imported and pinned (default ROOT/images)
  --apiserver-poll-interval DUR      list the node's pods this often instead of watching
  --node-labels k=v,...              the node's labels (admission matches pods against them;
                                     the Node is registered with them)
  --max-pods N                       pods the node admits at most (default 110)
  --register-with-taints k=v:Effect,...  taints to register the Node with
  --allowed-unsafe-sysctls a.b,c.*   unsafe sysctls (or prefix* patterns) pods may set
  --image-gc-high-threshold PERCENT  image filesystem usage that starts image GC (default 85;
                                     100 turns it off)
  --image-gc-low-threshold PERCENT   usage image GC frees down to (default 80)
  --minimum-image-ttl-duration DUR   an unused image younger than this stays (default 2m0s)
  --pod-infra-container-image REF    sandbox image never collected (default: the runtime's)
  --eviction-hard SIG<Q,...          hard eviction thresholds (default memory.available<100Mi,
                                     nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%)
  --eviction-soft SIG<Q,...          soft eviction thresholds (each needs a grace period)
  --eviction-soft-grace-period SIG=DUR,...  how long a soft threshold must hold
  --eviction-minimum-reclaim SIG=Q,...  what must be available beyond a threshold to release it
  --eviction-pressure-transition-period DUR  pressure held after the signal clears (default 5m0s)
  --eviction-max-pod-grace-period SECONDS  most a soft eviction gives a pod (default 0)
  --eviction-memory-psi-threshold PCT  evict on memory when the node's memory PSI some avg10
                                     reaches PCT percent, before memory.available does (0: off)
  --cgroup-driver cgroupfs|systemd   how cgroups are named; must match the runtime's
                                     (default cgroupfs)
  --cgroups-per-qos[=true|false]     the kubepods tree with QoS and pod cgroups (default true)
  --cgroup-root PATH                 where the kubepods tree goes (default /)
  --kube-reserved cpu=100m,memory=100Mi    kept from pods for picolet and the runtime
  --system-reserved cpu=100m,memory=100Mi  kept from pods for the system
  --enforce-node-allocatable pods|none     limit kubepods to node allocatable (default pods)
  --pod-max-pids N                   pids.max of each pod cgroup (default -1: none)
  -v, --v LEVEL                      log verbosity (0-5; 4 and above log debug)
  --version                          print the version and exit
  -h, --help                         print this help and exit
";

#[derive(Debug, thiserror::Error)]
pub enum OptionsError {
    #[error("unknown flag {0:?} (see --help)")]
    UnknownFlag(String),
    #[error("flag {0} needs a value")]
    MissingValue(String),
    #[error("flag {flag}: invalid value {value:?}: {reason}")]
    BadValue {
        flag: String,
        value: String,
        reason: String,
    },
    #[error("{path}: {reason}")]
    Config { path: PathBuf, reason: String },
    #[error("unexpected argument {0:?} (see --help)")]
    Unexpected(String),
    /// A setting's error that names the flag and value itself.
    #[error("{0}")]
    Invalid(String),
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Run(Box<Options>),
    Validate(Vec<PathBuf>),
    /// Preflight checks with the options of a run.
    Check(Box<Options>),
    /// `picolet logs`: a container's log through the local API.
    Logs(Box<crate::cli::logs::LogsArgs>),
    /// `picolet logs --help`.
    LogsHelp,
    /// `picolet exec`: a command in a running container, through the runtime.
    Exec(Box<crate::cli::exec::ExecArgs>),
    /// `picolet exec --help`.
    ExecHelp,
    Version,
    Help,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub pod_manifest_path: Option<PathBuf>,
    pub container_runtime_endpoint: String,
    pub image_service_endpoint: Option<String>,
    pub runtime_request_timeout: Duration,
    pub root_dir: PathBuf,
    pub pod_logs_dir: PathBuf,
    pub hostname_override: Option<String>,
    pub node_ip: Option<IpAddr>,
    pub healthz_port: u16,
    pub healthz_bind_address: IpAddr,
    pub sync_frequency: Duration,
    pub file_check_frequency: Duration,
    /// `containerLogMaxSize` and `containerLogMaxFiles`.
    pub container_log: crate::logs::rotate::Policy,
    pub verbosity: u8,
    /// kubeconfig of the apiserver to join; none: static pods only.
    pub kubeconfig: Option<PathBuf>,
    /// kubeconfig with a bootstrap token, used to get a client certificate by CSR when
    /// `kubeconfig` is missing or holds no valid certificate (`--bootstrap-kubeconfig`).
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// Renew the client certificate by CSR (`rotateCertificates`, `--rotate-certificates`);
    /// `None`: on with a bootstrap kubeconfig.
    pub rotate_certificates: Option<bool>,
    /// `--image-credential-provider-config` and `--image-credential-provider-bin-dir`.
    pub image_credential_provider_config: Option<PathBuf>,
    pub image_credential_provider_bin_dir: Option<PathBuf>,
    /// `--image-preload-dir`, `imagePreloadDir`: image archives imported at start and when
    /// added; `None`: `images/` under the root dir.
    pub image_preload_dir: Option<PathBuf>,
    /// List the node's pods every this long instead of watching them.
    pub apiserver_poll_interval: Option<Duration>,
    /// Labels the Node is registered with (`--node-labels k=v,...`).
    pub node_labels: Vec<(String, String)>,
    /// Pods the node admits at most (`--max-pods`, `maxPods`).
    pub max_pods: u32,
    /// Taints the Node is registered with (`--register-with-taints k=v:Effect,...`).
    pub register_with_taints: Vec<Taint>,
    /// Unsafe sysctls (or `prefix*` patterns) pods may set besides the safe ones
    /// (`--allowed-unsafe-sysctls`, `allowedUnsafeSysctls`).
    pub allowed_unsafe_sysctls: Vec<String>,
    /// Image filesystem usage (percent) at which image GC starts (`imageGCHighThresholdPercent`).
    pub image_gc_high_threshold_percent: i32,
    /// Usage (percent) image GC frees down to (`imageGCLowThresholdPercent`).
    pub image_gc_low_threshold_percent: i32,
    /// An unused image younger than this is never collected (`imageMinimumGCAge`).
    pub image_minimum_gc_age: Duration,
    /// An image unused this long is collected whatever the usage; zero: never
    /// (`imageMaximumGCAge`).
    pub image_maximum_gc_age: Duration,
    /// The sandbox image, never collected (`--pod-infra-container-image`).
    pub pod_infra_container_image: Option<String>,
    /// Node-pressure eviction: thresholds, periods, the memory PSI trigger.
    pub eviction: crate::eviction::Config,
    /// Unknown configuration fields, to be logged once the logger runs.
    pub config_warnings: Vec<String>,
    /// The kubepods tree and node allocatable.
    pub cgroups: crate::cm::CgroupConfig,
    /// The node API on `--port`: address, TLS, authentication and authorization.
    pub serving: Serving,
    /// The Konnectivity agent (`--proxy-server-host` and the flags beside it).
    pub tunnel: Tunnel,
    /// Graceful node shutdown: `shutdownGracePeriod`, `shutdownGracePeriodCriticalPods`,
    /// `shutdownGracePeriodByPodPriority` (checked as upstream checks them).
    pub shutdown: crate::nodeshutdown::Config,
}

/// The node API's settings (`port`, `address`, `tls*`, `authentication`, `authorization`).
#[derive(Debug, Clone, PartialEq)]
pub struct Serving {
    /// `None`: the default, 10250 when joined to a cluster and off standalone; `Some(0)`: off.
    pub port: Option<u16>,
    pub address: IpAddr,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    /// TLS 1.3 only when set; TLS 1.2 and 1.3 otherwise.
    pub tls13_only: bool,
    /// Ask the cluster for the serving certificate by CSR (`serverTLSBootstrap`); self-signed
    /// until it is issued.
    pub server_tls_bootstrap: bool,
    pub client_ca_file: Option<PathBuf>,
    pub anonymous: bool,
    /// `None`: on when joined to a cluster.
    pub webhook_authn: Option<bool>,
    pub webhook_cache_ttl: Duration,
    /// `None`: Webhook when joined to a cluster, else AlwaysAllow.
    pub authorization: Option<AuthorizationMode>,
    pub authorized_ttl: Duration,
    pub unauthorized_ttl: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationMode {
    Webhook,
    AlwaysAllow,
}

impl AuthorizationMode {
    fn parse(s: &str) -> Result<Self, String> {
        match s {
            "Webhook" => Ok(AuthorizationMode::Webhook),
            "AlwaysAllow" => Ok(AuthorizationMode::AlwaysAllow),
            _ => Err("must be Webhook or AlwaysAllow".into()),
        }
    }
}

fn parse_tls_version(s: &str) -> Result<bool, String> {
    match s {
        "" | "VersionTLS12" => Ok(false),
        "VersionTLS13" => Ok(true),
        "VersionTLS10" | "VersionTLS11" => Err("picolet serves TLS 1.2 and 1.3 only".into()),
        _ => Err("must be VersionTLS12 or VersionTLS13".into()),
    }
}

impl Default for Serving {
    fn default() -> Self {
        Serving {
            port: None,
            address: IpAddr::from([0, 0, 0, 0]),
            tls_cert_file: None,
            tls_private_key_file: None,
            tls13_only: false,
            server_tls_bootstrap: false,
            client_ca_file: None,
            anonymous: false,
            webhook_authn: None,
            webhook_cache_ttl: Duration::from_secs(120),
            authorization: None,
            authorized_ttl: Duration::from_secs(300),
            unauthorized_ttl: Duration::from_secs(30),
        }
    }
}

impl Options {
    /// The layout under `--root-dir`.
    pub fn root(&self) -> crate::root_dir::RootDir<'_> {
        crate::root_dir::RootDir(&self.root_dir)
    }

    /// Whether the client certificate is renewed by CSR.
    pub fn rotation(&self) -> bool {
        self.rotate_certificates
            .unwrap_or(self.bootstrap_kubeconfig.is_some())
    }

    /// The node API's port, `None` when it is off.
    pub fn node_api_port(&self) -> Option<u16> {
        match self.serving.port {
            Some(0) => None,
            Some(p) => Some(p),
            None => self.kubeconfig.is_some().then_some(10250),
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            pod_manifest_path: None,
            container_runtime_endpoint: crate::cri::DEFAULT_ENDPOINT.to_owned(),
            image_service_endpoint: None,
            runtime_request_timeout: Duration::from_secs(120),
            root_dir: PathBuf::from("/var/lib/kubelet"),
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            hostname_override: None,
            node_ip: None,
            healthz_port: 10248,
            healthz_bind_address: IpAddr::from([127, 0, 0, 1]),
            sync_frequency: Duration::from_secs(60),
            file_check_frequency: Duration::from_secs(20),
            container_log: crate::logs::rotate::Policy::default(),
            verbosity: 0,
            image_credential_provider_config: None,
            image_credential_provider_bin_dir: None,
            image_preload_dir: None,
            kubeconfig: None,
            bootstrap_kubeconfig: None,
            rotate_certificates: None,
            apiserver_poll_interval: None,
            node_labels: Vec::new(),
            max_pods: 110,
            register_with_taints: Vec::new(),
            allowed_unsafe_sysctls: Vec::new(),
            image_gc_high_threshold_percent: 85,
            image_gc_low_threshold_percent: 80,
            image_minimum_gc_age: Duration::from_secs(120),
            image_maximum_gc_age: Duration::ZERO,
            pod_infra_container_image: None,
            eviction: crate::eviction::Config::default(),
            shutdown: crate::nodeshutdown::Config::default(),
            config_warnings: Vec::new(),
            cgroups: crate::cm::CgroupConfig::default(),
            serving: Serving::default(),
            tunnel: Tunnel::default(),
        }
    }
}

/// `key=value:Effect` or `key:Effect`, comma-separated.
pub fn parse_taints(s: &str) -> Result<Vec<Taint>, String> {
    s.split(',')
        .filter(|t| !t.is_empty())
        .map(|t| {
            let (kv, effect) = t
                .rsplit_once(':')
                .ok_or_else(|| format!("{t:?}: expected key=value:Effect"))?;
            if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
                return Err(format!(
                    "{t:?}: effect {effect:?} is not NoSchedule, PreferNoSchedule or NoExecute"
                ));
            }
            let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
            if key.is_empty() {
                return Err(format!("{t:?}: empty key"));
            }
            Ok(Taint {
                key: key.to_owned(),
                value: value.to_owned(),
                effect: effect.to_owned(),
            })
        })
        .collect()
}

/// `k=v,k2=v2`.
pub fn parse_labels(s: &str) -> Result<Vec<(String, String)>, String> {
    s.split(',')
        .filter(|l| !l.is_empty())
        .map(|l| match l.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
            _ => Err(format!("{l:?}: expected key=value")),
        })
        .collect()
}

/// The `KubeletConfiguration` fields picolet reads.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct KubeletConfiguration {
    api_version: String,
    kind: String,
    static_pod_path: Option<String>,
    file_check_frequency: Option<String>,
    sync_frequency: Option<String>,
    container_runtime_endpoint: Option<String>,
    image_service_endpoint: Option<String>,
    runtime_request_timeout: Option<String>,
    healthz_port: Option<u16>,
    healthz_bind_address: Option<String>,
    pod_logs_dir: Option<String>,
    image_preload_dir: Option<String>,
    #[serde(rename = "imageGCHighThresholdPercent")]
    image_gc_high_threshold_percent: Option<i32>,
    #[serde(rename = "imageGCLowThresholdPercent")]
    image_gc_low_threshold_percent: Option<i32>,
    #[serde(rename = "imageMinimumGCAge")]
    image_minimum_gc_age: Option<String>,
    #[serde(rename = "imageMaximumGCAge")]
    image_maximum_gc_age: Option<String>,
    eviction_hard: Option<std::collections::BTreeMap<String, String>>,
    eviction_soft: Option<std::collections::BTreeMap<String, String>>,
    eviction_soft_grace_period: Option<std::collections::BTreeMap<String, String>>,
    eviction_minimum_reclaim: Option<std::collections::BTreeMap<String, String>>,
    eviction_pressure_transition_period: Option<String>,
    eviction_max_pod_grace_period: Option<i32>,
    cgroup_driver: Option<String>,
    #[serde(rename = "cgroupsPerQOS")]
    cgroups_per_qos: Option<bool>,
    cgroup_root: Option<String>,
    kube_reserved: Option<std::collections::BTreeMap<String, String>>,
    system_reserved: Option<std::collections::BTreeMap<String, String>>,
    enforce_node_allocatable: Option<Vec<String>>,
    pod_pids_limit: Option<i64>,
    max_pods: Option<u32>,
    allowed_unsafe_sysctls: Option<Vec<String>>,
    #[serde(rename = "singleProcessOOMKill")]
    single_process_oom_kill: Option<bool>,
    container_log_max_size: Option<String>,
    container_log_max_files: Option<i64>,
    port: Option<u16>,
    address: Option<String>,
    tls_cert_file: Option<String>,
    tls_private_key_file: Option<String>,
    tls_min_version: Option<String>,
    rotate_certificates: Option<bool>,
    #[serde(rename = "serverTLSBootstrap")]
    server_tls_bootstrap: Option<bool>,
    authentication: Option<ConfigAuthentication>,
    authorization: Option<ConfigAuthorization>,
    shutdown_grace_period: Option<String>,
    shutdown_grace_period_critical_pods: Option<String>,
    shutdown_grace_period_by_pod_priority: Option<Vec<crate::nodeshutdown::ByPriority>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct ConfigAuthentication {
    x509: Option<ConfigX509>,
    webhook: Option<ConfigWebhookAuthn>,
    anonymous: Option<ConfigAnonymous>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct ConfigX509 {
    #[serde(rename = "clientCAFile")]
    client_ca_file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct ConfigWebhookAuthn {
    enabled: Option<bool>,
    #[serde(rename = "cacheTTL")]
    cache_ttl: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ConfigAnonymous {
    enabled: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct ConfigAuthorization {
    mode: Option<String>,
    webhook: Option<ConfigWebhookAuthz>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct ConfigWebhookAuthz {
    #[serde(rename = "cacheAuthorizedTTL")]
    cache_authorized_ttl: Option<String>,
    #[serde(rename = "cacheUnauthorizedTTL")]
    cache_unauthorized_ttl: Option<String>,
}

const CONFIG_API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";

/// Reads a KubeletConfiguration file into `o`. The file must be a regular file within
/// [`Limits::CONFIG`].
pub fn load_config(path: &Path, o: &mut Options) -> Result<(), OptionsError> {
    let mut ev = crate::eviction::Settings::default();
    load_config_eviction(path, o, &mut ev)?;
    o.eviction = ev.build().map_err(|reason| OptionsError::Config {
        path: path.to_owned(),
        reason,
    })?;
    Ok(())
}

fn load_config_eviction(
    path: &Path,
    o: &mut Options,
    ev: &mut crate::eviction::Settings,
) -> Result<(), OptionsError> {
    let bytes = limits::read_file(path, &Limits::CONFIG).map_err(|e| OptionsError::Config {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    parse_config_into(&bytes, path, o, ev)
}

/// Applies a KubeletConfiguration document to `o`; `path` names it in errors.
pub fn parse_config(bytes: &[u8], path: &Path, o: &mut Options) -> Result<(), OptionsError> {
    let mut ev = crate::eviction::Settings::default();
    parse_config_into(bytes, path, o, &mut ev)?;
    o.eviction = ev.build().map_err(|reason| OptionsError::Config {
        path: path.to_owned(),
        reason,
    })?;
    Ok(())
}

fn parse_config_into(
    bytes: &[u8],
    path: &Path,
    o: &mut Options,
    ev: &mut crate::eviction::Settings,
) -> Result<(), OptionsError> {
    let err = |reason: String| OptionsError::Config {
        path: path.to_owned(),
        reason,
    };
    limits::check(bytes, Syntax::Yaml, &Limits::CONFIG).map_err(|e| err(e.to_string()))?;
    let mut unknown = Vec::new();
    let de = yaml_serde::Deserializer::from_slice(bytes);
    let cfg: KubeletConfiguration =
        serde_path_to_error::deserialize(serde_ignored::Deserializer::new(de, &mut |p| {
            unknown.push(p.to_string())
        }))
        .map_err(|e| {
            let at = e.path().to_string();
            err(if at == "." {
                e.inner().to_string()
            } else {
                format!("{at}: {}", e.inner())
            })
        })?;
    if cfg.kind != "KubeletConfiguration" {
        return Err(err(format!(
            "kind: expected \"KubeletConfiguration\", got {:?}",
            cfg.kind
        )));
    }
    if cfg.api_version != CONFIG_API_VERSION {
        return Err(err(format!(
            "apiVersion: expected {CONFIG_API_VERSION:?}, got {:?}",
            cfg.api_version
        )));
    }
    let dur = |field: &str, v: &Option<String>| -> Result<Option<Duration>, OptionsError> {
        v.as_deref()
            .map(|s| {
                parse_duration(s).map_err(|r| err(format!("{field}: invalid duration {s:?}: {r}")))
            })
            .transpose()
    };
    if let Some(p) = cfg.static_pod_path.filter(|p| !p.is_empty()) {
        o.pod_manifest_path = Some(PathBuf::from(p));
    }
    if let Some(d) = dur("fileCheckFrequency", &cfg.file_check_frequency)? {
        o.file_check_frequency = d;
    }
    if let Some(d) = dur("syncFrequency", &cfg.sync_frequency)? {
        o.sync_frequency = d;
    }
    if let Some(d) = dur("runtimeRequestTimeout", &cfg.runtime_request_timeout)? {
        o.runtime_request_timeout = d;
    }
    if let Some(e) = cfg.container_runtime_endpoint {
        o.container_runtime_endpoint = e;
    }
    if let Some(e) = cfg.image_service_endpoint {
        o.image_service_endpoint = Some(e);
    }
    if let Some(p) = cfg.healthz_port {
        o.healthz_port = p;
    }
    if let Some(a) = cfg.healthz_bind_address {
        o.healthz_bind_address = a
            .parse()
            .map_err(|_| err(format!("healthzBindAddress: invalid IP address {a:?}")))?;
    }
    if let Some(v) = cfg.container_log_max_size {
        o.container_log.max_size =
            parse_log_max_size(&v).map_err(|r| err(format!("containerLogMaxSize: {r}")))?;
    }
    if let Some(n) = cfg.container_log_max_files {
        o.container_log.max_files = log_max_files(n)
            .map_err(|r| err(format!("containerLogMaxFiles: invalid value {n}: {r}")))?;
    }
    if let Some(p) = cfg.pod_logs_dir {
        o.pod_logs_dir = PathBuf::from(p);
    }
    if let Some(p) = cfg.image_preload_dir {
        o.image_preload_dir = Some(PathBuf::from(p));
    }
    if let Some(v) = cfg.image_gc_high_threshold_percent {
        o.image_gc_high_threshold_percent = v;
    }
    if let Some(v) = cfg.image_gc_low_threshold_percent {
        o.image_gc_low_threshold_percent = v;
    }
    if let Some(d) = dur("imageMinimumGCAge", &cfg.image_minimum_gc_age)? {
        o.image_minimum_gc_age = d;
    }
    if let Some(d) = dur("imageMaximumGCAge", &cfg.image_maximum_gc_age)? {
        o.image_maximum_gc_age = d;
    }
    use crate::eviction::threshold::Given;
    let field = |name: &str, m: Option<std::collections::BTreeMap<String, String>>| {
        m.map(|m| Given {
            origin: name.to_owned(),
            value: m.into_iter().collect(),
        })
    };
    // Origins are field names; the error's prefix names the file.
    ev.hard = field("evictionHard", cfg.eviction_hard);
    ev.soft = field("evictionSoft", cfg.eviction_soft);
    ev.soft_grace_period = field("evictionSoftGracePeriod", cfg.eviction_soft_grace_period);
    ev.minimum_reclaim = field("evictionMinimumReclaim", cfg.eviction_minimum_reclaim);
    ev.pressure_transition_period = cfg.eviction_pressure_transition_period.map(|v| Given {
        origin: "evictionPressureTransitionPeriod".into(),
        value: v,
    });
    ev.max_pod_grace_period = cfg.eviction_max_pod_grace_period.map(|v| Given {
        origin: "evictionMaxPodGracePeriod".into(),
        value: i64::from(v),
    });
    if let Some(d) = dur("shutdownGracePeriod", &cfg.shutdown_grace_period)? {
        o.shutdown.grace_period = d;
    }
    if let Some(d) = dur(
        "shutdownGracePeriodCriticalPods",
        &cfg.shutdown_grace_period_critical_pods,
    )? {
        o.shutdown.critical_pods = d;
    }
    if let Some(v) = cfg.shutdown_grace_period_by_pod_priority {
        o.shutdown.by_priority = v;
    }
    o.shutdown.validate().map_err(err)?;
    let sv = &mut o.serving;
    if let Some(p) = cfg.port {
        sv.port = Some(p);
    }
    if let Some(a) = &cfg.address {
        sv.address = a
            .parse()
            .map_err(|_| err(format!("address: {a:?} is not an IP address")))?;
    }
    if let Some(f) = cfg.tls_cert_file {
        sv.tls_cert_file = Some(f.into());
    }
    if let Some(f) = cfg.tls_private_key_file {
        sv.tls_private_key_file = Some(f.into());
    }
    if let Some(v) = &cfg.tls_min_version {
        sv.tls13_only =
            parse_tls_version(v).map_err(|r| err(format!("tlsMinVersion: {v:?}: {r}")))?;
    }
    if let Some(b) = cfg.server_tls_bootstrap {
        sv.server_tls_bootstrap = b;
    }
    if let Some(b) = cfg.rotate_certificates {
        o.rotate_certificates = Some(b);
    }
    let sv = &mut o.serving;
    if let Some(a) = cfg.authentication {
        if let Some(f) = a.x509.and_then(|x| x.client_ca_file) {
            sv.client_ca_file = (!f.is_empty()).then(|| f.into());
        }
        if let Some(w) = a.webhook {
            if let Some(e) = w.enabled {
                sv.webhook_authn = Some(e);
            }
            if let Some(d) = dur("authentication.webhook.cacheTTL", &w.cache_ttl)? {
                sv.webhook_cache_ttl = d;
            }
        }
        if let Some(e) = a.anonymous.and_then(|a| a.enabled) {
            sv.anonymous = e;
        }
    }
    if let Some(a) = cfg.authorization {
        if let Some(m) = &a.mode {
            sv.authorization = Some(
                AuthorizationMode::parse(m)
                    .map_err(|r| err(format!("authorization.mode: {m:?}: {r}")))?,
            );
        }
        if let Some(w) = a.webhook {
            if let Some(d) = dur(
                "authorization.webhook.cacheAuthorizedTTL",
                &w.cache_authorized_ttl,
            )? {
                sv.authorized_ttl = d;
            }
            if let Some(d) = dur(
                "authorization.webhook.cacheUnauthorizedTTL",
                &w.cache_unauthorized_ttl,
            )? {
                sv.unauthorized_ttl = d;
            }
        }
    }
    let cg = &mut o.cgroups;
    if let Some(d) = cfg.cgroup_driver {
        cg.driver =
            crate::cm::Driver::parse(&d).map_err(|r| err(format!("cgroupDriver: {d:?}: {r}")))?;
    }
    if let Some(b) = cfg.cgroups_per_qos {
        cg.per_qos = b;
    }
    if let Some(r) = cfg.cgroup_root {
        cg.root = r;
    }
    if let Some(m) = &cfg.kube_reserved {
        cg.kube_reserved =
            crate::cm::Reserved::from_map(m).map_err(|r| err(format!("kubeReserved: {r}")))?;
    }
    if let Some(m) = &cfg.system_reserved {
        cg.system_reserved =
            crate::cm::Reserved::from_map(m).map_err(|r| err(format!("systemReserved: {r}")))?;
    }
    if let Some(e) = cfg.enforce_node_allocatable {
        cg.enforce_node_allocatable = e;
    }
    if let Some(n) = cfg.pod_pids_limit {
        cg.pod_pids_limit = n;
    }
    if let Some(n) = cfg.max_pods {
        o.max_pods = n;
    }
    if let Some(v) = cfg.allowed_unsafe_sysctls {
        crate::admission::sysctl_allowlist("", &v)
            .map_err(|r| err(format!("allowedUnsafeSysctls: {r}")))?;
        o.allowed_unsafe_sysctls = v;
    }
    if let Some(b) = cfg.single_process_oom_kill {
        cg.single_process_oom_kill = Some(b);
    }
    const MAX_WARNINGS: usize = 20;
    let more = unknown.len().saturating_sub(MAX_WARNINGS);
    o.config_warnings = unknown
        .into_iter()
        .take(MAX_WARNINGS)
        .map(|f| format!("{}: field {f:?} is not used by picolet", path.display()))
        .collect();
    if more > 0 {
        o.config_warnings.push(format!(
            "{}: {more} more fields are not used by picolet",
            path.display()
        ));
    }
    Ok(())
}

/// A quantity of bytes ("10Mi"); a negative one turns rotation off.
pub fn parse_log_max_size(v: &str) -> Result<Option<u64>, String> {
    let q = crate::api::Quantity::parse(v).map_err(|e| format!("invalid value {v:?}: {e}"))?;
    if q.is_negative() {
        return Ok(None);
    }
    Ok(u64::try_from(q.value()).ok())
}

fn log_max_files(n: i64) -> Result<usize, String> {
    match usize::try_from(n) {
        Ok(n) if n >= 2 => Ok(n),
        _ => Err("must be greater than 1".into()),
    }
}

pub(crate) fn bad(flag: &str, value: &str, reason: impl ToString) -> OptionsError {
    OptionsError::BadValue {
        flag: flag.to_owned(),
        value: value.to_owned(),
        reason: reason.to_string(),
    }
}

/// A subcommand's switch (`--flag` alone is true; `--flag=false` is allowed), with Go's
/// spellings of a boolean.
pub(crate) fn switch(flag: &str, inline: Option<&str>) -> Result<bool, OptionsError> {
    match inline {
        None | Some("true" | "1" | "t" | "T" | "TRUE" | "True") => Ok(true),
        Some("false" | "0" | "f" | "F" | "FALSE" | "False") => Ok(false),
        Some(v) => Err(bad(flag, v, "not true or false")),
    }
}

/// A subcommand flag's value: the one given inline (`--flag=v`), else the next argument
/// (`--flag v`, moving `i` past it).
pub(crate) fn flag_value(
    args: &[String],
    i: &mut usize,
    flag: &str,
    inline: Option<String>,
) -> Result<String, OptionsError> {
    if let Some(v) = inline {
        return Ok(v);
    }
    let v = args
        .get(*i)
        .cloned()
        .ok_or_else(|| OptionsError::MissingValue(flag.to_owned()))?;
    *i += 1;
    Ok(v)
}

/// Every flag picolet takes; each takes a value.
const FLAGS: &[&str] = &[
    "config",
    "pod-manifest-path",
    "container-runtime-endpoint",
    "image-service-endpoint",
    "runtime-request-timeout",
    "root-dir",
    "hostname-override",
    "node-ip",
    "healthz-port",
    "healthz-bind-address",
    "sync-frequency",
    "file-check-frequency",
    "container-log-max-size",
    "container-log-max-files",
    "kubeconfig",
    "bootstrap-kubeconfig",
    "rotate-certificates",
    "image-credential-provider-config",
    "image-credential-provider-bin-dir",
    "image-preload-dir",
    "apiserver-poll-interval",
    "node-labels",
    "register-with-taints",
    "image-gc-high-threshold",
    "image-gc-low-threshold",
    "minimum-image-ttl-duration",
    "pod-infra-container-image",
    "eviction-hard",
    "eviction-soft",
    "eviction-soft-grace-period",
    "eviction-minimum-reclaim",
    "eviction-pressure-transition-period",
    "eviction-max-pod-grace-period",
    "eviction-memory-psi-threshold",
    "cgroup-driver",
    "cgroups-per-qos",
    "cgroup-root",
    "kube-reserved",
    "system-reserved",
    "enforce-node-allocatable",
    "pod-max-pids",
    "max-pods",
    "allowed-unsafe-sysctls",
    "port",
    "address",
    "tls-cert-file",
    "tls-private-key-file",
    "tls-min-version",
    "client-ca-file",
    "anonymous-auth",
    "authentication-token-webhook",
    "authentication-token-webhook-cache-ttl",
    "authorization-mode",
    "authorization-webhook-cache-authorized-ttl",
    "authorization-webhook-cache-unauthorized-ttl",
    "proxy-server-host",
    "proxy-server-port",
    "ca-cert",
    "agent-cert",
    "agent-key",
    "service-account-token-path",
    "agent-id",
    "agent-identifiers",
    "keepalive-time",
    "proxy-allowed-destinations",
    "v",
];

/// Flags that are booleans: `--flag` alone means true, a value needs `=`, as in Go.
const BOOL_FLAGS: &[&str] = &[
    "rotate-certificates",
    "cgroups-per-qos",
    "anonymous-auth",
    "authentication-token-webhook",
];

/// Parses the arguments (without the program name).
pub fn parse(args: &[String]) -> Result<Command, OptionsError> {
    if args.first().map(String::as_str) == Some("validate") {
        let rest = &args[1..];
        if rest.iter().any(|a| a == "-h" || a == "--help") {
            return Ok(Command::Help);
        }
        if let Some(flag) = rest.iter().find(|a| a.len() > 1 && a.starts_with('-')) {
            return Err(OptionsError::Invalid(format!(
                "validate takes manifest files, not flags: {flag:?} (a file whose name starts with '-' is ./{flag})"
            )));
        }
        if rest.is_empty() {
            return Err(OptionsError::Invalid(
                "validate needs at least one manifest file: picolet validate FILE...".into(),
            ));
        }
        return Ok(Command::Validate(rest.iter().map(PathBuf::from).collect()));
    }
    if args.first().map(String::as_str) == Some("logs") {
        if args[1..].iter().any(|a| a == "-h" || a == "--help") {
            return Ok(Command::LogsHelp);
        }
        return Ok(Command::Logs(Box::new(crate::cli::logs::parse(
            &args[1..],
        )?)));
    }
    if args.first().map(String::as_str) == Some("exec") {
        let before_command = args[1..].iter().take_while(|a| *a != "--");
        if before_command
            .into_iter()
            .any(|a| a == "-h" || a == "--help")
        {
            return Ok(Command::ExecHelp);
        }
        return Ok(Command::Exec(Box::new(crate::cli::exec::parse(
            &args[1..],
        )?)));
    }
    if args.first().map(String::as_str) == Some("check") {
        return Ok(match parse(&args[1..])? {
            Command::Run(o) => Command::Check(o),
            other => other,
        });
    }
    // First pass: collect flag/value pairs, so the config file is applied before other flags.
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        match a.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--version" => return Ok(Command::Version),
            _ => {}
        }
        let Some(stripped) = a.strip_prefix("--").or_else(|| a.strip_prefix('-')) else {
            return Err(OptionsError::Unexpected(a.clone()));
        };
        let name = stripped.split_once('=').map_or(stripped, |(n, _)| n);
        if !FLAGS.contains(&name) {
            return Err(OptionsError::UnknownFlag(format!("--{name}")));
        }
        let (name, value) = match stripped.split_once('=') {
            Some((n, v)) => (n.to_owned(), v.to_owned()),
            None if BOOL_FLAGS.contains(&name) => (name.to_owned(), "true".to_owned()),
            None => {
                let v = args
                    .get(i)
                    .cloned()
                    .ok_or_else(|| OptionsError::MissingValue(a.clone()))?;
                i += 1;
                (stripped.to_owned(), v)
            }
        };
        pairs.push((name, value));
    }
    let mut o = Options::default();
    let mut ev = crate::eviction::Settings::default();
    let cfg_path = pairs
        .iter()
        .find(|(n, _)| n == "config")
        .map(|(_, p)| PathBuf::from(p));
    if let Some(path) = &cfg_path {
        load_config_eviction(path, &mut o, &mut ev)?;
    }
    use crate::eviction::threshold::{Given, parse_map};
    for (name, v) in pairs {
        let flag = format!("--{name}");
        let map =
            |sep: char| -> Result<Option<Given<crate::eviction::threshold::Pairs>>, OptionsError> {
                Ok(Some(Given {
                    origin: flag.clone(),
                    value: parse_map(&v, sep).map_err(|r| bad(&flag, &v, r))?,
                }))
            };
        match name.as_str() {
            "config" => {}
            "eviction-hard" => ev.hard = map('<')?,
            "eviction-soft" => ev.soft = map('<')?,
            "eviction-soft-grace-period" => ev.soft_grace_period = map('=')?,
            "eviction-minimum-reclaim" => ev.minimum_reclaim = map('=')?,
            "eviction-pressure-transition-period" => {
                ev.pressure_transition_period = Some(Given {
                    origin: flag.clone(),
                    value: v,
                })
            }
            "eviction-max-pod-grace-period" => {
                ev.max_pod_grace_period = Some(Given {
                    origin: flag.clone(),
                    value: v
                        .parse()
                        .map_err(|_| bad(&flag, &v, "not a number of seconds"))?,
                })
            }
            "eviction-memory-psi-threshold" => {
                ev.memory_psi_threshold = Some(Given {
                    origin: flag.clone(),
                    value: v,
                })
            }
            "pod-manifest-path" => o.pod_manifest_path = Some(PathBuf::from(v)),
            "container-runtime-endpoint" => o.container_runtime_endpoint = v,
            "image-service-endpoint" => o.image_service_endpoint = Some(v),
            "runtime-request-timeout" => {
                o.runtime_request_timeout = parse_duration(&v).map_err(|r| bad(&flag, &v, r))?
            }
            "root-dir" => o.root_dir = PathBuf::from(v),
            "kubeconfig" => o.kubeconfig = Some(PathBuf::from(v)),
            "bootstrap-kubeconfig" => o.bootstrap_kubeconfig = (!v.is_empty()).then(|| v.into()),
            "rotate-certificates" => {
                o.rotate_certificates =
                    Some(v.parse().map_err(|_| bad(&flag, &v, "not true or false"))?)
            }
            "image-credential-provider-config" => {
                o.image_credential_provider_config = Some(PathBuf::from(v))
            }
            "image-credential-provider-bin-dir" => {
                o.image_credential_provider_bin_dir = Some(PathBuf::from(v))
            }
            "image-preload-dir" => o.image_preload_dir = Some(PathBuf::from(v)),
            "apiserver-poll-interval" => {
                let d = parse_duration(&v).map_err(|r| bad(&flag, &v, r))?;
                o.apiserver_poll_interval = (!d.is_zero()).then_some(d);
            }
            "node-labels" => o.node_labels = parse_labels(&v).map_err(|r| bad(&flag, &v, r))?,
            "register-with-taints" => {
                o.register_with_taints = parse_taints(&v).map_err(|r| bad(&flag, &v, r))?
            }
            "allowed-unsafe-sysctls" => {
                let list: Vec<String> = v
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect();
                crate::admission::sysctl_allowlist("", &list).map_err(|r| bad(&flag, &v, r))?;
                o.allowed_unsafe_sysctls = list;
            }
            "hostname-override" => o.hostname_override = Some(v),
            "node-ip" => {
                o.node_ip = Some(v.parse().map_err(|_| bad(&flag, &v, "not an IP address"))?)
            }
            "healthz-port" => {
                o.healthz_port = v.parse().map_err(|_| bad(&flag, &v, "not a port number"))?
            }
            "healthz-bind-address" => {
                o.healthz_bind_address =
                    v.parse().map_err(|_| bad(&flag, &v, "not an IP address"))?
            }
            "sync-frequency" => {
                o.sync_frequency = parse_duration(&v).map_err(|r| bad(&flag, &v, r))?
            }
            "file-check-frequency" => {
                o.file_check_frequency = parse_duration(&v).map_err(|r| bad(&flag, &v, r))?
            }
            "image-gc-high-threshold" => {
                o.image_gc_high_threshold_percent = v
                    .parse()
                    .map_err(|_| bad(&flag, &v, "not a whole number"))?
            }
            "image-gc-low-threshold" => {
                o.image_gc_low_threshold_percent = v
                    .parse()
                    .map_err(|_| bad(&flag, &v, "not a whole number"))?
            }
            "minimum-image-ttl-duration" => {
                o.image_minimum_gc_age = parse_duration(&v).map_err(|r| bad(&flag, &v, r))?
            }
            "pod-infra-container-image" => {
                o.pod_infra_container_image = (!v.is_empty()).then_some(v)
            }
            "cgroup-driver" => {
                o.cgroups.driver = crate::cm::Driver::parse(&v).map_err(|r| bad(&flag, &v, r))?
            }
            "cgroups-per-qos" => {
                o.cgroups.per_qos = v.parse().map_err(|_| bad(&flag, &v, "not true or false"))?
            }
            "cgroup-root" => o.cgroups.root = v,
            "kube-reserved" => {
                o.cgroups.kube_reserved =
                    crate::cm::Reserved::parse_flag(&v).map_err(|r| bad(&flag, &v, r))?
            }
            "system-reserved" => {
                o.cgroups.system_reserved =
                    crate::cm::Reserved::parse_flag(&v).map_err(|r| bad(&flag, &v, r))?
            }
            "enforce-node-allocatable" => {
                o.cgroups.enforce_node_allocatable = v
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            }
            "max-pods" => o.max_pods = v.parse().map_err(|_| bad(&flag, &v, "not a number"))?,
            "pod-max-pids" => {
                o.cgroups.pod_pids_limit = v.parse().map_err(|_| bad(&flag, &v, "not a number"))?
            }
            "container-log-max-size" => {
                o.container_log.max_size = parse_log_max_size(&v).map_err(|r| bad(&flag, &v, r))?
            }
            "container-log-max-files" => {
                let n: i64 = v.parse().map_err(|_| bad(&flag, &v, "not an integer"))?;
                o.container_log.max_files = log_max_files(n).map_err(|r| bad(&flag, &v, r))?
            }
            "port" => {
                o.serving.port = Some(v.parse().map_err(|_| bad(&flag, &v, "not a port number"))?)
            }
            "address" => {
                o.serving.address = v.parse().map_err(|_| bad(&flag, &v, "not an IP address"))?
            }
            "tls-cert-file" => o.serving.tls_cert_file = Some(PathBuf::from(v)),
            "tls-private-key-file" => o.serving.tls_private_key_file = Some(PathBuf::from(v)),
            "tls-min-version" => {
                o.serving.tls13_only = parse_tls_version(&v).map_err(|r| bad(&flag, &v, r))?
            }
            "client-ca-file" => o.serving.client_ca_file = (!v.is_empty()).then(|| v.into()),
            "anonymous-auth" => {
                o.serving.anonymous = v.parse().map_err(|_| bad(&flag, &v, "not true or false"))?
            }
            "authentication-token-webhook" => {
                o.serving.webhook_authn =
                    Some(v.parse().map_err(|_| bad(&flag, &v, "not true or false"))?)
            }
            "authentication-token-webhook-cache-ttl" => {
                o.serving.webhook_cache_ttl = parse_duration(&v).map_err(|r| bad(&flag, &v, r))?
            }
            "authorization-mode" => {
                o.serving.authorization =
                    Some(AuthorizationMode::parse(&v).map_err(|r| bad(&flag, &v, r))?)
            }
            "authorization-webhook-cache-authorized-ttl" => {
                o.serving.authorized_ttl = parse_duration(&v).map_err(|r| bad(&flag, &v, r))?
            }
            "authorization-webhook-cache-unauthorized-ttl" => {
                o.serving.unauthorized_ttl = parse_duration(&v).map_err(|r| bad(&flag, &v, r))?
            }
            "proxy-server-host" => o.tunnel.host = v,
            "proxy-server-port" => {
                o.tunnel.port = v.parse().map_err(|_| bad(&flag, &v, "not a port number"))?
            }
            "ca-cert" => o.tunnel.ca_cert = (!v.is_empty()).then(|| v.into()),
            "agent-cert" => o.tunnel.agent_cert = (!v.is_empty()).then(|| v.into()),
            "agent-key" => o.tunnel.agent_key = (!v.is_empty()).then(|| v.into()),
            "service-account-token-path" => o.tunnel.token_path = (!v.is_empty()).then(|| v.into()),
            "agent-id" => o.tunnel.agent_id = (!v.is_empty()).then_some(v),
            "agent-identifiers" => o.tunnel.agent_identifiers = (!v.is_empty()).then_some(v),
            "keepalive-time" => {
                let d = parse_duration(&v).map_err(|r| bad(&flag, &v, r))?;
                if d < Duration::from_secs(1) {
                    return Err(bad(&flag, &v, "must be at least 1s"));
                }
                o.tunnel.keepalive = d
            }
            "proxy-allowed-destinations" => {
                o.tunnel.allowed = v
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            }
            "v" => {
                o.verbosity = v
                    .parse()
                    .map_err(|_| bad("-v", &v, "not a number from 0 to 10"))?
            }
            _ => unreachable!("flag names are checked against FLAGS"),
        }
    }
    o.eviction = ev.build().map_err(|reason| {
        // A setting from the file (its field name starts the message) is named with the
        // file; a flag names itself.
        match (&cfg_path, !reason.starts_with("--")) {
            (Some(path), true) => OptionsError::Config {
                path: path.clone(),
                reason,
            },
            _ => OptionsError::Invalid(reason),
        }
    })?;
    if o.sync_frequency.is_zero() {
        return Err(bad("--sync-frequency", "0", "must be positive"));
    }
    if o.file_check_frequency.is_zero() {
        return Err(bad("--file-check-frequency", "0", "must be positive"));
    }
    validate_image_gc(&o)?;
    if o.serving.tls_cert_file.is_some() != o.serving.tls_private_key_file.is_some() {
        return Err(OptionsError::Invalid(
            "--tls-cert-file and --tls-private-key-file (tlsCertFile, tlsPrivateKeyFile) go \
             together: set both or neither"
                .into(),
        ));
    }
    if o.bootstrap_kubeconfig.is_some() && o.kubeconfig.is_none() {
        return Err(OptionsError::Invalid(
            "--bootstrap-kubeconfig needs --kubeconfig: the path the node's own kubeconfig is              written to"
                .into(),
        ));
    }
    if o.serving.server_tls_bootstrap && o.serving.tls_cert_file.is_some() {
        return Err(OptionsError::Invalid(
            "serverTLSBootstrap and --tls-cert-file (tlsCertFile) exclude each other: the              serving certificate comes either from the cluster or from the file"
                .into(),
        ));
    }
    // "none" alone means no enforcement, as an empty list.
    o.cgroups.enforce_node_allocatable.retain(|e| e != "none");
    o.cgroups.validate().map_err(OptionsError::Invalid)?;
    crate::cri::parse_endpoint(&o.container_runtime_endpoint).map_err(|e| {
        bad(
            "--container-runtime-endpoint",
            &o.container_runtime_endpoint,
            e,
        )
    })?;
    Ok(Command::Run(Box::new(o)))
}

/// The image GC settings' checks, with the kubelet's wording: each threshold 0 to 100, the low
/// one below the high one, a maximum age above the minimum age.
pub fn validate_image_gc(o: &Options) -> Result<(), OptionsError> {
    let (high, low) = (
        o.image_gc_high_threshold_percent,
        o.image_gc_low_threshold_percent,
    );
    let mut errs = Vec::new();
    if !(0..=100).contains(&high) {
        errs.push(format!(
            "imageGCHighThresholdPercent (--image-gc-high-threshold) {high} must be between 0 and 100, inclusive"
        ));
    }
    if !(0..=100).contains(&low) {
        errs.push(format!(
            "imageGCLowThresholdPercent (--image-gc-low-threshold) {low} must be between 0 and 100, inclusive"
        ));
    }
    if low >= high {
        errs.push(format!(
            "imageGCLowThresholdPercent (--image-gc-low-threshold) {low} must be less than \
             imageGCHighThresholdPercent (--image-gc-high-threshold) {high}"
        ));
    }
    let (min, max) = (o.image_minimum_gc_age, o.image_maximum_gc_age);
    if !max.is_zero() && max <= min {
        errs.push(format!(
            "imageMaximumGCAge {} must be greater than imageMinimumGCAge {}",
            format_duration(max),
            format_duration(min)
        ));
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(OptionsError::Invalid(format!(
            "invalid configuration: {}",
            errs.join("; ")
        )))
    }
}

impl Options {
    /// The image GC policy; the options have passed [`validate_image_gc`].
    pub fn image_gc_policy(&self) -> crate::kuberuntime::image_gc_manager::ImageGcPolicy {
        let pct = |v: i32| u8::try_from(v.clamp(0, 100)).unwrap_or(100);
        crate::kuberuntime::image_gc_manager::ImageGcPolicy {
            high_threshold_percent: pct(self.image_gc_high_threshold_percent),
            low_threshold_percent: pct(self.image_gc_low_threshold_percent),
            min_age: self.image_minimum_gc_age,
            max_age: self.image_maximum_gc_age,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| (*x).to_owned()).collect()
    }

    fn run(s: &[&str]) -> Options {
        match parse(&args(s)).unwrap() {
            Command::Run(o) => *o,
            c => panic!("{c:?}"),
        }
    }

    #[test]
    fn konnectivity_agent_flags() {
        assert_eq!(run(&[]).tunnel, Tunnel::default());
        let t = run(&[
            "--proxy-server-host=proxy.example",
            "--proxy-server-port=8132",
            "--ca-cert=/etc/k/ca.crt",
            "--agent-cert=/etc/k/a.crt",
            "--agent-key=/etc/k/a.key",
            "--service-account-token-path=/var/run/t",
            "--agent-id=edge-7",
            "--agent-identifiers=host=edge-7",
            "--keepalive-time=30s",
            "--proxy-allowed-destinations=10.0.0.5:9100, *",
        ])
        .tunnel;
        assert_eq!(t.host, "proxy.example");
        assert_eq!(t.port, 8132);
        assert_eq!(t.ca_cert, Some(PathBuf::from("/etc/k/ca.crt")));
        assert_eq!(t.agent_cert, Some(PathBuf::from("/etc/k/a.crt")));
        assert_eq!(t.agent_key, Some(PathBuf::from("/etc/k/a.key")));
        assert_eq!(t.token_path, Some(PathBuf::from("/var/run/t")));
        assert_eq!(t.agent_id.as_deref(), Some("edge-7"));
        assert_eq!(t.agent_identifiers.as_deref(), Some("host=edge-7"));
        assert_eq!(t.keepalive, Duration::from_secs(30));
        assert_eq!(t.allowed, ["10.0.0.5:9100", "*"]);
        let e = parse(&args(&["--proxy-server-port=99999"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--proxy-server-port") && e.contains("99999"),
            "{e}"
        );
        let e = parse(&args(&["--keepalive-time=10ms"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--keepalive-time") && e.contains("at least 1s"),
            "{e}"
        );
    }

    #[test]
    fn bootstrap_and_rotation_flags_and_fields() {
        let o = run(&["--kubeconfig", "/k"]);
        assert!(!o.rotation(), "off without a bootstrap kubeconfig");
        let o = run(&["--kubeconfig", "/k", "--bootstrap-kubeconfig", "/b"]);
        assert_eq!(o.bootstrap_kubeconfig.as_deref(), Some(Path::new("/b")));
        assert!(o.rotation(), "on by default when bootstrapping");
        let o = run(&[
            "--kubeconfig",
            "/k",
            "--bootstrap-kubeconfig",
            "/b",
            "--rotate-certificates=false",
        ]);
        assert!(!o.rotation());
        let o = run(&["--kubeconfig", "/k", "--rotate-certificates"]);
        assert!(o.rotation());
        let e = parse(&args(&["--bootstrap-kubeconfig", "/b"])).unwrap_err();
        assert!(e.to_string().contains("needs --kubeconfig"), "{e}");
        let mut o = Options::default();
        parse_config(
            b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
              rotateCertificates: true\nserverTLSBootstrap: true\n",
            Path::new("/c.yaml"),
            &mut o,
        )
        .unwrap();
        assert_eq!(o.rotate_certificates, Some(true));
        assert!(o.serving.server_tls_bootstrap);
        assert!(o.config_warnings.is_empty(), "{:?}", o.config_warnings);
        let e = parse_config(
            b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
              rotateCertificates: maybe\n",
            Path::new("/c.yaml"),
            &mut o,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("/c.yaml") && e.contains("rotateCertificates"),
            "{e}"
        );
    }

    #[test]
    fn image_gc_settings_from_flags_and_file_with_upstream_defaults() {
        let o = run(&["--pod-manifest-path", "/m"]);
        let p = o.image_gc_policy();
        assert_eq!(
            (p.high_threshold_percent, p.low_threshold_percent),
            (85, 80)
        );
        assert_eq!(p.min_age, Duration::from_secs(120));
        assert_eq!(p.max_age, Duration::ZERO);
        assert_eq!(o.pod_infra_container_image, None);
        let o = run(&[
            "--image-gc-high-threshold=70",
            "--image-gc-low-threshold",
            "60",
            "--minimum-image-ttl-duration=5m",
            "--pod-infra-container-image=registry.k8s.io/pause:3.10",
        ]);
        assert_eq!(
            (
                o.image_gc_high_threshold_percent,
                o.image_gc_low_threshold_percent
            ),
            (70, 60)
        );
        assert_eq!(o.image_minimum_gc_age, Duration::from_secs(300));
        assert_eq!(
            o.pod_infra_container_image.as_deref(),
            Some("registry.k8s.io/pause:3.10")
        );
        let cfg = write_cfg(
            "gc.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             imageGCHighThresholdPercent: 1\nimageGCLowThresholdPercent: 0\n\
             imageMinimumGCAge: 0s\nimageMaximumGCAge: 168h\n",
        );
        let o = run(&["--config", cfg.to_str().unwrap()]);
        let p = o.image_gc_policy();
        assert_eq!((p.high_threshold_percent, p.low_threshold_percent), (1, 0));
        assert_eq!(p.min_age, Duration::ZERO);
        assert_eq!(p.max_age, Duration::from_secs(168 * 3600));
        assert!(o.config_warnings.is_empty(), "{:?}", o.config_warnings);
        // The flag wins over the file.
        let o = run(&[
            "--config",
            cfg.to_str().unwrap(),
            "--image-gc-low-threshold=0",
            "--image-gc-high-threshold=50",
        ]);
        assert_eq!(o.image_gc_high_threshold_percent, 50);
        std::fs::remove_file(&cfg).unwrap();
    }

    #[test]
    fn bad_image_gc_settings_name_the_field_and_the_value() {
        let err = |a: &[&str]| parse(&args(a)).unwrap_err().to_string();
        assert_eq!(
            err(&["--image-gc-high-threshold=101"]),
            "invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) 101 \
             must be between 0 and 100, inclusive"
        );
        let e = err(&["--image-gc-low-threshold=-1"]);
        assert!(
            e.contains(
                "imageGCLowThresholdPercent (--image-gc-low-threshold) -1 must be between 0 and 100"
            ),
            "{e}"
        );
        assert_eq!(
            err(&["--image-gc-low-threshold=85"]),
            "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 85 \
             must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 85"
        );
        assert!(err(&["--image-gc-high-threshold=50"]).contains("80 must be less than"));
        assert_eq!(
            err(&["--image-gc-high-threshold=x"]),
            "flag --image-gc-high-threshold: invalid value \"x\": not a whole number"
        );
        let e = err(&["--minimum-image-ttl-duration=soon"]);
        assert!(
            e.starts_with("flag --minimum-image-ttl-duration: invalid value \"soon\""),
            "{e}"
        );
        let cfg = write_cfg(
            "gc-bad.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             imageMaximumGCAge: 1m\n",
        );
        assert_eq!(
            err(&["--config", cfg.to_str().unwrap()]),
            "invalid configuration: imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s"
        );
        std::fs::remove_file(&cfg).unwrap();
        let cfg = write_cfg(
            "gc-bad2.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             imageMinimumGCAge: later\n",
        );
        let e = err(&["--config", cfg.to_str().unwrap()]);
        assert!(
            e.contains("gc-bad2.yaml")
                && e.contains("imageMinimumGCAge: invalid duration \"later\""),
            "{e}"
        );
        std::fs::remove_file(&cfg).unwrap();
    }

    #[test]
    fn flags_both_forms() {
        let o = run(&[
            "--pod-manifest-path=/etc/k",
            "--hostname-override",
            "edge",
            "-v=4",
            "--node-ip",
            "10.0.0.5",
        ]);
        assert_eq!(o.pod_manifest_path, Some(PathBuf::from("/etc/k")));
        assert_eq!(o.hostname_override.as_deref(), Some("edge"));
        assert_eq!(o.verbosity, 4);
        assert_eq!(o.node_ip, Some("10.0.0.5".parse().unwrap()));
        assert_eq!(run(&["--v", "2"]).verbosity, 2);
    }

    #[test]
    fn bad_flags_are_named() {
        let e = parse(&args(&["--pod-manifest-path"]))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "flag --pod-manifest-path needs a value");
        let e = parse(&args(&["--nope=1"])).unwrap_err().to_string();
        assert_eq!(e, "unknown flag \"--nope\" (see --help)");
        let e = parse(&args(&["--nope"])).unwrap_err().to_string();
        assert_eq!(e, "unknown flag \"--nope\" (see --help)");
        let e = parse(&args(&["--node-ip=300.1.1.1"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--node-ip") && e.contains("300.1.1.1"), "{e}");
        let e = parse(&args(&["--container-runtime-endpoint=tcp://x"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("tcp://x"), "{e}");
        assert!(matches!(
            parse(&args(&["stray"])),
            Err(OptionsError::Unexpected(_))
        ));
    }

    #[test]
    fn cgroup_flags() {
        let o = run(&[]);
        assert_eq!(o.cgroups, crate::cm::CgroupConfig::default());
        assert!(o.cgroups.per_qos && o.cgroups.enforces_pods());
        let o = run(&[
            "--cgroup-driver=systemd",
            "--cgroup-root",
            "/edge.slice",
            "--kube-reserved=cpu=100m,memory=100Mi",
            "--system-reserved",
            "memory=50Mi",
            "--pod-max-pids=512",
            "--cgroups-per-qos",
        ]);
        assert_eq!(o.cgroups.driver, crate::cm::Driver::Systemd);
        assert_eq!(o.cgroups.root, "/edge.slice");
        assert_eq!(o.cgroups.reserved().memory, 150 << 20);
        assert_eq!(o.cgroups.reserved().milli_cpu, 100);
        assert_eq!(o.cgroups.pod_pids_limit, 512);
        let o = run(&["--cgroups-per-qos=false", "--enforce-node-allocatable=none"]);
        assert!(!o.cgroups.per_qos && !o.cgroups.enforces_pods());
        let e = parse(&args(&["--cgroups-per-qos=false"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--enforce-node-allocatable"), "{e}");
        let e = parse(&args(&["--cgroup-driver=cgroupsfs"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--cgroup-driver") && e.contains("cgroupsfs"),
            "{e}"
        );
        let e = parse(&args(&["--kube-reserved=gpu=1"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--kube-reserved") && e.contains("gpu"), "{e}");
    }

    #[test]
    fn subcommands() {
        assert_eq!(parse(&args(&["--version"])).unwrap(), Command::Version);
        assert_eq!(parse(&args(&["-h"])).unwrap(), Command::Help);
        assert_eq!(
            parse(&args(&["validate", "a.yaml"])).unwrap(),
            Command::Validate(vec!["a.yaml".into()])
        );
        assert_eq!(
            parse(&args(&["validate"])).unwrap_err().to_string(),
            "validate needs at least one manifest file: picolet validate FILE..."
        );
        assert_eq!(
            parse(&args(&["validate", "--help"])).unwrap(),
            Command::Help
        );
        assert_eq!(
            parse(&args(&["validate", "a.yaml", "-h"])).unwrap(),
            Command::Help
        );
        assert_eq!(
            parse(&args(&["validate", "--strict", "a.yaml"]))
                .unwrap_err()
                .to_string(),
            "validate takes manifest files, not flags: \"--strict\" (a file whose name starts with '-' is ./--strict)"
        );
        match parse(&args(&["check", "--root-dir", "/r"])).unwrap() {
            Command::Check(o) => assert_eq!(o.root_dir, PathBuf::from("/r")),
            c => panic!("{c:?}"),
        }
    }

    fn write_cfg(name: &str, body: &str) -> PathBuf {
        let p =
            std::env::temp_dir().join(format!("picolet-cfg-{name}-{}.yaml", std::process::id()));
        std::fs::write(&p, body).unwrap();
        p
    }

    #[test]
    fn config_file_and_flag_precedence() {
        let p = write_cfg(
            "ok",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: /etc/kubernetes/manifests\nfileCheckFrequency: 5s\nsyncFrequency: 30s\ncontainerRuntimeEndpoint: unix:///run/k3s.sock\nhealthzPort: 0\ncgroupDriver: systemd\nkubeReserved:\n  cpu: 100m\n  memory: 100Mi\npodPidsLimit: 1024\nenforceNodeAllocatable: [pods]\nmaxPods: 20\nallowedUnsafeSysctls: [\"kernel.shm*\"]\nmaxOpenFiles: 1000\n",
        );
        let ps = p.display().to_string();
        let o = run(&["--config", &ps, "--file-check-frequency=7s"]);
        assert_eq!(
            o.pod_manifest_path,
            Some(PathBuf::from("/etc/kubernetes/manifests"))
        );
        assert_eq!(
            o.file_check_frequency,
            Duration::from_secs(7),
            "flags override the file"
        );
        assert_eq!(o.sync_frequency, Duration::from_secs(30));
        assert_eq!(o.container_runtime_endpoint, "unix:///run/k3s.sock");
        assert_eq!(o.healthz_port, 0);
        assert_eq!(o.config_warnings.len(), 1);
        assert!(o.config_warnings[0].contains("maxOpenFiles"));
        assert_eq!(o.max_pods, 20);
        assert_eq!(o.allowed_unsafe_sysctls, ["kernel.shm*"]);
        assert_eq!(run(&["--config", &ps, "--max-pods=300"]).max_pods, 300);
        assert_eq!(run(&[]).max_pods, 110);
        assert_eq!(
            run(&["--allowed-unsafe-sysctls=kernel.msg*,net.core.somaxconn"])
                .allowed_unsafe_sysctls,
            ["kernel.msg*", "net.core.somaxconn"]
        );
        assert_eq!(
            parse(&args(&["--allowed-unsafe-sysctls=vm.swappiness"]))
                .unwrap_err()
                .to_string(),
            bad(
                "--allowed-unsafe-sysctls",
                "vm.swappiness",
                "the sysctls \"vm.swappiness\" are not known to be namespaced"
            )
            .to_string()
        );
        assert_eq!(o.cgroups.driver, crate::cm::Driver::Systemd);
        assert_eq!(o.cgroups.kube_reserved.memory, 100 << 20);
        assert_eq!(o.cgroups.pod_pids_limit, 1024);
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn container_log_rotation_settings() {
        assert_eq!(
            run(&[]).container_log,
            crate::logs::rotate::Policy::default()
        );
        let o = run(&[
            "--container-log-max-size=1Ki",
            "--container-log-max-files",
            "3",
        ]);
        assert_eq!(o.container_log.max_size, Some(1024));
        assert_eq!(o.container_log.max_files, 3);
        assert_eq!(
            run(&["--container-log-max-size=-1"]).container_log.max_size,
            None
        );
        assert_eq!(
            run(&["--container-log-max-size=10M"])
                .container_log
                .max_size,
            Some(10_000_000)
        );
        let e = parse(&args(&["--container-log-max-files=1"]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "flag --container-log-max-files: invalid value \"1\": must be greater than 1"
        );
        let e = parse(&args(&["--container-log-max-size=lots"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--container-log-max-size") && e.contains("lots"),
            "{e}"
        );
        let p = write_cfg(
            "logs",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncontainerLogMaxSize: 2Mi\ncontainerLogMaxFiles: 4\n",
        );
        let ps = p.display().to_string();
        let o = run(&["--config", &ps]);
        assert_eq!(o.container_log.max_size, Some(2 * 1024 * 1024));
        assert_eq!(o.container_log.max_files, 4);
        assert!(o.config_warnings.is_empty());
        let o = run(&["--config", &ps, "--container-log-max-files=6"]);
        assert_eq!(o.container_log.max_files, 6, "flags override the file");
        std::fs::remove_file(&p).unwrap();
        let p = write_cfg(
            "logs-bad",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncontainerLogMaxFiles: 0\n",
        );
        let e = parse(&args(&["--config", &p.display().to_string()]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&p.display().to_string())
                && e.contains("containerLogMaxFiles: invalid value 0: must be greater than 1"),
            "{e}"
        );
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn the_logs_subcommand() {
        match parse(&args(&["logs", "web", "-f"])).unwrap() {
            Command::Logs(a) => assert!(a.follow && a.pod == "web"),
            c => panic!("{c:?}"),
        }
        assert_eq!(
            parse(&args(&["logs", "--help"])).unwrap(),
            Command::LogsHelp
        );
    }

    #[test]
    fn bad_config_names_file_and_field() {
        let p = write_cfg(
            "bad",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzPort: lots\n",
        );
        let e = parse(&args(&["--config", &p.display().to_string()]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&p.display().to_string()) && e.contains("healthzPort"),
            "{e}"
        );
        std::fs::remove_file(&p).unwrap();
        let p = write_cfg(
            "dur",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsyncFrequency: soon\n",
        );
        let e = parse(&args(&["--config", &p.display().to_string()]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("syncFrequency") && e.contains("soon"), "{e}");
        std::fs::remove_file(&p).unwrap();
        let p = write_cfg("kind", "apiVersion: v1\nkind: Pod\n");
        let e = parse(&args(&["--config", &p.display().to_string()]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("kind"), "{e}");
        std::fs::remove_file(&p).unwrap();
        let e = parse(&args(&["--config", "/nonexistent/cfg.yaml"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/cfg.yaml"), "{e}");
    }

    #[test]
    fn eviction_flags_and_config() {
        use crate::eviction::Signal;
        use crate::eviction::threshold::Amount;
        let o = run(&[]);
        assert_eq!(o.eviction, crate::eviction::Config::default());
        let p = write_cfg(
            "evict",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             evictionHard:\n  memory.available: 200Mi\n  pid.available: \"1000\"\n\
             evictionSoft:\n  memory.available: 1Gi\nevictionSoftGracePeriod:\n  memory.available: 1m30s\n\
             evictionMinimumReclaim:\n  memory.available: 100Mi\n\
             evictionPressureTransitionPeriod: 1m\nevictionMaxPodGracePeriod: 20\n",
        );
        let ps = p.display().to_string();
        let o = run(&["--config", &ps]);
        let t = &o.eviction.thresholds;
        assert_eq!(t.len(), 3, "{t:?}");
        assert!(t.iter().any(|t| t.signal == Signal::PidAvailable && t.hard));
        let soft = t.iter().find(|t| !t.hard).unwrap();
        assert_eq!(soft.grace, Duration::from_secs(90));
        assert_eq!(soft.min_reclaim, Some(Amount::Absolute(100 << 20)));
        assert_eq!(
            o.eviction.pressure_transition_period,
            Duration::from_secs(60)
        );
        assert_eq!(o.eviction.max_pod_grace_period, 20);
        assert_eq!(o.config_warnings, Vec::<String>::new());
        // Flags override the file, each map whole.
        let o = run(&[
            "--config",
            &ps,
            "--eviction-hard=memory.available<1Gi,nodefs.available<5%",
            "--eviction-pressure-transition-period=30s",
            "--eviction-memory-psi-threshold=10",
        ]);
        let hard: Vec<_> = o.eviction.thresholds.iter().filter(|t| t.hard).collect();
        assert_eq!(hard.len(), 2);
        assert_eq!(hard[0].value, Amount::Absolute(1 << 30));
        assert_eq!(
            o.eviction.pressure_transition_period,
            Duration::from_secs(30)
        );
        assert_eq!(o.eviction.memory_psi_threshold, Some(10.0));
        std::fs::remove_file(&p).unwrap();

        let e = parse(&args(&["--eviction-hard=memory.available>1Gi"]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "flag --eviction-hard: invalid value \"memory.available>1Gi\": \"memory.available>1Gi\": expected signal<value"
        );
        let e = parse(&args(&["--eviction-soft=memory.available<1Gi"]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--eviction-soft: memory.available: a soft threshold needs a grace period in evictionSoftGracePeriod"
        );
        let e = parse(&args(&["--eviction-max-pod-grace-period=soon"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--eviction-max-pod-grace-period") && e.contains("soon"),
            "{e}"
        );
        let p = write_cfg(
            "evict-bad",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard:\n  nodefs.available: 110%\n",
        );
        let e = parse(&args(&["--config", &p.display().to_string()]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "{}: evictionHard: nodefs.available: percentage \"110%\" must be between 0% and 100%",
                p.display()
            )
        );
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn hostile_config_files_are_refused_by_name() {
        let cfg = |body: String| {
            let mut o = Options::default();
            parse_config(
                body.as_bytes(),
                Path::new("/etc/picolet/config.yaml"),
                &mut o,
            )
            .map(|()| o)
            .map_err(|e| e.to_string())
        };
        let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
        let e = cfg(format!(
            "{head}x: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        ))
        .unwrap_err();
        assert_eq!(
            e,
            "/etc/picolet/config.yaml: refused: nested deeper than the limit of 64 levels at line 3 column 67"
        );
        let e = cfg(format!(
            "{head}x: &a [{}]\ny: [{}]\n",
            "1,".repeat(100),
            "*a,".repeat(300)
        ))
        .unwrap_err();
        assert!(
            e.contains("refused: more than the limit of 20000 nodes"),
            "{e}"
        );
        let many: String = (0..50).map(|i| format!("unused{i}: 1\n")).collect();
        let o = cfg(format!("{head}{many}")).unwrap();
        assert_eq!(o.config_warnings.len(), 21);
        assert!(o.config_warnings[20].ends_with("30 more fields are not used by picolet"));
        // Not a regular file: refused at once, never read (a FIFO would block a plain read).
        let e = parse(&args(&["--config", "/dev/zero"]))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "/dev/zero: not a regular file: it is a character device");
    }
}
