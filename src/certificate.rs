//! Certificates asked of the cluster (feature `apiserver`), with the kubelet's names: TLS
//! bootstrap and rotation of the client certificate, and the serving certificate by CSR
//! (`serverTLSBootstrap`).
//!
//! A key is made on the node (ECDSA P-256), a PKCS#10 request signed with it goes to the
//! apiserver as a CertificateSigningRequest, and once the signer has issued the certificate the
//! key and the certificate are written together to `<root-dir>/pki/<prefix>-<time>.pem` (0600),
//! then the `<prefix>-current.pem` link is switched to it by renaming a new link over it. A
//! power cut leaves the old link or the new one, each naming a whole file. The node's own
//! `--kubeconfig` names the link, so it is written once (at bootstrap) and never again.
//!
//! Timing comes from `rt`'s clock: a certificate is renewed at a random point between 70 % and
//! 90 % of its lifetime, as upstream's certificate manager.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::apiclient::backoff::Jitter;
use crate::apiclient::kubeconfig::KubeconfigError;
use crate::apiclient::kubeconfig::{self, Connection, Credentials, Pem};
use crate::apiclient::{ApiError, Client, TlsError};
use crate::pki::PkiError;
use crate::rt;

/// The client certificate's files: `kubelet-client-<time>.pem`, `kubelet-client-current.pem`.
pub const CLIENT_PREFIX: &str = "kubelet-client";
/// The serving certificate's files: `kubelet-server-<time>.pem`, `kubelet-server-current.pem`.
pub const SERVER_PREFIX: &str = "kubelet-server";

pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

const CSR_PATH: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/// How often a pending request is read again: soon at first (an approver that answers at once
/// is met within a second), then every 10 s (a person may take hours).
fn poll_delay(waited: Duration) -> Duration {
    if waited < Duration::from_secs(60) {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(10)
    }
}

/// Longest wait between attempts after a failure: a node whose apiserver comes back asks again
/// within a minute (one request a minute while it is away is little beside the Lease's six).
const RETRY_CAP: Duration = Duration::from_secs(60);

/// A key and the certificate chain issued for it, as read from or written to a PEM file.
#[derive(Clone)]
pub struct Identity {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    /// The leaf's notBefore and notAfter, Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .finish()
    }
}

impl Identity {
    /// Splits a PEM text into its certificates (the first one the leaf) and its private key.
    pub fn parse(text: &[u8]) -> Result<Identity, CertError> {
        let blocks = crate::pki::pem_blocks(text).map_err(CertError::Pem)?;
        let mut cert_pem = String::new();
        let mut key_pem = String::new();
        for (label, der) in &blocks {
            match label.as_str() {
                "CERTIFICATE" => cert_pem.push_str(&crate::pki::pem(label, der)),
                "PRIVATE KEY" | "EC PRIVATE KEY" | "RSA PRIVATE KEY" if key_pem.is_empty() => {
                    key_pem = crate::pki::pem(label, der)
                }
                _ => {}
            }
        }
        let leaf = blocks
            .iter()
            .find(|(l, _)| l == "CERTIFICATE")
            .ok_or(CertError::NoCertificate)?;
        if key_pem.is_empty() {
            return Err(CertError::NoPrivateKey);
        }
        let (not_before, not_after) = crate::pki::validity(&leaf.1).ok_or(CertError::Validity)?;
        Ok(Identity {
            cert_pem: cert_pem.into_bytes(),
            key_pem: key_pem.into_bytes(),
            not_before,
            not_after,
        })
    }

    /// The certificate and key of a kubeconfig's client credentials.
    pub fn of(c: &Credentials) -> Option<Identity> {
        match c {
            Credentials::ClientCert { cert, key } => {
                let mut text = cert.0.clone();
                text.push(b'\n');
                text.extend_from_slice(&key.0);
                Identity::parse(&text).ok()
            }
            _ => None,
        }
    }

    pub fn valid_at(&self, now: i64) -> bool {
        self.not_before <= now && now < self.not_after
    }

    pub fn credentials(&self) -> Credentials {
        Credentials::ClientCert {
            cert: Pem(self.cert_pem.clone()),
            key: Pem(self.key_pem.clone()),
        }
    }

    /// When to ask for the next certificate: `fraction` (0.7 to 0.9) of the way through the
    /// lifetime.
    pub fn renew_at(&self, fraction: f64) -> i64 {
        let life = (self.not_after - self.not_before).max(0);
        #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
        let part = (life as f64 * fraction) as i64;
        self.not_before + part
    }
}

/// A uniformly random point in 70 % to 90 % of a lifetime.
pub fn renewal_fraction(jitter: &mut Jitter) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let r = (jitter.next_u64() % 1_000_000) as f64 / 1_000_000.0;
    0.7 + 0.2 * r
}

