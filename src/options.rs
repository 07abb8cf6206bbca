//! Command line and configuration file, with the kubelet's flag names and
//! `KubeletConfiguration` (kubelet.config.k8s.io/v1beta1) field names. Flags override the file.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::limits::{self, Limits, Syntax};

pub const USAGE: &str = "\
usage: picolet [flags]
       picolet validate FILE...
       picolet check [flags]   (preflight: cgroups, runtime, overlayfs, directories, clock)
       picolet logs POD [CONTAINER] [flags]   (a container's log; picolet logs --help)

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
  --sync-frequency DUR               full resync period of each pod (default 1m0s)
  --file-check-frequency DUR         manifest directory re-list period (default 20s)
  --container-log-max-size SIZE      rotate a container's log at this size (default 10Mi;
                                     negative: never)
  --container-log-max-files N        log files kept per container, the live one included
                                     (default 5, at least 2)
  --kubeconfig FILE                  join the cluster of this kubeconfig (node identity
                                     system:node:<name>); without it, static pods only
  --apiserver-poll-interval DUR      list the node's pods this often instead of watching
  --node-labels k=v,...              labels to register the Node with
  --register-with-taints k=v:Effect,...  taints to register the Node with
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
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Run(Box<Options>),
    Validate(Vec<PathBuf>),
    /// Preflight checks with the options of a run.
    Check(Box<Options>),
    /// `picolet logs`: a container's log through the local API.
    Logs(Box<crate::logs::cli::LogsArgs>),
    /// `picolet logs --help`.
    LogsHelp,
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
    /// List the node's pods every this long instead of watching them.
    pub apiserver_poll_interval: Option<Duration>,
    /// Labels the Node is registered with (`--node-labels k=v,...`).
    pub node_labels: Vec<(String, String)>,
    /// Taints the Node is registered with (`--register-with-taints k=v:Effect,...`).
    pub register_with_taints: Vec<Taint>,
    /// Unknown configuration fields, to be logged once the logger runs.
    pub config_warnings: Vec<String>,
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
            kubeconfig: None,
            apiserver_poll_interval: None,
            node_labels: Vec::new(),
            register_with_taints: Vec::new(),
            config_warnings: Vec::new(),
        }
    }
}

/// A node taint, as `--register-with-taints` gives it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Taint {
    pub key: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub value: String,
    pub effect: String,
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

/// Parses a Go duration ("20s", "1m30s", "500ms", "2h", "1.5s").
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration".into());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(format!("expected a number at {rest:?}"));
        }
        let n: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("bad number {:?}", &rest[..num_len]))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err("missing unit (use ns, us, ms, s, m or h)".into()),
            u => return Err(format!("unknown unit {u:?}")),
        };
        total += n * scale;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|e| e.to_string())
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
    container_log_max_size: Option<String>,
    container_log_max_files: Option<i64>,
}

const CONFIG_API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";

