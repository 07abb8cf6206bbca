//! The Prometheus texts of the local API, with the kubelet's and cAdvisor's names, types,
//! labels and help: `/metrics` (the agent itself), `/metrics/cadvisor` (every cgroup picolet
//! accounts for) and `/metrics/resource` (the kubelet's resource metrics, from the Summary).
//! Pure: they format what a [`Snapshot`], a [`Summary`] or a [`KubeletView`] hold.

use std::path::Path;

use super::cgroup::Stats;
use super::prom::{Encoder, Histogram, Kind};
use super::summary::Summary;
use super::{PodSample, Snapshot};

#[allow(
    clippy::cast_precision_loss,
    reason = "metric values are f64 by the format"
)]
fn f(v: u64) -> f64 {
    v as f64
}

#[allow(
    clippy::cast_precision_loss,
    reason = "metric values are f64 by the format"
)]
fn secs(nanos: i64) -> f64 {
    nanos as f64 / 1e9
}

/// What cAdvisor labels a machine with, and its size.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Machine {
    pub cores: Option<u64>,
    pub boot_id: String,
    pub machine_id: String,
    pub system_uuid: String,
}

/// Logical CPUs from a CPU list as `/sys/devices/system/cpu/online` writes it ("0-3,5").
pub fn count_cpus(list: &str) -> Option<u64> {
    let mut n = 0u64;
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
                n += b.checked_sub(a)? + 1;
            }
            None => {
                part.parse::<u64>().ok()?;
                n += 1;
            }
        }
    }
    (n > 0).then_some(n)
}

impl Machine {
    /// Reads the machine's identity under `root` (`/` on a host); a file that cannot be read
    /// (the DMI UUID needs root) leaves its label empty.
    pub fn read(root: &Path) -> Machine {
        let read = |p: &str| {
            std::fs::read_to_string(root.join(p))
                .map(|s| s.trim().to_owned())
                .unwrap_or_default()
        };
        Machine {
            cores: count_cpus(&read("sys/devices/system/cpu/online")),
            boot_id: read("proc/sys/kernel/random/boot_id"),
            machine_id: read("etc/machine-id"),
            system_uuid: read("sys/class/dmi/id/product_uuid"),
        }
    }
}

/// One cgroup's series: cAdvisor's labels, sorted by name as client_golang writes them.
struct Row<'a> {
    container: &'a str,
    id: &'a str,
    image: &'a str,
    name: &'a str,
    namespace: &'a str,
    pod: &'a str,
    stats: &'a Stats,
    start: Option<i64>,
}

impl Row<'_> {
    fn labels(&self) -> [(&str, &str); 6] {
        [
            ("container", self.container),
            ("id", self.id),
            ("image", self.image),
            ("name", self.name),
            ("namespace", self.namespace),
            ("pod", self.pod),
        ]
    }
}

fn rows(snap: &Snapshot) -> Vec<Row<'_>> {
    let mut rows = vec![Row {
        container: "",
        id: "/",
        image: "",
        name: "",
        namespace: "",
        pod: "",
        stats: &snap.node.stats.cgroup,
        start: None,
    }];
    for p in &snap.pods {
        pod_rows(p, &mut rows);
    }
    rows
}

fn pod_rows<'a>(p: &'a PodSample, rows: &mut Vec<Row<'a>>) {
    if let Some(id) = &p.cgroup {
        rows.push(Row {
            container: "",
            id,
            image: "",
            name: "",
            namespace: &p.namespace,
            pod: &p.name,
            stats: &p.stats,
            start: None,
        });
    }
    for c in &p.containers {
        let Some(id) = &c.cgroup else { continue };
        rows.push(Row {
            container: &c.name,
            id,
            image: &c.image,
            name: &c.id,
            namespace: &p.namespace,
            pod: &p.name,
            stats: &c.stats,
            start: Some(c.started_at),
        });
    }
}

type Getter = fn(&Stats) -> Option<f64>;

