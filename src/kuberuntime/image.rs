//! Images: the pull policy (whether a container's image must be pulled before it starts) and
//! making sure the image is there, with the pull backoff.

use std::time::Duration;

use crate::api::{Container, ImageVolumeSource, Pod, PullPolicy};
use crate::credentials::{self, AuthConfig, Keyring, Tracked};
use crate::cri::CriError;

use super::error::{ImageFailure, SyncError};
use super::manager::{ERROR_RETRY, RuntimeManager};
use super::pullmanager::{self, PullSecret, PulledWith, Verify};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Use,
    Pull,
    NeverPull,
}

/// True when the image names no tag (digests count as a tag) or the tag `latest`.
fn latest_or_untagged(image: &str) -> bool {
    if image.contains('@') {
        return false;
    }
    // A ':' after the last '/' starts the tag; one before it is a registry port.
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, tag)) => tag == "latest",
        None => true,
    }
}

/// The policy in force: the container's own, else Always for `:latest` or untagged images and
/// IfNotPresent otherwise (the API server's default).
pub fn effective_policy(c: &Container) -> PullPolicy {
    c.image_pull_policy
        .unwrap_or(if latest_or_untagged(&c.image) {
            PullPolicy::Always
        } else {
            PullPolicy::IfNotPresent
        })
}

/// An image volume's policy: its own, else defaulted from its reference as a container's.
pub fn volume_policy(v: &ImageVolumeSource) -> PullPolicy {
    v.pull_policy
        .unwrap_or(if latest_or_untagged(&v.reference) {
            PullPolicy::Always
        } else {
            PullPolicy::IfNotPresent
        })
}

/// Whether the runtime mounts image volumes (the CRI `Mount.image` field), from what its CRI
/// Version call said at start (`name://version`): containerd does from 2.1, CRI-O from 1.31,
/// and an older one ignores the field and fails the container or mounts nothing. No CRI call
/// or status feature tells, so the version decides; another runtime, or one that did not
/// answer, is trusted. `Err` says why not.
pub fn runtime_mounts_images(runtime: &str) -> Result<(), String> {
    let Some((name, version)) = runtime.split_once("://") else {
        return Ok(());
    };
    let need = match name {
        "containerd" => (2, 1),
        "cri-o" => (1, 31),
        _ => return Ok(()),
    };
    let mut parts = version
        .trim_start_matches('v')
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    let (Some(Some(major)), Some(Some(minor))) = (parts.next(), parts.next()) else {
        return Ok(());
    };
    if (major, minor) >= need {
        return Ok(());
    }
    Err(format!(
        "the container runtime {name} {version} cannot mount images (image volumes need {name} {}.{} or later)",
        need.0, need.1
    ))
}

pub fn decide(c: &Container, present: bool) -> Decision {
    decide_policy(effective_policy(c), present)
}

fn decide_policy(policy: PullPolicy, present: bool) -> Decision {
    match (policy, present) {
        (PullPolicy::Always, _) => Decision::Pull,
        (PullPolicy::IfNotPresent, true) | (PullPolicy::Never, true) => Decision::Use,
        (PullPolicy::IfNotPresent, false) => Decision::Pull,
        (PullPolicy::Never, false) => Decision::NeverPull,
    }
}

/// One image to make sure of: a container's, or an image volume's.
struct Wanted<'a> {
    image: &'a str,
    policy: PullPolicy,
    /// What the events are about: the container, or the pod for a volume (as upstream).
    at: crate::events::ObjectRef,
    /// The container that waits on a failure; empty for a volume (each container mounting it
    /// is named when it is started: [`ImageFailure::for_container`]).
    container: &'a str,
    volume: Option<&'a str>,
}

impl RuntimeManager {
    /// Makes sure the container's image is present, by its pull policy; returns the image id.
    pub(super) async fn ensure_image(
        &self,
        pod: &Pod,
        c: &Container,
        now: i64,
    ) -> Result<String, ImageFailure> {
        let w = Wanted {
            image: &c.image,
            policy: effective_policy(c),
            at: crate::events::ObjectRef::container(pod, &c.name),
            container: &c.name,
            volume: None,
        };
        self.ensure_image_exists(pod, &w, now).await
    }

