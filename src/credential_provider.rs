//! Image credential provider plugins, as the kubelet runs them (`--image-credential-provider-config`,
//! `--image-credential-provider-bin-dir`): a `CredentialProviderConfig` names executables in the
//! bin directory and the images each serves (`matchImages`, matched with the keyring's rules);
//! for a pull of a matching image the plugin gets a `CredentialProviderRequest`
//! (`credentialprovider.kubelet.k8s.io/v1`) on stdin and answers a `CredentialProviderResponse`
//! on stdout: an `auth` map (registry → username and password, matched again like a
//! `config.json`), a `cacheKeyType` (`Image`, `Registry` or `Global`) and an optional
//! `cacheDuration` (else the provider's `defaultCacheDuration`; zero: not cached). Answers are
//! cached per provider and key until they expire, so a plugin is not run at every pull.
//!
//! Runs on the blocking pool (the caller's `rt::unblock`). A plugin that fails, hangs past
//! [`EXEC_TIMEOUT`] or answers nonsense gives no credentials and a warning naming it; its
//! stdout (the credentials) is never logged.

use std::collections::HashMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::api::parse_duration;
use crate::credentials::{self, AuthConfig, DockerConfig};

/// How long a plugin may run.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(60);
/// The most of a plugin's stdout read.
const MAX_RESPONSE: u64 = 1 << 20;
const PLUGIN_API: &str = "credentialprovider.kubelet.k8s.io/v1";
const CONFIG_APIS: &[&str] = &["kubelet.config.k8s.io/v1", "kubelet.config.k8s.io/v1beta1"];

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct ConfigFile {
    api_version: String,
    kind: String,
    providers: Vec<ProviderSpec>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct ProviderSpec {
    name: String,
    match_images: Vec<String>,
    default_cache_duration: Option<String>,
    api_version: String,
    args: Vec<String>,
    env: Vec<EnvVar>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct EnvVar {
    name: String,
    value: String,
}

/// One configured plugin.
#[derive(Debug, Clone)]
pub struct Provider {
    pub name: String,
    pub match_images: Vec<String>,
    pub default_cache_duration: Duration,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub path: PathBuf,
}

impl Provider {
    fn serves(&self, repo: &str) -> bool {
        self.match_images
            .iter()
            .any(|m| credentials::urls_match(m, repo))
    }
}

/// The configured plugins and their cache (shared by the pulls).
#[derive(Debug)]
pub struct Providers {
    pub providers: Vec<Provider>,
    cache: Mutex<HashMap<(usize, String), (Instant, DockerConfig)>>,
}

/// Reads and checks the config file; every plugin must be in `bin_dir`. Errors name the file,
/// the field and the value.
pub fn load(config: &Path, bin_dir: &Path) -> Result<Providers, String> {
    let at = config.display();
    let text = std::fs::read_to_string(config).map_err(|e| format!("reading {at}: {e}"))?;
    // YAML (or JSON) to a JSON value first, then the struct: the one YAML-to-value decoder
    // the binary already has, rather than another for these structs.
    let value: serde_json::Value =
        serde::Deserialize::deserialize(yaml_serde::Deserializer::from_str(&text))
            .map_err(|e: yaml_serde::Error| format!("{at}: {e}"))?;
    let f: ConfigFile = serde_json::from_value(value).map_err(|e| format!("{at}: {e}"))?;
    if !CONFIG_APIS.contains(&f.api_version.as_str()) {
        return Err(format!(
            "{at}: apiVersion {:?} is not one of {CONFIG_APIS:?}",
            f.api_version
        ));
    }
    if f.kind != "CredentialProviderConfig" {
        return Err(format!(
            "{at}: kind {:?} is not CredentialProviderConfig",
            f.kind
        ));
    }
    let mut out = Vec::new();
    for (i, p) in f.providers.into_iter().enumerate() {
        let field = |f: &str| format!("{at}: providers[{i}].{f}");
        if p.name.is_empty() || p.name.contains('/') || p.name == "." || p.name == ".." {
            return Err(format!(
                "{}: {:?} must be a file name in the bin dir",
                field("name"),
                p.name
            ));
        }
        if out.iter().any(|o: &Provider| o.name == p.name) {
            return Err(format!("{}: {:?} is named twice", field("name"), p.name));
        }
        if p.match_images.is_empty() {
            return Err(format!(
                "{}: at least one is required",
                field("matchImages")
            ));
        }
        if p.api_version != PLUGIN_API {
            return Err(format!(
                "{}: {:?} is not {PLUGIN_API}",
                field("apiVersion"),
                p.api_version
            ));
        }
        let Some(d) = p.default_cache_duration else {
            return Err(format!("{}: required", field("defaultCacheDuration")));
        };
        let default_cache_duration = parse_duration(&d)
            .map_err(|e| format!("{}: {d:?}: {e}", field("defaultCacheDuration")))?;
        let path = bin_dir.join(&p.name);
        if !path.is_file() {
            return Err(format!(
                "{}: plugin {} not found",
                field("name"),
                path.display()
            ));
        }
        out.push(Provider {
            name: p.name,
            match_images: p.match_images,
            default_cache_duration,
            args: p.args,
            env: p.env.into_iter().map(|e| (e.name, e.value)).collect(),
            path,
        });
    }
    Ok(Providers {
        providers: out,
        cache: Mutex::new(HashMap::new()),
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    cache_key_type: String,
    #[serde(default)]
    cache_duration: Option<String>,
    #[serde(default)]
    auth: std::collections::BTreeMap<String, ResponseAuth>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ResponseAuth {
    username: String,
    password: String,
}

/// What a plugin answered, checked: its credentials, the cache key type and the lifetime.
#[derive(Debug, PartialEq)]
pub struct Answer {
    pub auth: DockerConfig,
    pub key_type: KeyType,
    pub duration: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    Image,
    Registry,
    Global,
}

/// Why a plugin gave no credentials. Nothing of its answer is quoted (it could hold a
/// password): a JSON error is kept as its place only.
#[derive(Debug)]
pub enum PluginError {
    /// The plugin could not be started.
    Start {
        path: PathBuf,
        source: std::io::Error,
    },
    /// No answer within [`EXEC_TIMEOUT`]: it was killed.
    Timeout,
    /// Waiting for it failed.
    Wait(std::io::Error),
    /// It failed: its exit status and the start of its stderr.
    Failed { status: ExitStatus, stderr: String },
    /// Its answer is not JSON of a CredentialProviderResponse.
    NotAResponse { line: usize, column: usize },
    /// Its answer is of another kind or version.
    WrongKind { kind: String, api_version: String },
    /// Its answer's cacheKeyType is none of Image, Registry, Global.
    KeyType(String),
    /// Its answer's cacheDuration does not parse (the duration parser's message).
    CacheDuration(String),
}

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginError::Start { path, source } => {
                write!(f, "starting {}: {source}", path.display())
            }
            PluginError::Timeout => write!(f, "no answer within {EXEC_TIMEOUT:?}: killed"),
            PluginError::Wait(e) => write!(f, "waiting for it: {e}"),
            PluginError::Failed { status, stderr } => write!(f, "{status}; stderr: {stderr:?}"),
            PluginError::NotAResponse { line, column } => write!(
                f,
                "its answer is not a CredentialProviderResponse (line {line} column {column})"
            ),
            PluginError::WrongKind { kind, api_version } => write!(
                f,
                "its answer is kind {kind:?} apiVersion {api_version:?}, not \
                 CredentialProviderResponse {PLUGIN_API}"
            ),
            PluginError::KeyType(t) => write!(
                f,
                "its answer's cacheKeyType {t:?} is not Image, Registry or Global"
            ),
            PluginError::CacheDuration(e) => write!(f, "its answer's cacheDuration: {e}"),
        }
    }
}

impl std::error::Error for PluginError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PluginError::Start { source, .. } | PluginError::Wait(source) => Some(source),
            _ => None,
        }
    }
}

