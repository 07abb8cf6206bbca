//! Benchmarks against a real containerd. Prints figures; asserts nothing about timings.
//!
//! ```sh
//! scripts/scratch-containerd.sh start /tmp/pbench
//! cargo bench --bench cri -- unix:///tmp/pbench/containerd.sock
//! ```
//!
//! 1. Raw CRI call times of a pod start (RunPodSandbox with the bridge network, CreateContainer,
//!    StartContainer) for 5 pods, with the configs picolet itself sends.
//! 2. PLEG relist cost at 10 containers (10 pods × 1) and at 100 (10 pods × 10): one cold relist
//!    (inspects every pod), then 100 steady relists back to back; wall time and CPU time per
//!    relist, picolet's side and containerd's side; the status cache footprint.
//!
//! Everything lives under the scratch directory (the socket's parent, or `$PICOLET_BENCH_DIR`):
//! pod logs go to `<dir>/bench-<run>/`. Every sandbox carries the label `picolet.bench/run=<run>`
//! and is stopped and removed at the end, also after an error, SIGINT or SIGTERM.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal};
use picolet::api::{Container, ObjectMeta, Pod, PodSpec};
use picolet::cri::{self, Cri, v1};
use picolet::kuberuntime::{self, NodeContext, RuntimeManager, config};
use picolet::pleg::{Cache, Pleg};
use picolet::rt;

const DEFAULT_ENDPOINT: &str = "unix:///tmp/pbench/containerd.sock";
const RUN_LABEL: &str = "picolet.bench/run";
const NAMESPACE: &str = "picolet-bench";
const IMAGE: &str = "picolet.local/busybox:1";
/// Pods whose start is timed call by call.
const TIMED_PODS: usize = 5;
/// Pods for the PLEG figures.
const PODS: usize = 10;
/// Containers per pod in the larger PLEG scenario.
const CONTAINERS_PER_POD: usize = 10;
const STEADY_RELISTS: usize = 100;

fn main() -> ExitCode {
    // Block SIGINT/SIGTERM before any thread starts; one thread takes them with sigwait, and the
    // benchmark then stops and removes what it created instead of dying half-way.
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    if let Err(e) = set.thread_block() {
        eprintln!("bench: blocking signals: {e}");
        return ExitCode::FAILURE;
    }
    let (sig_tx, sig_rx) = async_channel::bounded::<i32>(1);
    std::thread::spawn(move || {
        if let Ok(sig) = set.wait() {
            let _ = sig_tx.send_blocking(sig as i32);
        }
    });

    // `cargo bench` appends `--bench`; the first other argument is the endpoint.
    let endpoint = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
    let socket = match cri::parse_endpoint(&endpoint) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::from(2);
        }
    };
    let dir = std::env::var_os("PICOLET_BENCH_DIR")
        .map(PathBuf::from)
        .or_else(|| socket.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("/tmp/pbench"));
    let run = format!(
        "{}-{}",
        std::process::id(),
        rt::now_nanos() / 1_000_000 % 1_000_000
    );
    let work = dir.join(format!("bench-{run}"));
    let deadlines = cri::Deadlines {
        request: Duration::from_secs(60),
        ..cri::Deadlines::default()
    };
    let cri = match Cri::new(&endpoint, None, deadlines) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::from(2);
        }
    };
    let containerd_pid = containerd_pid(&dir);
    let ctx = Ctx {
        cri: cri.clone(),
        node: NodeContext {
            node_name: "bench-node".into(),
            node_ip: "127.0.0.1".into(),
            memory_bytes: mem_total(),
            dns: std::fs::read_to_string("/etc/resolv.conf")
                .ok()
                .map(|t| config::parse_resolv_conf(&t)),
            cluster_dns: config::ClusterDns::default(),
            pod_logs_dir: work.join("logs"),
            root_dir: work.join("root"),
            memory_oom_group: false,
        },
        run: run.clone(),
        sandboxes: RefCell::new(Vec::new()),
        containerd_pid,
        clk_tck: clk_tck(),
    };

    println!("picolet CRI benchmark (prints figures, asserts nothing)");
    println!("  endpoint       {endpoint}");
    println!("  scratch dir    {}", dir.display());
    println!("  run label      {RUN_LABEL}={run}");
    match containerd_pid {
        Some(p) => println!("  containerd     pid {p}"),
        None => println!(
            "  containerd     pid unknown (no {}/containerd.pid): its CPU is not reported",
            dir.display()
        ),
    }

    let result = rt::block_on(async {
        let outcome = futures_lite::future::or(benchmark(&ctx), async {
            match sig_rx.recv().await {
                Ok(sig) => Err(format!("interrupted by signal {sig}")),
                Err(_) => std::future::pending().await,
            }
        })
        .await;
        let cleaned = cleanup(&ctx).await;
        outcome.and(cleaned)
    });
    if let Err(e) = std::fs::remove_dir_all(&work)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        eprintln!("bench: removing {}: {e}", work.display());
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}