    /// Makes sure an image volume's image is present, by the volume's pull policy and with
    /// the pod's credentials, as a container's image; returns the image id the runtime
    /// mounts. A failure names the volume.
    pub(super) async fn ensure_volume_image(
        &self,
        pod: &Pod,
        volume: &str,
        src: &ImageVolumeSource,
        now: i64,
    ) -> Result<String, ImageFailure> {
        let w = Wanted {
            image: &src.reference,
            policy: volume_policy(src),
            at: crate::events::ObjectRef::pod(pod),
            container: "",
            volume: Some(volume),
        };
        self.ensure_image_exists(pod, &w, now).await
    }

    /// The kubelet's EnsureImageExists: present and allowed, pulled, or why not.
    async fn ensure_image_exists(
        &self,
        pod: &Pod,
        w: &Wanted<'_>,
        now: i64,
    ) -> Result<String, ImageFailure> {
        use crate::events::{Type, record};
        let uid = pod.metadata.uid.as_str();
        let image = w.image;
        let at = || w.at.clone();
        // Backoff per pod and image, as the kubelet keys it: one pod's failing pulls do not
        // hold back another pod using the same image.
        let key = pull_backoff_key(uid, image);
        let key = key.as_str();
        let container = || w.container.to_owned();
        let volume = || w.volume.map(str::to_owned);
        let of_volume = super::error::of_volume(&volume());
        let present = self.image_id(image).await.map_err(|e| ImageFailure {
            error: SyncError::ImagePull {
                container: container(),
                message: format!("{of_volume}checking image {image:?}: {e}"),
            },
            retry_after: ERROR_RETRY,
        })?;
        let credentials_failed = |message: String| {
            record(
                &at(),
                Type::Warning,
                "Failed",
                &format!("Failed to pull image {image:?}: {message}"),
            );
            ImageFailure {
                error: SyncError::ImagePull {
                    container: container(),
                    message: format!("{of_volume}{message}"),
                },
                retry_after: ERROR_RETRY,
            }
        };
        let mut decision = decide_policy(w.policy, present.is_some());
        if decision == Decision::Use {
            // KEP-2535: a pod uses an image already on the node only when the policy exempts
            // it or the pod shows credentials that pulled it; otherwise it pulls it again with
            // its own (and with a pull policy of Never, it cannot).
            let id = present.clone().unwrap_or_default();
            if self
                .may_use_present(pod, image, &id)
                .await
                .map_err(credentials_failed)?
            {
                record(
                    &at(),
                    Type::Normal,
                    "Pulled",
                    &format!(
                        "Container image {image:?} already present on machine and can be accessed by the pod"
                    ),
                );
                return Ok(id);
            }
            decision = if w.policy == PullPolicy::Never {
                Decision::NeverPull
            } else {
                Decision::Pull
            };
        }
        match decision {
            Decision::Use => unreachable!("decided above"),
            Decision::NeverPull => {
                record(
                    &at(),
                    Type::Warning,
                    "ErrImageNeverPull",
                    &format!(
                        "{of_volume}Container image {image:?} is not present with pull policy of Never"
                    ),
                );
                return Err(ImageFailure {
                    error: SyncError::ImageNeverPull {
                        container: container(),
                        image: image.to_owned(),
                        volume: volume(),
                    },
                    retry_after: Duration::from_secs(10),
                });
            }
            Decision::Pull => {}
        }
        if let Some(rem) = self.pull_backoff.borrow().remaining_since_last(key, now) {
            record(
                &at(),
                Type::Normal,
                "BackOff",
                &format!("Back-off pulling image {image:?}"),
            );
            return Err(ImageFailure {
                error: SyncError::ImagePullBackOff {
                    container: container(),
                    image: image.to_owned(),
                    volume: volume(),
                },
                retry_after: rem,
            });
        }
        let creds = self
            .pull_credentials(pod, image)
            .await
            .map_err(credentials_failed)?;
        if let Err(e) = self.pull_records.record_pull_intent(image) {
            let message =
                format!("Failed to record image pull intent for container image {image:?}: {e}");
            return Err(ImageFailure {
                error: SyncError::ImagePull {
                    container: container(),
                    message: format!("{of_volume}{message}"),
                },
                retry_after: ERROR_RETRY,
            });
        }
        record(
            &at(),
            Type::Normal,
            "Pulling",
            &format!("Pulling image {image:?}"),
        );
        let t0 = crate::rt::now();
        let sources: Vec<Option<(String, String)>> =
            creds.iter().map(|t| t.secret.clone()).collect();
        let hashes: Vec<String> = creds
            .iter()
            .map(|t| pullmanager::credential_hash(&t.auth))
            .collect();
        let auths = creds.into_iter().map(|t| t.auth).collect();
        match pull_with_tracked(&*self.images, image, auths).await {
            Ok((image_ref, used)) => {
                self.pull_backoff.borrow_mut().forget(key);
                let id = match self.image_id(image).await {
                    Ok(Some(id)) => id,
                    _ => image_ref,
                };
                let with = match used.and_then(|i| Some((sources[i].clone()?, i))) {
                    Some(((namespace, name), i)) => PulledWith::Secret(PullSecret {
                        uid: String::new(),
                        namespace,
                        name,
                        credential_hash: hashes[i].clone(),
                    }),
                    None => PulledWith::Node,
                };
                self.pull_records
                    .record_image_pulled(image, &id, with, crate::rt::now_nanos());
                record(
                    &at(),
                    Type::Normal,
                    "Pulled",
                    &format!(
                        "Successfully pulled image {image:?} in {}",
                        crate::api::format_duration(crate::rt::now().saturating_duration_since(t0))
                    ),
                );
                Ok(id)
            }
            Err(e) => {
                self.pull_records.record_image_pull_failed(image);
                record(
                    &at(),
                    Type::Warning,
                    "Failed",
                    &format!("Failed to pull image {image:?}: {e}"),
                );
                let mut b = self.pull_backoff.borrow_mut();
                b.next(key, now);
                // Synced again soon, inside the back-off: the container then waits with
                // ImagePullBackOff until the back-off ends, as upstream's shows it (its pod
                // worker requeues a failed sync after 10 s, under the image's back-off from
                // the second failure on), rather than with ErrImagePull the whole time.
                let backoff = b.delay(key).unwrap_or(Duration::from_secs(10));
                Err(ImageFailure {
                    error: SyncError::ImagePull {
                        container: container(),
                        message: format!("{of_volume}failed to pull image {image:?}: {e}"),
                    },
                    retry_after: backoff.min(super::manager::ERROR_RETRY),
                })
            }
        }
    }

