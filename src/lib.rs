//! picolet: a small Kubernetes node agent for edge devices.
//!
//! `ARCHITECTURE.md` at the repository root maps the modules; `run` wires them.

pub mod api;
pub mod config;
pub mod cri;
pub(crate) mod hash;
pub(crate) mod kubecontainer;
pub mod kuberuntime;
pub mod logger;
pub mod node;
pub mod options;
pub mod pleg;
pub(crate) mod pod_manager;
pub(crate) mod pod_workers;
pub(crate) mod prober;
pub(crate) mod qos;
pub mod rt;
#[cfg(feature = "local-api")]
pub(crate) mod server;
pub(crate) mod status;
pub(crate) mod sync_loop;
pub(crate) mod volume;

use std::cell::RefCell;
use std::rc::Rc;

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

/// Runs the agent until SIGTERM or SIGINT; pods keep running after it exits.
pub fn run(o: Options, stop: async_channel::Receiver<i32>) -> Result<(), String> {
    for w in &o.config_warnings {
        log::warn!("{w}");
    }
    if !cfg!(feature = "file-source") {
        return Err(
            "this picolet was built without a pod source (cargo feature file-source)".into(),
        );
    }
    let Some(manifest_dir) = o.pod_manifest_path.clone() else {
        return Err(
            "no pod source configured: set --pod-manifest-path or staticPodPath in --config".into(),
        );
    };
    let node = node::detect(&o)?;
    log::info!(
        "picolet {} starting: node {:?}, address {}, manifests {}, runtime {}",
        env!("CARGO_PKG_VERSION"),
        node.node_name,
        node.node_ip,
        manifest_dir.display(),
        o.container_runtime_endpoint
    );
    std::fs::create_dir_all(&o.root_dir)
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

    rt::block_on(async move {
        let status = Rc::new(status::manager::StatusManager::new(&host_ip));
        let cri = Rc::new(cri);
        let rm = Rc::new(kuberuntime::RuntimeManager::new(cri.clone(), cri, node));
        match rm.version().await {
            Ok(v) => {
                log::info!("runtime {} {} (CRI {})", v.name, v.version, v.api_version);
                status.set_runtime_name(&v.name);
            }
            Err(e) => log::warn!("runtime not reachable yet (picolet keeps retrying): {e}"),
        }
        let cache = Rc::new(RefCell::new(pleg::Cache::default()));
        let (snap_tx, snap_rx) = async_channel::unbounded();
        let (ev_tx, ev_rx) = async_channel::unbounded();
        let (done_tx, done_rx) = async_channel::unbounded();
        let pleg = Rc::new(pleg::Pleg::new(rm.clone(), cache.clone(), ev_tx));
        let shared = Rc::new(pod_workers::Shared {
            rm: rm.clone(),
            cache: cache.clone(),
            status: status.clone(),
            done: done_tx,
        });
        let workers = pod_workers::PodWorkers::new(shared);
        status.set_probe_results(rm.probe_results());
        let prober = prober::ProbeManager::new(rm.clone(), cache.clone(), &host_ip);
        let kubelet = Rc::new(sync_loop::Kubelet::new(
            rm,
            cache,
            status,
            pleg.clone(),
            workers,
            prober,
            Mux::new(&[Source::File]),
            sync_loop::LoopConfig {
                sync_frequency: o.sync_frequency,
            },
        ));
        #[cfg(feature = "file-source")]
        let report: config::file::Report = Rc::default();
        #[cfg(feature = "file-source")]
        let _file = rt::spawn(config::file::run(
            config::file::FileSourceConfig {
                dir: manifest_dir,
                node_name: kubelet.rm.node().node_name.clone(),
                check_frequency: o.file_check_frequency,
                store: Some(o.root_dir.join("static-pods")),
            },
            snap_tx,
            report.clone(),
        ));
        #[cfg(not(feature = "file-source"))]
        drop((manifest_dir, snap_tx));
        let _pleg = rt::spawn(pleg.run(pleg::RELIST_PERIOD));
        #[cfg(feature = "local-api")]
        let _server = if o.healthz_port != 0 {
            let addr = std::net::SocketAddr::new(o.healthz_bind_address, o.healthz_port);
            let l = server::bind(addr).map_err(|e| e.to_string())?;
            log::info!("local API on http://{addr}");
            Some(rt::spawn(server::serve(
                l,
                kubelet.clone(),
                #[cfg(feature = "file-source")]
                report,
            )))
        } else {
            None
        };
        let main = kubelet.run(snap_rx, ev_rx, done_rx);
        futures_lite::future::or(
            async {
                main.await;
                Err("sync loop ended".to_owned())
            },
            async {
                let sig = stop.recv().await.unwrap_or(0);
                log::info!("received signal {sig}, exiting; pods keep running");
                Ok(())
            },
        )
        .await
    })
}
