//! Registry credentials for image pulls: the docker config formats, the keyring that matches an
//! image to the credentials of its registry, and the pod's and node's sources of them.
//!
//! Upstream's rules (`pkg/credentialprovider`): an entry's key is its URL without scheme, with a
//! `/v1/` or `/v2/` path prefix dropped (`https://index.docker.io/v1/` is `index.docker.io`);
//! keys are tried from the last in reverse lexical order (so a longer path under the same host
//! comes before the host); a key matches an image's repository when the host has as many DNS
//! labels, each label matches as a glob (`*.example.com` covers one label), the ports are equal
//! and the repository's path starts with the key's path. An image of Docker Hub (no registry,
//! or `docker.io`) without a match falls back to an `index.docker.io` entry. Pod secrets' matches
//! come first, then the node's; each is tried in order, and with no match the pull is anonymous.
//!
//! Pure apart from [`node_keyring`], which reads `<root-dir>/config.json`. Nothing here logs a
//! credential, and the `Debug` forms show registries only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

/// One credential, as the CRI's `AuthConfig` carries it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AuthConfig {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The entries of a docker config: registry (as written) → credential.
pub type DockerConfig = BTreeMap<String, AuthConfig>;

#[derive(Deserialize, Default)]
#[serde(default)]
struct Entry {
    username: String,
    password: String,
    auth: String,
}

/// Why registry credentials were not read. No variant holds or quotes what a file or Secret
/// carries (a value could be a password): a JSON error is kept as its kind and place only,
/// not as a source whose text could quote it.
#[derive(Debug)]
pub enum CredentialsError {
    /// An entry whose `auth` is not base64 of `user:password`.
    Auth { registry: String },
    /// Not JSON of a docker config: what is wrong (not valid JSON, a field of the wrong type,
    /// truncated) and where.
    Json {
        what: &'static str,
        line: usize,
        column: usize,
    },
    /// In a Secret's key (`.dockerconfigjson`, `.dockercfg`).
    Key {
        key: &'static str,
        source: Box<CredentialsError>,
    },
    /// The node's file cannot be read.
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The node's file does not parse.
    File {
        path: PathBuf,
        source: Box<CredentialsError>,
    },
}

impl std::fmt::Display for CredentialsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CredentialsError::Auth { registry } => write!(
                f,
                "{registry:?}: \"auth\" is not base64 of \"user:password\""
            ),
            CredentialsError::Json { what, line, column } => {
                write!(f, "{what} at line {line} column {column}")
            }
            CredentialsError::Key { key, source } => write!(f, "{key}: {source}"),
            CredentialsError::Read { path, source } => {
                write!(f, "reading {}: {source}", path.display())
            }
            CredentialsError::File { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for CredentialsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CredentialsError::Key { source, .. } | CredentialsError::File { source, .. } => {
                Some(source.as_ref())
            }
            CredentialsError::Read { source, .. } => Some(source),
            CredentialsError::Auth { .. } | CredentialsError::Json { .. } => None,
        }
    }
}

fn entries(raw: BTreeMap<String, Entry>) -> Result<DockerConfig, CredentialsError> {
    let mut out = DockerConfig::new();
    for (registry, e) in raw {
        let cred = if e.auth.is_empty() {
            AuthConfig {
                username: e.username,
                password: e.password,
            }
        } else {
            // `auth` is base64 of "user:password" and wins over the two fields, as upstream.
            // The error names the entry and the field, never what was in it.
            let bad = || CredentialsError::Auth {
                registry: registry.clone(),
            };
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(e.auth.trim())
                .map_err(|_| bad())?;
            let text = String::from_utf8(bytes).map_err(|_| bad())?;
            let (u, p) = text.split_once(':').ok_or_else(bad)?;
            AuthConfig {
                username: u.to_owned(),
                password: p.trim_matches('\0').to_owned(),
            }
        };
        out.insert(registry, cred);
    }
    Ok(out)
}

