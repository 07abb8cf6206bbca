//! Which credentials pulled which image, and whether a pod must show that it may use an image
//! already on the node (upstream's `pkg/kubelet/images/pullmanager`, KEP-2535,
//! `KubeletEnsureSecretPulledImages`).
//!
//! The records sit under `<root-dir>/image_manager/` as upstream keeps them: `pulling/` holds an
//! `ImagePullIntent` per image being pulled (written before the pull, removed after it), and
//! `pulled/` an `ImagePulledRecord` per image id, listing for each repository the image pull
//! secrets (namespace, name and a SHA-256 of the credential, never the credential) that pulled
//! it, or that any pod may use it (pulled anonymously or with the node's own credentials). Each
//! file is named `sha256-<hex of the image or image id>` and written whole (`atomic_file`), so a
//! power cut leaves the old file or the new one. A record that cannot be read is refused with
//! its path and removed; the image then counts as pulled by the kubelet without a record, so the
//! next pod pulls it again with its own credentials and the record is written anew.
//!
//! Pure apart from [`PullRecords`]' file access; the policy decisions are [`Policy`]'s.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// `imagePullCredentialsVerificationPolicy`: which images already on the node a pod must show
/// credentials for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VerificationPolicy {
    /// Any pod may use any image on the node.
    NeverVerify,
    /// Images the kubelet did not pull (preloaded, or pulled before the records were kept)
    /// need no check; the ones it pulled do. Upstream's default.
    #[default]
    NeverVerifyPreloadedImages,
    /// Images in `preloadedImagesVerificationAllowlist` need no check; all others do.
    NeverVerifyAllowlistedImages,
    /// Every image needs the check.
    AlwaysVerify,
}

impl VerificationPolicy {
    pub const VALUES: [&'static str; 4] = [
        "NeverVerify",
        "NeverVerifyPreloadedImages",
        "NeverVerifyAllowlistedImages",
        "AlwaysVerify",
    ];

    pub fn parse(s: &str) -> Result<VerificationPolicy, String> {
        Ok(match s {
            "NeverVerify" => VerificationPolicy::NeverVerify,
            "NeverVerifyPreloadedImages" => VerificationPolicy::NeverVerifyPreloadedImages,
            "NeverVerifyAllowlistedImages" => VerificationPolicy::NeverVerifyAllowlistedImages,
            "AlwaysVerify" => VerificationPolicy::AlwaysVerify,
            _ => {
                return Err(format!(
                    "unknown image pull credentials verification policy, must be one of: {}",
                    Self::VALUES.join(", ")
                ));
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            VerificationPolicy::NeverVerify => "NeverVerify",
            VerificationPolicy::NeverVerifyPreloadedImages => "NeverVerifyPreloadedImages",
            VerificationPolicy::NeverVerifyAllowlistedImages => "NeverVerifyAllowlistedImages",
            VerificationPolicy::AlwaysVerify => "AlwaysVerify",
        }
    }
}

/// One `preloadedImagesVerificationAllowlist` entry, as upstream checks it: a repository
/// written in full (`docker.io/library/nginx`, no tag or digest), or a prefix ending in `/*`
/// (`registry.local/fleet/*`); no spaces around it, no other `*`.
pub fn check_allowlist_pattern(pattern: &str) -> Result<(), String> {
    if pattern != pattern.trim() {
        return Err(format!(
            "leading/trailing spaces are not allowed: {pattern:?}"
        ));
    }
    let (trimmed, wildcard) = match pattern.strip_suffix('*') {
        Some(t) if pattern.ends_with("/*") => (t, true),
        _ => (pattern, false),
    };
    if trimmed.is_empty() {
        return Err(format!("the supplied pattern is too short: {pattern:?}"));
    }
    if trimmed.contains('*') {
        return Err(format!(
            "not a valid wildcard pattern, only patterns ending with '/*' are allowed: {pattern:?}"
        ));
    }
    if wildcard {
        if trimmed.len() == 1 {
            return Err("at least registry hostname is required".into());
        }
        return Ok(());
    }
    if crate::credentials::repository(trimmed) != trimmed {
        return Err(format!(
            "{pattern:?} must be a repository written in full, without tag or digest (such as {:?})",
            crate::credentials::repository(trimmed)
        ));
    }
    Ok(())
}

/// The policy in force, with its allowlist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    pub policy: VerificationPolicy,
    pub allowlist: Vec<String>,
}

impl Policy {
    /// Whether a pod must show credentials for `image` (upstream's
    /// `RequireCredentialVerificationForImage`): `pulled_by_kubelet` when a record or an intent
    /// says picolet pulled it.
    pub fn requires_verification(&self, image: &str, pulled_by_kubelet: bool) -> bool {
        match self.policy {
            VerificationPolicy::NeverVerify => false,
            VerificationPolicy::NeverVerifyPreloadedImages => pulled_by_kubelet,
            VerificationPolicy::AlwaysVerify => true,
            VerificationPolicy::NeverVerifyAllowlistedImages => {
                let repo = crate::credentials::repository(image);
                !self.allowlist.iter().any(|p| match p.strip_suffix('*') {
                    Some(prefix) if p.ends_with("/*") => repo.starts_with(prefix),
                    _ => *p == repo,
                })
            }
        }
    }
}

/// An image pull secret as a record names it: no credential, only its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct PullSecret {
    /// The Secret's UID; picolet's object store does not keep it, so it stays empty and
    /// matching goes by [`PullSecret::credential_hash`] alone.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub credential_hash: String,
}

