//! picolet: a small Kubernetes node agent for edge devices.
//!
//! `ARCHITECTURE.md` at the repository root maps the modules; `run` wires them.

pub mod admission;
pub mod api;
#[cfg(feature = "apiserver")]
pub mod apiclient;
pub(crate) mod atomic_file;
pub(crate) mod atomic_writer;
#[cfg(feature = "apiserver")]
pub mod certificate;
pub mod check;
#[cfg(feature = "apiserver")]
pub(crate) mod cluster;
pub mod cm;
pub mod config;
pub mod credential_provider;
pub mod credentials;
pub mod cri;
pub mod events;
pub mod eviction;
pub mod exec_cli;
pub(crate) mod hash;
#[cfg(feature = "konnectivity")]
pub mod konnectivity;
pub(crate) mod kubecontainer;
pub mod kuberuntime;
pub mod limits;
pub mod logger;
pub mod logs;
pub mod malloc;
pub mod node;
pub mod nodeshutdown;
pub mod notify;
pub mod objects;
pub mod options;
#[cfg(feature = "apiserver")]
pub mod pki;
pub mod pleg;
pub(crate) mod pod_manager;
pub(crate) mod pod_workers;
pub(crate) mod prober;
pub(crate) mod projection;
pub(crate) mod qos;
pub mod rt;
#[cfg(feature = "local-api")]
pub(crate) mod server;
pub mod services;
pub mod stats;
pub(crate) mod status;
pub(crate) mod sync_loop;
pub mod volume;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use config::{Mux, Source};
use options::Options;

/// Checks manifests as the file source would; returns one line per error.
#[cfg(feature = "file-source")]
pub fn validate(files: &[std::path::PathBuf]) -> Vec<String> {
    let mut errors = Vec::new();
    for f in files {
        if let Err(e) = config::file::load(f, "validate", "") {
            errors.extend(e);
        }
    }
    errors
}

/// The pod sources the options ask for, checked against what this build has.
struct Sources {
    manifests: Option<std::path::PathBuf>,
    #[cfg(feature = "apiserver")]
    apiserver: Option<apiclient::Client>,
    /// How the client identity stood at start, and the certificate it had.
    #[cfg(feature = "apiserver")]
    identity: Option<(certificate::Start, Option<certificate::Identity>)>,
}

fn sources(o: &Options) -> Result<Sources, String> {
    let manifests = o.pod_manifest_path.clone();
    if manifests.is_some() && !cfg!(feature = "file-source") {
        return Err("--pod-manifest-path: this picolet was built without the file source".into());
    }
    #[cfg(feature = "apiserver")]
    let (apiserver, identity) = match &o.kubeconfig {
        Some(path) => {
            let store =
                certificate::Store::new(&o.root_dir.join("pki"), certificate::CLIENT_PREFIX);
            let now = rt::now_nanos().div_euclid(1_000_000_000);
            let (conn, start) = certificate::start(
                path,
                o.bootstrap_kubeconfig.as_deref(),
                &store,
                o.rotation(),
                now,
            )?;
            let id = certificate::Identity::of(&conn.credentials);
            let flag = if matches!(start, certificate::Start::Ready) {
                "--kubeconfig"
            } else {
                "--bootstrap-kubeconfig"
            };
            (
                Some(
                    apiclient::Client::new(&conn)
                        .map_err(|e| format!("{flag} {}: {e}", path.display()))?,
                ),
                Some((start, id)),
            )
        }
        None => (None, None),
    };
    #[cfg(not(feature = "apiserver"))]
    if o.kubeconfig.is_some() {
        return Err("--kubeconfig: this picolet was built without the apiserver client".into());
    }
    let s = Sources {
        manifests,
        #[cfg(feature = "apiserver")]
        apiserver,
        #[cfg(feature = "apiserver")]
        identity,
    };
    #[cfg(feature = "apiserver")]
    let any = s.manifests.is_some() || s.apiserver.is_some();
    #[cfg(not(feature = "apiserver"))]
    let any = s.manifests.is_some();
    if !any {
        return Err(
            "no pod source configured: set --pod-manifest-path (or staticPodPath in \
                    --config) and/or --kubeconfig"
                .into(),
        );
    }
    Ok(s)
}