/// `2006-01-02-15-04-05`, the stamp upstream's certificate store names files with.
fn stamp(unix: i64) -> String {
    let t = crate::api::rfc3339(unix.saturating_mul(1_000_000_000));
    // "YYYY-MM-DDTHH:MM:SSZ"
    t.trim_end_matches('Z').replace(['T', ':'], "-")
}

/// The PEM files of one kind of certificate in `<root-dir>/pki`.
#[derive(Debug, Clone)]
pub struct Store {
    pub dir: PathBuf,
    pub prefix: &'static str,
}

/// Points at which a test kills the process (`PICOLET_CRASH_AT=<point>`), as a power cut would.
fn crash_point(point: &str) {
    if std::env::var("PICOLET_CRASH_AT").as_deref() == Ok(point) {
        log::warn!("PICOLET_CRASH_AT={point}: killing this process");
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}

impl Store {
    pub fn new(dir: &Path, prefix: &'static str) -> Store {
        Store {
            dir: dir.to_owned(),
            prefix,
        }
    }

    /// `<prefix>-current.pem`.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.prefix))
    }

    /// The identity the current link names; `None` when there is none, an error naming the
    /// file when it does not read.
    pub fn current(&self) -> Result<Option<Identity>, CertError> {
        let p = self.current_path();
        match std::fs::read(&p) {
            Ok(text) => Identity::parse(&text)
                .map(Some)
                .map_err(|e| CertError::File {
                    path: p,
                    source: Box::new(e),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(CertError::Read { path: p, source }),
        }
    }

    /// Writes the certificate and key to a new file named for `now`, then switches the current
    /// link to it. Each step is durable before the next; the link's switch is one rename.
    pub fn save(&self, cert_pem: &[u8], key_pem: &[u8], now: i64) -> Result<PathBuf, CertError> {
        let name = format!("{}-{}.pem", self.prefix, stamp(now));
        let file = self.dir.join(&name);
        let mut text = cert_pem.to_vec();
        if !text.ends_with(b"\n") {
            text.push(b'\n');
        }
        text.extend_from_slice(key_pem);
        crate::atomic_file::create_dir_all(&self.dir)
            .map_err(io(format!("creating {}", self.dir.display())))?;
        crate::atomic_file::write_mode(&file, &text, 0o600)
            .map_err(io(format!("writing {}", file.display())))?;
        crash_point("cert-written");
        let link = self.current_path();
        let tmp = crate::atomic_file::temp_path(&link);
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&name, &tmp)
            .map_err(io(format!("linking {} to {name}", tmp.display())))?;
        crash_point("link-made");
        std::fs::rename(&tmp, &link).map_err(io(format!(
            "renaming {} to {}",
            tmp.display(),
            link.display()
        )))?;
        crash_point("link-renamed");
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io(format!("fsync of {}", self.dir.display())))?;
        Ok(file)
    }
}

/// The node's kubeconfig as upstream's bootstrap writes it: the bootstrap kubeconfig's server
/// and CA, and the client certificate and key from `pem` (the current link).
pub fn kubeconfig_text(conn: &Connection, pem: &Path) -> String {
    use base64::Engine;
    let mut cluster = format!("    server: {}\n", conn.server);
    if let Some(ca) = &conn.ca {
        cluster.push_str(&format!(
            "    certificate-authority-data: {}\n",
            base64::engine::general_purpose::STANDARD.encode(&ca.0)
        ));
    }
    if conn.insecure_skip_tls_verify {
        cluster.push_str("    insecure-skip-tls-verify: true\n");
    }
    let pem = pem.display();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: default-cluster\n  cluster:\n{cluster}\
         contexts:\n- name: default-context\n  context:\n    cluster: default-cluster\n    \
         namespace: default\n    user: default-auth\ncurrent-context: default-context\n\
         users:\n- name: default-auth\n  user:\n    client-certificate: {pem}\n    \
         client-key: {pem}\n"
    )
}

/// The CertificateSigningRequest body for a PEM request.
fn csr_object(csr_der: &[u8], signer: &str, usages: &[&str]) -> Vec<u8> {
    use base64::Engine;
    let request = crate::pki::pem("CERTIFICATE REQUEST", csr_der);
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(request),
            "signerName": signer,
            "usages": usages,
        },
    }))
    .unwrap_or_default()
}

#[derive(Debug, Default, serde::Deserialize)]
struct CsrObject {
    #[serde(default)]
    metadata: CsrMeta,
    #[serde(default)]
    status: CsrStatus,
}

#[derive(Debug, Default, serde::Deserialize)]
struct CsrMeta {
    #[serde(default)]
    name: String,
}