    /// The credentials to try for a pull, in order: the matches in the pod's image pull
    /// secrets (API pods), then in the node's `<root-dir>/config.json` and the answers of the
    /// credential provider plugins serving the image. A secret the apiserver
    /// says is missing is left out (the pull may still work anonymously); one not read yet
    /// makes the pull wait for it; one that does not parse fails the pull, naming it.
    async fn pull_credentials(&self, pod: &Pod, image: &str) -> Result<Vec<Tracked>, String> {
        use crate::objects::{Kind, Object};
        let repo = credentials::repository(image);
        let mut out = Vec::new();
        let api_pod = pod
            .metadata
            .annotations
            .get(crate::config::ANNOTATION_CONFIG_SOURCE)
            .is_some_and(|s| s == "api");
        if api_pod && !pod.spec.image_pull_secrets.is_empty() {
            let ns = super::config::namespace(pod);
            let mut pod_ring = Keyring::default();
            let store = self.objects.lock();
            for s in &pod.spec.image_pull_secrets {
                match store.object(Kind::Secret, ns, &s.name) {
                    Some(Object::Present(d)) => {
                        let cfg = credentials::secret_config(d)
                            .map_err(|e| format!("image pull secret {ns}/{}: {e}", s.name))?;
                        pod_ring.add_from(&cfg, Some((ns.to_owned(), s.name.clone())));
                    }
                    Some(Object::Missing) => log::warn!(
                        "pod {ns}/{}: image pull secret {ns}/{} not found; the pull of {image:?} goes on without it",
                        pod.metadata.name,
                        s.name
                    ),
                    None => {
                        return Err(format!(
                            "image pull secret {ns}/{} not read from the apiserver yet",
                            s.name
                        ));
                    }
                }
            }
            drop(store);
            out.extend(pod_ring.lookup_tracked(&repo));
        }
        out.extend(
            node_credentials(
                self.node.root_dir.clone(),
                self.credential_providers.clone(),
                image,
            )
            .await
            .into_iter()
            .map(|auth| Tracked { auth, secret: None }),
        );
        Ok(out)
    }

