//! Upkeep beside the loop: image GC, log rotation, eviction, the malloc trim, and the systemd
//! notifications.

use std::rc::Rc;
use std::sync::Arc;

use super::Parts;
use crate::cli::options::Options;
use crate::{cm, eviction, logs, malloc, notify, rt, stats};

pub(super) fn start(
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
            o.pod_logs_dir.clone(),
            parts.clone(),
        )),
        rt::spawn(malloc::run_trim()),
    ];
    if let Some(n) = notifier {
        tasks.push(rt::spawn(notify::run(n, parts.kubelet.clone())));
    }
    tasks
}

/// The eviction manager's task, wired to the host's signals, the loop and the runtime.
async fn run_eviction(
    cfg: eviction::Config,
    root_dir: std::path::PathBuf,
    logs_dir: std::path::PathBuf,
    parts: Parts,
) {
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
    let pods_root = root_dir.clone();
    let signals = Arc::new(eviction::HostSignals {
        cgroups: cgroups.clone(),
        root: "/".into(),
        root_dir: root_dir.clone(),
        image_fs,
    });
    let mut usage = eviction::Usage::new(parts.counted.clone(), cgroups);
    usage.disk = Some(eviction::Disk {
        storage: parts.storage.clone(),
        runtime: parts.counted.clone(),
        root_dir,
        logs_dir,
    });
    let usage = Rc::new(usage);
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
                cache: parts.cache.clone(),
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
        cleaned_up: {
            let cache = parts.cache;
            Box::new(move |uid| pod_resources_reclaimed(&cache.borrow(), &pods_root, uid))
        },
    };
    eviction::run(cfg, seams).await;
}

/// Whether what an evicted pod held is given back (upstream's `podResourcesAreReclaimed`, which
/// the eviction manager waits for before it reads the signals again): its containers gone from
/// the runtime (as the PLEG last listed it), their writable layers and logs with them, and its
/// directory under the root dir removed, which the runtime manager's `forget` does last, after
/// trying to remove its cgroup and after unmounting its volumes (a memory-backed emptyDir's
/// tmpfs holds its memory until then). Without
/// the second half, the round after an eviction read memory still held by the evicted pod's
/// tmpfs and evicted another pod for it.
fn pod_resources_reclaimed(
    cache: &crate::pleg::Cache,
    root_dir: &std::path::Path,
    uid: &str,
) -> bool {
    cache
        .get(uid)
        .is_none_or(|c| c.status.containers.is_empty())
        && !crate::volume::pod_dir(root_dir, uid).exists()
}

/// The thresholds of one kind for the log line: `memory.available<100Mi,...`, or `none`.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubecontainer::{ContainerState, ContainerStatus, PodRuntimeStatus};

    #[test]
    fn an_evicted_pod_is_reclaimed_once_its_containers_and_its_directory_are_gone() {
        let root = crate::testdir::TestDir::new("upkeep-reclaimed");
        let mut cache = crate::pleg::Cache::default();
        let dir = crate::volume::pod_dir(&root, "u1");
        std::fs::create_dir_all(dir.join("volumes")).unwrap();
        let container = ContainerStatus {
            id: "c1".into(),
            sandbox_id: "s1".into(),
            name: "app".into(),
            state: ContainerState::Exited,
            created_at: 0,
            started_at: 0,
            finished_at: 0,
            exit_code: 137,
            image: "img".into(),
            image_ref: "img".into(),
            reason: "".into(),
            message: "".into(),
            hash: 0,
            restart_count: 0,
        };
        let status = |containers| PodRuntimeStatus {
            uid: "u1".into(),
            containers,
            ..Default::default()
        };
        cache.put(status(vec![container]), 1, None);
        assert!(
            !pod_resources_reclaimed(&cache, &root, "u1"),
            "its container"
        );
        cache.put(status(vec![]), 2, None);
        // The containers are gone but its directory (its volumes) is not yet.
        assert!(!pod_resources_reclaimed(&cache, &root, "u1"), "its volumes");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(pod_resources_reclaimed(&cache, &root, "u1"));
        // A pod the runtime never had and that has no directory holds nothing.
        assert!(pod_resources_reclaimed(&cache, &root, "u2"));
    }
}
