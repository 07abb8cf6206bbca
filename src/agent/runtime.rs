//! The runtime side: the CRI client wrapped to count every call (as the kubelet's instrumented
//! services), the pod cgroups, the image credential providers and the runtime manager.

use std::rc::Rc;

use super::{Counted, Restored};
use crate::cli::options::Options;
use crate::node::Facts;
use crate::{cm, credential_provider, cri, images, kuberuntime, rt, status};

/// The CRI client of `--container-runtime-endpoint` (and `--image-service-endpoint`); it
/// connects on first use.
pub(super) fn connect(o: &Options) -> Result<cri::Cri, String> {
    let deadlines = cri::Deadlines {
        request: o.runtime_request_timeout,
        ..cri::Deadlines::default()
    };
    cri::Cri::new(
        &o.container_runtime_endpoint,
        o.image_service_endpoint.as_deref(),
        deadlines,
    )
    .map_err(|e| e.to_string())
}

/// Imports and pins the image archives of `--image-preload-dir` (default `ROOT/images`)
/// through containerd's own API on the runtime's socket; each result is logged. Returns the
/// preloader, whose `watch` imports archives added later and pulls the images of the
/// directory's `*.txt` lists through `cri` with the node's credentials.
pub(super) async fn preload_images(
    o: &Options,
    cri: &cri::Cri,
    node: &str,
) -> Option<images::preload::Preloader> {
    let dir = o
        .image_preload_dir
        .clone()
        .unwrap_or_else(|| o.root().images());
    let endpoint = o
        .image_service_endpoint
        .as_deref()
        .unwrap_or(&o.container_runtime_endpoint);
    let socket = match cri::parse_endpoint(endpoint) {
        Ok(s) => s,
        Err(e) => {
            log::error!("image preload: {e}");
            return None;
        }
    };
    let client = images::containerd::Client::new(&socket, o.runtime_request_timeout);
    let providers = match credential_providers(o) {
        Ok(p) => p,
        Err(e) => {
            log::error!("image preload: {e}");
            None
        }
    };
    let puller = images::preload::Puller {
        images: Rc::new(cri.clone()),
        root_dir: o.root_dir.clone(),
        providers,
    };
    let mut preloader =
        images::preload::Preloader::new(dir, client, Some(o.root().preloaded_images_record()))
            .with_node(node)
            .with_puller(puller);
    preloader.pass().await;
    Some(preloader)
}

/// What `start` starts.
pub(super) struct Runtime {
    pub rm: Rc<kuberuntime::RuntimeManager>,
    pub counted: Rc<Counted>,
    pub ops: Rc<kuberuntime::instrumented::Ops>,
    /// `name://version`, empty while the runtime does not answer.
    pub version: String,
}

/// The runtime manager over the counted runtime, with the pod cgroups and the credential
/// providers; and the runtime's `name://version`.
pub(super) async fn start(
    o: &Options,
    cri: cri::Cri,
    node: &Facts,
    restored: &Restored,
    status: &status::manager::StatusManager,
) -> Result<Runtime, String> {
    let capacity = node.capacity();
    let cri = Rc::new(cri);
    let ops = Rc::new(kuberuntime::instrumented::Ops::default());
    let counted = Rc::new(kuberuntime::instrumented::Instrumented::new(
        cri.clone(),
        cri,
        ops.clone(),
    ));
    let (cgroups, cgroup_parent) = pod_cgroups(o, &*counted, capacity).await?;
    let providers = credential_providers(o)?;
    if let Some(p) = &providers {
        let names: Vec<&str> = p.providers.iter().map(|p| p.name.as_str()).collect();
        log::info!("image credential providers: {}", names.join(", "));
    }
    let rm = Rc::new(
        kuberuntime::RuntimeManager::new(counted.clone(), counted.clone(), node_context(o, node))
            .with_objects(restored.objects.clone())
            .with_services(restored.services.clone())
            .with_credential_providers(providers)
            .with_pull_verification(o.image_pull_verification.clone())
            .with_cgroups(cgroups, cgroup_parent)
            .with_allocatable(o.cgroups.allocatable(capacity))
            .with_allocation(crate::allocation::Manager::load(
                o.root().allocation_checkpoint(),
            )),
    );
    let version = match rm.version().await {
        Ok(v) => {
            log::info!("runtime {} {} (CRI {})", v.name, v.version, v.api_version);
            status.set_runtime_name(&v.name);
            let version = format!("{}://{}", v.name, v.version);
            if let Err(why) = kuberuntime::image::runtime_mounts_images(&version) {
                log::info!("{why}: pods with image volumes are refused");
            }
            version
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
        version,
    })
}

/// What the runtime manager knows of the node.
fn node_context(o: &Options, node: &Facts) -> kuberuntime::NodeContext {
    kuberuntime::NodeContext {
        node_name: node.name.clone(),
        node_ip: node.ip.clone(),
        memory_bytes: node.memory_bytes,
        dns: node.dns.clone(),
        cluster_dns: kuberuntime::config::ClusterDns {
            servers: o.cluster_dns.iter().map(ToString::to_string).collect(),
            domain: o.cluster_domain.clone(),
        },
        pod_logs_dir: o.pod_logs_dir.clone(),
        root_dir: o.root_dir.clone(),
        memory_oom_group: false,
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
            Ok(Some(std::sync::Arc::new(p)))
        }
    }
}