/// A plugin's stdout, checked; errors never quote it.
pub fn parse_response(stdout: &[u8], default_duration: Duration) -> Result<Answer, PluginError> {
    let r: Response = serde_json::from_slice(stdout).map_err(|e| PluginError::NotAResponse {
        line: e.line(),
        column: e.column(),
    })?;
    if r.kind != "CredentialProviderResponse" || r.api_version != PLUGIN_API {
        return Err(PluginError::WrongKind {
            kind: r.kind,
            api_version: r.api_version,
        });
    }
    let key_type = match r.cache_key_type.as_str() {
        "Image" => KeyType::Image,
        "Registry" => KeyType::Registry,
        "Global" => KeyType::Global,
        other => return Err(PluginError::KeyType(other.to_owned())),
    };
    let duration = match &r.cache_duration {
        Some(d) => parse_duration(d).map_err(PluginError::CacheDuration)?,
        None => default_duration,
    };
    let auth = r
        .auth
        .into_iter()
        .map(|(k, a)| {
            (
                k,
                AuthConfig {
                    username: a.username,
                    password: a.password,
                },
            )
        })
        .collect();
    Ok(Answer {
        auth,
        key_type,
        duration,
    })
}

/// The registry (host and port) of a repository, the `Registry` cache key.
fn registry_of(repo: &str) -> &str {
    repo.split('/').next().unwrap_or(repo)
}

