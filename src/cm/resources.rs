//! The limits of a pod, QoS or node cgroup, as the kubelet derives them (`ResourceConfigForPod`),
//! and the files that carry them on cgroup v2 and v1.

use crate::api::{Container, Pod};
use crate::qos::{self, QosClass};

/// What one cgroup is limited to; `None` leaves the kernel's default (no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResourceConfig {
    pub cpu_shares: Option<u64>,
    /// CFS quota in microseconds per `cpu_period`; `Some(-1)` writes "no limit" explicitly.
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<u64>,
    pub memory: Option<i64>,
    pub pids: Option<i64>,
}

/// cgroup v1 `cpu.shares` to v2 `cpu.weight`, as runc (1.3.2 and later) and crun (1.23 and
/// later) convert them: quadratic in log2(shares), so the range ends map to each other
/// (2 → 1, 262144 → 10000) and the default does too (1024 → 100). The older linear mapping
/// (`1 + (shares - 2) * 9999 / 262142`) sends 1024 shares to weight 39, so a container with a
/// one-CPU request got less than a plain process in a sibling cgroup (weight 100). picolet
/// writes pod and QoS cgroups itself and the runtime writes the containers' from the shares in
/// the CRI config: using the runtime's own mapping keeps the two levels on one scale.
pub fn shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    if shares <= 2 {
        return 1;
    }
    if shares >= qos::MAX_SHARES {
        return 10_000;
    }
    #[allow(
        clippy::cast_precision_loss,
        reason = "shares are below 2^18, exact in an f64"
    )]
    let l = (shares as f64).log2();
    // 7/34 written over 612 keeps the default point exact: (100 + 1250 - 126) / 612 = 2.
    let exponent = (l * l + 125.0 * l - 126.0) / 612.0;
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "the value lies in [1, 10000]"
    )]
    let w = 10f64.powf(exponent).ceil() as u64;
    w.clamp(1, 10_000)
}

fn sidecars(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.init_containers.iter().filter(|c| c.is_sidecar())
}

/// Every container that runs for the pod's life: app containers and sidecars.
fn long_running(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.containers.iter().chain(sidecars(pod))
}

/// The pod's effective amount of `res` (requests or limits picked by `get`): the sum over app
/// containers and sidecars, or the largest init container (plus the sidecars started before
/// it) when that is more, as the scheduler counts it.
pub fn pod_amount(pod: &Pod, get: impl Fn(&Container) -> i64) -> i64 {
    let running: i64 = long_running(pod).map(&get).sum();
    let mut sidecars_before = 0i64;
    let mut peak = running;
    for c in &pod.spec.init_containers {
        if c.is_sidecar() {
            sidecars_before += get(c);
        } else {
            peak = peak.max(sidecars_before + get(c));
        }
    }
    peak
}

/// A container's request of `res`, its limit when the request is absent (as the apiserver
/// defaults it): millicores for cpu, bytes for memory.
fn request_of(c: &Container, res: &str) -> i64 {
    let r = &c.resources;
    r.requests
        .get(res)
        .or_else(|| r.limits.get(res))
        .map_or(0, |q| {
            if res == "cpu" {
                q.milli_value()
            } else {
                q.value()
            }
        })
}

/// The pod's request of `res` as the scheduler counts it: app containers and sidecars summed,
/// or the largest init container with the sidecars started before it when that is more, plus
/// the pod's overhead.
pub fn pod_request(pod: &Pod, res: &str) -> i64 {
    let overhead = pod.spec.overhead.get(res).map_or(0, |q| {
        if res == "cpu" {
            q.milli_value()
        } else {
            q.value()
        }
    });
    pod_amount(pod, |c| request_of(c, res)).saturating_add(overhead)
}

fn cpu_request(c: &Container) -> i64 {
    let r = &c.resources;
    // An absent request defaults to the limit, as the apiserver defaults it.
    r.requests
        .get("cpu")
        .or_else(|| r.limits.get("cpu"))
        .map_or(0, |q| q.milli_value())
}

fn limit(c: &Container, res: &str) -> Option<i64> {
    let q = c.resources.limits.get(res).filter(|q| !q.is_zero())?;
    Some(if res == "cpu" {
        q.milli_value()
    } else {
        q.value()
    })
}

