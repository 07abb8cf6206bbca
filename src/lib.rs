//! picolet: a small Kubernetes node agent for edge devices.
//!
//! `ARCHITECTURE.md` at the repository root maps the modules; `run` wires them.

pub mod api;
pub mod config;
pub mod cri;
pub mod hash;
pub mod kubecontainer;
pub mod kuberuntime;
pub mod limits;
pub mod logger;
pub mod node;
pub mod options;
pub mod pleg;
pub mod pod_workers;
pub mod qos;
pub mod rt;
pub mod server;
pub mod status;
pub mod sync_loop;
pub mod volume;

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;

use config::{Mux, Source};
use options::Options;

/// Checks manifests as the file source would; returns one line per error.
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
        match cri.version(cri::v1::VersionRequest::default()).await {
            Ok(v) => {
                log::info!(
                    "runtime {} {} (CRI {})",
                    v.runtime_name,
                    v.runtime_version,
                    v.runtime_api_version
                );
                status.set_runtime_name(&v.runtime_name);
            }
            Err(e) => log::warn!("runtime not reachable yet (picolet keeps retrying): {e}"),
        }
        let rm = Rc::new(kuberuntime::RuntimeManager::new(cri, node));
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
        let kubelet = Rc::new(sync_loop::Kubelet::new(
            rm,
            cache,
            status,
            pleg.clone(),
            workers,
            Mux::new(&[Source::File]),
            sync_loop::LoopConfig {
                sync_frequency: o.sync_frequency,
            },
        ));
        let report: config::file::Report = Rc::default();
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
        let _pleg = rt::spawn(pleg.run(pleg::RELIST_PERIOD));
        let _server = if o.healthz_port != 0 {
            let addr = SocketAddr::new(o.healthz_bind_address, o.healthz_port);
            let l = server::bind(addr).map_err(|e| e.to_string())?;
            log::info!("local API on http://{addr}");
            Some(rt::spawn(server::serve(l, kubelet.clone(), report)))
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