struct Ctx {
    cri: Cri,
    node: NodeContext,
    run: String,
    /// Every sandbox created, for the cleanup.
    sandboxes: RefCell<Vec<String>>,
    containerd_pid: Option<u32>,
    clk_tck: u64,
}

/// A pod of the benchmark, with its sandbox once it runs.
struct BenchPod {
    pod: Pod,
    sandbox_cfg: v1::PodSandboxConfig,
    sandbox_id: String,
}

/// Times of one pod start, call by call.
struct StartTimes {
    run_sandbox: Duration,
    create: Duration,
    start: Duration,
}

async fn benchmark(ctx: &Ctx) -> Result<(), String> {
    let v = ctx
        .cri
        .version(v1::VersionRequest::default())
        .await
        .map_err(|e| format!("runtime not reachable: {e}"))?;
    println!(
        "  runtime        {} {} (CRI {})",
        v.runtime_name, v.runtime_version, v.runtime_api_version
    );
    let listed = ctx
        .cri
        .list_containers(v1::ListContainersRequest::default())
        .await
        .map_err(|e| e.to_string())?
        .containers
        .len();
    if listed > 0 {
        println!(
            "  note           the runtime already holds {listed} containers; the PLEG figures include them"
        );
    }

    // ---- 1. raw CRI call times
    println!();
    println!(
        "== 1. Raw CRI call times, {TIMED_PODS} pods (bridge network, {IMAGE} `sleep 3600`, configs built by picolet)"
    );
    println!(
        "  {:<5} {:>15} {:>17} {:>16} {:>12}",
        "pod", "RunPodSandbox", "CreateContainer", "StartContainer", "sum"
    );
    let mut pods = Vec::with_capacity(PODS);
    let mut times = Vec::with_capacity(TIMED_PODS);
    for i in 0..PODS {
        let (p, t) = start_pod(ctx, i).await?;
        if i < TIMED_PODS {
            let sum = t.run_sandbox + t.create + t.start;
            println!(
                "  {:<5} {:>15} {:>17} {:>16} {:>12}",
                i + 1,
                ms(t.run_sandbox),
                ms(t.create),
                ms(t.start),
                ms(sum)
            );
            times.push(t);
        }
        pods.push(p);
        if i + 1 == TIMED_PODS {
            let med = |f: &dyn Fn(&StartTimes) -> Duration| median(times.iter().map(f).collect());
            let (r, c, s) = (
                med(&|t| t.run_sandbox),
                med(&|t| t.create),
                med(&|t| t.start),
            );
            let sum = med(&|t| t.run_sandbox + t.create + t.start);
            println!(
                "  {:<5} {:>15} {:>17} {:>16} {:>12}",
                "median",
                ms(r),
                ms(c),
                ms(s),
                ms(sum)
            );
            println!("  (sum column: median of the per-pod sums)");
            println!(
                "RESULT raw_cri_median_ms run_pod_sandbox={:.1} create_container={:.1} start_container={:.1} sum={:.1}",
                msf(r),
                msf(c),
                msf(s),
                msf(sum)
            );
        }
    }

    // ---- 2. PLEG relist cost
    println!();
    println!(
        "== 2. PLEG relist cost (1 cold relist, then {STEADY_RELISTS} steady relists back to back)"
    );
    println!(
        "  CPU: picolet's side is this process (sum of its threads' run time from /proc/self/task/*/sched, or"
    );
    println!(
        "  utime+stime ticks where that is missing); containerd's side is its own process, measured the same way."
    );
    pleg_scenario(ctx, PODS).await?;

    let t0 = Instant::now();
    let mut added = 0u32;
    for p in &pods {
        for c in 1..CONTAINERS_PER_POD {
            start_container(ctx, p, c).await?;
            added += 1;
        }
    }
    let took = t0.elapsed();
    println!(
        "  setup: {added} more containers (CreateContainer+StartContainer, serially) in {:.1} s, {} per container",
        took.as_secs_f64(),
        ms(took / added.max(1))
    );
    pleg_scenario(ctx, PODS * CONTAINERS_PER_POD).await?;
    Ok(())
}