/// The pod cgroup's limits: CPU shares from the sum of requests; a CFS quota and a memory
/// limit only when every container declares that limit (one unlimited container makes the pod
/// unlimited); `pids.max` from `podPidsLimit` (-1 or 0: none).
pub fn for_pod(pod: &Pod, pod_pids_limit: i64) -> ResourceConfig {
    let class = qos::qos_class(pod);
    let cpu_declared = long_running(pod).all(|c| limit(c, "cpu").is_some());
    let mem_declared = long_running(pod).all(|c| limit(c, "memory").is_some());
    let mut r = ResourceConfig {
        pids: (pod_pids_limit > 0).then_some(pod_pids_limit),
        ..Default::default()
    };
    if class == QosClass::BestEffort {
        r.cpu_shares = Some(qos::MIN_SHARES);
        return r;
    }
    r.cpu_shares = Some(qos::milli_cpu_to_shares(pod_amount(pod, cpu_request)));
    if cpu_declared {
        let milli = pod_amount(pod, |c| limit(c, "cpu").unwrap_or(0));
        r.cpu_quota = Some(qos::milli_cpu_to_quota(milli, qos::QUOTA_PERIOD_US));
        r.cpu_period = Some(qos::QUOTA_PERIOD_US.unsigned_abs());
    }
    if mem_declared {
        r.memory = Some(pod_amount(pod, |c| limit(c, "memory").unwrap_or(0)));
    }
    r
}

/// Each limit of `a` and `b` at its larger (no limit is the largest; shares the larger too):
/// what a pod cgroup holds while its containers move from one to the other. The period is
/// the kubelet's fixed one, so quotas compare directly.
pub fn widest(a: &ResourceConfig, b: &ResourceConfig) -> ResourceConfig {
    let limit = |x: Option<i64>, y: Option<i64>| match (x, y) {
        (Some(x), Some(y)) if x > 0 && y > 0 => Some(x.max(y)),
        (None, None) => None,
        // One side unlimited: unlimited, written explicitly.
        _ => Some(-1),
    };
    ResourceConfig {
        cpu_shares: a.cpu_shares.max(b.cpu_shares),
        cpu_quota: limit(a.cpu_quota, b.cpu_quota),
        cpu_period: a.cpu_period.or(b.cpu_period),
        // memory.max takes no -1: leave an unlimited side's file as it is (already "max" for
        // the old, or raised at the end for the new).
        memory: match (a.memory, b.memory) {
            (Some(x), Some(y)) => Some(x.max(y)),
            _ => None,
        },
        pids: b.pids,
    }
}

/// The pod's CPU request in millicores (for the burstable QoS cgroup's shares).
pub fn pod_cpu_request_milli(pod: &Pod) -> i64 {
    pod_amount(pod, cpu_request)
}

