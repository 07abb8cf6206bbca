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

/// The OOM score adjustment of a container, as the kubelet computes it: -997 for Guaranteed,
/// 1000 for BestEffort, and for Burstable a value in [2, 999] that is lower the larger the
/// container's memory request relative to the node's memory.
pub fn oom_score_adj(pod: &Pod, c: &Container, node_memory_bytes: i64) -> i64 {
    match qos_class(pod) {
        QosClass::Guaranteed => -997,
        QosClass::BestEffort => 1000,
        QosClass::Burstable => {
            let req = c.resources.requests.get("memory").map_or(0, |q| q.value());
            if node_memory_bytes <= 0 {
                return 999;
            }
            let adj = 1000 - (1000 * i128::from(req) / i128::from(node_memory_bytes));
            i64::try_from(adj).unwrap_or(2).clamp(2, 999)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Quantity;

    fn container(req: &[(&str, &str)], lim: &[(&str, &str)]) -> Container {
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

    fn pod(cs: Vec<Container>) -> Pod {
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
        let huge = container(&[("memory", "8Gi")], &[]);
        assert_eq!(oom_score_adj(&pod(vec![huge.clone()]), &huge, 4 * gi), 2);
        let tiny = container(&[("cpu", "1m")], &[]);
        assert_eq!(oom_score_adj(&pod(vec![tiny.clone()]), &tiny, 4 * gi), 999);
    }
}