/// The eviction manager's task, wired to the host's signals, the loop and the runtime.
async fn run_eviction(cfg: eviction::Config, root_dir: std::path::PathBuf, parts: Parts) {
    let cgroups = cm::detect::detect(std::path::Path::new("/")).ok();
    // The runtime's image filesystem; nodefs when the runtime does not say (or is down).
    let image_fs = stats::RuntimeFacts::image_fs(&*parts.counted)
        .await
        .map(|f| f.mountpoint);
    log::info!(
        "eviction: hard {}, soft {}, imagefs {}, memory PSI {}",
        thresholds(&cfg, true),
        thresholds(&cfg, false),
        image_fs
            .as_ref()
            .map_or("on nodefs".into(), |p| p.display().to_string()),
        cfg.memory_psi_threshold
            .map_or("off".into(), |t| format!("some avg10 >= {t}%")),
    );
    let signals = Arc::new(eviction::HostSignals {
        cgroups: cgroups.clone(),
        root: "/".into(),
        root_dir,
        image_fs,
    });
    let usage = Rc::new(eviction::Usage::new(parts.counted.clone(), cgroups));
    let kubelet = parts.kubelet;
    let (k1, k2, k3) = (kubelet.clone(), kubelet.clone(), kubelet.clone());
    let seams = eviction::Seams {
        signals,
        candidates: Box::new(move || {
            let (usage, pods) = (usage.clone(), k1.eviction_pods());
            Box::pin(async move { usage.candidates(pods).await })
        }),
        reclaimers: vec![
            Box::new(eviction::ContainerGc {
                rm: parts.rm,
                cache: parts.cache,
            }),
            Box::new(eviction::ImageGc {
                gc: parts.image_gc,
                needed: {
                    let k = kubelet.clone();
                    Box::new(move || k.needed_images())
                },
            }),
        ],
        evict: Box::new(move |e| k2.evict(&e.uid, e.grace, &e.message)),
        pressure: Box::new(move |p| k3.set_pressure(p)),
    };
    eviction::run(cfg, seams).await;
}

fn thresholds(cfg: &eviction::Config, hard: bool) -> String {
    let v: Vec<String> = cfg
        .thresholds
        .iter()
        .filter(|t| t.hard == hard)
        .map(|t| {
            let q = match t.value {
                eviction::threshold::Amount::Absolute(v) => {
                    eviction::manager::format_quantity(t.signal.resource(), v)
                }
                eviction::threshold::Amount::Percent(p) => format!("{p}%"),
            };
            format!("{}<{q}", t.signal.name())
        })
        .collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(",")
    }
}

/// The kubepods tree (`--cgroups-per-qos`), set up with the driver the runtime agrees to and
/// kubepods limited to node allocatable; or, without the tree, the cgroup parent pods get.
async fn pod_cgroups(
    o: &Options,
    cri: &dyn cri::RuntimeService,
    capacity: cm::Allocatable,
) -> Result<(Option<cm::PodCgroups>, String), String> {
    let mut cfg = o.cgroups.clone();
    if !cfg.per_qos {
        let parent = if cfg.root.trim_matches('/').is_empty() {
            String::new()
        } else {
            cm::CgroupName::parse_root(&cfg.root, cfg.driver).path(cfg.driver)
        };
        return Ok((None, parent));
    }
    // A runtime still starting must not hold picolet up: its driver is then taken on trust.
    let said = rt::timeout(
        std::time::Duration::from_secs(5),
        cm::runtime::runtime_driver(cri),
    )
    .await
    .unwrap_or(cm::runtime::RuntimeDriver::Unknown);
    let (driver, warning) = cm::runtime::decide(cfg.driver, said)?;
    if let Some(w) = warning {
        log::warn!("{w}");
    }
    cfg.driver = driver;
    let mut pc = cm::PodCgroups::new(&cfg, std::path::Path::new("/"))
        .map_err(|e| format!("--cgroups-per-qos: {e}"))?;
    pc.check_oom_setting()?;
    let allocatable = cfg.enforces_pods().then(|| cfg.allocatable(capacity));
    let reserved_pids = cfg.reserved().pids;
    let pids = (reserved_pids > 0)
        .then(|| std::fs::read_to_string("/proc/sys/kernel/pid_max").ok())
        .flatten()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .map(|max| (max - reserved_pids).max(1));
    pc.setup(allocatable, pids).map_err(|e| {
        format!(
            "creating the kubepods cgroup tree {}: {e} (run as root, or pass \
             --cgroups-per-qos=false --enforce-node-allocatable=none)",
            pc.kubepods_path()
        )
    })?;
    log::info!(
        "pods under {} ({} driver, {:?}){}{}",
        pc.kubepods_path(),
        driver,
        pc.hierarchy.mode,
        allocatable.map_or(String::new(), |a| format!(
            ", limited to {}m CPU and {} bytes of memory",
            a.milli_cpu, a.memory
        )),
        if pc.oom_group() {
            ", memory.oom.group for containers"
        } else {
            ""
        }
    );
    Ok((Some(pc), String::new()))
}