/// A credential's hash as the records keep it: SHA-256 of the user name and password.
pub fn credential_hash(auth: &crate::credentials::AuthConfig) -> String {
    let mut h = crate::sha256::Sha256::default();
    h.update(auth.username.as_bytes());
    h.update(b"\0");
    h.update(auth.password.as_bytes());
    h.digest()
}

/// Who may use an image of one repository.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Credentials {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubernetes_secrets: Vec<PullSecret>,
    /// Pulled anonymously or with the node's credentials: any pod on the node may use it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub node_pods_accessible: bool,
}

/// The credentials a pull succeeded with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PulledWith {
    /// Anonymously, or with the node's `config.json` or a credential provider plugin.
    Node,
    Secret(PullSecret),
}

const API_VERSION: &str = "kubelet.config.k8s.io/v1alpha1";

/// `ImagePulledRecord`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PulledRecord {
    pub kind: String,
    pub api_version: String,
    pub last_updated_time: String,
    pub image_ref: String,
    /// By repository (the image without tag or digest, registry written out).
    #[serde(default)]
    pub credential_mapping: BTreeMap<String, Credentials>,
}

/// `ImagePullIntent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PullIntent {
    kind: String,
    api_version: String,
    image: String,
}

/// What a pod must do before it uses an image already on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verify {
    /// Nothing: the policy exempts the image, or any pod may use it.
    NotNeeded,
    /// Pull it again with the pod's credentials: no record says who may use it.
    Pull,
    /// Use it when one of the pod's image pull secrets carries one of these credentials;
    /// otherwise pull it again with the pod's credentials.
    IfSecretMatches(Vec<PullSecret>),
}

/// Whether one of the pod's secrets carries a credential that pulled the image.
pub fn secrets_match(recorded: &[PullSecret], pod: &[PullSecret]) -> bool {
    pod.iter().any(|p| {
        recorded
            .iter()
            .any(|r| !r.credential_hash.is_empty() && r.credential_hash == p.credential_hash)
    })
}

/// `sha256-<hex>`: a record's file name for an image or image id.
fn file_name(key: &str) -> String {
    let d = crate::sha256::digest(key.as_bytes());
    format!("sha256-{}", d.trim_start_matches("sha256:"))
}

/// The records under `<root-dir>/image_manager/`, and the policy.
pub struct PullRecords {
    /// `None` without a root directory (a runtime manager built for a test that pulls
    /// nothing it checks): no records are kept and nothing needs verification but by policy.
    dir: Option<PathBuf>,
    pub policy: Policy,
    /// Pulls of each image under way in this run: the intent file goes when the last ends.
    intents: RefCell<HashMap<String, u32>>,
}

impl PullRecords {
    pub fn new(root_dir: &Path, policy: Policy) -> PullRecords {
        PullRecords {
            dir: (!root_dir.as_os_str().is_empty())
                .then(|| crate::root_dir::RootDir(root_dir).image_manager()),
            policy,
            intents: RefCell::default(),
        }
    }