/// A `config.json` (`{"auths": {...}}`), as in a `kubernetes.io/dockerconfigjson` Secret's
/// `.dockerconfigjson` and the node's `<root-dir>/config.json`.
pub fn parse_config_json(bytes: &[u8]) -> Result<DockerConfig, CredentialsError> {
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct File {
        auths: BTreeMap<String, Entry>,
    }
    let f: File = serde_json::from_slice(bytes).map_err(|e| json_error(&e))?;
    entries(f.auths)
}

/// A legacy `.dockercfg` (the entries at the top level), as in a `kubernetes.io/dockercfg`
/// Secret.
pub fn parse_dockercfg(bytes: &[u8]) -> Result<DockerConfig, CredentialsError> {
    let raw: BTreeMap<String, Entry> = serde_json::from_slice(bytes).map_err(|e| json_error(&e))?;
    entries(raw)
}

/// A JSON error without the text it quotes (a value could be a password): its kind and place.
fn json_error(e: &serde_json::Error) -> CredentialsError {
    use serde_json::error::Category;
    let what = match e.classify() {
        Category::Io => "unreadable",
        Category::Syntax => "not valid JSON",
        Category::Data => "not a docker config (a field of the wrong type)",
        Category::Eof => "truncated JSON",
    };
    CredentialsError::Json {
        what,
        line: e.line(),
        column: e.column(),
    }
}

/// A registry key as upstream's keyring indexes it: no scheme, `/v1/` or `/v2/` dropped, and
/// no path when only `/` is left.
fn index_key(registry: &str) -> String {
    let rest = registry
        .strip_prefix("https://")
        .or_else(|| registry.strip_prefix("http://"))
        .unwrap_or(registry);
    let (host, path) = split_host_path(rest);
    let path = match path.get(..4) {
        Some("/v1/" | "/v2/") => &path[3..],
        _ => path,
    };
    if path.is_empty() || path == "/" {
        host.to_owned()
    } else {
        format!("{host}{path}")
    }
}

/// A schemeless URL's host (with its port) and path (with its leading `/`, or empty); a query
/// or fragment is no part of either.
fn split_host_path(s: &str) -> (&str, &str) {
    let s = s.split(['?', '#']).next().unwrap_or(s);
    let (host, path) = match s.find('/') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    // user information is no part of the host
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    (host, path)
}

/// A host's DNS labels and its port (empty when none), as Go's `net.SplitHostPort` splits.
fn labels_and_port(host: &str) -> (Vec<&str>, &str) {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((h, tail)) => (h, tail.strip_prefix(':').unwrap_or("")),
            None => (host, ""),
        }
    } else {
        match host.split_once(':') {
            Some((h, p)) if !p.contains(':') => (h, p),
            _ => (host, ""),
        }
    };
    (name.split('.').collect(), port)
}

/// Whether a key (a glob) covers a repository: same port, same number of labels, each label
/// matching, and the repository's path under the key's.
pub fn urls_match(glob: &str, target: &str) -> bool {
    let (gh, gp) = split_host_path(glob);
    let (th, tp) = split_host_path(target);
    let (gl, gport) = labels_and_port(gh);
    let (tl, tport) = labels_and_port(th);
    gport == tport
        && gl.len() == tl.len()
        && tp.starts_with(gp)
        && gl.iter().zip(&tl).all(|(g, t)| glob_match(g, t))
}

