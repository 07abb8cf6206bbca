//! Quality-of-service class and the resource numbers derived from a pod spec: CPU shares and
//! quota, memory limit and OOM score, as the kubelet derives them.

use crate::api::{Container, Pod};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

const TRACKED: [&str; 2] = ["cpu", "memory"];

/// The pod's QoS class from its containers' cpu and memory requests and limits.
pub fn qos_class(pod: &Pod) -> QosClass {
    let all = || pod.spec.init_containers.iter().chain(&pod.spec.containers);
    let mut any = false;
    let mut guaranteed = true;
    for c in all() {
        let r = &c.resources;
        for res in TRACKED {
            let req = r.requests.get(res).filter(|q| !q.is_zero());
            let lim = r.limits.get(res).filter(|q| !q.is_zero());
            any |= req.is_some() || lim.is_some();
            match (req, lim) {
                (_, None) => guaranteed = false,
                (Some(q), Some(l)) if q.milli_value() != l.milli_value() => guaranteed = false,
                _ => {}
            }
        }
    }
    if !any {
        QosClass::BestEffort
    } else if guaranteed {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

pub const MIN_SHARES: u64 = 2;
pub const MAX_SHARES: u64 = 262_144;
/// CFS period picolet sets with a CPU limit (the kubelet's default, 100 ms).
pub const QUOTA_PERIOD_US: i64 = 100_000;
const MIN_QUOTA_US: i64 = 1_000;

/// cpu.shares for a CPU request in millicores: milli * 1024 / 1000, clamped to [2, 262144].
pub fn milli_cpu_to_shares(milli: i64) -> u64 {
    if milli <= 0 {
        return MIN_SHARES;
    }
    let shares = u64::try_from(milli).unwrap_or(0).saturating_mul(1024) / 1000;
    shares.clamp(MIN_SHARES, MAX_SHARES)
}

/// CFS quota in microseconds for a CPU limit in millicores, at least 1 ms.
pub fn milli_cpu_to_quota(milli: i64, period_us: i64) -> i64 {
    if milli <= 0 {
        return 0;
    }
    (milli.saturating_mul(period_us) / 1000).max(MIN_QUOTA_US)
}

/// The priority from which a pod is critical (`scheduling.SystemCriticalPriority`).
const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
const BEST_EFFORT_OOM_SCORE_ADJ: i64 = 1000;

/// A node-critical pod, as the kubelet's `IsNodeCriticalPod`: critical (a static pod, a mirror
/// pod, or a priority of at least 2000000000) and of priority class `system-node-critical`.
pub fn is_node_critical(pod: &Pod) -> bool {
    let a = &pod.metadata.annotations;
    let static_or_mirror = a
        .get(crate::config::ANNOTATION_CONFIG_SOURCE)
        .is_some_and(|s| s != "api")
        || a.contains_key(crate::config::ANNOTATION_CONFIG_MIRROR);
    let critical = static_or_mirror
        || pod
            .spec
            .priority
            .is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY);
    critical && pod.spec.priority_class_name.as_deref() == Some("system-node-critical")
}

fn memory_request(c: &Container) -> i64 {
    c.resources.requests.get("memory").map_or(0, |q| q.value())
}

/// The OOM score adjustment of a container, as the kubelet computes it: -997 for node-critical
/// pods and Guaranteed ones, 1000 for BestEffort, and for Burstable a value in [3, 999] that is
/// lower the larger the container's memory request relative to the node's memory (a sidecar's
/// no higher than that of the app container with the smallest request, so it is not killed
/// before the containers it serves).
pub fn oom_score_adj(pod: &Pod, c: &Container, node_memory_bytes: i64) -> i64 {
    if is_node_critical(pod) {
        return GUARANTEED_OOM_SCORE_ADJ;
    }
    match qos_class(pod) {
        QosClass::Guaranteed => return GUARANTEED_OOM_SCORE_ADJ,
        QosClass::BestEffort => return BEST_EFFORT_OOM_SCORE_ADJ,
        QosClass::Burstable => {}
    }
    if node_memory_bytes <= 0 {
        return BEST_EFFORT_OOM_SCORE_ADJ - 1;
    }
    let adj = |req: i64| {
        let a = 1000 - (1000 * i128::from(req) / i128::from(node_memory_bytes));
        i64::try_from(a).unwrap_or(i64::MIN)
    };
    let mut score = adj(memory_request(c));
    let sidecar = c.is_sidecar() && pod.spec.init_containers.iter().any(|i| i.name == c.name);
    if sidecar && let Some(min) = pod.spec.containers.iter().map(memory_request).min() {
        score = score.min(adj(min));
    }
    // Never as low as a Guaranteed container, never as high as a BestEffort one.
    if score < 1000 + GUARANTEED_OOM_SCORE_ADJ {
        1000 + GUARANTEED_OOM_SCORE_ADJ
    } else if score == BEST_EFFORT_OOM_SCORE_ADJ {
        score - 1
    } else {
        score
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::Quantity;

    /// A container with the given requests and limits (test helper, also for `cm`).
    pub(crate) fn container(req: &[(&str, &str)], lim: &[(&str, &str)]) -> Container {
        let mut c = Container {
            name: "c".into(),
            image: "i".into(),
            ..Default::default()
        };
        for (k, v) in req {
            c.resources
                .requests
                .insert((*k).into(), Quantity::parse(v).unwrap());
        }
        for (k, v) in lim {
            c.resources
                .limits
                .insert((*k).into(), Quantity::parse(v).unwrap());
        }
        c
    }

    pub(crate) fn pod(cs: Vec<Container>) -> Pod {
        let mut p = Pod::default();
        p.spec.containers = cs;
        p
    }

    #[test]
    fn classes() {
        assert_eq!(
            qos_class(&pod(vec![container(&[], &[])])),
            QosClass::BestEffort
        );
        let g = container(
            &[("cpu", "500m"), ("memory", "128Mi")],
            &[("cpu", "0.5"), ("memory", "128Mi")],
        );
        assert_eq!(qos_class(&pod(vec![g.clone()])), QosClass::Guaranteed);
        // limits only also counts as Guaranteed (requests default to limits)
        let lo = container(&[], &[("cpu", "1"), ("memory", "1Gi")]);
        assert_eq!(qos_class(&pod(vec![lo])), QosClass::Guaranteed);
        let b = container(&[("cpu", "100m")], &[]);
        assert_eq!(qos_class(&pod(vec![b.clone()])), QosClass::Burstable);
        assert_eq!(qos_class(&pod(vec![g, b])), QosClass::Burstable);
        let mem_only = container(&[("memory", "1Gi")], &[("memory", "1Gi")]);
        assert_eq!(qos_class(&pod(vec![mem_only])), QosClass::Burstable);
    }

    #[test]
    fn shares_and_quota() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(100), 102);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(1_000_000), MAX_SHARES);
        assert_eq!(milli_cpu_to_quota(500, QUOTA_PERIOD_US), 50_000);
        assert_eq!(milli_cpu_to_quota(1, QUOTA_PERIOD_US), 1_000);
        assert_eq!(milli_cpu_to_quota(0, QUOTA_PERIOD_US), 0);
    }

    #[test]
    fn oom_scores() {
        let gi = 1i64 << 30;
        let g = container(&[], &[("cpu", "1"), ("memory", "1Gi")]);
        assert_eq!(oom_score_adj(&pod(vec![g.clone()]), &g, 4 * gi), -997);
        let be = container(&[], &[]);
        assert_eq!(oom_score_adj(&pod(vec![be.clone()]), &be, 4 * gi), 1000);
        let b = container(&[("memory", "1Gi")], &[]);
        assert_eq!(oom_score_adj(&pod(vec![b.clone()]), &b, 4 * gi), 750);
        // the Burstable floor is 1000 - 997
        let huge = container(&[("memory", "8Gi")], &[]);
        assert_eq!(oom_score_adj(&pod(vec![huge.clone()]), &huge, 4 * gi), 3);
        let tiny = container(&[("cpu", "1m")], &[]);
        assert_eq!(oom_score_adj(&pod(vec![tiny.clone()]), &tiny, 4 * gi), 999);
    }

    #[test]
    fn node_critical_pods_score_as_guaranteed() {
        let gi = 1i64 << 30;
        let be = container(&[], &[]);
        let mut p = pod(vec![be.clone()]);
        p.spec.priority_class_name = Some("system-node-critical".into());
        // from the apiserver, critical only by its priority
        p.metadata
            .annotations
            .insert("kubernetes.io/config.source".into(), "api".into());
        assert_eq!(oom_score_adj(&p, &be, 4 * gi), 1000);
        p.spec.priority = Some(2_000_001_000);
        assert_eq!(oom_score_adj(&p, &be, 4 * gi), -997);
        // a static pod is critical whatever its priority
        p.spec.priority = None;
        p.metadata
            .annotations
            .insert("kubernetes.io/config.source".into(), "file".into());
        assert_eq!(oom_score_adj(&p, &be, 4 * gi), -997);
        // as upstream, system-cluster-critical is not node-critical
        p.spec.priority_class_name = Some("system-cluster-critical".into());
        assert_eq!(oom_score_adj(&p, &be, 4 * gi), 1000);
    }

    #[test]
    fn a_sidecar_scores_no_higher_than_the_smallest_app_container() {
        let gi = 1i64 << 30;
        let app = container(&[("memory", "1Gi")], &[]);
        let mut side = container(&[("memory", "100Mi")], &[]);
        side.name = "side".into();
        side.restart_policy = Some("Always".into());
        let mut p = pod(vec![app.clone()]);
        p.spec.init_containers = vec![side.clone()];
        assert_eq!(oom_score_adj(&p, &app, 4 * gi), 750);
        assert_eq!(oom_score_adj(&p, &side, 4 * gi), 750);
        // a plain init container keeps its own
        side.restart_policy = None;
        p.spec.init_containers = vec![side.clone()];
        assert_eq!(oom_score_adj(&p, &side, 4 * gi), 976);
    }
}