    fn pulling(&self, image: &str) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join("pulling").join(file_name(image)))
    }

    fn pulled(&self, image_ref: &str) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join("pulled").join(file_name(image_ref)))
    }

    /// Writes the intent before a pull (upstream's `RecordPullIntent`): an image whose pull
    /// a power cut interrupted still counts as pulled by the kubelet.
    pub fn record_pull_intent(&self, image: &str) -> Result<(), String> {
        *self
            .intents
            .borrow_mut()
            .entry(image.to_owned())
            .or_default() += 1;
        let intent = PullIntent {
            kind: "ImagePullIntent".into(),
            api_version: API_VERSION.into(),
            image: image.to_owned(),
        };
        let Some(path) = self.pulling(image) else {
            return Ok(());
        };
        let bytes = serde_json::to_vec(&intent).map_err(|e| e.to_string())?;
        write(&path, &bytes)
    }

    /// After a failed pull: the intent goes with the last pull of the image under way.
    pub fn record_image_pull_failed(&self, image: &str) {
        self.drop_intent(image);
    }

    fn drop_intent(&self, image: &str) {
        let mut intents = self.intents.borrow_mut();
        let n = intents.entry(image.to_owned()).or_default();
        *n = n.saturating_sub(1);
        if *n > 0 {
            return;
        }
        intents.remove(image);
        let Some(p) = self.pulling(image) else {
            return;
        };
        if let Err(e) = std::fs::remove_file(&p)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            log::warn!("image pull intent {}: {e}", p.display());
        }
    }

    /// After a pull: `with` may use `image_ref` for `image`'s repository from now on; the record
    /// is rewritten only when that is news.
    pub fn record_image_pulled(&self, image: &str, image_ref: &str, with: PulledWith, now: i64) {
        let Some(path) = self.pulled(image_ref) else {
            self.drop_intent(image);
            return;
        };
        let mut rec = self.read_pulled(&path).unwrap_or_else(|| PulledRecord {
            kind: "ImagePulledRecord".into(),
            api_version: API_VERSION.into(),
            image_ref: image_ref.to_owned(),
            ..Default::default()
        });
        if merge(&mut rec, &crate::credentials::repository(image), with) {
            rec.last_updated_time = crate::api::time::rfc3339(now);
            match serde_json::to_vec(&rec) {
                Ok(bytes) => {
                    if let Err(e) = write(&path, &bytes) {
                        log::warn!("{e}");
                    }
                }
                Err(e) => log::warn!("image pulled record {}: {e}", path.display()),
            }
        }
        self.drop_intent(image);
    }

    /// What a pod must do to use `image`, present as `image_ref` (upstream's
    /// `MustAttemptImagePull` up to the credentials it then compares).
    pub fn verification(&self, image: &str, image_ref: &str) -> Verify {
        let Some(path) = self.pulled(image_ref) else {
            let by_kubelet = self.intents.borrow().get(image).is_some_and(|n| *n > 0);
            return if self.policy.requires_verification(image, by_kubelet) {
                Verify::Pull
            } else {
                Verify::NotNeeded
            };
        };
        let (record, unreadable) = match std::fs::read(&path) {
            Ok(b) => match parse_record(&b) {
                Ok(r) => (Some(r), false),
                Err(e) => {
                    refuse(&path, &e);
                    (None, true)
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (None, false),
            Err(e) => {
                log::warn!("image pulled record {}: {e}", path.display());
                (None, true)
            }
        };
        let pulled_by_kubelet = record.is_some()
            || unreadable
            || self.intents.borrow().get(image).is_some_and(|n| *n > 0)
            || self.pulling(image).is_some_and(|p| p.exists());
        if !self.policy.requires_verification(image, pulled_by_kubelet) {
            return Verify::NotNeeded;
        }
        let Some(record) = record else {
            return Verify::Pull;
        };
        match record
            .credential_mapping
            .get(&crate::credentials::repository(image))
        {
            None => Verify::Pull,
            Some(c) if c.node_pods_accessible => Verify::NotNeeded,
            Some(c) if c.kubernetes_secrets.is_empty() => Verify::Pull,
            Some(c) => Verify::IfSecretMatches(c.kubernetes_secrets.clone()),
        }
    }

    /// Removes the pulled records of images no longer on the node (upstream's
    /// `PruneUnknownRecords`, which its image GC runs after a collection): a record goes when
    /// its image id is not in `images` and it was last written before `until`, the time taken
    /// before the runtime listed `images` (a record written since may name an image pulled
    /// after the listing). An unreadable record is refused as [`Self::verification`] refuses
    /// it. Returns how many records went.
    pub fn prune_unknown_records(&self, images: &HashSet<String>, until: i64) -> usize {
        let Some(dir) = self.dir.as_ref().map(|d| d.join("pulled")) else {
            return 0;
        };
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return 0,
            Err(e) => {
                log::warn!("image pulled records {}: {e}", dir.display());
                return 0;
            }
        };
        // Whole seconds, as the records' lastUpdatedTime: one written in the second the
        // listing began is kept.
        let until = crate::api::time::rfc3339(until);
        let mut removed = 0;
        for e in entries.filter_map(Result::ok) {
            let path = e.path();
            let name = e.file_name();
            // atomic_file's temporary files and anything else not named as a record
            if !name.to_str().is_some_and(|n| n.starts_with("sha256-")) {
                continue;
            }
            let Some(rec) = self.read_pulled(&path) else {
                continue;
            };
            if rec.last_updated_time.as_str() >= until.as_str() || images.contains(&rec.image_ref) {
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    log::debug!(
                        "image pulled record {} removed: image {} is gone",
                        path.display(),
                        rec.image_ref
                    );
                    removed += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => log::warn!("image pulled record {}: {e}", path.display()),
            }
        }
        removed
    }

    fn read_pulled(&self, path: &Path) -> Option<PulledRecord> {
        match std::fs::read(path) {
            Ok(b) => match parse_record(&b) {
                Ok(r) => Some(r),
                Err(e) => {
                    refuse(path, &e);
                    None
                }
            },
            Err(_) => None,
        }
    }
}