/// Go's `filepath.Match` on one label: `*` any run, `?` one character, `[...]` a class (with
/// `^` negation and ranges), `\` escapes; a malformed pattern matches nothing.
fn glob_match(pattern: &str, name: &str) -> bool {
    fn class(p: &[char], c: char) -> Option<(bool, usize)> {
        // p starts after '['; returns (matched, chars consumed including ']')
        let mut i = 0;
        let negate = p.first() == Some(&'^');
        if negate {
            i += 1;
        }
        let mut matched = false;
        let mut first = true;
        loop {
            let lo = *p.get(i)?;
            if lo == ']' && !first {
                i += 1;
                break;
            }
            first = false;
            let lo = if lo == '\\' {
                i += 1;
                *p.get(i)?
            } else {
                lo
            };
            i += 1;
            let mut hi = lo;
            if p.get(i) == Some(&'-') && p.get(i + 1).is_some_and(|&x| x != ']') {
                hi = p[i + 1];
                if hi == '\\' {
                    hi = *p.get(i + 2)?;
                    i += 1;
                }
                i += 2;
            }
            if lo <= c && c <= hi {
                matched = true;
            }
        }
        Some((matched != negate, i))
    }
    fn go(p: &[char], n: &[char]) -> Option<bool> {
        match p.first() {
            None => Some(n.is_empty()),
            Some('*') => {
                for k in 0..=n.len() {
                    if go(&p[1..], &n[k..])? {
                        return Some(true);
                    }
                }
                Some(false)
            }
            Some('?') => match n.first() {
                Some(_) => go(&p[1..], &n[1..]),
                None => Some(false),
            },
            Some('[') => {
                let Some(&c) = n.first() else {
                    // still check the class is well formed
                    class(&p[1..], '\0')?;
                    return Some(false);
                };
                let (ok, used) = class(&p[1..], c)?;
                if ok {
                    go(&p[1 + used..], &n[1..])
                } else {
                    Some(false)
                }
            }
            Some('\\') => {
                let &lit = p.get(1)?;
                if n.first() == Some(&lit) {
                    go(&p[2..], &n[1..])
                } else {
                    Some(false)
                }
            }
            Some(&lit) => {
                if n.first() == Some(&lit) {
                    go(&p[1..], &n[1..])
                } else {
                    Some(false)
                }
            }
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    go(&p, &n).unwrap_or(false)
}

const DEFAULT_REGISTRY_HOST: &str = "index.docker.io";

/// Whether an image is Docker Hub's: no registry part, or `docker.io`/`index.docker.io`, or a
/// first part that is no host (no `.` or `:`).
fn is_default_registry(image: &str) -> bool {
    match image.split_once('/') {
        _ if image.is_empty() || image.starts_with('/') => false,
        None => true,
        Some((first, _)) => {
            first == "docker.io" || first == DEFAULT_REGISTRY_HOST || !first.contains(['.', ':'])
        }
    }
}

/// The repository an image reference names, as the pull looks it up: registry added
/// (`docker.io`, with `library/` for a one-part name), tag and digest left out.
/// `busybox:1` is `docker.io/library/busybox`; `reg:5000/a/b@sha256:..` is `reg:5000/a/b`.
pub fn repository(image: &str) -> String {
    let name = image.split_once('@').map_or(image, |(n, _)| n);
    // a ':' after the last '/' starts the tag
    let name = match name.rfind(':') {
        Some(i) if !name[i..].contains('/') => &name[..i],
        _ => name,
    };
    // the first part is a registry when it looks like a host (docker's rule)
    let (domain, rest) = match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.to_lowercase() != first =>
        {
            (first, rest)
        }
        _ => ("docker.io", name),
    };
    let domain = if domain == DEFAULT_REGISTRY_HOST {
        "docker.io"
    } else {
        domain
    };
    if domain == "docker.io" && !rest.contains('/') {
        format!("docker.io/library/{rest}")
    } else {
        format!("{domain}/{rest}")
    }
}

/// Credentials by registry key, looked up by an image's repository.
#[derive(Default, Clone)]
pub struct Keyring {
    creds: BTreeMap<String, Vec<Tracked>>,
}

/// A credential and the image pull secret it came from (`namespace`, `name`); `None` for the
/// node's own (its `config.json`, a credential provider plugin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracked {
    pub auth: AuthConfig,
    pub secret: Option<(String, String)>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.creds.keys()).finish()
    }
}

impl Keyring {
    pub fn add(&mut self, config: &DockerConfig) {
        self.add_from(config, None);
    }