#[derive(Debug, Default, serde::Deserialize)]
struct CsrStatus {
    #[serde(default)]
    certificate: String,
    #[serde(default)]
    conditions: Vec<CsrCondition>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct CsrCondition {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    message: String,
}

/// Why a certificate could not be read, kept or put to use.
#[derive(Debug)]
pub enum CertError {
    /// A PEM text whose blocks do not decode.
    Pem(PkiError),
    /// A PEM text without a certificate.
    NoCertificate,
    /// A PEM text without a private key.
    NoPrivateKey,
    /// The leaf certificate's validity does not parse.
    Validity,
    /// A file that cannot be read.
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file that does not hold an identity.
    File {
        path: PathBuf,
        source: Box<CertError>,
    },
    /// A step of writing a file failed: what was being done ("writing /x", "linking /a to b").
    Io {
        doing: String,
        source: std::io::Error,
    },
    /// The kubeconfig a flag names does not load.
    Kubeconfig {
        flag: &'static str,
        source: KubeconfigError,
    },
    /// No client can be made with a kubeconfig's TLS material (`flag` names it), or with a
    /// new identity (`None`).
    Client {
        flag: Option<&'static str>,
        source: TlsError,
    },
    /// The node API's self-signed certificate could not be made.
    SelfSigned(PkiError),
}

/// A failed file step, with what was being done.
fn io(doing: String) -> impl FnOnce(std::io::Error) -> CertError {
    move |source| CertError::Io { doing, source }
}

impl std::fmt::Display for CertError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CertError::Pem(e) => write!(f, "{e}"),
            CertError::NoCertificate => f.write_str("no PEM certificate found"),
            CertError::NoPrivateKey => f.write_str("no PEM private key found"),
            CertError::Validity => f.write_str("the certificate's validity does not parse"),
            CertError::Read { path, source } => write!(f, "{}: {source}", path.display()),
            CertError::File { path, source } => write!(f, "{}: {source}", path.display()),
            CertError::Io { doing, source } => write!(f, "{doing}: {source}"),
            CertError::Kubeconfig { flag, source } => write!(f, "{flag}: {source}"),
            CertError::Client {
                flag: Some(flag),
                source,
            } => write!(f, "{flag}: {source}"),
            CertError::Client { flag: None, source } => write!(f, "{source}"),
            CertError::SelfSigned(e) => write!(f, "the node API's self-signed certificate: {e}"),
        }
    }
}

impl std::error::Error for CertError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CertError::Pem(e) | CertError::SelfSigned(e) => Some(e),
            CertError::Read { source, .. } | CertError::Io { source, .. } => Some(source),
            CertError::File { source, .. } => Some(source.as_ref()),
            CertError::Kubeconfig { source, .. } => Some(source),
            CertError::Client { source, .. } => Some(source),
            CertError::NoCertificate | CertError::NoPrivateKey | CertError::Validity => None,
        }
    }
}

/// Why a request brought no certificate.
#[derive(Debug)]
pub enum RequestError {
    /// The apiserver could not be reached or refused the call.
    Api(ApiError),
    /// The request was denied or the signer failed it.
    Refused(String),
    /// No key or certificate request could be made.
    Key(PkiError),
    /// The request was not issued before its time ran out.
    NotIssued { name: String },
    /// The issued certificate is not base64.
    NotBase64 {
        name: String,
        source: base64::DecodeError,
    },
    /// The issued certificate does not make an identity with the key.
    Issued { name: String, source: CertError },
    /// The certificate could not be kept or put to use (a file not written, no client made,
    /// no bootstrap kubeconfig).
    Install(CertError),
    /// No `--bootstrap-kubeconfig` to bootstrap with.
    NoBootstrap,
    /// The server refused the issued serving certificate.
    Serving(String),
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::Api(e) => write!(f, "{e}"),
            RequestError::Refused(m) | RequestError::Serving(m) => f.write_str(m),
            RequestError::Key(e) => write!(f, "{e}"),
            RequestError::NotIssued { name } => write!(
                f,
                "CertificateSigningRequest {name} was not issued in time; sending a new one"
            ),
            RequestError::NotBase64 { name, source } => write!(
                f,
                "CertificateSigningRequest {name}: status.certificate is not base64: {source}"
            ),
            RequestError::Issued { name, source } => write!(
                f,
                "CertificateSigningRequest {name}: status.certificate: {source}"
            ),
            RequestError::Install(e) => write!(f, "{e}"),
            RequestError::NoBootstrap => f.write_str("no --bootstrap-kubeconfig"),
        }
    }
}

impl std::error::Error for RequestError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RequestError::Api(e) => Some(e),
            RequestError::Key(e) => Some(e),
            RequestError::NotBase64 { source, .. } => Some(source),
            RequestError::Issued { source, .. } => Some(source),
            RequestError::Install(e) => Some(e),
            RequestError::Refused(_)
            | RequestError::Serving(_)
            | RequestError::NotIssued { .. }
            | RequestError::NoBootstrap => None,
        }
    }
}

/// What a certificate is asked for.
#[derive(Debug, Clone)]
pub struct Ask {
    pub node: String,
    pub signer: &'static str,
    pub usages: &'static [&'static str],
    pub dns: Vec<String>,
    pub ips: Vec<IpAddr>,
}

