//! The sync loop and what it is built from: the status manager, the runtime side, the PLEG, the
//! pod workers and the prober.

use std::cell::RefCell;
use std::rc::Rc;

use super::{Parts, Restored, runtime, sources::Sources};
use crate::cli::options::Options;
use crate::config::{Mux, Snapshot, Source};
use crate::node::Facts;
use crate::{admission, cri, kuberuntime, pleg, pod_workers, prober, status, sync_loop};

/// What `start` starts: the parts the subsystems share, the PLEG to run, the sender the pod
/// sources send to, and the loop's inputs (pods, PLEG events, finished pod workers).
pub(super) struct Started {
    pub parts: Parts,
    pub pleg: Rc<pleg::Pleg>,
    pub snapshots: async_channel::Sender<Snapshot>,
    pub inputs: (
        async_channel::Receiver<Snapshot>,
        async_channel::Receiver<pleg::Event>,
        async_channel::Receiver<pod_workers::Done>,
    ),
}

pub(super) async fn start(
    o: &Options,
    cri: cri::Cri,
    node: &Facts,
    src: &Sources,
    restored: &Restored,
) -> Result<Started, String> {
    let host_ip = node.ip.clone();
    let status = Rc::new(status::manager::StatusManager::new(&host_ip));
    let runtime = runtime::start(o, cri, node, restored, &status).await?;
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
    if src.cluster.is_some() {
        expected.push(Source::Api);
    }
    status.set_probe_results(rm.probe_results());
    status.set_allocation(rm.allocation().clone());
    let prober = prober::ProbeManager::new(rm.clone(), cache.clone(), &host_ip);
    let admission_node = admission_node(o, node, &runtime.version);
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
            node: Some(admission_node.clone()),
            allocation: Some(rm.allocation().clone()),
        },
    ));
    let parts = Parts {
        kubelet,
        image_gc: Rc::new(
            kuberuntime::image_gc_manager::ImageGcManager::new(
                rm.clone(),
                o.image_gc_policy(),
                o.pod_infra_container_image.clone(),
            )
            .with_preloaded(preloaded_names(o.root().preloaded_images_record())),
        ),
        rm,
        cache,
        storage: crate::stats::ephemeral::Storage::new(crate::stats::disk::DEFAULT_BUDGET),
        counted: runtime.counted,
        ops: runtime.ops,
        runtime_version: runtime.version,
        admission_node,
    };
    Ok(Started {
        parts,
        pleg,
        snapshots: snap_tx,
        inputs: (snap_rx, ev_rx, done_rx),
    })
}

/// The names of the images imported from the preload directory, read from its record at each
/// image collection: image GC keeps them even where the runtime does not report their pin.
fn preloaded_names(record: std::path::PathBuf) -> Rc<dyn Fn() -> Vec<String>> {
    Rc::new(move || match crate::images::record::Record::read(&record) {
        Ok(r) => r
            .archives
            .values()
            .flat_map(|e| e.images.iter().map(|i| i.name.clone()))
            .collect(),
        Err(e) => {
            log::debug!("image GC: {e}");
            Vec::new()
        }
    })
}

/// The node as admission weighs pods against it: its name, the well-known labels and
/// `--node-labels`, `--register-with-taints`, node allocatable and pods.
fn admission_node(o: &Options, node: &Facts, runtime: &str) -> admission::NodeInfo {
    let a = node.allocatable(&o.cgroups, &o.eviction);
    admission::NodeInfo {
        name: node.name.clone(),
        labels: admission::NodeInfo::node_labels(&node.name, &o.node_labels),
        taints: o.register_with_taints.clone(),
        milli_cpu: a.milli_cpu,
        memory: a.memory,
        // Unknown (the filesystem's size could not be read): not checked.
        ephemeral_storage: if node.disk_bytes.is_some() {
            a.ephemeral_storage
        } else {
            i64::MAX
        },
        pods: i64::from(o.max_pods),
        // The list was checked when the options were read.
        sysctls: admission::sysctl_allowlist(&node.kernel, &o.allowed_unsafe_sysctls)
            .unwrap_or_default(),
        no_image_volumes: kuberuntime::image::runtime_mounts_images(runtime).err(),
        seen: admission::SeenNode::default(),
    }
}