/// cAdvisor's per-cgroup metrics: name, help, type, value.
const CADVISOR: &[(&str, &str, Kind, Getter)] = &[
    (
        "container_memory_usage_bytes",
        "Current memory usage in bytes, including all memory regardless of when it was accessed",
        Kind::Gauge,
        |s| s.memory_usage_bytes.map(f),
    ),
    (
        "container_memory_working_set_bytes",
        "Current working set in bytes.",
        Kind::Gauge,
        |s| s.memory_working_set_bytes.map(f),
    ),
    (
        "container_memory_rss",
        "Size of RSS in bytes.",
        Kind::Gauge,
        |s| s.memory_rss_bytes.map(f),
    ),
    (
        "container_oom_events_total",
        "Count of out of memory events observed for the container",
        Kind::Counter,
        |s| s.oom_kills.map(f),
    ),
    (
        "container_fs_reads_bytes_total",
        "Cumulative count of bytes read",
        Kind::Counter,
        |s| s.io_read_bytes.map(f),
    ),
    (
        "container_fs_writes_bytes_total",
        "Cumulative count of bytes written",
        Kind::Counter,
        |s| s.io_write_bytes.map(f),
    ),
    (
        "container_processes",
        "Number of processes running inside the container.",
        Kind::Gauge,
        |s| s.pids.map(f),
    ),
    (
        "container_spec_memory_limit_bytes",
        "Memory limit for the container.",
        Kind::Gauge,
        |s| Some(f(s.memory_limit_bytes.unwrap_or(0))),
    ),
    (
        "container_pressure_cpu_waiting_seconds_total",
        "Total time duration tasks in the container have waited due to CPU congestion.",
        Kind::Counter,
        |s| s.cpu_psi.as_ref().map(|p| f(p.some.total_usec) / 1e6),
    ),
    (
        "container_pressure_cpu_stalled_seconds_total",
        "Total time duration no tasks in the container could make progress due to CPU congestion.",
        Kind::Counter,
        |s| {
            s.cpu_psi
                .as_ref()
                .and_then(|p| p.full)
                .map(|l| f(l.total_usec) / 1e6)
        },
    ),
    (
        "container_pressure_memory_waiting_seconds_total",
        "Total time duration tasks in the container have waited due to memory congestion.",
        Kind::Counter,
        |s| s.memory_psi.as_ref().map(|p| f(p.some.total_usec) / 1e6),
    ),
    (
        "container_pressure_memory_stalled_seconds_total",
        "Total time duration no tasks in the container could make progress due to memory congestion.",
        Kind::Counter,
        |s| {
            s.memory_psi
                .as_ref()
                .and_then(|p| p.full)
                .map(|l| f(l.total_usec) / 1e6)
        },
    ),
    (
        "container_pressure_io_waiting_seconds_total",
        "Total time duration tasks in the container have waited due to I/O congestion.",
        Kind::Counter,
        |s| s.io_psi.as_ref().map(|p| f(p.some.total_usec) / 1e6),
    ),
    (
        "container_pressure_io_stalled_seconds_total",
        "Total time duration no tasks in the container could make progress due to I/O congestion.",
        Kind::Counter,
        |s| {
            s.io_psi
                .as_ref()
                .and_then(|p| p.full)
                .map(|l| f(l.total_usec) / 1e6)
        },
    ),
];

/// `/metrics/cadvisor`: the root cgroup, each pod's own cgroup (when it has one) and each
/// running container, with cAdvisor's names and labels, stamped with the snapshot's time.
pub fn cadvisor(snap: &Snapshot, m: &Machine) -> String {
    let mut e = Encoder::new();
    let ts = Some(snap.at.div_euclid(1_000_000));
    let rows = rows(snap);
    e.family(
        "container_cpu_usage_seconds_total",
        "Cumulative cpu time consumed in seconds.",
        Kind::Counter,
    );
    for r in &rows {
        if let Some(u) = r.stats.cpu_usage_nanos {
            let [c, id, img, n, ns, pod] = r.labels();
            let l = [c, ("cpu", "total"), id, img, n, ns, pod];
            e.sample("container_cpu_usage_seconds_total", &l, f(u) / 1e9, ts);
        }
    }
    for (name, help, kind, get) in CADVISOR {
        let values: Vec<(&Row, f64)> = rows
            .iter()
            .filter_map(|r| get(r.stats).map(|v| (r, v)))
            .collect();
        if values.is_empty() {
            continue; // a kernel without PSI: no family at all, as cAdvisor
        }
        e.family(name, help, *kind);
        for (r, v) in values {
            e.sample(name, &r.labels(), v, ts);
        }
    }
    e.family(
        "container_start_time_seconds",
        "Start time of the container since unix epoch in seconds.",
        Kind::Gauge,
    );
    for r in &rows {
        if let Some(s) = r.start {
            e.sample("container_start_time_seconds", &r.labels(), secs(s), ts);
        }
    }
    let ml = [
        ("boot_id", m.boot_id.as_str()),
        ("machine_id", m.machine_id.as_str()),
        ("system_uuid", m.system_uuid.as_str()),
    ];
    if let Some(n) = m.cores {
        e.family(
            "machine_cpu_cores",
            "Number of logical CPU cores.",
            Kind::Gauge,
        );
        e.sample("machine_cpu_cores", &ml, f(n), None);
    }
    if let Some(b) = snap.node.stats.memory_total_bytes {
        e.family(
            "machine_memory_bytes",
            "Amount of memory installed on the machine.",
            Kind::Gauge,
        );
        e.sample("machine_memory_bytes", &ml, f(b), None);
    }
    e.finish()
}

