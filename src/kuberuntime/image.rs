//! Images: the pull policy (whether a container's image must be pulled before it starts) and
//! making sure the image is there, with the pull backoff.

use std::time::Duration;

use crate::api::{Container, PullPolicy};
use crate::cri::CriError;

use super::error::{ImageFailure, SyncError};
use super::manager::{ERROR_RETRY, RuntimeManager};

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

pub fn decide(c: &Container, present: bool) -> Decision {
    match (effective_policy(c), present) {
        (PullPolicy::Always, _) => Decision::Pull,
        (PullPolicy::IfNotPresent, true) | (PullPolicy::Never, true) => Decision::Use,
        (PullPolicy::IfNotPresent, false) => Decision::Pull,
        (PullPolicy::Never, false) => Decision::NeverPull,
    }
}

impl RuntimeManager {
    /// Makes sure the container's image is present, by its pull policy; returns the image id.
    pub(super) async fn ensure_image(
        &self,
        c: &Container,
        now: i64,
    ) -> Result<String, ImageFailure> {
        let image = c.image.as_str();
        let container = || c.name.to_string();
        let present = self.image_id(image).await.map_err(|e| ImageFailure {
            error: SyncError::ImagePull {
                container: container(),
                message: format!("checking image {image:?}: {e}"),
            },
            retry_after: ERROR_RETRY,
        })?;
        match decide(c, present.is_some()) {
            Decision::Use => return Ok(present.unwrap_or_default()),
            Decision::NeverPull => {
                return Err(ImageFailure {
                    error: SyncError::ImageNeverPull {
                        container: container(),
                        image: image.to_owned(),
                    },
                    retry_after: Duration::from_secs(10),
                });
            }
            Decision::Pull => {}
        }
        if let Some(rem) = self.pull_backoff.borrow().remaining_since_last(image, now) {
            return Err(ImageFailure {
                error: SyncError::ImagePullBackOff {
                    container: container(),
                    image: image.to_owned(),
                },
                retry_after: rem,
            });
        }
        log::info!("pulling image {image}");
        match self.images.pull_image(image).await {
            Ok(image_ref) => {
                self.pull_backoff.borrow_mut().forget(image);
                Ok(match self.image_id(image).await {
                    Ok(Some(id)) => id,
                    _ => image_ref,
                })
            }
            Err(e) => {
                let mut b = self.pull_backoff.borrow_mut();
                b.next(image, now);
                Err(ImageFailure {
                    error: SyncError::ImagePull {
                        container: container(),
                        message: format!("failed to pull image {image:?}: {e}"),
                    },
                    retry_after: b.delay(image).unwrap_or(Duration::from_secs(10)),
                })
            }
        }
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