/// The parts of a running agent that the subsystems started beside the loop share.
#[derive(Clone)]
struct Parts {
    kubelet: Rc<sync_loop::Kubelet>,
    rm: Rc<kuberuntime::RuntimeManager>,
    cache: Rc<RefCell<pleg::Cache>>,
    /// The runtime and image services, counted for `/metrics`.
    counted: Rc<Counted>,
    #[cfg_attr(
        not(feature = "local-api"),
        allow(dead_code, reason = "read by the server")
    )]
    ops: Rc<kuberuntime::instrumented::Ops>,
    image_gc: Rc<kuberuntime::image_gc_manager::ImageGcManager>,
}

type Counted = kuberuntime::instrumented::Instrumented<cri::Cri, cri::Cri>;

/// The image credential provider plugins of `--image-credential-provider-config`, checked
/// (each in `--image-credential-provider-bin-dir`).
fn credential_providers(
    o: &Options,
) -> Result<Option<std::sync::Arc<credential_provider::Providers>>, String> {
    match (
        &o.image_credential_provider_config,
        &o.image_credential_provider_bin_dir,
    ) {
        (None, _) => Ok(None),
        (Some(_), None) => Err(
            "--image-credential-provider-config needs --image-credential-provider-bin-dir".into(),
        ),
        (Some(cfg), Some(bin)) => {
            let p = credential_provider::load(cfg, bin)?;
            let names: Vec<&str> = p.providers.iter().map(|p| p.name.as_str()).collect();
            log::info!("image credential providers: {}", names.join(", "));
            Ok(Some(std::sync::Arc::new(p)))
        }
    }
}

/// The runtime side: the CRI client wrapped to count every call (as the kubelet's instrumented
/// services), the pod cgroups, the runtime manager; and the runtime's `name://version`.
async fn start_runtime(
    o: &Options,
    cri: cri::Cri,
    node: kuberuntime::NodeContext,
    objects: objects::Store,
    services: Option<services::Shared>,
    status: &status::manager::StatusManager,
) -> Result<Runtime, String> {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let capacity = cm::Allocatable {
        milli_cpu: i64::try_from(cpus).unwrap_or(1).saturating_mul(1000),
        memory: node.memory_bytes,
        ephemeral_storage: 0,
    };
    let cri = Rc::new(cri);
    let ops = Rc::new(kuberuntime::instrumented::Ops::default());
    let counted = Rc::new(kuberuntime::instrumented::Instrumented::new(
        cri.clone(),
        cri,
        ops.clone(),
    ));
    let (cgroups, cgroup_parent) = pod_cgroups(o, &*counted, capacity).await?;
    let providers = credential_providers(o)?;
    let rm = Rc::new(
        kuberuntime::RuntimeManager::new(counted.clone(), counted.clone(), node)
            .with_objects(objects)
            .with_services(services)
            .with_credential_providers(providers)
            .with_cgroups(cgroups, cgroup_parent)
            .with_allocatable(o.cgroups.allocatable(capacity)),
    );
    let runtime_version = match rm.version().await {
        Ok(v) => {
            log::info!("runtime {} {} (CRI {})", v.name, v.version, v.api_version);
            status.set_runtime_name(&v.name);
            format!("{}://{}", v.name, v.version)
        }
        Err(e) => {
            log::warn!("runtime not reachable yet (picolet keeps retrying): {e}");
            String::new()
        }
    };
    Ok(Runtime {
        rm,
        counted,
        ops,
        version: runtime_version,
    })
}

/// What `start_runtime` starts.
struct Runtime {
    rm: Rc<kuberuntime::RuntimeManager>,
    counted: Rc<Counted>,
    ops: Rc<kuberuntime::instrumented::Ops>,
    /// `name://version`, empty while the runtime does not answer.
    version: String,
}

/// The manifest directory's source.
#[cfg(feature = "file-source")]
fn start_file_source(
    o: &Options,
    dir: Option<std::path::PathBuf>,
    node_name: &str,
    tx: async_channel::Sender<config::Snapshot>,
    report: config::file::Report,
) -> Option<rt::Task<()>> {
    dir.map(|dir| {
        rt::spawn(config::file::run(
            config::file::FileSourceConfig {
                dir,
                node_name: node_name.to_owned(),
                check_frequency: o.file_check_frequency,
                store: Some(o.root_dir.join("static-pods")),
            },
            tx,
            report,
        ))
    })
}