    /// The pod's image pull secrets' credentials for `image`, as the pull records name them.
    fn pod_secrets(creds: &[Tracked]) -> Vec<PullSecret> {
        creds
            .iter()
            .filter_map(|t| {
                let (namespace, name) = t.secret.clone()?;
                Some(PullSecret {
                    uid: String::new(),
                    namespace,
                    name,
                    credential_hash: pullmanager::credential_hash(&t.auth),
                })
            })
            .collect()
    }

    /// Whether the pod may use `image`, present as `image_ref`, without pulling it again
    /// (upstream's `MustAttemptImagePull`): the verification policy exempts it, any pod may
    /// use it, or one of the pod's image pull secrets carries a credential that pulled it.
    async fn may_use_present(
        &self,
        pod: &Pod,
        image: &str,
        image_ref: &str,
    ) -> Result<bool, String> {
        match self.pull_records.verification(image, image_ref) {
            Verify::NotNeeded => Ok(true),
            Verify::Pull => Ok(false),
            Verify::IfSecretMatches(recorded) => {
                let creds = self.pull_credentials(pod, image).await?;
                Ok(pullmanager::secrets_match(
                    &recorded,
                    &Self::pod_secrets(&creds),
                ))
            }
        }
    }

    /// The user an image runs as, as the kubelet reads it from ImageStatus: a numeric uid, or
    /// a user name the runtime could not turn into one, or root when the image names none.
    pub(super) async fn image_user(&self, image: &str) -> Result<ImageUser, CriError> {
        let img = self.images.image_status(image).await?;
        Ok(match img {
            Some(i) if i.uid.is_some() => ImageUser::Uid(i.uid.map_or(0, |u| u.value)),
            Some(i) if !i.username.is_empty() => ImageUser::Name(i.username),
            _ => ImageUser::Uid(0),
        })
    }

    async fn image_id(&self, image: &str) -> Result<Option<String>, CriError> {
        Ok(self
            .images
            .image_status(image)
            .await?
            .map(|i| i.id)
            .filter(|id| !id.is_empty()))
    }
}

/// The node's credentials for `image`: `<root-dir>/config.json` and the credential provider
/// plugins' answers in one keyring, as upstream's default keyring merges its providers.
pub async fn node_credentials(
    root_dir: std::path::PathBuf,
    plugins: Option<std::sync::Arc<crate::credential_provider::Providers>>,
    image: &str,
) -> Vec<AuthConfig> {
    let repo = credentials::repository(image);
    crate::rt::unblock(move || {
        let mut ring = credentials::node_keyring(&root_dir).unwrap_or_else(|e| {
            log::warn!("node registry credentials ignored: {e}");
            Keyring::default()
        });
        if let Some(p) = plugins {
            for cfg in p.provide(&repo) {
                ring.add(&cfg);
            }
        }
        ring.lookup(&repo)
    })
    .await
}

/// Pulls with each credential in turn until one works, or anonymously without any, as the
/// kubelet does; the last failure is the one reported.
pub async fn pull_with(
    images: &dyn crate::cri::ImageService,
    image: &str,
    creds: Vec<AuthConfig>,
) -> Result<String, CriError> {
    Ok(pull_with_tracked(images, image, creds).await?.0)
}