impl Ask {
    pub fn client(node: &str) -> Ask {
        Ask {
            node: node.to_owned(),
            signer: CLIENT_SIGNER,
            // "key encipherment" is for RSA keys only; this key is ECDSA.
            usages: &["digital signature", "client auth"],
            dns: Vec::new(),
            ips: Vec::new(),
        }
    }

    pub fn serving(node: &str, dns: Vec<String>, ips: Vec<IpAddr>) -> Ask {
        Ask {
            node: node.to_owned(),
            signer: SERVING_SIGNER,
            usages: &["digital signature", "server auth"],
            dns,
            ips,
        }
    }
}

/// How long a request is waited for before a new one is sent (an approver that missed it, a
/// signer that was down), as upstream's certificate manager.
pub const ISSUE_WAIT: i64 = 15 * 60;

/// Makes a key, sends the request through `client` and waits until the certificate is
/// issued, or until `give_up` (Unix seconds: [`ISSUE_WAIT`] from now, and no later than the
/// end of the identity the request was sent with); returns the key and the certificate chain,
/// PEM. Runs on the executor; each call runs on the blocking pool.
pub async fn request(client: &Client, ask: &Ask, give_up: i64) -> Result<Identity, RequestError> {
    let key = crate::pki::new_key_pkcs8().map_err(RequestError::Key)?;
    let cn = format!("system:node:{}", ask.node);
    let der = crate::pki::csr(&key, &cn, &["system:nodes"], &ask.dns, &ask.ips)
        .map_err(RequestError::Key)?;
    let body = csr_object(&der, ask.signer, ask.usages);
    let c = client.clone();
    let created: CsrObject =
        rt::unblock(move || c.json("POST", CSR_PATH, Some(("application/json", body))))
            .await
            .map_err(RequestError::Api)?;
    let name = created.metadata.name;
    log::info!(
        "certificate: CertificateSigningRequest {name} sent ({}, {cn}); waiting for it to be \
         approved and issued",
        ask.signer
    );
    let started = rt::now();
    let mut failures = 0u32;
    loop {
        rt::sleep(poll_delay(rt::now().saturating_duration_since(started))).await;
        if wall() >= give_up {
            return Err(RequestError::NotIssued { name });
        }
        let (c, path) = (client.clone(), format!("{CSR_PATH}/{name}"));
        let got: Result<CsrObject, ApiError> =
            rt::unblock(move || c.json("GET", &path, None)).await;
        let obj = match got {
            Ok(o) => {
                failures = 0;
                o
            }
            // Gone (collected, or deleted by someone): ask again from the start.
            Err(e) if e.is_not_found() => {
                return Err(RequestError::Refused(format!(
                    "CertificateSigningRequest {name} was deleted before it was issued"
                )));
            }
            Err(e) => {
                failures += 1;
                if failures == 1 || failures.is_power_of_two() {
                    log::warn!("certificate: reading CertificateSigningRequest {name}: {e}");
                }
                continue;
            }
        };
        if let Some(c) = obj
            .status
            .conditions
            .iter()
            .find(|c| c.kind == "Denied" || c.kind == "Failed")
        {
            return Err(RequestError::Refused(format!(
                "CertificateSigningRequest {name} was {}: {} {}",
                c.kind.to_lowercase(),
                c.reason,
                c.message
            )));
        }
        if obj.status.certificate.is_empty() {
            continue;
        }
        use base64::Engine;
        let cert = base64::engine::general_purpose::STANDARD
            .decode(obj.status.certificate.trim())
            .map_err(|source| RequestError::NotBase64 {
                name: name.clone(),
                source,
            })?;
        let key_pem = crate::pki::pem("PRIVATE KEY", &key);
        let mut text = cert.clone();
        text.push(b'\n');
        text.extend_from_slice(key_pem.as_bytes());
        let id = Identity::parse(&text).map_err(|source| RequestError::Issued {
            name: name.clone(),
            source,
        })?;
        log::info!(
            "certificate: CertificateSigningRequest {name} issued, valid until {}",
            crate::api::rfc3339(id.not_after.saturating_mul(1_000_000_000))
        );
        return Ok(id);
    }
}

/// How the node's client identity stands at start.
#[derive(Debug)]
pub enum Start {
    /// A usable client identity (or a token kubeconfig).
    Ready,
    /// None yet: the first bootstrap, cluster calls wait for it.
    Bootstrap,
    /// One that expired (pods run on; the manager renews or says what to do).
    Expired,
}