/// The node as admission weighs pods against it: its name, the well-known labels and
/// `--node-labels`, `--register-with-taints`, and allocatable cpu, memory, ephemeral storage
/// (capacity less `kubeReserved`, `systemReserved` and the hard eviction thresholds, as the
/// Node's allocatable) and pods.
fn admission_node(o: &Options, name: &str, memory_bytes: i64) -> admission::NodeInfo {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let reserved = o.cgroups.reserved();
    #[allow(
        clippy::useless_conversion,
        reason = "statvfs counts are u32 on 32-bit targets (armv7)"
    )]
    let disk = nix::sys::statvfs::statvfs(&o.root_dir)
        .ok()
        .map(|s| u64::from(s.blocks()).saturating_mul(u64::from(s.fragment_size())))
        .and_then(|b| i64::try_from(b).ok());
    let (evict_memory, evict_disk) = o
        .eviction
        .hard_reserved(memory_bytes, disk.unwrap_or(i64::MAX));
    admission::NodeInfo {
        name: name.to_owned(),
        labels: admission::NodeInfo::node_labels(name, &o.node_labels),
        taints: o.register_with_taints.clone(),
        milli_cpu: i64::try_from(cpus)
            .unwrap_or(i64::MAX)
            .saturating_mul(1000)
            .saturating_sub(reserved.milli_cpu)
            .max(0),
        memory: memory_bytes
            .saturating_sub(reserved.memory)
            .saturating_sub(evict_memory)
            .max(0),
        // Unknown (statvfs failed): not checked.
        ephemeral_storage: disk.map_or(i64::MAX, |d| {
            d.saturating_sub(reserved.ephemeral_storage)
                .saturating_sub(evict_disk)
                .max(0)
        }),
        pods: i64::from(o.max_pods),
        // The list was checked when the options were read.
        sysctls: admission::sysctl_allowlist(
            &std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default(),
            &o.allowed_unsafe_sysctls,
        )
        .unwrap_or_default(),
    }
}

/// Cluster membership: the API pods' source (a thread of its own), and the tasks that keep the
/// Node, its Lease, the pods' statuses, the objects they use and the mirror pods.
#[cfg(feature = "apiserver")]
fn start_cluster(
    o: &Options,
    client: apiclient::Client,
    parts: &Parts,
    runtime_version: &str,
    objects: objects::Store,
    services: Option<services::Shared>,
    tx: async_channel::Sender<config::Snapshot>,
) -> Result<Vec<rt::Task<()>>, String> {
    let node = parts.rm.node();
    let node_name = node.node_name.clone();
    let cfg = config::api::ApiSourceConfig {
        node_name: node_name.clone(),
        poll_interval: o.apiserver_poll_interval,
        checkpoint: Some(o.root_dir.join("checkpoints").join("pods.json")),
    };
    let mirrors = config::api::Mirrors::default();
    let (c, m) = (client.clone(), mirrors.clone());
    std::thread::Builder::new()
        .name("api-source".into())
        .spawn(move || config::api::run_blocking(c, cfg, tx, m))
        .map_err(|e| format!("starting the api source thread: {e}"))?;
    if let Some(shared) = services {
        let (c, name, poll) = (client.clone(), node_name.clone(), o.apiserver_poll_interval);
        let checkpoint = Some(o.root_dir.join("checkpoints").join("services.json"));
        std::thread::Builder::new()
            .name("api-services".into())
            .spawn(move || cluster::services::run_blocking(c, shared, &name, poll, checkpoint))
            .map_err(|e| format!("starting the api services thread: {e}"))?;
    }
    let mut facts = cluster::node::gather(
        &node_name,
        &node.node_ip,
        node.memory_bytes,
        &o.root_dir,
        runtime_version,
        &o.node_labels,
        &o.register_with_taints,
    );
    // As upstream, the Node's allocatable also leaves out the hard eviction thresholds.
    facts.reserved = o.cgroups.reserved();
    let disk = i64::try_from(facts.ephemeral_storage_bytes).unwrap_or(i64::MAX);
    let (memory, nodefs) = o.eviction.hard_reserved(facts.memory_bytes, disk);
    facts.reserved.memory = facts.reserved.memory.saturating_add(memory);
    facts.reserved.ephemeral_storage = facts.reserved.ephemeral_storage.saturating_add(nodefs);
    facts.max_pods = o.max_pods;
    facts.kubelet_port = if cfg!(feature = "node-api") {
        o.node_api_port().unwrap_or(0)
    } else {
        0
    };
    let kubelet = &parts.kubelet;
    let recorder = Rc::new(events::Recorder::new(&node_name));
    events::install(recorder.clone());
    Ok(vec![
        rt::spawn(events::run(recorder, client.clone())),
        rt::spawn(cluster::run_node(client.clone(), facts, kubelet.clone())),
        rt::spawn(cluster::run_lease(client.clone(), node_name.clone())),
        rt::spawn(cluster::run_pod_status(client.clone(), kubelet.clone())),
        rt::spawn(cluster::objects::run_objects(
            client.clone(),
            kubelet.clone(),
            objects,
            Some(o.root_dir.join("checkpoints").join("objects.json")),
        )),
        rt::spawn(cluster::run_mirrors(
            client,
            kubelet.clone(),
            mirrors,
            node_name,
        )),
    ])
}