/// As [`pull_with`], also saying which credential worked (its index; `None`: anonymously).
pub async fn pull_with_tracked(
    images: &dyn crate::cri::ImageService,
    image: &str,
    creds: Vec<AuthConfig>,
) -> Result<(String, Option<usize>), CriError> {
    if creds.is_empty() {
        return Ok((images.pull_image(image, None).await?, None));
    }
    let mut last = None;
    for (i, c) in creds.into_iter().enumerate() {
        let auth = crate::cri::v1::AuthConfig {
            username: c.username,
            password: c.password,
            ..Default::default()
        };
        match images.pull_image(image, Some(auth)).await {
            Ok(r) => return Ok((r, Some(i))),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("at least one credential was tried"))
}

/// The pull backoff's key: `<pod uid>_<image>`, as the kubelet's.
pub fn pull_backoff_key(uid: &str, image: &str) -> String {
    format!("{uid}_{image}")
}

/// The user an image names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageUser {
    Uid(i64),
    Name(String),
}

/// Whether [`verify_run_as_non_root`] depends on the image's user: `runAsNonRoot` without a
/// `runAsUser`.
pub fn needs_image_user(pod: &Pod, c: &Container) -> bool {
    let sc = c.security_context.as_ref();
    let psc = pod.spec.security_context.as_ref();
    let non_root = sc
        .and_then(|s| s.run_as_non_root)
        .or_else(|| psc.and_then(|s| s.run_as_non_root));
    let run_as = sc
        .and_then(|s| s.run_as_user)
        .or_else(|| psc.and_then(|s| s.run_as_user));
    non_root == Some(true) && run_as.is_none()
}