/// One control file and its value.
pub type Setting = (&'static str, String);

/// The cgroup v2 files for `r`.
pub fn v2_files(r: &ResourceConfig) -> Vec<Setting> {
    let mut out = Vec::new();
    if let Some(s) = r.cpu_shares {
        out.push(("cpu.weight", shares_to_weight(s).to_string()));
    }
    if r.cpu_quota.is_some() || r.cpu_period.is_some() {
        let period = r.cpu_period.unwrap_or(qos::QUOTA_PERIOD_US.unsigned_abs());
        let quota = match r.cpu_quota {
            Some(q) if q > 0 => q.to_string(),
            _ => "max".into(),
        };
        out.push(("cpu.max", format!("{quota} {period}")));
    }
    if let Some(m) = r.memory {
        out.push(("memory.max", m.to_string()));
    }
    if let Some(p) = r.pids {
        out.push(("pids.max", p.to_string()));
    }
    out
}

/// The cgroup v1 files for `r`, each with the controller whose hierarchy holds it.
pub fn v1_files(r: &ResourceConfig) -> Vec<(&'static str, Setting)> {
    let mut out = Vec::new();
    if let Some(s) = r.cpu_shares {
        out.push(("cpu", ("cpu.shares", s.to_string())));
    }
    // The period first: the kernel checks a quota against the period in force.
    if let Some(p) = r.cpu_period {
        out.push(("cpu", ("cpu.cfs_period_us", p.to_string())));
    }
    if let Some(q) = r.cpu_quota {
        out.push((
            "cpu",
            ("cpu.cfs_quota_us", if q > 0 { q } else { -1 }.to_string()),
        ));
    }
    if let Some(m) = r.memory {
        out.push(("memory", ("memory.limit_in_bytes", m.to_string())));
    }
    if let Some(p) = r.pids {
        out.push(("pids", ("pids.max", p.to_string())));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qos::tests::{container, pod};

    #[test]
    fn weight_mapping_matches_the_runtimes() {
        // The three fixed points.
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 100);
        assert_eq!(shares_to_weight(262_144), 10_000);
        assert_eq!(shares_to_weight(0), 0, "unset stays unset");
        assert_eq!(shares_to_weight(1), 1);
        assert_eq!(shares_to_weight(3), 2);
        assert_eq!(shares_to_weight(512), 59);
        assert_eq!(shares_to_weight(2048), 174);
        assert_eq!(shares_to_weight(4096), 303);
        assert_eq!(shares_to_weight(1_000_000), 10_000);
        // 100m (102 shares) and 250m (256 shares), the common small requests; the linear
        // mapping gave them 4 and 10.
        assert_eq!(shares_to_weight(102), 17);
        assert_eq!(shares_to_weight(256), 35);
        // Monotonic over the whole range.
        let mut last = 0;
        for s in 2..=262_144u64 {
            let w = shares_to_weight(s);
            assert!(w >= last, "{s}: {w} < {last}");
            last = w;
        }
    }

    #[test]
    fn guaranteed_pod_gets_every_limit() {
        let g = container(&[], &[("cpu", "500m"), ("memory", "64Mi")]);
        let r = for_pod(&pod(vec![g.clone(), g]), 100);
        assert_eq!(r.cpu_shares, Some(1024));
        assert_eq!(r.cpu_quota, Some(100_000));
        assert_eq!(r.cpu_period, Some(100_000));
        assert_eq!(r.memory, Some(128 << 20));
        assert_eq!(r.pids, Some(100));
        assert_eq!(
            v2_files(&r),
            vec![
                ("cpu.weight", "100".to_owned()),
                ("cpu.max", "100000 100000".to_owned()),
                ("memory.max", "134217728".to_owned()),
                ("pids.max", "100".to_owned()),
            ]
        );
        assert_eq!(
            v1_files(&r),
            vec![
                ("cpu", ("cpu.shares", "1024".to_owned())),
                ("cpu", ("cpu.cfs_period_us", "100000".to_owned())),
                ("cpu", ("cpu.cfs_quota_us", "100000".to_owned())),
                ("memory", ("memory.limit_in_bytes", "134217728".to_owned())),
                ("pids", ("pids.max", "100".to_owned())),
            ]
        );
    }

    #[test]
    fn one_unlimited_container_leaves_the_pod_unlimited() {
        let limited = container(&[("cpu", "100m")], &[("cpu", "200m"), ("memory", "32Mi")]);
        let open = container(&[("cpu", "100m")], &[("memory", "32Mi")]);
        let r = for_pod(&pod(vec![limited, open]), -1);
        assert_eq!(r.cpu_shares, Some(204));
        assert_eq!(r.cpu_quota, None, "one container has no CPU limit");
        assert_eq!(r.memory, Some(64 << 20), "both have memory limits");
        assert_eq!(r.pids, None);
        assert_eq!(v2_files(&r)[0], ("cpu.weight", "29".to_owned()));
        assert!(!v2_files(&r).iter().any(|(f, _)| *f == "cpu.max"));
    }

    #[test]
    fn best_effort_gets_minimum_shares_only() {
        let r = for_pod(&pod(vec![container(&[], &[])]), 0);
        assert_eq!(
            r,
            ResourceConfig {
                cpu_shares: Some(2),
                ..Default::default()
            }
        );
        assert_eq!(v2_files(&r), vec![("cpu.weight", "1".to_owned())]);
    }

    #[test]
    fn init_containers_count_when_larger() {
        let mut p = pod(vec![container(&[], &[("cpu", "100m"), ("memory", "16Mi")])]);
        p.spec.init_containers = vec![container(&[], &[("cpu", "1"), ("memory", "64Mi")])];
        let r = for_pod(&p, -1);
        assert_eq!(r.memory, Some(64 << 20));
        assert_eq!(r.cpu_quota, Some(100_000));
        assert_eq!(pod_cpu_request_milli(&p), 1000);
        // A sidecar runs beside the app containers: it adds up.
        let mut side = container(&[], &[("cpu", "100m"), ("memory", "16Mi")]);
        side.restart_policy = Some("Always".into());
        p.spec.init_containers = vec![side];
        let r = for_pod(&p, -1);
        assert_eq!(r.memory, Some(32 << 20));
        assert_eq!(r.cpu_quota, Some(20_000));
    }

    #[test]
    fn unlimited_quota_is_written_as_such() {
        let r = ResourceConfig {
            cpu_quota: Some(-1),
            cpu_period: Some(100_000),
            ..Default::default()
        };
        assert_eq!(v2_files(&r), vec![("cpu.max", "max 100000".to_owned())]);
        assert_eq!(
            v1_files(&r)[1],
            ("cpu", ("cpu.cfs_quota_us", "-1".to_owned()))
        );
    }
}
