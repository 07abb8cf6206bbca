//! The options of a run, with the kubelet's flag names and `KubeletConfiguration`
//! (kubelet.config.k8s.io/v1beta1) field names: [`Options`], their defaults, and the parsers of
//! values some settings share. Every setting is a row of `flags::SETTINGS`; `parse` reads the
//! flags and the file through that table.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::api::{Taint, format_duration};
pub use crate::content_type::ContentType;
/// Where the tests name it.
pub use crate::konnectivity::Tunnel;
// The node API's settings, a field of `Options`.
use crate::server::settings::Serving;

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
    /// `clusterDNS`: the nameservers of `ClusterFirst` pods (none: the node's resolv.conf).
    pub cluster_dns: Vec<IpAddr>,
    /// `clusterDomain`: the DNS domain of the cluster, in those pods' search paths.
    pub cluster_domain: String,
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
    /// `imagePullCredentialsVerificationPolicy` and `preloadedImagesVerificationAllowlist`:
    /// which images already on the node a pod must show credentials for (KEP-2535).
    pub image_pull_verification: crate::kuberuntime::pullmanager::Policy,
    /// List the node's pods every this long instead of watching them.
    pub apiserver_poll_interval: Option<Duration>,
    /// `--apiserver-watch-bookmarks`: whether watches ask for bookmarks.
    pub apiserver_watch_bookmarks: bool,
    /// `configMapAndSecretChangeDetectionStrategy`: how changes of the ConfigMaps and Secrets
    /// the pods use are seen; default `Watch`.
    pub config_map_and_secret_change_detection_strategy: crate::objects::ChangeDetection,
    /// `--kube-api-content-type`, `contentType`: the encoding asked of the apiserver for the
    /// answers to the node's writes; default protobuf.
    pub kube_api_content_type: ContentType,
    /// `nodeLeaseDurationSeconds`: how long the node's Lease holds (renewed every quarter of
    /// it); default 40.
    pub node_lease_duration_seconds: u32,
    /// `--node-status-update-frequency`, `nodeStatusUpdateFrequency`: how often the node
    /// status is computed, and posted when it changed; default 10 s.
    pub node_status_update_frequency: Duration,
    /// `nodeStatusReportFrequency`: how often the node status is posted when nothing changed;
    /// default 5 min.
    pub node_status_report_frequency: Duration,
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
            cluster_dns: Vec::new(),
            cluster_domain: String::new(),
            healthz_port: 10248,
            healthz_bind_address: IpAddr::from([127, 0, 0, 1]),
            sync_frequency: Duration::from_secs(60),
            file_check_frequency: Duration::from_secs(20),
            container_log: crate::logs::rotate::Policy::default(),
            verbosity: 0,
            image_credential_provider_config: None,
            image_credential_provider_bin_dir: None,
            image_preload_dir: None,
            image_pull_verification: Default::default(),
            kubeconfig: None,
            bootstrap_kubeconfig: None,
            rotate_certificates: None,
            apiserver_poll_interval: None,
            apiserver_watch_bookmarks: true,
            config_map_and_secret_change_detection_strategy: Default::default(),
            kube_api_content_type: ContentType::default(),
            node_lease_duration_seconds: 40,
            node_status_update_frequency: Duration::from_secs(10),
            node_status_report_frequency: Duration::from_secs(300),
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

/// A quantity of bytes ("10Mi"); a negative one turns rotation off.
pub fn parse_log_max_size(v: &str) -> Result<Option<u64>, String> {
    let q = crate::api::Quantity::parse(v).map_err(|e| format!("invalid value {v:?}: {e}"))?;
    if q.is_negative() {
        return Ok(None);
    }
    Ok(u64::try_from(q.value()).ok())
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