/// A record that cannot be read is refused with its path and removed (it is written anew
/// after the next pull of the image).
fn refuse(path: &Path, why: &str) {
    log::warn!(
        "image pulled record {}: {why}; removed, the image is pulled again before a pod uses it",
        path.display()
    );
    let _ = std::fs::remove_file(path);
}

const MAX_RECORD_BYTES: usize = 1 << 20;

fn parse_record(bytes: &[u8]) -> Result<PulledRecord, String> {
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(format!("larger than {MAX_RECORD_BYTES} bytes"));
    }
    crate::limits::check(
        bytes,
        crate::limits::Syntax::Json,
        &crate::limits::Limits::API,
    )
    .map_err(|e| e.to_string())?;
    let r: PulledRecord = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if r.kind != "ImagePulledRecord" || r.image_ref.is_empty() {
        return Err(format!(
            "not an ImagePulledRecord (kind {:?}, imageRef {:?})",
            r.kind, r.image_ref
        ));
    }
    Ok(r)
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let at = |e: std::io::Error| format!("image pull record {}: {e}", path.display());
    if let Some(dir) = path.parent() {
        crate::atomic_file::create_dir_all(dir).map_err(at)?;
    }
    crate::atomic_file::write(path, bytes).map_err(at)
}

/// Adds `with` to `repo`'s entry (upstream's `pulledRecordMergeNewCreds`); true when it
/// changed. Node access replaces any secrets: every pod may use the image.
fn merge(rec: &mut PulledRecord, repo: &str, with: PulledWith) -> bool {
    let c = rec.credential_mapping.entry(repo.to_owned()).or_default();
    if c.node_pods_accessible {
        return false;
    }
    match with {
        PulledWith::Node => {
            c.node_pods_accessible = true;
            c.kubernetes_secrets.clear();
            true
        }
        PulledWith::Secret(s) => {
            if let Some(old) = c
                .kubernetes_secrets
                .iter_mut()
                .find(|o| o.namespace == s.namespace && o.name == s.name)
            {
                if *old == s {
                    return false;
                }
                *old = s;
            } else {
                c.kubernetes_secrets.push(s);
                c.kubernetes_secrets.sort();
            }
            true
        }
    }
}

#[cfg(test)]
mod tests;
