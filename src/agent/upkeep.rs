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
        // Its containers gone from the runtime (as the PLEG last listed it): their writable
        // layers and logs with them.
        cleaned_up: {
            let cache = parts.cache;
            Box::new(move |uid| {
                cache
                    .borrow()
                    .get(uid)
                    .is_none_or(|c| c.status.containers.is_empty())
            })
        },
    };
    eviction::run(cfg, seams).await;
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