/// `/metrics/resource`: the kubelet's resource metrics from the Summary (what metrics-server
/// reads), stamped with the sample's time as upstream.
pub fn resource(s: &Summary, at: i64) -> String {
    let mut e = Encoder::new();
    let ts = Some(at.div_euclid(1_000_000));
    let cpu_secs = |c: &Option<super::summary::CpuStats>| {
        c.as_ref()
            .and_then(|c| c.usage_core_nano_seconds)
            .map(|n| f(n) / 1e9)
    };
    let ws = |m: &Option<super::summary::MemoryStats>| {
        m.as_ref().and_then(|m| m.working_set_bytes).map(f)
    };
    if let Some(v) = cpu_secs(&s.node.cpu) {
        e.family(
            "node_cpu_usage_seconds_total",
            "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
            Kind::Counter,
        );
        e.sample("node_cpu_usage_seconds_total", &[], v, ts);
    }
    if let Some(v) = ws(&s.node.memory) {
        e.family(
            "node_memory_working_set_bytes",
            "[STABLE] Current working set of the node in bytes",
            Kind::Gauge,
        );
        e.sample("node_memory_working_set_bytes", &[], v, ts);
    }
    let per_container: &[(&str, &str, Kind)] = &[
        (
            "container_start_time_seconds",
            "[STABLE] Start time of the container since unix epoch in seconds",
            Kind::Gauge,
        ),
        (
            "container_cpu_usage_seconds_total",
            "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
            Kind::Counter,
        ),
        (
            "container_memory_working_set_bytes",
            "[STABLE] Current working set of the container in bytes",
            Kind::Gauge,
        ),
    ];
    for (i, (name, help, kind)) in per_container.iter().enumerate() {
        e.family(name, help, *kind);
        for p in &s.pods {
            for c in &p.containers {
                let l = [
                    ("container", c.name.as_str()),
                    ("namespace", p.pod_ref.namespace.as_str()),
                    ("pod", p.pod_ref.name.as_str()),
                ];
                match i {
                    // Upstream sends the start time without a timestamp.
                    0 => {
                        if let Some(t) = parse_rfc3339_secs(&c.start_time).filter(|&t| t > 0) {
                            e.sample(name, &l, f(t), None);
                        }
                    }
                    1 => {
                        if let Some(v) = cpu_secs(&c.cpu) {
                            e.sample(name, &l, v, ts);
                        }
                    }
                    _ => {
                        if let Some(v) = ws(&c.memory) {
                            e.sample(name, &l, v, ts);
                        }
                    }
                }
            }
        }
    }
    e.family(
        "pod_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
        Kind::Counter,
    );
    for p in &s.pods {
        let l = [
            ("namespace", p.pod_ref.namespace.as_str()),
            ("pod", p.pod_ref.name.as_str()),
        ];
        if let Some(v) = cpu_secs(&p.cpu) {
            e.sample("pod_cpu_usage_seconds_total", &l, v, ts);
        }
    }
    e.family(
        "pod_memory_working_set_bytes",
        "[STABLE] Current working set of the pod in bytes",
        Kind::Gauge,
    );
    for p in &s.pods {
        let l = [
            ("namespace", p.pod_ref.namespace.as_str()),
            ("pod", p.pod_ref.name.as_str()),
        ];
        if let Some(v) = ws(&p.memory) {
            e.sample("pod_memory_working_set_bytes", &l, v, ts);
        }
    }
    e.family(
        "resource_scrape_error",
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
        Kind::Gauge,
    );
    e.sample("resource_scrape_error", &[], 0.0, None);
    e.family(
        "scrape_error",
        "[ALPHA] (Deprecated since 1.29.0) 1 if there was an error while getting container metrics, 0 otherwise",
        Kind::Gauge,
    );
    e.sample("scrape_error", &[], 0.0, None);
    e.finish()
}