    /// Adds the entries of an image pull secret (`namespace`, `name`), or the node's (`None`).
    pub fn add_from(&mut self, config: &DockerConfig, secret: Option<(String, String)>) {
        for (registry, cred) in config {
            self.creds
                .entry(index_key(registry))
                .or_default()
                .push(Tracked {
                    auth: cred.clone(),
                    secret: secret.clone(),
                });
        }
    }

    pub fn is_empty(&self) -> bool {
        self.creds.is_empty()
    }

    /// The credentials for a repository (see [`repository`]), most specific key first.
    pub fn lookup(&self, repo: &str) -> Vec<AuthConfig> {
        self.lookup_tracked(repo)
            .into_iter()
            .map(|t| t.auth)
            .collect()
    }

    /// As [`Keyring::lookup`], each with where it came from.
    pub fn lookup_tracked(&self, repo: &str) -> Vec<Tracked> {
        let mut out: Vec<Tracked> = self
            .creds
            .iter()
            .rev()
            .filter(|(k, _)| urls_match(k, repo))
            .flat_map(|(_, c)| c.iter().cloned())
            .collect();
        if out.is_empty()
            && is_default_registry(repo)
            && let Some(c) = self.creds.get(DEFAULT_REGISTRY_HOST)
        {
            out.extend(c.iter().cloned());
        }
        out
    }
}

/// A Secret's keyring entries by its data: `.dockerconfigjson` (type
/// `kubernetes.io/dockerconfigjson`) or `.dockercfg` (type `kubernetes.io/dockercfg`); a Secret
/// with neither gives none, as upstream ignores other types.
pub fn secret_config(data: &crate::objects::Data) -> Result<DockerConfig, CredentialsError> {
    let in_key = |key| {
        move |e| CredentialsError::Key {
            key,
            source: Box::new(e),
        }
    };
    if let Some(b) = data.get(".dockerconfigjson").filter(|b| !b.is_empty()) {
        return parse_config_json(b).map_err(in_key(".dockerconfigjson"));
    }
    if let Some(b) = data.get(".dockercfg").filter(|b| !b.is_empty()) {
        return parse_dockercfg(b).map_err(in_key(".dockercfg"));
    }
    Ok(DockerConfig::new())
}