/// The connection the node starts with, from `--kubeconfig`, the current certificate of the
/// store and `--bootstrap-kubeconfig`, as upstream's `LoadClientCert` decides:
/// a kubeconfig whose certificate is valid is used; else a valid current certificate, with
/// the kubeconfig written for it; else the bootstrap kubeconfig's cluster, with the expired
/// certificate (if any) until bootstrap brings a new one.
pub fn start(
    kubeconfig: &Path,
    bootstrap: Option<&Path>,
    store: &Store,
    rotation: bool,
    now: i64,
) -> Result<(Connection, Start), CertError> {
    let loaded = kubeconfig::read(kubeconfig);
    let current = store.current().unwrap_or_else(|e| {
        log::warn!("certificate: {e}; ignoring it");
        None
    });
    let current_valid = current.as_ref().filter(|c| c.valid_at(now));
    if let Ok(conn) = &loaded {
        let id = Identity::of(&conn.credentials);
        match (&id, current_valid) {
            // With rotation on, a newer certificate in the store wins over the kubeconfig's.
            (Some(k), Some(c)) if rotation && c.not_after > k.not_after => {
                let mut conn = conn.clone();
                conn.credentials = c.credentials();
                return Ok((conn, Start::Ready));
            }
            (Some(k), _) if k.valid_at(now) => return Ok((conn.clone(), Start::Ready)),
            (None, _) if !matches!(conn.credentials, Credentials::ClientCert { .. }) => {
                return Ok((conn.clone(), Start::Ready));
            }
            _ => {}
        }
    }
    let Some(bootstrap) = bootstrap else {
        // No way to a new certificate: start with what there is (pods run on), or fail as
        // before when the kubeconfig does not load.
        let conn = loaded.map_err(|source| CertError::Kubeconfig {
            flag: "--kubeconfig",
            source,
        })?;
        return Ok((conn, Start::Expired));
    };
    let boot = kubeconfig::read(bootstrap).map_err(|source| CertError::Kubeconfig {
        flag: "--bootstrap-kubeconfig",
        source,
    })?;
    if let Some(c) = current_valid {
        write_kubeconfig(kubeconfig, &boot, &store.current_path())?;
        log::info!(
            "certificate: {} written for the current certificate {}",
            kubeconfig.display(),
            store.current_path().display()
        );
        return Ok((
            Connection {
                credentials: c.credentials(),
                ..boot
            },
            Start::Ready,
        ));
    }
    let expired = loaded
        .ok()
        .and_then(|c| Identity::of(&c.credentials))
        .or(current);
    let start = if expired.is_some() {
        Start::Expired
    } else {
        Start::Bootstrap
    };
    Ok((
        Connection {
            credentials: expired.map_or(Credentials::None, |i| i.credentials()),
            ..boot
        },
        start,
    ))
}

/// Writes the node's kubeconfig for the current link, atomically.
pub fn write_kubeconfig(path: &Path, boot: &Connection, pem: &Path) -> Result<(), CertError> {
    let text = kubeconfig_text(boot, pem);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        crate::atomic_file::create_dir_all(dir)
            .map_err(io(format!("creating {}", dir.display())))?;
    }
    crate::atomic_file::write_mode(path, text.as_bytes(), 0o600)
        .map_err(io(format!("writing {}", path.display())))
}

/// The client certificate's manager: renews it by CSR before it expires (with the node's own
/// identity), bootstraps again with the bootstrap kubeconfig when it has expired, and swaps the
/// identity of `client` (every clone) each time.
#[derive(Debug)]
pub struct ClientManager {
    pub client: Client,
    pub kubeconfig: PathBuf,
    pub bootstrap: Option<PathBuf>,
    pub store: Store,
    pub node: String,
    pub rotation: bool,
    /// Told once the node has a usable identity.
    pub ready: Option<async_channel::Sender<()>>,
}

/// What the manager does next, decided from the identity of now (pure).
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Wait until this time (Unix seconds), then decide again.
    WaitUntil(i64),
    /// Ask for a new certificate with the node's own identity.
    Renew,
    /// Ask for one with the bootstrap credential.
    Bootstrap,
    /// Nothing can renew it: say what the operator must do, then check again later.
    Stuck,
}

pub fn next(
    id: Option<&Identity>,
    now: i64,
    rotation: bool,
    bootstrap: bool,
    fraction: f64,
) -> Next {
    match id {
        Some(i) if now < i.not_after => {
            let at = i.renew_at(fraction);
            if rotation && now >= at {
                Next::Renew
            } else if rotation {
                Next::WaitUntil(at)
            } else {
                Next::WaitUntil(i.not_after)
            }
        }
        _ if bootstrap => Next::Bootstrap,
        _ => Next::Stuck,
    }
}

/// Longest single sleep: the wall clock is read again after it, so a clock set or a suspend
/// does not move the renewal far.
const MAX_SLEEP: Duration = Duration::from_secs(600);

fn secs(d: i64) -> Duration {
    Duration::from_secs(u64::try_from(d.max(0)).unwrap_or(0))
}

fn wall() -> i64 {
    rt::now_nanos().div_euclid(1_000_000_000)
}