/// Seconds since the epoch of a `metav1.Time` ("2024-05-01T12:34:56Z"); none before 1970.
fn parse_rfc3339_secs(s: &str) -> Option<u64> {
    crate::api::time::parse_rfc3339(s).and_then(|t| u64::try_from(t).ok())
}

/// This process, as client_golang's process collector reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Process {
    pub cpu_seconds: f64,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub start_time_seconds: Option<f64>,
    pub open_fds: Option<u64>,
}

/// From `/proc/self/stat` (utime, stime and starttime in USER_HZ ticks, 100 a second; vsize
/// in bytes), `VmRSS` of `/proc/self/status`, and the boot time of `/proc/stat`.
pub fn parse_process(stat: &str, status: &str, proc_stat: &str) -> Option<Process> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
    let (utime, stime) = (num(11)?, num(12)?);
    let btime = super::boot_time(proc_stat).map(secs);
    Some(Process {
        cpu_seconds: f(utime + stime) / 100.0,
        resident_bytes: status.lines().find_map(|l| {
            let kib: u64 = l
                .strip_prefix("VmRSS:")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some(kib * 1024)
        }),
        virtual_bytes: num(20),
        start_time_seconds: btime.zip(num(19)).map(|(b, st)| b + f(st) / 100.0),
        open_fds: None,
    })
}

/// This process's figures, read now.
pub fn read_process() -> Option<Process> {
    let r = |p: &str| std::fs::read_to_string(p).ok();
    let mut p = parse_process(
        &r("/proc/self/stat")?,
        &r("/proc/self/status").unwrap_or_default(),
        &r("/proc/stat").unwrap_or_default(),
    )?;
    p.open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as u64);
    Some(p)
}

/// One runtime operation type's counters.
#[derive(Debug, Clone, PartialEq)]
pub struct OpStats {
    pub total: u64,
    pub errors: u64,
    pub duration: Histogram,
}

/// What `/metrics` reports of the agent.
pub struct KubeletView<'a> {
    pub node_name: &'a str,
    pub running_pods: usize,
    /// Container count per state: created, running, exited, unknown.
    pub containers: [(&'static str, usize); 4],
    pub relist_duration: &'a Histogram,
    pub relist_interval: &'a Histogram,
    /// Unix seconds of the last successful relist.
    pub pleg_last_seen: Option<f64>,
    pub pod_start: &'a Histogram,
    pub ops: &'a [(&'static str, OpStats)],
    pub process: Option<Process>,
}

/// `/metrics`: the agent's own metrics, with the kubelet's names.
/// `/metrics/probes`: each probe worker's results and its successful probes' durations, with
/// upstream's names and labels. A series appears once it has counted something, as upstream's.
pub fn probes(counts: &[crate::prober::results::ProbeCounts]) -> String {
    let mut e = Encoder::new();
    e.family(
        "prober_probe_total",
        "[BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.",
        Kind::Counter,
    );
    for c in counts {
        for (result, n) in ["successful", "failed", "unknown"].iter().zip(c.results) {
            if n > 0 {
                e.sample(
                    "prober_probe_total",
                    &[
                        ("container", &c.container),
                        ("namespace", &c.namespace),
                        ("pod", &c.pod),
                        ("pod_uid", &c.pod_uid),
                        ("probe_type", c.kind.name()),
                        ("result", result),
                    ],
                    f(n),
                    None,
                );
            }
        }
    }
    e.family(
        "prober_probe_duration_seconds",
        "[ALPHA] Duration in seconds for a probe response.",
        Kind::Histogram,
    );
    for c in counts.iter().filter(|c| c.duration.count() > 0) {
        e.histogram(
            "prober_probe_duration_seconds",
            &[
                ("container", &c.container),
                ("namespace", &c.namespace),
                ("pod", &c.pod),
                ("probe_type", c.kind.name()),
            ],
            &c.duration,
        );
    }
    e.finish()
}