/// The client certificate's manager (bootstrap, rotation, expiry), when the identity is a
/// certificate or a bootstrap kubeconfig is set; and, on the first bootstrap, the channel told
/// when the node has an identity.
#[cfg(feature = "apiserver")]
fn start_certificates(
    o: &Options,
    src: &Sources,
    node_name: &str,
) -> (Vec<rt::Task<()>>, Option<async_channel::Receiver<()>>) {
    let (Some(client), Some((start, id)), Some(kubeconfig)) =
        (&src.apiserver, &src.identity, &o.kubeconfig)
    else {
        return (Vec::new(), None);
    };
    if id.is_none() && o.bootstrap_kubeconfig.is_none() {
        return (Vec::new(), None);
    }
    let (tx, rx) = async_channel::bounded(1);
    log::info!(
        "client certificate: {}; rotation {}",
        match start {
            certificate::Start::Ready => "valid",
            certificate::Start::Bootstrap => "none yet, bootstrapping",
            certificate::Start::Expired => "expired",
        },
        if o.rotation() { "on" } else { "off" }
    );
    let m = certificate::ClientManager {
        client: client.clone(),
        kubeconfig: kubeconfig.clone(),
        bootstrap: o.bootstrap_kubeconfig.clone(),
        store: certificate::Store::new(&o.root_dir.join("pki"), certificate::CLIENT_PREFIX),
        node: node_name.to_owned(),
        rotation: o.rotation(),
        ready: Some(tx),
    };
    let task = rt::spawn(m.run(id.clone()));
    let wait = matches!(start, certificate::Start::Bootstrap).then_some(rx);
    (vec![task], wait)
}

/// The local API on `--healthz-port` (none when it is 0) and the node API on `--port`.
#[cfg(feature = "local-api")]
fn start_server(
    o: &Options,
    parts: &Parts,
    #[cfg(feature = "file-source")] report: config::file::Report,
    #[cfg(feature = "apiserver")] client: Option<&apiclient::Client>,
) -> Result<Vec<rt::Task<()>>, String> {
    let root = std::path::Path::new("/");
    let ctx = Rc::new(server::Context {
        host: parts.kubelet.clone(),
        stats: Rc::new(server::StatsContext {
            provider: stats::Provider::new(root, &o.root_dir, parts.counted.clone()),
            ops: parts.ops.clone(),
            machine: stats::expose::Machine::read(root),
        }),
        #[cfg(feature = "file-source")]
        report,
    });
    let mut tasks = Vec::new();
    if o.healthz_port != 0 {
        let addr = std::net::SocketAddr::new(o.healthz_bind_address, o.healthz_port);
        let l = server::bind(addr).map_err(|e| e.to_string())?;
        log::info!("local API on http://{addr}");
        tasks.push(rt::spawn(server::serve(l, ctx.clone())));
    }
    #[cfg(feature = "node-api")]
    if let Some(port) = o.node_api_port() {
        tasks.extend(start_node_api(o, port, parts, ctx, client)?);
        #[cfg(feature = "konnectivity")]
        if !o.tunnel.host.is_empty() {
            tasks.push(start_tunnel(o, port, parts)?);
        }
    }
    #[cfg(not(feature = "konnectivity"))]
    if !o.tunnel.host.is_empty() {
        return Err(
            "--proxy-server-host: this picolet was built without the konnectivity \
                    feature"
                .into(),
        );
    }
    #[cfg(all(feature = "apiserver", not(feature = "node-api")))]
    let _ = client;
    Ok(tasks)
}