impl ClientManager {
    fn install(&mut self, id: &Identity) -> Result<(), CertError> {
        let now = wall();
        let file = self.store.save(&id.cert_pem, &id.key_pem, now)?;
        log::info!(
            "certificate: client certificate {} installed (valid until {})",
            file.display(),
            crate::api::rfc3339(id.not_after.saturating_mul(1_000_000_000))
        );
        let conn = self.client.connection();
        // An operator's kubeconfig that still holds a valid certificate is left as it is (the
        // newer certificate of the store wins at start); one that gives none is written anew.
        let usable = kubeconfig::read(&self.kubeconfig)
            .ok()
            .and_then(|c| Identity::of(&c.credentials))
            .is_some_and(|i| i.valid_at(now));
        if !usable && !kubeconfig_names(&self.kubeconfig, &self.store.current_path()) {
            write_kubeconfig(&self.kubeconfig, &conn, &self.store.current_path())?;
            crash_point("kubeconfig-written");
            log::info!("certificate: {} written", self.kubeconfig.display());
        }
        self.client
            .set_credentials(id.credentials())
            .map_err(|source| CertError::Client { flag: None, source })?;
        if let Some(tx) = self.ready.take() {
            let _ = tx.try_send(());
        }
        Ok(())
    }

    /// Runs until the task is dropped.
    pub async fn run(mut self, mut id: Option<Identity>) {
        let mut jitter = Jitter::new(&self.node);
        let mut fraction = renewal_fraction(&mut jitter);
        let mut failures = 0u32;
        let mut stuck_told = false;
        if id.as_ref().is_some_and(|i| i.valid_at(wall()))
            && let Some(tx) = self.ready.take()
        {
            let _ = tx.try_send(());
        }
        loop {
            let now = wall();
            let step = next(
                id.as_ref(),
                now,
                self.rotation,
                self.bootstrap.is_some(),
                fraction,
            );
            let asked = match step {
                Next::WaitUntil(at) => {
                    rt::sleep(secs(at - now).min(MAX_SLEEP).max(Duration::from_secs(1))).await;
                    continue;
                }
                Next::Stuck => {
                    if !stuck_told {
                        log::error!(
                            "certificate: the client certificate of {} expired{} and no \
                             --bootstrap-kubeconfig is set: pods keep running, but the node is \
                             cut off from the cluster until an operator puts a valid client \
                             certificate for system:node:{} there (or sets \
                             --bootstrap-kubeconfig with a valid bootstrap token and restarts \
                             picolet); a new certificate put in the kubeconfig is taken up within \
                             a minute",
                            self.kubeconfig.display(),
                            id.as_ref().map_or(String::new(), |i| format!(
                                " at {}",
                                crate::api::rfc3339(i.not_after.saturating_mul(1_000_000_000))
                            )),
                            self.node
                        );
                        stuck_told = true;
                    }
                    rt::sleep(Duration::from_secs(60)).await;
                    // The operator may have put a new certificate in place.
                    if let Ok(c) = kubeconfig::read(&self.kubeconfig)
                        && let Some(i) = Identity::of(&c.credentials).filter(|i| i.valid_at(wall()))
                    {
                        let _ = self.client.set_credentials(i.credentials());
                        id = Some(i);
                        stuck_told = false;
                    }
                    continue;
                }
                Next::Renew => {
                    log::info!("certificate: renewing the client certificate");
                    let end = id.as_ref().map_or(i64::MAX, |i| i.not_after);
                    let give_up = (now + ISSUE_WAIT).min(end);
                    request(&self.client, &Ask::client(&self.node), give_up).await
                }
                Next::Bootstrap => self.bootstrap_once(&mut stuck_told).await,
            };
            match asked.and_then(|i| {
                self.install(&i).map_err(RequestError::Install)?;
                Ok(i)
            }) {
                Ok(i) => {
                    id = Some(i);
                    failures = 0;
                    stuck_told = false;
                    fraction = renewal_fraction(&mut jitter);
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let wait = Duration::from_secs(1u64 << failures.min(9)).min(RETRY_CAP);
                    let wait = wait / 2 + jitter.below(wait / 2);
                    log::warn!("certificate: {e}; trying again in {wait:?}");
                    rt::sleep(wait).await;
                }
            }
        }
    }

    /// One bootstrap: the bootstrap kubeconfig read afresh (an operator may have put a new
    /// token there), its token used to send the request.
    async fn bootstrap_once(&mut self, told: &mut bool) -> Result<Identity, RequestError> {
        let Some(path) = self.bootstrap.clone() else {
            return Err(RequestError::NoBootstrap);
        };
        let flag = "--bootstrap-kubeconfig";
        let conn = kubeconfig::read(&path)
            .map_err(|source| RequestError::Install(CertError::Kubeconfig { flag, source }))?;
        let boot = Client::new(&conn).map_err(|source| {
            RequestError::Install(CertError::Client {
                flag: Some(flag),
                source,
            })
        })?;
        log::info!(
            "certificate: bootstrapping the client certificate with {}",
            path.display()
        );
        let r = request(&boot, &Ask::client(&self.node), wall() + ISSUE_WAIT).await;
        if let Err(RequestError::Api(e)) = &r
            && e.is_forbidden()
            && !*told
        {
            log::error!(
                "certificate: the apiserver refuses the bootstrap credential of {} ({e}): \
                 pods keep running, but the node cannot rejoin until an operator puts a \
                 valid bootstrap token there (kubeadm token create) or a valid client \
                 certificate in {}",
                path.display(),
                self.kubeconfig.display()
            );
            *told = true;
        }
        r
    }
}