impl Providers {
    /// The credentials every plugin serving `repo` gives (blocking: runs plugins whose answer
    /// is not cached).
    pub fn provide(&self, repo: &str) -> Vec<DockerConfig> {
        let mut out = Vec::new();
        for (i, p) in self.providers.iter().enumerate() {
            if !p.serves(repo) {
                continue;
            }
            if let Some(c) = self.cached(i, repo) {
                out.push(c);
                continue;
            }
            match run(p, repo) {
                Ok(a) => {
                    if !a.duration.is_zero() {
                        let key = match a.key_type {
                            KeyType::Image => repo.to_owned(),
                            KeyType::Registry => registry_of(repo).to_owned(),
                            KeyType::Global => String::new(),
                        };
                        let until = Instant::now() + a.duration;
                        self.lock().insert((i, key), (until, a.auth.clone()));
                    }
                    out.push(a.auth);
                }
                Err(e) => log::warn!(
                    "image credential provider {}: {e}; pulling {repo} without its credentials",
                    p.name
                ),
            }
        }
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(usize, String), (Instant, DockerConfig)>> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn cached(&self, i: usize, repo: &str) -> Option<DockerConfig> {
        let now = Instant::now();
        let mut c = self.lock();
        c.retain(|_, (until, _)| *until > now);
        [repo, registry_of(repo), ""]
            .iter()
            .find_map(|k| c.get(&(i, (*k).to_owned())).map(|(_, v)| v.clone()))
    }
}

/// Runs a plugin for one image: the request on stdin, its answer from stdout, within
/// [`EXEC_TIMEOUT`].
fn run(p: &Provider, repo: &str) -> Result<Answer, PluginError> {
    let request = serde_json::json!({
        "apiVersion": PLUGIN_API,
        "kind": "CredentialProviderRequest",
        "image": repo,
    })
    .to_string();
    let mut child = Command::new(&p.path)
        .args(&p.args)
        .envs(p.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| PluginError::Start {
            path: p.path.clone(),
            source,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        // A plugin that does not read its request is its own affair: its answer decides.
        let _ = stdin.write_all(request.as_bytes());
    }
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = (&mut stdout).take(MAX_RESPONSE).read_to_end(&mut b);
        b
    });
    let err = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = (&mut stderr).take(4096).read_to_end(&mut b);
        b
    });
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if t0.elapsed() < EXEC_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(PluginError::Timeout);
            }
            Err(e) => return Err(PluginError::Wait(e)),
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if !status.success() {
        let text = String::from_utf8_lossy(&stderr);
        let text = text.trim();
        let stderr: String = text.chars().take(512).collect();
        return Err(PluginError::Failed { status, stderr });
    }
    parse_response(&stdout, p.default_cache_duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses() {
        let a = parse_response(
            br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse",
                "cacheKeyType":"Registry","cacheDuration":"5s",
                "auth":{"reg.io":{"username":"u","password":"p"}}}"#,
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!(a.key_type, KeyType::Registry);
        assert_eq!(a.duration, Duration::from_secs(5));
        assert_eq!(a.auth["reg.io"].username, "u");
        let a = parse_response(
            br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image"}"#,
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!(a.duration, Duration::from_secs(60), "the default");
        assert!(a.auth.is_empty());
        let e = parse_response(
            br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Pod"}"#,
            Duration::ZERO,
        )
        .unwrap_err().to_string();
        assert!(e.contains("\"Pod\""), "{e}");
        let e = parse_response(
            b"{\"auth\": {\"r\": {\"password\": \"hunter2",
            Duration::ZERO,
        )
        .unwrap_err()
        .to_string();
        assert!(!e.contains("hunter2"), "{e}");
        let e = parse_response(br#"{"kind":"Other"}"#, Duration::ZERO)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not CredentialProviderResponse"), "{e}");
    }

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("picolet-cp-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn plugin(dir: &Path, name: &str, body: &str) {
        use std::os::unix::fs::PermissionsExt as _;
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn config_errors_name_the_field() {
        let d = dir("cfg");
        plugin(&d, "p", "exit 0");
        let cfg = d.join("c.yaml");
        let check = |text: &str| {
            std::fs::write(&cfg, text).unwrap();
            load(&cfg, &d)
        };
        let ok = "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n\
                  - name: p\n  matchImages: ['*.reg.io']\n  defaultCacheDuration: 10m\n  \
                  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  env: [{name: A, value: b}]\n";
        let p = check(ok).unwrap();
        assert_eq!(
            p.providers[0].default_cache_duration,
            Duration::from_secs(600)
        );
        assert_eq!(p.providers[0].env, [("A".to_string(), "b".to_string())]);
        let e = check(&ok.replace("name: p", "name: ../p")).unwrap_err();
        assert!(e.contains("providers[0].name") && e.contains("../p"), "{e}");
        let e = check(&ok.replace("name: p", "name: q")).unwrap_err();
        assert!(e.contains("not found"), "{e}");
        let e = check(&ok.replace("  defaultCacheDuration: 10m\n", "")).unwrap_err();
        assert!(
            e.contains("providers[0].defaultCacheDuration: required"),
            "{e}"
        );
        let e = check(&ok.replace("10m", "soon")).unwrap_err();
        assert!(e.contains("\"soon\""), "{e}");
        let e = check(&ok.replace("kubelet.k8s.io/v1\n", "kubelet.k8s.io/v1alpha1\n")).unwrap_err();
        assert!(e.contains("providers[0].apiVersion"), "{e}");
        let e = check(&ok.replace("matchImages", "matchImage")).unwrap_err();
        assert!(e.contains("matchImage"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn runs_a_plugin_and_caches_its_answer() {
        let d = dir("run");
        let calls = d.join("calls");
        plugin(
            &d,
            "p",
            &format!(
                "read req; echo \"$req\" >> {}\nprintf '%s' '{{\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"kind\":\"CredentialProviderResponse\",\"cacheKeyType\":\"Registry\",\"cacheDuration\":\"300ms\",\"auth\":{{\"reg.io\":{{\"username\":\"'$WHO'\",\"password\":\"pw\"}}}}}}'",
                calls.display()
            ),
        );
        plugin(&d, "bad", "echo oops >&2; exit 3");
        let cfg = d.join("c.yaml");
        std::fs::write(
            &cfg,
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n\
             - {name: p, matchImages: [reg.io], defaultCacheDuration: 1h, apiVersion: credentialprovider.kubelet.k8s.io/v1, env: [{name: WHO, value: plug}]}\n\
             - {name: bad, matchImages: [reg.io], defaultCacheDuration: 1h, apiVersion: credentialprovider.kubelet.k8s.io/v1}\n",
        )
        .unwrap();
        let p = load(&cfg, &d).unwrap();
        let n = || {
            std::fs::read_to_string(&calls)
                .unwrap_or_default()
                .lines()
                .count()
        };
        let got = p.provide("reg.io/app");
        assert_eq!(got.len(), 1, "the failing plugin gives nothing");
        assert_eq!(got[0]["reg.io"].username, "plug");
        let req: serde_json::Value =
            serde_json::from_str(std::fs::read_to_string(&calls).unwrap().trim()).unwrap();
        assert_eq!(req["kind"], "CredentialProviderRequest");
        assert_eq!(req["image"], "reg.io/app");
        // cached for the registry: another image of it runs no plugin
        assert_eq!(p.provide("reg.io/other")[0]["reg.io"].password, "pw");
        assert_eq!(n(), 1);
        // other images are not the plugin's
        assert!(p.provide("else.io/app").is_empty());
        std::thread::sleep(Duration::from_millis(400));
        p.provide("reg.io/app");
        assert_eq!(n(), 2, "run again once the answer expired");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