fn make_pod(run: &str, i: usize) -> Pod {
    let containers = (0..CONTAINERS_PER_POD)
        .map(|c| Container {
            name: format!("c{c}"),
            image: IMAGE.into(),
            command: vec!["sleep".into(), "3600".into()],
            ..Default::default()
        })
        .collect();
    Pod {
        api_version: "v1".into(),
        kind: "Pod".into(),
        metadata: ObjectMeta {
            name: format!("bench-{i}"),
            namespace: NAMESPACE.into(),
            uid: format!("bench-{run}-{i}"),
            labels: BTreeMap::from([(RUN_LABEL.to_owned(), run.to_owned())]),
            ..Default::default()
        },
        spec: PodSpec {
            containers,
            termination_grace_period_seconds: Some(0),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Starts pod `i` with its first container, timing each call.
async fn start_pod(ctx: &Ctx, i: usize) -> Result<(BenchPod, StartTimes), String> {
    let pod = make_pod(&ctx.run, i);
    let sandbox_cfg = config::sandbox_config(&pod, &ctx.node, 0);
    std::fs::create_dir_all(&sandbox_cfg.log_directory)
        .map_err(|e| format!("creating {}: {e}", sandbox_cfg.log_directory))?;
    let t = Instant::now();
    let sandbox_id = ctx
        .cri
        .run_pod_sandbox(v1::RunPodSandboxRequest {
            config: Some(sandbox_cfg.clone()),
            runtime_handler: String::new(),
        })
        .await
        .map_err(|e| format!("pod {i}: {e}"))?
        .pod_sandbox_id;
    let run_sandbox = t.elapsed();
    ctx.sandboxes.borrow_mut().push(sandbox_id.clone());
    let p = BenchPod {
        pod,
        sandbox_cfg,
        sandbox_id,
    };
    let (create, start) = start_container(ctx, &p, 0).await?;
    Ok((
        p,
        StartTimes {
            run_sandbox,
            create,
            start,
        },
    ))
}

/// Creates and starts container `c` of a pod; returns the time of each call.
async fn start_container(
    ctx: &Ctx,
    p: &BenchPod,
    c: usize,
) -> Result<(Duration, Duration), String> {
    let container = &p.pod.spec.containers[c];
    let logs = Path::new(&p.sandbox_cfg.log_directory).join(&container.name);
    std::fs::create_dir_all(&logs).map_err(|e| format!("creating {}: {e}", logs.display()))?;
    let volumes = HashMap::new();
    let cfg = config::container_config(
        &p.pod,
        &ctx.node,
        &config::ContainerInputs {
            object_env: &Default::default(),
            container,
            image_ref: IMAGE,
            restart_count: 0,
            hash: kuberuntime::container_hash(container),
            pod_ip: "",
            volumes: &volumes,
            subpaths: &HashMap::new(),
            image_mounts: &HashMap::new(),
            termination_log: None,
            etc_hosts: None,
            pid_target: None,
        },
    );
    let what = format!("{}/{}", p.pod.metadata.name, container.name);
    let t = Instant::now();
    let id = ctx
        .cri
        .create_container(v1::CreateContainerRequest {
            pod_sandbox_id: p.sandbox_id.clone(),
            config: Some(cfg),
            sandbox_config: Some(p.sandbox_cfg.clone()),
        })
        .await
        .map_err(|e| format!("{what}: {e}"))?
        .container_id;
    let create = t.elapsed();
    let t = Instant::now();
    ctx.cri
        .start_container(v1::StartContainerRequest { container_id: id })
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    Ok((create, t.elapsed()))
}

async fn pleg_scenario(ctx: &Ctx, containers: usize) -> Result<(), String> {
    println!();
    println!("  -- {containers} containers ({PODS} pods)");
    let cri = Rc::new(ctx.cri.clone());
    let rm = Rc::new(RuntimeManager::new(cri.clone(), cri, ctx.node.clone()));
    let cache = Rc::new(RefCell::new(Cache::default()));
    let (tx, rx) = async_channel::unbounded();
    let pleg = Pleg::new(rm, cache.clone(), tx);
    let drain = || std::iter::from_fn(|| rx.try_recv().ok()).count();

    let before = ctx.cpu();
    let t = Instant::now();
    let inspected = pleg.relist().await.map_err(|e| e.to_string())?;
    let cold = t.elapsed();
    let cold_cpu = ctx.cpu().since(&before);
    let cold_events = drain();
    {
        let c = cache.borrow();
        println!(
            "  runtime as cached: {} pods, {} containers",
            c.len(),
            c.containers()
        );
    }
    println!(
        "  cold relist:   wall {:>9}   CPU picolet {:>9}   containerd {:>9}   ({inspected} pods inspected, {cold_events} events)",
        ms(cold),
        cold_cpu.picolet(),
        cold_cpu.containerd()
    );

    let mut walls = Vec::with_capacity(STEADY_RELISTS);
    let (mut insp, mut events) = (0, 0);
    let before = ctx.cpu();
    let t0 = Instant::now();
    for _ in 0..STEADY_RELISTS {
        let t = Instant::now();
        insp += pleg.relist().await.map_err(|e| e.to_string())?;
        walls.push(t.elapsed());
        events += drain();
    }
    let total = t0.elapsed();
    let cpu = ctx.cpu().since(&before).per(STEADY_RELISTS);
    walls.sort();
    let n = walls.len();
    println!(
        "  steady relist: wall median {} (min {}, p90 {}, max {}; {} for all {n})",
        ms(median(walls.clone())),
        ms(walls[0]),
        ms(walls[n * 9 / 10]),
        ms(walls[n - 1]),
        ms(total)
    );
    println!(
        "                 CPU per relist: picolet {}, containerd {}   ({insp} pods inspected, {events} events over {n} relists)",
        cpu.picolet(),
        cpu.containerd()
    );
    if let Some(busy) = cpu.picolet_ms.map(|c| c * n as f64 / msf(total) * 100.0) {
        println!(
            "                 (picolet busy {busy:.1}% of one core while relisting back to back; at the 1 s period: {:.2}%)",
            cpu.picolet_ms.unwrap_or(0.0) / 10.0
        );
    }

    let (bytes, held, pods) = {
        let c = cache.borrow();
        (c.approx_bytes(), c.containers(), c.len())
    };
    println!(
        "  status cache:  {bytes} bytes for {pods} pods / {held} containers = {} bytes per container",
        bytes.checked_div(held).unwrap_or(0)
    );
    println!(
        "RESULT pleg containers={held} cold_ms={:.2} steady_median_ms={:.2} steady_cpu_picolet_ms={} steady_cpu_containerd_ms={} cache_bytes={bytes} cache_bytes_per_container={}",
        msf(cold),
        msf(median(walls)),
        cpu.picolet_ms.map_or("n/a".into(), |v| format!("{v:.3}")),
        cpu.containerd_ms
            .map_or("n/a".into(), |v| format!("{v:.3}")),
        bytes.checked_div(held).unwrap_or(0)
    );
    Ok(())
}

/// Stops and removes every sandbox of this run (those it recorded and those the runtime lists
/// with its label), with their containers.
async fn cleanup(ctx: &Ctx) -> Result<(), String> {
    let t0 = Instant::now();
    let mut ids: Vec<String> = ctx.sandboxes.borrow().clone();
    let mut errors = Vec::new();
    let filter = || v1::ListPodSandboxRequest {
        filter: Some(v1::PodSandboxFilter {
            label_selector: HashMap::from([(RUN_LABEL.to_owned(), ctx.run.clone())]),
            ..Default::default()
        }),
    };
    match ctx.cri.list_pod_sandbox(filter()).await {
        Ok(r) => {
            for s in r.items {
                if !ids.contains(&s.id) {
                    ids.push(s.id);
                }
            }
        }
        Err(e) => errors.push(format!("listing sandboxes: {e}")),
    }
    for id in &ids {
        let stop = ctx
            .cri
            .stop_pod_sandbox(v1::StopPodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await;
        if let Err(e) = stop.map(drop).or_else(not_found_ok) {
            errors.push(format!("stopping sandbox {id}: {e}"));
        }
        let remove = ctx
            .cri
            .remove_pod_sandbox(v1::RemovePodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await;
        if let Err(e) = remove.map(drop).or_else(not_found_ok) {
            errors.push(format!("removing sandbox {id}: {e}"));
        }
    }
    let left = match ctx.cri.list_pod_sandbox(filter()).await {
        Ok(r) => r.items.len().to_string(),
        Err(e) => format!("unknown ({e})"),
    };
    println!();
    println!(
        "cleanup: stopped and removed {} sandboxes with their containers in {:.1} s; {left} left",
        ids.len(),
        t0.elapsed().as_secs_f64()
    );
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("cleanup: {}", errors.join("; ")))
    }
}

fn not_found_ok(e: cri::CriError) -> Result<(), cri::CriError> {
    if e.is_not_found() { Ok(()) } else { Err(e) }
}

// ---------------------------------------------------------------- CPU time

/// CPU time consumed so far by this process and by containerd.
struct CpuSample {
    picolet_ms: Option<f64>,
    containerd_ms: Option<f64>,
}

impl Ctx {
    fn cpu(&self) -> CpuSample {
        CpuSample {
            picolet_ms: process_cpu_ms(std::process::id(), self.clk_tck),
            containerd_ms: self
                .containerd_pid
                .and_then(|p| process_cpu_ms(p, self.clk_tck)),
        }
    }
}

impl CpuSample {
    fn since(&self, before: &CpuSample) -> CpuSample {
        let d = |a: Option<f64>, b: Option<f64>| Some((a? - b?).max(0.0));
        CpuSample {
            picolet_ms: d(self.picolet_ms, before.picolet_ms),
            containerd_ms: d(self.containerd_ms, before.containerd_ms),
        }
    }

    fn per(&self, n: usize) -> CpuSample {
        let n = n.max(1) as f64;
        CpuSample {
            picolet_ms: self.picolet_ms.map(|v| v / n),
            containerd_ms: self.containerd_ms.map(|v| v / n),
        }
    }

    fn picolet(&self) -> String {
        fmt_ms(self.picolet_ms)
    }

    fn containerd(&self) -> String {
        fmt_ms(self.containerd_ms)
    }
}

fn fmt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |v| format!("{v:.3} ms"))
}

/// CPU time of a process in ms: the sum of its threads' `se.sum_exec_runtime` (ns precision)
/// when the kernel exposes /proc/PID/task/TID/sched, else utime+stime from /proc/PID/stat
/// (clock ticks, typically 10 ms).
fn process_cpu_ms(pid: u32, clk_tck: u64) -> Option<f64> {
    if let Some(v) = sched_runtime_ms(pid) {
        return Some(v);
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(") ")?.1;
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some((utime + stime) as f64 * 1000.0 / clk_tck.max(1) as f64)
}

fn sched_runtime_ms(pid: u32) -> Option<f64> {
    let mut total = 0.0;
    let mut any = false;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let Ok(text) = std::fs::read_to_string(t.path().join("sched")) else {
            continue;
        };
        if let Some(v) = text
            .lines()
            .find(|l| l.starts_with("se.sum_exec_runtime"))
            .and_then(|l| l.rsplit(':').next())
            .and_then(|v| v.trim().parse::<f64>().ok())
        {
            total += v;
            any = true;
        }
    }
    any.then_some(total)
}

fn clk_tck() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

/// containerd's PID from `<dir>/containerd.pid`, if that process is a containerd.
fn containerd_pid(dir: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(dir.join("containerd.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    (comm.trim() == "containerd").then_some(pid)
}

fn mem_total() -> i64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| picolet::node::mem_total(&m))
        .unwrap_or(0)
}

// ---------------------------------------------------------------- figures

fn median(mut v: Vec<Duration>) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

fn msf(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", msf(d))
}