/// The node API's certificate files, as the kubelet chooses them: `tlsCertFile` and
/// `tlsPrivateKeyFile` when given, else a self-signed certificate kept in `pki` for the node's
/// name and address (and localhost, 127.0.0.1), made on first use.
pub fn serving_files(
    given: (Option<&Path>, Option<&Path>),
    pki: &Path,
    node_name: &str,
    node_ip: &str,
    now: i64,
) -> Result<(PathBuf, PathBuf), CertError> {
    if let (Some(c), Some(k)) = given {
        return Ok((c.to_owned(), k.to_owned()));
    }
    let mut ips = vec![IpAddr::from([127, 0, 0, 1])];
    if let Ok(ip) = node_ip.parse() {
        ips.insert(0, ip);
    }
    let names = [node_name.to_owned(), "localhost".to_owned()];
    crate::pki::ensure_self_signed(pki, node_name, &names, &ips, now).map_err(CertError::SelfSigned)
}

/// With `serverTLSBootstrap`: the store of the serving certificates the cluster issues, the
/// one it holds that is valid now (served at once, else the files serve until one is issued),
/// and what to ask for (the node's name and address).
pub struct ServingBootstrap {
    pub store: Store,
    pub current: Option<Identity>,
    pub ask: Ask,
}

impl ServingBootstrap {
    pub fn new(pki: &Path, node_name: &str, node_ip: &str, now: i64) -> ServingBootstrap {
        let store = Store::new(pki, SERVER_PREFIX);
        let current = store
            .current()
            .unwrap_or_else(|e| {
                log::warn!("certificate: {e}; asking for a new serving certificate");
                None
            })
            .filter(|i| i.valid_at(now));
        let ips: Vec<IpAddr> = node_ip.parse().into_iter().collect();
        let ask = Ask::serving(node_name, vec![node_name.to_owned()], ips);
        ServingBootstrap {
            store,
            current,
            ask,
        }
    }
}

/// The serving certificate's manager (`serverTLSBootstrap`): asks for one through `client`
/// (the node's own identity) when there is none valid, and again at 70 % to 90 % of each one's
/// lifetime; each is saved in `store` and handed to `install` (the server's resolver).
pub async fn run_serving(
    client: Client,
    store: Store,
    ask: Ask,
    mut id: Option<Identity>,
    install: impl Fn(&Identity) -> Result<(), String>,
) {
    let mut jitter = Jitter::new(&ask.node);
    let mut fraction = renewal_fraction(&mut jitter);
    let mut failures = 0u32;
    loop {
        let now = wall();
        if let Next::WaitUntil(at) = next(id.as_ref(), now, true, true, fraction) {
            rt::sleep(secs(at - now).min(MAX_SLEEP).max(Duration::from_secs(1))).await;
            continue;
        }
        let got = request(&client, &ask, now + ISSUE_WAIT)
            .await
            .and_then(|i| {
                store
                    .save(&i.cert_pem, &i.key_pem, wall())
                    .map_err(RequestError::Install)?;
                install(&i).map_err(RequestError::Serving)?;
                Ok(i)
            });
        match got {
            Ok(i) => {
                log::info!(
                    "certificate: serving certificate installed (valid until {})",
                    crate::api::rfc3339(i.not_after.saturating_mul(1_000_000_000))
                );
                id = Some(i);
                failures = 0;
                fraction = renewal_fraction(&mut jitter);
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let wait = Duration::from_secs(1u64 << failures.min(9)).min(RETRY_CAP);
                let wait = wait / 2 + jitter.below(wait / 2);
                log::warn!("certificate: serving certificate: {e}; trying again in {wait:?}");
                rt::sleep(wait).await;
            }
        }
    }
}

