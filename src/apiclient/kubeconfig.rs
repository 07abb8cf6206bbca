//! kubeconfig files as kubectl and kubeadm write them: clusters, users, contexts and the current
//! context, resolved to what one connection needs. Certificates and keys come inline
//! (`*-data`, base64) or from files (relative paths are relative to the kubeconfig's directory);
//! keys may be EC (SEC1), RSA (PKCS#1) or PKCS#8. Every error names the file and the field.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

/// Largest kubeconfig, certificate or token file read.
const MAX_FILE: u64 = 1 << 20;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct KubeConfigFile {
    #[serde(default)]
    clusters: Vec<NamedCluster>,
    #[serde(default)]
    users: Vec<NamedUser>,
    #[serde(default)]
    contexts: Vec<NamedContext>,
    #[serde(default)]
    current_context: String,
}

#[derive(Debug, Deserialize)]
struct NamedCluster {
    name: String,
    #[serde(default)]
    cluster: Cluster,
}

#[derive(Debug, Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: User,
}

#[derive(Debug, Deserialize)]
struct NamedContext {
    name: String,
    #[serde(default)]
    context: Context,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    #[serde(default)]
    server: String,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
    tls_server_name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct User {
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<String>,
    token: Option<String>,
    #[serde(alias = "tokenFile")]
    token_file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Context {
    #[serde(default)]
    cluster: String,
    #[serde(default)]
    user: String,
    #[serde(default)]
    namespace: String,
}

/// A PEM blob, as read from a kubeconfig.
#[derive(Clone, PartialEq, Eq)]
pub struct Pem(pub Vec<u8>);

impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Keys never reach a log.
        write!(f, "Pem({} bytes)", self.0.len())
    }
}

/// How requests authenticate.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    None,
    /// A client certificate chain and its key, PEM.
    ClientCert {
        cert: Pem,
        key: Pem,
    },
    /// A bearer token.
    Token(String),
    /// A bearer token read from this file at each use, so a refreshed token is picked up.
    TokenFile(PathBuf),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::None => write!(f, "None"),
            Credentials::ClientCert { .. } => write!(f, "ClientCert"),
            Credentials::Token(_) => write!(f, "Token(<redacted>)"),
            Credentials::TokenFile(p) => write!(f, "TokenFile({})", p.display()),
        }
    }
}

/// What one connection to the apiserver needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// `https://host:port` (or `http://` for a test server), without a trailing slash.
    pub server: String,
    pub ca: Option<Pem>,
    pub insecure_skip_tls_verify: bool,
    pub tls_server_name: Option<String>,
    pub credentials: Credentials,
    /// The context's namespace ("" when unset).
    pub namespace: String,
}

fn read_limited(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_FILE + 1)
        .read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_FILE {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_FILE} bytes"
        )));
    }
    Ok(buf)
}

/// Why a kubeconfig gives no connection; every message names the file, and the field when one
/// is at fault.
#[derive(Debug)]
pub enum KubeconfigError {
    /// The file, or a file it names, cannot be read.
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not a kubeconfig: beyond the cost limits, not UTF-8, not YAML of one.
    Parse {
        path: PathBuf,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A field's value is wrong or missing.
    Field {
        path: PathBuf,
        field: String,
        message: String,
    },
    /// A field's inline data is not base64.
    Base64 {
        path: PathBuf,
        field: String,
        source: base64::DecodeError,
    },
    /// The file a field names cannot be read.
    FieldFile {
        path: PathBuf,
        field: String,
        source: Box<KubeconfigError>,
    },
}

impl std::fmt::Display for KubeconfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KubeconfigError::Read { path, source } => write!(f, "{}: {source}", path.display()),
            KubeconfigError::Parse { path, source } => {
                write!(f, "{}: (file): {source}", path.display())
            }
            KubeconfigError::Field {
                path,
                field,
                message,
            } => write!(f, "{}: {field}: {message}", path.display()),
            KubeconfigError::Base64 {
                path,
                field,
                source,
            } => write!(f, "{}: {field}: not base64: {source}", path.display()),
            KubeconfigError::FieldFile {
                path,
                field,
                source,
            } => write!(f, "{}: {field}: {source}", path.display()),
        }
    }
}