/// The node API: its serving certificate (given, or self-signed under `<root-dir>/pki`), TLS,
/// authentication and authorization, and the listener.
#[cfg(feature = "node-api")]
fn start_node_api(
    o: &Options,
    port: u16,
    parts: &Parts,
    ctx: Rc<server::Context>,
    client: Option<&apiclient::Client>,
) -> Result<Vec<rt::Task<()>>, String> {
    let s = &o.serving;
    let node = parts.rm.node();
    let mut tasks = Vec::new();
    let (cert, key) = match (&s.tls_cert_file, &s.tls_private_key_file) {
        (Some(c), Some(k)) => (c.clone(), k.clone()),
        _ => {
            let mut ips = vec![std::net::IpAddr::from([127, 0, 0, 1])];
            if let Ok(ip) = node.node_ip.parse() {
                ips.insert(0, ip);
            }
            let names = [node.node_name.clone(), "localhost".to_owned()];
            let now = rt::now_nanos().div_euclid(1_000_000_000);
            pki::ensure_self_signed(&o.root_dir.join("pki"), &node.node_name, &names, &ips, now)
                .map_err(|e| format!("the node API's self-signed certificate: {e}"))?
        }
    };
    let serving = server::node_api::serving_from_files(&cert, &key)
        .map_err(|e| format!("the node API's certificate: {e}"))?;
    let mut cert_name = cert.display().to_string();
    if s.server_tls_bootstrap {
        let Some(c) = client else {
            return Err(
                "serverTLSBootstrap needs --kubeconfig (the certificate is asked of \
                        the cluster)"
                    .into(),
            );
        };
        let store = certificate::Store::new(&o.root_dir.join("pki"), certificate::SERVER_PREFIX);
        let now = rt::now_nanos().div_euclid(1_000_000_000);
        let current = store
            .current()
            .unwrap_or_else(|e| {
                log::warn!("certificate: {e}; asking for a new serving certificate");
                None
            })
            .filter(|i| i.valid_at(now));
        if let Some(i) = &current {
            let what = store.current_path().display().to_string();
            serving.set(server::node_api::Serving::key_of(
                &i.cert_pem,
                &i.key_pem,
                &what,
            )?);
            cert_name = what;
        } else {
            cert_name = format!("{cert_name} until the cluster issues one");
        }
        let ips: Vec<std::net::IpAddr> = node.node_ip.parse().into_iter().collect();
        let ask = certificate::Ask::serving(&node.node_name, vec![node.node_name.clone()], ips);
        let (target, path) = (serving.clone(), store.current_path());
        tasks.push(rt::spawn(certificate::run_serving(
            c.clone(),
            store,
            ask,
            current,
            move |i| {
                let what = path.display().to_string();
                target.set(server::node_api::Serving::key_of(
                    &i.cert_pem,
                    &i.key_pem,
                    &what,
                )?);
                Ok(())
            },
        )));
    }
    let tls = server::node_api::tls_config(serving, s.client_ca_file.as_deref(), s.tls13_only)
        .map_err(|e| format!("the node API's TLS: {e}"))?;
    let webhook = s.webhook_authn.unwrap_or(client.is_some());
    let authz = match s.authorization {
        Some(m) => m,
        None if client.is_some() => options::AuthorizationMode::Webhook,
        None => options::AuthorizationMode::AlwaysAllow,
    };
    let need =
        |what: &str| format!("{what} needs --kubeconfig (the apiserver answers the reviews)");
    if webhook && client.is_none() {
        return Err(need("--authentication-token-webhook"));
    }
    if authz == options::AuthorizationMode::Webhook && client.is_none() {
        return Err(need("--authorization-mode=Webhook"));
    }
    let auth = server::auth::Auth::new(
        s.anonymous,
        webhook.then(|| client.cloned()).flatten(),
        s.webhook_cache_ttl,
        (authz == options::AuthorizationMode::Webhook)
            .then(|| client.cloned())
            .flatten(),
        s.authorized_ttl,
        s.unauthorized_ttl,
        node.node_name.clone(),
    );
    let addr = std::net::SocketAddr::new(s.address, port);
    let l = server::node_api::bind(addr)?;
    log::info!(
        "node API on https://{addr} (certificate {}, client CA {}, token webhook {}, authorization {:?}, anonymous {})",
        cert_name,
        s.client_ca_file
            .as_ref()
            .map_or("none".into(), |p| p.display().to_string()),
        if webhook { "on" } else { "off" },
        authz,
        if s.anonymous { "on" } else { "off" },
    );
    let api = Rc::new(server::node_api::NodeApi {
        ctx,
        auth,
        configz: server::node_api::configz(o, port),
    });
    tasks.push(rt::spawn(server::node_api::serve(l, tls, api)));
    Ok(tasks)
}

/// The Konnectivity agent: the node's own addresses at the node API's port are dialed on
/// this host.
#[cfg(feature = "konnectivity")]
fn start_tunnel(o: &Options, port: u16, parts: &Parts) -> Result<rt::Task<()>, String> {
    let t = &o.tunnel;
    let tls = konnectivity::tls_config(t)?;
    let node = parts.rm.node();
    let node_ip: Option<std::net::IpAddr> = node.node_ip.parse().ok();
    let local_ip = match o.serving.address {
        a if a.is_unspecified() && a.is_ipv6() => {
            std::net::IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1])
        }
        a if a.is_unspecified() => std::net::IpAddr::from([127, 0, 0, 1]),
        a => a,
    };
    let mut addresses = vec![node.node_name.clone()];
    addresses.extend(node_ip.map(|ip| ip.to_string()));
    let agent = Rc::new(konnectivity::Agent {
        routes: konnectivity::Routes {
            node_addresses: addresses,
            node_api_port: port,
            local: std::net::SocketAddr::new(local_ip, port),
            allowed: t.allowed.clone(),
        },
        tls,
        agent_id: t.agent_id.clone().unwrap_or_else(|| node.node_name.clone()),
        agent_identifiers: t
            .agent_identifiers
            .clone()
            .unwrap_or_else(|| konnectivity::default_identifiers(&node.node_name, node_ip)),
        settings: t.clone(),
        stats: Rc::default(),
    });
    log::info!(
        "konnectivity agent: dialing {}:{} as {:?} ({})",
        t.host,
        t.port,
        agent.agent_id,
        agent.agent_identifiers
    );
    Ok(rt::spawn(agent.run()))
}