/// Reads a KubeletConfiguration file into `o`. The file must be a regular file within
/// [`Limits::CONFIG`].
pub fn load_config(path: &Path, o: &mut Options) -> Result<(), OptionsError> {
    let bytes = limits::read_file(path, &Limits::CONFIG).map_err(|e| OptionsError::Config {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    parse_config(&bytes, path, o)
}

/// Applies a KubeletConfiguration document to `o`; `path` names it in errors.
pub fn parse_config(bytes: &[u8], path: &Path, o: &mut Options) -> Result<(), OptionsError> {
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

fn bad(flag: &str, value: &str, reason: impl ToString) -> OptionsError {
    OptionsError::BadValue {
        flag: flag.to_owned(),
        value: value.to_owned(),
        reason: reason.to_string(),
    }
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
    "apiserver-poll-interval",
    "node-labels",
    "register-with-taints",
    "v",
];

/// Parses the arguments (without the program name).
pub fn parse(args: &[String]) -> Result<Command, OptionsError> {
    if args.first().map(String::as_str) == Some("validate") {
        let files: Vec<PathBuf> = args[1..].iter().map(PathBuf::from).collect();
        if files.is_empty() {
            return Err(OptionsError::MissingValue("validate FILE".into()));
        }
        return Ok(Command::Validate(files));
    }
    if args.first().map(String::as_str) == Some("logs") {
        if args[1..].iter().any(|a| a == "-h" || a == "--help") {
            return Ok(Command::LogsHelp);
        }
        return Ok(Command::Logs(Box::new(crate::logs::cli::parse(
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
    if let Some((_, path)) = pairs.iter().find(|(n, _)| n == "config") {
        load_config(Path::new(path), &mut o)?;
    }
    for (name, v) in pairs {
        let flag = format!("--{name}");
        match name.as_str() {
            "config" => {}
            "pod-manifest-path" => o.pod_manifest_path = Some(PathBuf::from(v)),
            "container-runtime-endpoint" => o.container_runtime_endpoint = v,
            "image-service-endpoint" => o.image_service_endpoint = Some(v),
            "runtime-request-timeout" => {
                o.runtime_request_timeout = parse_duration(&v).map_err(|r| bad(&flag, &v, r))?
            }
            "root-dir" => o.root_dir = PathBuf::from(v),
            "kubeconfig" => o.kubeconfig = Some(PathBuf::from(v)),
            "apiserver-poll-interval" => {
                let d = parse_duration(&v).map_err(|r| bad(&flag, &v, r))?;
                o.apiserver_poll_interval = (!d.is_zero()).then_some(d);
            }
            "node-labels" => o.node_labels = parse_labels(&v).map_err(|r| bad(&flag, &v, r))?,
            "register-with-taints" => {
                o.register_with_taints = parse_taints(&v).map_err(|r| bad(&flag, &v, r))?
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
            "container-log-max-size" => {
                o.container_log.max_size = parse_log_max_size(&v).map_err(|r| bad(&flag, &v, r))?
            }
            "container-log-max-files" => {
                let n: i64 = v.parse().map_err(|_| bad(&flag, &v, "not an integer"))?;
                o.container_log.max_files = log_max_files(n).map_err(|r| bad(&flag, &v, r))?
            }
            "v" => {
                o.verbosity = v
                    .parse()
                    .map_err(|_| bad("-v", &v, "not a number from 0 to 10"))?
            }
            _ => unreachable!("flag names are checked against FLAGS"),
        }
    }
    if o.sync_frequency.is_zero() {
        return Err(bad("--sync-frequency", "0", "must be positive"));
    }
    if o.file_check_frequency.is_zero() {
        return Err(bad("--file-check-frequency", "0", "must be positive"));
    }
    crate::cri::parse_endpoint(&o.container_runtime_endpoint).map_err(|e| {
        bad(
            "--container-runtime-endpoint",
            &o.container_runtime_endpoint,
            e,
        )
    })?;
    Ok(Command::Run(Box::new(o)))
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
    fn durations() {
        assert_eq!(parse_duration("20s").unwrap(), Duration::from_secs(20));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        for bad in ["", "20", "s", "1x", "1m-2s", "--1s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
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
    fn subcommands() {
        assert_eq!(parse(&args(&["--version"])).unwrap(), Command::Version);
        assert_eq!(parse(&args(&["-h"])).unwrap(), Command::Help);
        assert_eq!(
            parse(&args(&["validate", "a.yaml"])).unwrap(),
            Command::Validate(vec!["a.yaml".into()])
        );
        assert!(parse(&args(&["validate"])).is_err());
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
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: /etc/kubernetes/manifests\nfileCheckFrequency: 5s\nsyncFrequency: 30s\ncontainerRuntimeEndpoint: unix:///run/k3s.sock\nhealthzPort: 0\ncgroupDriver: systemd\n",
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
        assert!(o.config_warnings[0].contains("cgroupDriver"));
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
