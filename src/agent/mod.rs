//! The wiring: `run` opens the pod sources, starts the runtime side and the sync loop, then
//! each subsystem beside it (one file each), and waits for SIGTERM or SIGINT. A subsystem a
//! build leaves out has its feature on its `mod` line; `without/` holds what such a build
//! does instead (refuse the flags that ask for it, or nothing).

#[cfg(feature = "apiserver")]
mod cluster;
#[cfg(not(feature = "apiserver"))]
#[path = "without/cluster.rs"]
mod cluster;
#[cfg(feature = "file-source")]
mod file_source;
#[cfg(not(feature = "file-source"))]
#[path = "without/file_source.rs"]
mod file_source;
mod kubelet;
mod runtime;
#[cfg(feature = "local-api")]
mod server;
#[cfg(not(feature = "local-api"))]
#[path = "without/server.rs"]
mod server;
#[cfg(feature = "graceful-shutdown")]
mod shutdown;
#[cfg(not(feature = "graceful-shutdown"))]
#[path = "without/shutdown.rs"]
mod shutdown;
mod sources;
mod upkeep;

use std::cell::RefCell;
use std::rc::Rc;

use crate::cli::check;
use crate::cli::options::Options;
use crate::{cri, kuberuntime, notify, pleg, rt, sync_loop};

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
    /// The pods' ephemeral storage: measured by the eviction rounds, read by the Summary API.
    #[cfg_attr(
        not(feature = "local-api"),
        allow(dead_code, reason = "read by the server")
    )]
    storage: Rc<crate::stats::ephemeral::Storage>,
    /// The runtime's `name://version`, empty while it did not answer.
    #[cfg_attr(
        not(feature = "apiserver"),
        allow(dead_code, reason = "reported in the Node's status")
    )]
    runtime_version: String,
    /// The node as admission weighs pods against it: the pod source checks the pods the
    /// scheduler placed here against it, and the status reports keep its labels current.
    #[cfg_attr(
        not(feature = "apiserver"),
        allow(dead_code, reason = "read by the cluster tasks")
    )]
    admission_node: crate::admission::NodeInfo,
}

/// What the node last had from the cluster, read back before any pod starts.
struct Restored {
    /// The ConfigMaps, Secrets and tokens the API pods' volumes and environments use.
    objects: crate::objects::Store,
    /// The Services for the containers' service variables; none standalone.
    services: Option<crate::services::Shared>,
}

type Counted = kuberuntime::instrumented::Instrumented<cri::Cri, cri::Cri>;

/// Runs the agent until SIGTERM or SIGINT; pods keep running after it exits.
pub fn run(o: Options, stop: async_channel::Receiver<i32>) -> Result<(), String> {
    for w in &o.config_warnings {
        log::warn!("{w}");
    }
    let src = sources::open(&o)?;
    // Before the facts: they include the size of its filesystem.
    crate::atomic_file::create_dir_all(&o.root_dir)
        .map_err(|e| format!("creating --root-dir {}: {e}", o.root_dir.display()))?;
    let node = crate::node::Facts::gather(o.hostname_override.as_deref(), o.node_ip, &o.root_dir)?;
    log::info!(
        "picolet {} starting: node {:?}, address {}, manifests {}, apiserver {}, runtime {}",
        env!("CARGO_PKG_VERSION"),
        node.name,
        node.ip,
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
    let cri = runtime::connect(&o)?;
    // What the API pods' volumes and environments had, and the Services, before any pod
    // starts: a node that comes up without its apiserver runs them at once with it.
    let restored = cluster::restore(&o, src.cluster.as_ref());
    let notifier = notifier();
    rt::block_on(async move {
        // Preloaded images before the first pod sync, so static pods start from them.
        let preloader = runtime::preload_images(&o, &cri, &node.name).await;
        let kubelet::Started {
            parts,
            pleg,
            snapshots,
            inputs,
        } = kubelet::start(&o, cri, &node, &src, &restored).await?;
        let file = file_source::start(&o, &src, &parts, snapshots.clone());
        let _cluster =
            cluster::start(&o, src.cluster.as_ref(), &parts, &node, restored, snapshots)?;
        let _pleg = rt::spawn(pleg.run(pleg::RELIST_PERIOD));
        let _preload = preloader.map(|p| rt::spawn(p.watch()));
        let _server = server::start(&o, &parts, file.report, src.cluster.as_ref())?;
        let _upkeep = upkeep::start(&o, &parts, notifier.clone());
        let _shutdown = shutdown::start(&o, &parts);
        let main = parts.kubelet.clone().run(inputs.0, inputs.1, inputs.2);
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

/// The systemd notifier of `NOTIFY_SOCKET`. A broken one is logged, not fatal: picolet runs
/// the same under any supervisor.
fn notifier() -> Option<Rc<notify::Notifier>> {
    let notifier = notify::Notifier::from_env()
        .inspect_err(|e| log::warn!("{e}; not notifying systemd"))
        .ok()
        .flatten()
        .map(Rc::new);
    if let Some(p) = notifier.as_ref().and_then(|n| n.watchdog) {
        log::info!("systemd watchdog: pinging every {p:?} while healthy");
    }
    notifier
}