/// Upkeep beside the loop: image GC, log rotation, eviction, the malloc trim, and the systemd
/// notifications.
fn start_upkeep(
    o: &Options,
    parts: &Parts,
    notifier: Option<Rc<notify::Notifier>>,
) -> Vec<rt::Task<()>> {
    let k = parts.kubelet.clone();
    let mut tasks = vec![
        rt::spawn(parts.image_gc.clone().run(move || k.needed_images())),
        rt::spawn(logs::run_rotation(
            parts.rm.clone(),
            parts.cache.clone(),
            o.container_log,
        )),
        rt::spawn(run_eviction(
            o.eviction.clone(),
            o.root_dir.clone(),
            parts.clone(),
        )),
        rt::spawn(malloc::run_trim()),
    ];
    if let Some(n) = notifier {
        tasks.push(rt::spawn(notify::run(n, parts.kubelet.clone())));
    }
    tasks
}

/// Runs the agent until SIGTERM or SIGINT; pods keep running after it exits.
pub fn run(o: Options, stop: async_channel::Receiver<i32>) -> Result<(), String> {
    for w in &o.config_warnings {
        log::warn!("{w}");
    }
    let src = sources(&o)?;
    let node = node::detect(&o)?;
    log::info!(
        "picolet {} starting: node {:?}, address {}, manifests {}, apiserver {}, runtime {}",
        env!("CARGO_PKG_VERSION"),
        node.node_name,
        node.node_ip,
        src.manifests
            .as_ref()
            .map_or("none".into(), |m| m.display().to_string()),
        o.kubeconfig
            .as_ref()
            .map_or("none".into(), |k| k.display().to_string()),
        o.container_runtime_endpoint
    );
    let now = rt::now_nanos().div_euclid(1_000_000_000);
    if let Some(line) = check::summary(&check::host(&o, std::path::Path::new("/"), now)) {
        log::warn!("{line}");
    }
    atomic_file::create_dir_all(&o.root_dir)
        .map_err(|e| format!("creating --root-dir {}: {e}", o.root_dir.display()))?;
    let deadlines = cri::Deadlines {
        request: o.runtime_request_timeout,
        ..cri::Deadlines::default()
    };
    let cri = cri::Cri::new(
        &o.container_runtime_endpoint,
        o.image_service_endpoint.as_deref(),
        deadlines,
    )
    .map_err(|e| e.to_string())?;
    let host_ip = node.node_ip.clone();
    // What the API pods' volumes and environments had, before any pod starts: a node that
    // comes up without its apiserver runs them at once with it.
    let objects = objects::Store::default();
    #[cfg(feature = "apiserver")]
    if src.apiserver.is_some() {
        let checkpoint = o.root_dir.join("checkpoints").join("objects.json");
        match cluster::objects::load_checkpoint(&checkpoint, &objects) {
            Ok(0) => {}
            Ok(n) => log::info!("{n} ConfigMaps, Secrets and tokens from the checkpoint"),
            Err(e) => log::warn!("ignoring the objects checkpoint: {e}"),
        }
    }
    // The Services for the containers' service variables, with what the node last saw.
    #[cfg(feature = "apiserver")]
    let services = src.apiserver.is_some().then(|| {
        let shared = services::Shared::default();
        let checkpoint = o.root_dir.join("checkpoints").join("services.json");
        match cluster::services::load_checkpoint(&checkpoint, &shared) {
            Ok(None) => {}
            Ok(Some(n)) => log::info!("{n} Services from the checkpoint"),
            Err(e) => log::warn!("ignoring the services checkpoint: {e}"),
        }
        shared
    });
    #[cfg(not(feature = "apiserver"))]
    let services: Option<services::Shared> = None;
    // A broken NOTIFY_SOCKET is logged, not fatal: picolet runs the same under any supervisor.
    let notifier = notify::Notifier::from_env()
        .inspect_err(|e| log::warn!("{e}; not notifying systemd"))
        .ok()
        .flatten()
        .map(Rc::new);
    if let Some(p) = notifier.as_ref().and_then(|n| n.watchdog) {
        log::info!("systemd watchdog: pinging every {p:?} while healthy");
    }

    let admission_node = admission_node(&o, &node.node_name, node.memory_bytes);
    rt::block_on(async move {
        let status = Rc::new(status::manager::StatusManager::new(&host_ip));
        let runtime =
            start_runtime(&o, cri, node, objects.clone(), services.clone(), &status).await?;
        let rm = runtime.rm;
        let cache = Rc::new(RefCell::new(pleg::Cache::default()));
        let (snap_tx, snap_rx) = async_channel::unbounded();
        let (ev_tx, ev_rx) = async_channel::unbounded();
        let (done_tx, done_rx) = async_channel::unbounded();
        let pleg = Rc::new(pleg::Pleg::new(rm.clone(), cache.clone(), ev_tx));
        let workers = pod_workers::PodWorkers::new(Rc::new(pod_workers::Shared {
            rm: rm.clone(),
            cache: cache.clone(),
            status: status.clone(),
            done: done_tx,
        }));
        let mut expected = Vec::new();
        if src.manifests.is_some() {
            expected.push(Source::File);
        }
        #[cfg(feature = "apiserver")]
        if src.apiserver.is_some() {
            expected.push(Source::Api);
        }
        status.set_probe_results(rm.probe_results());
        let prober = prober::ProbeManager::new(rm.clone(), cache.clone(), &host_ip);
        let kubelet = Rc::new(sync_loop::Kubelet::new(
            rm.clone(),
            cache.clone(),
            status,
            pleg.clone(),
            workers,
            prober,
            Mux::new(&expected),
            sync_loop::LoopConfig {
                sync_frequency: o.sync_frequency,
                node: Some(admission_node),
            },
        ));
        let parts = Parts {
            kubelet: kubelet.clone(),
            image_gc: Rc::new(kuberuntime::image_gc_manager::ImageGcManager::new(
                rm.clone(),
                o.image_gc_policy(),
                o.pod_infra_container_image.clone(),
            )),
            rm,
            cache,
            counted: runtime.counted,
            ops: runtime.ops,
        };
        #[cfg(feature = "file-source")]
        let report: config::file::Report = Rc::default();
        #[cfg(feature = "file-source")]
        let _file = start_file_source(
            &o,
            src.manifests.clone(),
            &parts.rm.node().node_name,
            snap_tx.clone(),
            report.clone(),
        );
        #[cfg(feature = "apiserver")]
        let (_certs, ready) = start_certificates(&o, &src, &parts.rm.node().node_name);
        #[cfg(feature = "apiserver")]
        let _cluster = match (src.apiserver.clone(), ready) {
            (Some(client), None) => start_cluster(
                &o,
                client,
                &parts,
                &runtime.version,
                objects,
                services,
                snap_tx.clone(),
            )?,
            // The first bootstrap: the cluster's tasks start once the node has an identity.
            (Some(client), Some(ready)) => {
                let (o, parts, version, tx) = (
                    o.clone(),
                    parts.clone(),
                    runtime.version.clone(),
                    snap_tx.clone(),
                );
                vec![rt::spawn(async move {
                    let _ = ready.recv().await;
                    match start_cluster(&o, client, &parts, &version, objects, services, tx) {
                        Ok(tasks) => {
                            futures_lite::future::pending::<()>().await;
                            drop(tasks);
                        }
                        Err(e) => log::error!("joining the cluster: {e}"),
                    }
                })]
            }
            (None, _) => Vec::new(),
        };
        #[cfg(not(feature = "apiserver"))]
        let _ = (&runtime.version, objects, services);
        drop(snap_tx);
        let _pleg = rt::spawn(pleg.run(pleg::RELIST_PERIOD));
        #[cfg(feature = "local-api")]
        let _server = start_server(
            &o,
            &parts,
            #[cfg(feature = "file-source")]
            report,
            #[cfg(feature = "apiserver")]
            src.apiserver.as_ref(),
        )?;
        let _upkeep = start_upkeep(&o, &parts, notifier.clone());
        let _shutdown = nodeshutdown::start(&o, &parts.kubelet);
        let main = kubelet.run(snap_rx, ev_rx, done_rx);
        futures_lite::future::or(
            async {
                main.await;
                Err("sync loop ended".to_owned())
            },
            async {
                let sig = stop.recv().await.unwrap_or(0);
                log::info!("received signal {sig}, exiting; pods keep running");
                if let Some(n) = &notifier {
                    let _ = n.send("STOPPING=1\nSTATUS=stopping; pods keep running\n");
                }
                Ok(())
            },
        )
        .await
    })
}