impl std::error::Error for KubeconfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            KubeconfigError::Read { source, .. } => Some(source),
            KubeconfigError::Parse { source, .. } => Some(source.as_ref()),
            KubeconfigError::Field { .. } => None,
            KubeconfigError::Base64 { source, .. } => Some(source),
            KubeconfigError::FieldFile { source, .. } => Some(source.as_ref()),
        }
    }
}

/// A file that could not be read, named.
fn read_error(path: &Path) -> impl FnOnce(std::io::Error) -> KubeconfigError + '_ {
    move |source| KubeconfigError::Read {
        path: path.to_owned(),
        source,
    }
}

/// Loads `path` and resolves its current context.
pub fn read(path: &Path) -> Result<Connection, KubeconfigError> {
    let text = read_limited(path).map_err(read_error(path))?;
    parse(&text, path)
}

/// [`read`], with the error as its message, for `picolet check`'s findings.
pub fn load(path: &Path) -> Result<Connection, String> {
    read(path).map_err(|e| e.to_string())
}

/// Resolves the current context of a kubeconfig read from `path`.
pub fn parse(text: &[u8], path: &Path) -> Result<Connection, KubeconfigError> {
    let at = |field: &str, msg: &dyn std::fmt::Display| KubeconfigError::Field {
        path: path.to_owned(),
        field: field.to_owned(),
        message: msg.to_string(),
    };
    let unparsed = |e: Box<dyn std::error::Error + Send + Sync>| KubeconfigError::Parse {
        path: path.to_owned(),
        source: e,
    };
    // The same cost limits as a KubeletConfiguration: a hostile kubeconfig never costs more.
    crate::limits::check(
        text,
        crate::limits::Syntax::Yaml,
        &crate::limits::Limits::CONFIG,
    )
    .map_err(|e| unparsed(e.into()))?;
    let text = std::str::from_utf8(text).map_err(|e| unparsed(e.into()))?;
    let kc: KubeConfigFile = yaml_serde::from_str(text).map_err(|e| unparsed(e.into()))?;
    let ctx_name = if kc.current_context.is_empty() {
        match kc.contexts.as_slice() {
            [only] => only.name.clone(),
            _ => return Err(at("current-context", &"not set")),
        }
    } else {
        kc.current_context.clone()
    };
    let ctx = kc
        .contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .map(|c| &c.context)
        .ok_or_else(|| at("current-context", &format!("no context named {ctx_name:?}")))?;
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .map(|c| &c.cluster)
        .ok_or_else(|| {
            at(
                &format!("contexts[{ctx_name}].context.cluster"),
                &format!("no cluster named {:?}", ctx.cluster),
            )
        })?;
    let user = kc
        .users
        .iter()
        .find(|u| u.name == ctx.user)
        .map(|u| &u.user);
    if !ctx.user.is_empty() && user.is_none() {
        return Err(at(
            &format!("contexts[{ctx_name}].context.user"),
            &format!("no user named {:?}", ctx.user),
        ));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let cpath = format!("clusters[{}].cluster", ctx.cluster);
    let server = cluster.server.trim_end_matches('/').to_owned();
    if !(server.starts_with("https://") || server.starts_with("http://")) {
        return Err(at(
            &format!("{cpath}.server"),
            &format!("{:?} is not an http(s) URL", cluster.server),
        ));
    }
    let ca = blob(
        dir,
        cluster.certificate_authority.as_deref(),
        cluster.certificate_authority_data.as_deref(),
    )
    .map_err(blob_error(path, &format!("{cpath}.certificate-authority")))?;
    let credentials = match user {
        None => Credentials::None,
        Some(u) => {
            let upath = format!("users[{}].user", ctx.user);
            let cert = blob(
                dir,
                u.client_certificate.as_deref(),
                u.client_certificate_data.as_deref(),
            )
            .map_err(blob_error(path, &format!("{upath}.client-certificate")))?;
            let key = blob(dir, u.client_key.as_deref(), u.client_key_data.as_deref())
                .map_err(blob_error(path, &format!("{upath}.client-key")))?;
            match (cert, key, &u.token, &u.token_file) {
                (Some(cert), Some(key), _, _) => Credentials::ClientCert { cert, key },
                (Some(_), None, _, _) => {
                    return Err(at(&format!("{upath}.client-key"), &"missing"));
                }
                (None, Some(_), _, _) => {
                    return Err(at(&format!("{upath}.client-certificate"), &"missing"));
                }
                (None, None, Some(t), _) if !t.is_empty() => Credentials::Token(t.clone()),
                (None, None, _, Some(f)) if !f.is_empty() => Credentials::TokenFile(dir.join(f)),
                _ => Credentials::None,
            }
        }
    };
    Ok(Connection {
        server,
        ca,
        insecure_skip_tls_verify: cluster.insecure_skip_tls_verify,
        tls_server_name: cluster.tls_server_name.clone(),
        credentials,
        namespace: ctx.namespace.clone(),
    })
}

/// Why a PEM blob was not read: its inline data is not base64, or its file does not read.
enum BlobError {
    Base64(base64::DecodeError),
    File(KubeconfigError),
}

/// A blob's error as the kubeconfig's, at `field` (`-data` appended for inline data).
fn blob_error<'a>(
    path: &'a Path,
    field: &'a str,
) -> impl FnOnce(BlobError) -> KubeconfigError + 'a {
    move |e| match e {
        BlobError::Base64(source) => KubeconfigError::Base64 {
            path: path.to_owned(),
            field: format!("{field}-data"),
            source,
        },
        BlobError::File(source) => KubeconfigError::FieldFile {
            path: path.to_owned(),
            field: field.to_owned(),
            source: Box::new(source),
        },
    }
}