/// Whether the kubeconfig at `path` takes its client certificate from `pem`.
fn kubeconfig_names(path: &Path, pem: &Path) -> bool {
    std::fs::read_to_string(path)
        .is_ok_and(|t| t.contains(&format!("client-certificate: {}\n", pem.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(not_before: i64, not_after: i64) -> Identity {
        Identity {
            cert_pem: Vec::new(),
            key_pem: Vec::new(),
            not_before,
            not_after,
        }
    }

    #[test]
    fn renewal_falls_between_70_and_90_percent_of_the_lifetime() {
        let mut j = Jitter::new("n");
        for _ in 0..1000 {
            let f = renewal_fraction(&mut j);
            assert!((0.7..0.9).contains(&f), "{f}");
        }
        let i = id(1000, 2000);
        assert_eq!(i.renew_at(0.7), 1700);
        assert_eq!(next(Some(&i), 1500, true, true, 0.8), Next::WaitUntil(1800));
        assert_eq!(next(Some(&i), 1800, true, true, 0.8), Next::Renew);
        // Without rotation the certificate is kept until it expires.
        assert_eq!(
            next(Some(&i), 1800, false, true, 0.8),
            Next::WaitUntil(2000)
        );
        // Expired: bootstrap again if the node can, else say so.
        assert_eq!(next(Some(&i), 2000, true, true, 0.8), Next::Bootstrap);
        assert_eq!(next(Some(&i), 2000, true, false, 0.8), Next::Stuck);
        assert_eq!(next(None, 0, false, true, 0.8), Next::Bootstrap);
    }

    #[test]
    fn stamps_are_upstreams() {
        assert_eq!(stamp(0), "1970-01-01-00-00-00");
        assert_eq!(stamp(1_780_000_000), "2026-05-28-20-26-40");
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("picolet-cert-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn the_store_switches_the_link_to_a_whole_owner_only_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tmp("store");
        let store = Store::new(&dir.join("pki"), CLIENT_PREFIX);
        assert!(store.current().unwrap().is_none());
        let now = 1_780_000_000;
        let a = crate::pki::self_signed("n", &[], &[], now).unwrap();
        let f1 = store
            .save(a.cert_pem.as_bytes(), a.key_pem.as_bytes(), now)
            .unwrap();
        assert!(f1.ends_with("kubelet-client-2026-05-28-20-26-40.pem"));
        let mode = std::fs::metadata(&f1).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let cur = store.current().unwrap().unwrap();
        assert_eq!(cur.not_after, now + 365 * 24 * 3600);
        let b = crate::pki::self_signed("n", &[], &[], now + 10).unwrap();
        store
            .save(b.cert_pem.as_bytes(), b.key_pem.as_bytes(), now + 10)
            .unwrap();
        assert_eq!(
            store.current().unwrap().unwrap().not_before,
            now + 10 - 3600
        );
        let link = std::fs::read_link(store.current_path()).unwrap();
        assert_eq!(link, Path::new("kubelet-client-2026-05-28-20-26-50.pem"));
        // The old file stays (as upstream's), the temporary link is gone.
        assert!(f1.exists());
        assert!(!crate::atomic_file::temp_path(&store.current_path()).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn start_picks_the_kubeconfig_the_store_or_bootstrap() {
        let dir = tmp("start");
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::new(&dir.join("pki"), CLIENT_PREFIX);
        let kc = dir.join("kubelet.conf");
        let boot = dir.join("bootstrap.conf");
        std::fs::write(
            &boot,
            "clusters:\n- name: c\n  cluster: {server: 'https://10.0.0.1:6443'}\nusers:\n- name: u\n  \
             user: {token: abcdef.0123456789abcdef}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\n",
        )
        .unwrap();
        let now = 1_780_000_000;
        // Nothing yet: bootstrap, with no credentials until then.
        let (conn, s) = start(&kc, Some(&boot), &store, true, now).unwrap();
        assert!(matches!(s, Start::Bootstrap), "{s:?}");
        assert_eq!(conn.server, "https://10.0.0.1:6443");
        assert_eq!(conn.credentials, Credentials::None);
        // No kubeconfig and no bootstrap: the error names the flag.
        let e = start(&kc, None, &store, true, now).unwrap_err();
        assert!(matches!(e, CertError::Kubeconfig { .. }), "{e:?}");
        assert!(e.to_string().starts_with("--kubeconfig: "), "{e}");
        // A valid current certificate: the kubeconfig is written for it.
        let a = crate::pki::self_signed("n", &[], &[], now).unwrap();
        store
            .save(a.cert_pem.as_bytes(), a.key_pem.as_bytes(), now)
            .unwrap();
        let (conn, s) = start(&kc, Some(&boot), &store, true, now).unwrap();
        assert!(matches!(s, Start::Ready), "{s:?}");
        assert!(matches!(conn.credentials, Credentials::ClientCert { .. }));
        let written = kubeconfig::load(&kc).unwrap();
        assert_eq!(written.server, "https://10.0.0.1:6443");
        assert_eq!(
            Identity::of(&written.credentials).unwrap().not_after,
            now + 365 * 24 * 3600
        );
        assert!(kubeconfig_names(&kc, &store.current_path()));
        // Later, expired: bootstrap again, the expired certificate kept meanwhile.
        let late = now + 400 * 24 * 3600;
        let (conn, s) = start(&kc, Some(&boot), &store, true, late).unwrap();
        assert!(matches!(s, Start::Expired), "{s:?}");
        assert!(matches!(conn.credentials, Credentials::ClientCert { .. }));
        // Expired with no bootstrap kubeconfig: start anyway.
        let (_, s) = start(&kc, None, &store, true, late).unwrap();
        assert!(matches!(s, Start::Expired), "{s:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