/// The node's credentials: `<root-dir>/config.json`, as the kubelet reads it in its root
/// directory. No file is no credentials; a file that does not parse is an error naming it.
pub fn node_keyring(root_dir: &Path) -> Result<Keyring, CredentialsError> {
    let path = crate::root_dir::RootDir(root_dir).registry_credentials();
    let mut k = Keyring::default();
    match std::fs::read(&path) {
        Ok(b) => {
            let cfg = parse_config_json(&b).map_err(|e| CredentialsError::File {
                path: path.clone(),
                source: Box::new(e),
            })?;
            k.add(&cfg);
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(CredentialsError::Read { path, source }),
    }
    Ok(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(u: &str) -> AuthConfig {
        AuthConfig {
            username: u.into(),
            password: format!("{u}-pw"),
        }
    }

    fn ring(entries: &[(&str, &str)]) -> Keyring {
        let mut k = Keyring::default();
        let cfg: DockerConfig = entries
            .iter()
            .map(|(r, u)| (r.to_string(), cred(u)))
            .collect();
        k.add(&cfg);
        k
    }

    fn users(k: &Keyring, image: &str) -> Vec<String> {
        k.lookup(&repository(image))
            .into_iter()
            .map(|c| c.username)
            .collect()
    }

    #[test]
    fn repositories() {
        assert_eq!(repository("busybox"), "docker.io/library/busybox");
        assert_eq!(repository("busybox:1.36"), "docker.io/library/busybox");
        assert_eq!(repository("library/busybox"), "docker.io/library/busybox");
        assert_eq!(repository("user/app:v1"), "docker.io/user/app");
        assert_eq!(repository("docker.io/busybox"), "docker.io/library/busybox");
        assert_eq!(repository("index.docker.io/user/app"), "docker.io/user/app");
        assert_eq!(repository("reg:5000/a/b:1"), "reg:5000/a/b");
        assert_eq!(repository("reg:5000/a/b"), "reg:5000/a/b");
        assert_eq!(repository("quay.io/x/y@sha256:0123abcd"), "quay.io/x/y");
        assert_eq!(repository("localhost/app:1"), "localhost/app");
        assert_eq!(repository("gcr.io/p/i:t@sha256:ab"), "gcr.io/p/i");
    }

    #[test]
    fn keys() {
        assert_eq!(index_key("https://index.docker.io/v1/"), "index.docker.io");
        assert_eq!(index_key("http://reg:5000/v2/"), "reg:5000");
        assert_eq!(index_key("reg:5000"), "reg:5000");
        assert_eq!(index_key("reg.io/team/"), "reg.io/team/");
        assert_eq!(index_key("https://reg.io/v2/team"), "reg.io/team");
        assert_eq!(index_key("reg.io/"), "reg.io");
    }

    #[test]
    fn docker_hub() {
        let k = ring(&[("https://index.docker.io/v1/", "hub")]);
        assert_eq!(users(&k, "busybox"), ["hub"]);
        assert_eq!(users(&k, "docker.io/library/busybox:1"), ["hub"]);
        assert_eq!(users(&k, "user/app"), ["hub"]);
        assert!(users(&k, "quay.io/user/app").is_empty());
        assert!(users(&k, "reg:5000/app").is_empty());
        // a docker.io entry matches directly
        let k = ring(&[("docker.io", "d")]);
        assert_eq!(users(&k, "busybox"), ["d"]);
        assert!(users(&k, "quay.io/busybox").is_empty());
    }

    #[test]
    fn ports() {
        let k = ring(&[("reg.local:5000", "p")]);
        assert_eq!(users(&k, "reg.local:5000/app:1"), ["p"]);
        assert!(users(&k, "reg.local/app:1").is_empty());
        assert!(users(&k, "reg.local:5001/app:1").is_empty());
        let k = ring(&[("reg.local", "nop")]);
        assert!(users(&k, "reg.local:5000/app").is_empty());
        assert_eq!(users(&k, "reg.local/app"), ["nop"]);
        let k = ring(&[("[fd00::1]:5000", "v6")]);
        assert_eq!(users(&k, "[fd00::1]:5000/app"), ["v6"]);
    }

    #[test]
    fn paths_most_specific_first() {
        let k = ring(&[
            ("reg.io", "host"),
            ("reg.io/team", "team"),
            ("reg.io/team/app", "app"),
            ("reg.io/other", "other"),
        ]);
        assert_eq!(users(&k, "reg.io/team/app:1"), ["app", "team", "host"]);
        assert_eq!(users(&k, "reg.io/team/x"), ["team", "host"]);
        assert_eq!(users(&k, "reg.io/z"), ["host"]);
        // a prefix of the path, as upstream compares it (a string prefix)
        assert_eq!(users(&k, "reg.io/teamwork/x"), ["team", "host"]);
    }

    #[test]
    fn wildcards() {
        let k = ring(&[("*.example.com", "star"), ("*.*.example.com", "two")]);
        assert_eq!(users(&k, "a.example.com/app"), ["star"]);
        assert_eq!(users(&k, "a.b.example.com/app"), ["two"]);
        // a wildcard is one label, never none
        assert!(users(&k, "example.com/app").is_empty());
        let k = ring(&[("reg[0-9].io", "c"), ("x*.io:443", "sp")]);
        assert_eq!(users(&k, "reg7.io/app"), ["c"]);
        assert!(users(&k, "regx.io/app").is_empty());
        assert_eq!(users(&k, "xyz.io:443/app"), ["sp"]);
        assert!(users(&k, "xyz.io/app").is_empty());
        // malformed patterns match nothing
        assert!(!glob_match("reg[", "reg["));
        assert!(glob_match("[^a]b", "cb"));
        assert!(!glob_match("[^a]b", "ab"));
        assert!(glob_match("a\\*", "a*"));
        assert!(glob_match("r?g", "reg"));
        assert!(!glob_match("a\\*", "ab"));
    }

    #[test]
    fn several_credentials_per_key_in_order() {
        let mut k = Keyring::default();
        k.add(
            &[("reg.io".to_string(), cred("first"))]
                .into_iter()
                .collect(),
        );
        k.add(
            &[("https://reg.io/v1/".to_string(), cred("second"))]
                .into_iter()
                .collect(),
        );
        assert_eq!(users(&k, "reg.io/app"), ["first", "second"]);
        assert!(!k.is_empty());
        assert!(Keyring::default().lookup("reg.io/app").is_empty());
    }

    #[test]
    fn formats() {
        // auth (base64 "u:p:w") wins over the fields; a password may hold ':'
        let j = br#"{"auths":{"reg:5000":{"auth":"dTpwOnc=","username":"x","password":"y"},
            "https://index.docker.io/v1/":{"username":"hub","password":"pw","email":"e@x"}}}"#;
        let c = parse_config_json(j).unwrap();
        assert_eq!(c["reg:5000"].username, "u");
        assert_eq!(c["reg:5000"].password, "p:w");
        assert_eq!(c["https://index.docker.io/v1/"].password, "pw");
        let c = parse_dockercfg(br#"{"reg.io":{"auth":"YTpi"}}"#).unwrap();
        assert_eq!(c["reg.io"].username, "a");
        assert_eq!(c["reg.io"].password, "b");
        assert!(parse_config_json(b"{}").unwrap().is_empty());
        // errors name the entry and never quote the secret
        let e = parse_config_json(br#"{"auths":{"reg.io":{"auth":"!!secret!!"}}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"reg.io\"") && e.contains("auth"), "{e}");
        assert!(!e.contains("secret"), "{e}");
        let e = parse_config_json(br#"{"auths":{"reg.io":{"auth":"bm9jb2xvbg=="}}}"#)
            .unwrap_err()
            .to_string();
        assert!(!e.contains("nocolon"), "{e}");
        let e = parse_config_json(br#"{"auths":{"reg.io":{"password":55555}}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("wrong type") && !e.contains("55555"), "{e}");
        let e = parse_config_json(b"{\"auths\": {\"reg\": {\"password\": \"hunter2")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("hunter2"), "{e}");
        // Debug shows no password
        assert!(!format!("{:?}", cred("u")).contains("u-pw"));
    }

    #[test]
    fn secrets_by_key() {
        let mut d = crate::objects::Data::new();
        assert!(secret_config(&d).unwrap().is_empty());
        d.insert(
            ".dockercfg".into(),
            br#"{"reg.io":{"username":"a","password":"b"}}"#.to_vec(),
        );
        assert_eq!(secret_config(&d).unwrap()["reg.io"].username, "a");
        d.insert(
            ".dockerconfigjson".into(),
            br#"{"auths":{"other.io":{"username":"c","password":"d"}}}"#.to_vec(),
        );
        assert!(secret_config(&d).unwrap().contains_key("other.io"));
        d.insert(".dockerconfigjson".into(), b"{".to_vec());
        let e = secret_config(&d).unwrap_err().to_string();
        assert!(e.starts_with(".dockerconfigjson: "), "{e}");
    }

    #[test]
    fn node_file() {
        let dir = std::env::temp_dir().join(format!("picolet-cred-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(node_keyring(&dir).unwrap().is_empty());
        std::fs::write(
            dir.join("config.json"),
            br#"{"auths":{"reg.local:5000":{"username":"n","password":"p"}}}"#,
        )
        .unwrap();
        assert_eq!(
            users(&node_keyring(&dir).unwrap(), "reg.local:5000/a:1"),
            ["n"]
        );
        std::fs::write(dir.join("config.json"), b"not json").unwrap();
        let e = node_keyring(&dir).unwrap_err().to_string();
        assert!(
            e.contains("config.json") && e.contains("not valid JSON"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