/// A PEM blob given inline (base64) or as a file.
fn blob(dir: &Path, file: Option<&str>, data: Option<&str>) -> Result<Option<Pem>, BlobError> {
    if let Some(d) = data.filter(|d| !d.is_empty()) {
        let clean: String = d.chars().filter(|c| !c.is_whitespace()).collect();
        return base64::engine::general_purpose::STANDARD
            .decode(clean)
            .map(|b| Some(Pem(b)))
            .map_err(BlobError::Base64);
    }
    match file.filter(|f| !f.is_empty()) {
        Some(f) => {
            let p = dir.join(f);
            read_limited(&p)
                .map(|b| Some(Pem(b)))
                .map_err(|e| BlobError::File(read_error(&p)(e)))
        }
        None => Ok(None),
    }
}

/// The token to send now, reading a token file afresh.
pub fn bearer(c: &Credentials) -> Result<Option<String>, KubeconfigError> {
    match c {
        Credentials::Token(t) => Ok(Some(t.clone())),
        Credentials::TokenFile(p) => read_limited(p)
            .map(|b| Some(String::from_utf8_lossy(&b).trim().to_owned()))
            .map_err(read_error(p)),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn resolves_the_current_context_with_inline_data() {
        let y = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: node\nclusters:\n- name: c\n  cluster:\n    \
             server: https://127.0.0.1:6443/\n    certificate-authority-data: {}\nusers:\n- name: n\n  user:\n    \
             client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: other\n  context: {{cluster: x, user: y}}\n\
             - name: node\n  context:\n    cluster: c\n    user: n\n    namespace: kube-system\n",
            b64("CA"),
            b64("CERT"),
            b64("KEY")
        );
        let c = parse(y.as_bytes(), Path::new("/etc/kubernetes/kubelet.conf")).unwrap();
        assert_eq!(c.server, "https://127.0.0.1:6443");
        assert_eq!(c.ca, Some(Pem(b"CA".to_vec())));
        assert_eq!(
            c.credentials,
            Credentials::ClientCert {
                cert: Pem(b"CERT".to_vec()),
                key: Pem(b"KEY".to_vec())
            }
        );
        assert_eq!(c.namespace, "kube-system");
    }

    #[test]
    fn files_are_relative_to_the_kubeconfig_and_tokens_work() {
        let dir = std::env::temp_dir().join(format!("picolet-kc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.crt"), "CAFILE").unwrap();
        std::fs::write(dir.join("token"), "tok-1\n").unwrap();
        let y = "clusters:\n- name: c\n  cluster:\n    server: https://h:6443\n    certificate-authority: ca.crt\n\
                 users:\n- name: u\n  user:\n    tokenFile: token\ncontexts:\n- name: only\n  context: {cluster: c, user: u}\n";
        let path = dir.join("config");
        let c = parse(y.as_bytes(), &path).unwrap();
        assert_eq!(c.ca, Some(Pem(b"CAFILE".to_vec())));
        assert_eq!(c.credentials, Credentials::TokenFile(dir.join("token")));
        assert_eq!(bearer(&c.credentials).unwrap().as_deref(), Some("tok-1"));
        std::fs::write(dir.join("token"), "tok-2").unwrap();
        assert_eq!(bearer(&c.credentials).unwrap().as_deref(), Some("tok-2"));
        let _ = std::fs::remove_dir_all(&dir);
        let y = "clusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:1'}\nusers:\n- name: u\n  user: {token: abc}\n\
                 contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n";
        let c = parse(y.as_bytes(), Path::new("k")).unwrap();
        assert_eq!(c.credentials, Credentials::Token("abc".into()));
        assert!(
            !format!("{c:?}").contains("abc"),
            "tokens never reach a log"
        );
    }

    #[test]
    fn a_deeply_nested_kubeconfig_is_refused_before_parsing() {
        let deep = format!("x: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        let e = parse(deep.as_bytes(), Path::new("/k.conf")).unwrap_err();
        assert!(matches!(e, KubeconfigError::Parse { .. }), "{e:?}");
        let e = e.to_string();
        assert!(e.starts_with("/k.conf: (file): "), "{e}");
        assert!(e.contains("nested deeper than the limit"), "{e}");
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        let p = Path::new("/k.conf");
        let err = |y: &str| parse(y.as_bytes(), p).unwrap_err().to_string();
        let base = "clusters:\n- name: c\n  cluster: {server: 'https://h'}\nusers:\n- name: u\n  user: {client-certificate-data: Q0VSVA==}\n";
        let e = err(&format!(
            "{base}contexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: y\n"
        ));
        assert_eq!(e, "/k.conf: current-context: no context named \"y\"");
        let e = err(&format!(
            "{base}contexts:\n- name: x\n  context: {{cluster: c, user: u}}\n"
        ));
        assert_eq!(e, "/k.conf: users[u].user.client-key: missing");
        let e = err(&format!(
            "{base}contexts:\n- name: x\n  context: {{cluster: nope, user: u}}\n"
        ));
        assert_eq!(
            e,
            "/k.conf: contexts[x].context.cluster: no cluster named \"nope\""
        );
        let e = err(
            "clusters:\n- name: c\n  cluster: {server: 'h:1', certificate-authority-data: '!!'}\ncontexts:\n- name: x\n  context: {cluster: c}\n",
        );
        assert_eq!(
            e,
            "/k.conf: clusters[c].cluster.server: \"h:1\" is not an http(s) URL"
        );
        let e = err(
            "clusters:\n- name: c\n  cluster: {server: 'https://h', certificate-authority-data: '!!'}\ncontexts:\n- name: x\n  context: {cluster: c}\n",
        );
        assert!(
            e.starts_with("/k.conf: clusters[c].cluster.certificate-authority-data: not base64"),
            "{e}"
        );
        let e = err(
            "clusters:\n- name: c\n  cluster: {server: 'https://h', certificate-authority: /nonexistent/ca}\ncontexts:\n- name: x\n  context: {cluster: c}\n",
        );
        assert!(
            e.starts_with("/k.conf: clusters[c].cluster.certificate-authority: /nonexistent/ca: "),
            "{e}"
        );
    }
}