/// The kubelet's `runAsNonRoot` check: with it set, a container may not run as uid 0, whether
/// its `runAsUser` (container's, else pod's) says so or, without one, its image's user; a
/// user name that is not a number cannot be verified and is refused too.
pub fn verify_run_as_non_root(pod: &Pod, c: &Container, image: &ImageUser) -> Result<(), String> {
    let sc = c.security_context.as_ref();
    let psc = pod.spec.security_context.as_ref();
    let non_root = sc
        .and_then(|s| s.run_as_non_root)
        .or_else(|| psc.and_then(|s| s.run_as_non_root));
    if non_root != Some(true) {
        return Ok(());
    }
    let who = format!(
        "pod: \"{}_{}({})\", container: {}",
        pod.metadata.name,
        super::config::namespace(pod),
        pod.metadata.uid,
        c.name
    );
    let run_as = sc
        .and_then(|s| s.run_as_user)
        .or_else(|| psc.and_then(|s| s.run_as_user));
    match (run_as, image) {
        (Some(0), _) => Err(format!(
            "container's runAsUser breaks non-root policy ({who})"
        )),
        (Some(_), _) => Ok(()),
        (None, ImageUser::Name(n)) => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({n}), cannot verify user is non-root ({who})"
        )),
        (None, ImageUser::Uid(0)) => Err(format!(
            "container has runAsNonRoot and image will run as root ({who})"
        )),
        (None, ImageUser::Uid(u)) if *u > i64::from(i32::MAX) || *u < 0 => Err(format!(
            "container has runAsNonRoot and image has an invalid user id ({u}). (Must be 1-(2147483647)) ({who})"
        )),
        (None, ImageUser::Uid(_)) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(image: &str, p: Option<PullPolicy>) -> Container {
        Container {
            name: "c".into(),
            image: image.into(),
            image_pull_policy: p,
            ..Default::default()
        }
    }

    #[test]
    fn run_as_non_root() {
        use crate::api::{PodSecurityContext, SecurityContext};
        let mut pod = Pod::default();
        pod.metadata.name = "p".into();
        pod.metadata.uid = "u".into();
        let mut ctr = c("busybox", None);
        let root = ImageUser::Uid(0);
        // not asked for: anything runs
        assert_eq!(verify_run_as_non_root(&pod, &ctr, &root), Ok(()));
        assert!(!needs_image_user(&pod, &ctr));
        pod.spec.security_context = Some(PodSecurityContext {
            run_as_non_root: Some(true),
            ..Default::default()
        });
        assert!(needs_image_user(&pod, &ctr));
        let e = verify_run_as_non_root(&pod, &ctr, &root).unwrap_err();
        assert!(e.contains("image will run as root"), "{e}");
        assert!(e.contains("container: c"), "{e}");
        let e = verify_run_as_non_root(&pod, &ctr, &ImageUser::Name("nginx".into())).unwrap_err();
        assert!(e.contains("non-numeric user (nginx)"), "{e}");
        assert_eq!(
            verify_run_as_non_root(&pod, &ctr, &ImageUser::Uid(101)),
            Ok(())
        );
        assert!(verify_run_as_non_root(&pod, &ctr, &ImageUser::Uid(1 << 40)).is_err());
        // an explicit runAsUser decides, the image's user does not matter
        ctr.security_context = Some(SecurityContext {
            run_as_user: Some(1000),
            ..Default::default()
        });
        assert_eq!(verify_run_as_non_root(&pod, &ctr, &root), Ok(()));
        assert!(!needs_image_user(&pod, &ctr));
        ctr.security_context.as_mut().unwrap().run_as_user = Some(0);
        let e = verify_run_as_non_root(&pod, &ctr, &ImageUser::Uid(5)).unwrap_err();
        assert!(e.contains("runAsUser breaks non-root policy"), "{e}");
        // the container's false overrides the pod's true
        ctr.security_context.as_mut().unwrap().run_as_non_root = Some(false);
        assert_eq!(verify_run_as_non_root(&pod, &ctr, &root), Ok(()));
    }

    #[test]
    fn defaults() {
        assert_eq!(effective_policy(&c("nginx", None)), PullPolicy::Always);
        assert_eq!(
            effective_policy(&c("nginx:latest", None)),
            PullPolicy::Always
        );
        assert_eq!(
            effective_policy(&c("nginx:1.25", None)),
            PullPolicy::IfNotPresent
        );
        assert_eq!(
            effective_policy(&c("reg:5000/nginx", None)),
            PullPolicy::Always
        );
        assert_eq!(
            effective_policy(&c("reg:5000/nginx:1", None)),
            PullPolicy::IfNotPresent
        );
        assert_eq!(
            effective_policy(&c("nginx@sha256:abcd", None)),
            PullPolicy::IfNotPresent
        );
        assert_eq!(
            effective_policy(&c("nginx:latest", Some(PullPolicy::Never))),
            PullPolicy::Never
        );
    }

    #[test]
    fn image_volume_policies_default_as_containers() {
        let v = |r: &str, p| ImageVolumeSource {
            reference: r.into(),
            pull_policy: p,
        };
        assert_eq!(volume_policy(&v("m", None)), PullPolicy::Always);
        assert_eq!(volume_policy(&v("m:1", None)), PullPolicy::IfNotPresent);
        assert_eq!(
            volume_policy(&v("m", Some(PullPolicy::Never))),
            PullPolicy::Never
        );
    }

    #[test]
    fn which_runtimes_mount_images() {
        for ok in [
            "containerd://v2.1.0",
            "containerd://v2.4.2",
            "containerd://3.0.0",
            "cri-o://1.31.2",
            "other://0.1",
            "containerd://unparsable",
            "",
        ] {
            assert_eq!(runtime_mounts_images(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            runtime_mounts_images("containerd://1.6.20~ds1"),
            Err("the container runtime containerd 1.6.20~ds1 cannot mount images (image volumes need containerd 2.1 or later)".into())
        );
        for no in [
            "containerd://v2.0.5",
            "containerd://v1.7.27",
            "cri-o://1.30.4",
        ] {
            assert!(runtime_mounts_images(no).is_err(), "{no}");
        }
    }

    #[test]
    fn decisions() {
        assert_eq!(decide(&c("a:1", None), true), Decision::Use);
        assert_eq!(decide(&c("a:1", None), false), Decision::Pull);
        assert_eq!(decide(&c("a", None), true), Decision::Pull);
        assert_eq!(
            decide(&c("a:1", Some(PullPolicy::Never)), false),
            Decision::NeverPull
        );
        assert_eq!(
            decide(&c("a:1", Some(PullPolicy::Never)), true),
            Decision::Use
        );
    }
}
