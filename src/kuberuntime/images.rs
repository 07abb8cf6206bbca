//! Image pull policy: whether a container's image must be pulled before it starts.

use crate::api::{Container, PullPolicy};

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