pub fn kubelet(v: &KubeletView) -> String {
    let mut e = Encoder::new();
    e.family(
        "kubelet_node_name",
        "[ALPHA] The node's name. The count is always 1.",
        Kind::Gauge,
    );
    e.sample("kubelet_node_name", &[("node", v.node_name)], 1.0, None);
    e.family(
        "kubelet_running_pods",
        "[ALPHA] Number of pods that have a running pod sandbox",
        Kind::Gauge,
    );
    e.sample("kubelet_running_pods", &[], f(v.running_pods as u64), None);
    e.family(
        "kubelet_running_containers",
        "[ALPHA] Number of containers currently running",
        Kind::Gauge,
    );
    for (state, n) in v.containers {
        e.sample(
            "kubelet_running_containers",
            &[("container_state", state)],
            f(n as u64),
            None,
        );
    }
    e.family(
        "kubelet_pleg_relist_duration_seconds",
        "[ALPHA] Duration in seconds for relisting pods in PLEG.",
        Kind::Histogram,
    );
    e.histogram(
        "kubelet_pleg_relist_duration_seconds",
        &[],
        v.relist_duration,
    );
    e.family(
        "kubelet_pleg_relist_interval_seconds",
        "[ALPHA] Interval in seconds between relisting in PLEG.",
        Kind::Histogram,
    );
    e.histogram(
        "kubelet_pleg_relist_interval_seconds",
        &[],
        v.relist_interval,
    );
    if let Some(t) = v.pleg_last_seen {
        e.family(
            "kubelet_pleg_last_seen_seconds",
            "[ALPHA] Timestamp in seconds when PLEG was last seen active.",
            Kind::Gauge,
        );
        e.sample("kubelet_pleg_last_seen_seconds", &[], t, None);
    }
    e.family(
        "kubelet_pod_start_duration_seconds",
        "[ALPHA] Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
        Kind::Histogram,
    );
    e.histogram("kubelet_pod_start_duration_seconds", &[], v.pod_start);
    e.family(
        "kubelet_runtime_operations_total",
        "[ALPHA] Cumulative number of runtime operations by operation type.",
        Kind::Counter,
    );
    for (op, s) in v.ops {
        let l = [("operation_type", *op)];
        e.sample("kubelet_runtime_operations_total", &l, f(s.total), None);
    }
    e.family(
        "kubelet_runtime_operations_errors_total",
        "[ALPHA] Cumulative number of runtime operation errors by operation type.",
        Kind::Counter,
    );
    for (op, s) in v.ops.iter().filter(|(_, s)| s.errors > 0) {
        let l = [("operation_type", *op)];
        e.sample(
            "kubelet_runtime_operations_errors_total",
            &l,
            f(s.errors),
            None,
        );
    }
    e.family(
        "kubelet_runtime_operations_duration_seconds",
        "[ALPHA] Duration in seconds of runtime operations. Broken down by operation type.",
        Kind::Histogram,
    );
    for (op, s) in v.ops {
        e.histogram(
            "kubelet_runtime_operations_duration_seconds",
            &[("operation_type", *op)],
            &s.duration,
        );
    }
    if let Some(p) = &v.process {
        e.family(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            Kind::Counter,
        );
        e.sample("process_cpu_seconds_total", &[], p.cpu_seconds, None);
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                p.resident_bytes.map(f),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                p.virtual_bytes.map(f),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                p.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                p.open_fds.map(f),
            ),
        ];
        for (name, help, val) in gauges {
            if let Some(val) = val {
                e.family(name, help, Kind::Gauge);
                e.sample(name, &[], val, None);
            }
        }
    }
    e.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(count_cpus("0-3\n"), Some(4));
        assert_eq!(count_cpus("0,2-3,7"), Some(4));
        assert_eq!(count_cpus("0"), Some(1));
        assert_eq!(count_cpus(""), None);
        assert_eq!(count_cpus("3-1"), None);
    }

    #[test]
    fn rfc3339_back_to_seconds() {
        for t in [0i64, 1_700_000_000, 951_782_400, 4_102_444_799] {
            let s = crate::api::time::rfc3339(t * 1_000_000_000);
            assert_eq!(parse_rfc3339_secs(&s), u64::try_from(t).ok(), "{s}");
        }
        assert_eq!(parse_rfc3339_secs("2024-01-01T00:00:00"), None);
    }

    #[test]
    fn process_from_proc_files() {
        // A comm with spaces and a parenthesis, as the kernel allows.
        let stat = "4242 (pico let) x) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 3 0 1000 123456789 1500 18446744073709551615";
        let status = "Name:\tpicolet\nVmPeak:\t  9000 kB\nVmRSS:\t    5120 kB\n";
        let p = parse_process(stat, status, "cpu  1 2 3\nbtime 1700000000\n").unwrap();
        assert_eq!(p.cpu_seconds, 3.0);
        assert_eq!(p.resident_bytes, Some(5120 * 1024));
        assert_eq!(p.virtual_bytes, Some(123_456_789));
        assert_eq!(p.start_time_seconds, Some(1_700_000_010.0));
    }
}
