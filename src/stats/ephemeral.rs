//! A pod's ephemeral storage, what `limits.ephemeral-storage` bounds and the Summary API's
//! `ephemeral-storage` reports: per container its writable layer (the runtime's figure) and
//! its logs (the container's directory of log files), and the pod's emptyDir volumes on disk
//! (a `medium: Memory` one is tmpfs, bounded by its size, and counts as memory). The
//! directories are measured by [`disk::Shared`] within its budget; the figures of the last
//! pass are kept here for the eviction manager and the Summary API alike.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

use super::RuntimeFacts;
use super::disk::{self, Usage};

/// What to measure of one pod: its running containers with their log directory, and its
/// emptyDir volumes on disk.
#[derive(Debug, Clone, PartialEq)]
pub struct PodTrees {
    pub uid: String,
    /// Name, runtime ID, log directory.
    pub containers: Vec<(String, String, PathBuf)>,
    /// Name, directory.
    pub volumes: Vec<(String, PathBuf)>,
}

/// One container's figures; `None` when not measured (yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerDisk {
    pub name: String,
    pub rootfs: Option<Usage>,
    pub logs: Option<Usage>,
}

impl ContainerDisk {
    /// Writable layer and logs, what the container's own limit bounds.
    pub fn used(&self) -> Usage {
        self.rootfs.unwrap_or_default() + self.logs.unwrap_or_default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeDisk {
    pub name: String,
    pub usage: Usage,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDisk {
    pub containers: Vec<ContainerDisk>,
    pub volumes: Vec<VolumeDisk>,
    /// When the oldest figure in it was taken.
    pub at: Option<Instant>,
}

impl PodDisk {
    /// The pod's ephemeral storage: every container's writable layer and logs, and its
    /// emptyDir volumes on disk.
    pub fn total(&self) -> Usage {
        self.containers
            .iter()
            .map(ContainerDisk::used)
            .chain(self.volumes.iter().map(|v| v.usage))
            .fold(Usage::default(), |a, b| a + b)
    }
}

/// The figures of one pod from the directories' figures and the runtime's writable layers.
pub fn account(
    t: &PodTrees,
    figure: impl Fn(&std::path::Path) -> Option<disk::Measured>,
    layers: Option<&HashMap<String, Usage>>,
) -> PodDisk {
    let mut at: Option<Instant> = None;
    let mut seen = |m: Option<disk::Measured>| {
        m.map(|m| {
            at = Some(at.map_or(m.at, |a| a.min(m.at)));
            m.usage
        })
    };
    let containers = t
        .containers
        .iter()
        .map(|(name, id, logs)| ContainerDisk {
            name: name.clone(),
            rootfs: layers.and_then(|l| l.get(id)).copied(),
            logs: seen(figure(logs)),
        })
        .collect();
    let volumes = t
        .volumes
        .iter()
        .filter_map(|(name, dir)| {
            seen(figure(dir)).map(|usage| VolumeDisk {
                name: name.clone(),
                usage,
            })
        })
        .collect();
    PodDisk {
        containers,
        volumes,
        at,
    }
}

/// The node's pods' ephemeral storage, refreshed by the eviction manager's rounds and read by
/// the Summary API.
pub struct Storage {
    meter: Rc<disk::Shared>,
    budget: u64,
    pods: RefCell<HashMap<String, PodDisk>>,
    last: RefCell<Option<disk::Pass>>,
}

impl Storage {
    pub fn new(budget: u64) -> Rc<Storage> {
        Rc::new(Storage {
            meter: disk::Shared::new(),
            budget,
            pods: RefCell::default(),
            last: RefCell::default(),
        })
    }

    /// One measurement pass over these pods' directories and one call for the writable
    /// layers; the pods' figures are then replaced (a pod not listed is forgotten). While a
    /// pass runs, another refresh does nothing.
    pub async fn refresh(&self, pods: &[PodTrees], runtime: &dyn RuntimeFacts) {
        let trees: Vec<PathBuf> = pods
            .iter()
            .flat_map(|p| {
                p.containers
                    .iter()
                    .map(|(_, _, l)| l.clone())
                    .chain(p.volumes.iter().map(|(_, d)| d.clone()))
            })
            .collect();
        let n = trees.len();
        let started = crate::rt::now();
        let Some(pass) = self.meter.pass(trees, self.budget).await else {
            return;
        };
        // What a pass costs, for `scripts/bench-storage.sh agent` and whoever wonders.
        log::debug!(
            "storage: measurement pass over {n} directories: {} entries in {:.1} ms, {} figures completed, {} to finish next time (budget {})",
            pass.entries,
            crate::rt::now()
                .saturating_duration_since(started)
                .as_secs_f64()
                * 1000.0,
            pass.completed,
            pass.pending,
            self.budget
        );
        *self.last.borrow_mut() = Some(pass);
        let layers = runtime.writable_layers().await;
        let figures: HashMap<String, PodDisk> = pods
            .iter()
            .map(|t| {
                (
                    t.uid.clone(),
                    account(t, |p| self.meter.get(p), layers.as_ref()),
                )
            })
            .collect();
        *self.pods.borrow_mut() = figures;
    }

    /// The last figures of a pod.
    pub fn pod(&self, uid: &str) -> Option<PodDisk> {
        self.pods.borrow().get(uid).cloned()
    }

    /// What the last pass did.
    pub fn last_pass(&self) -> Option<disk::Pass> {
        *self.last.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    struct Layers(HashMap<String, Usage>);

    impl RuntimeFacts for Layers {
        fn container_pid(&self, _: &str) -> super::super::Ask<'_, u32> {
            Box::pin(async { None })
        }
        fn image_fs(&self) -> super::super::Ask<'_, super::super::ImageFs> {
            Box::pin(async { None })
        }
        fn writable_layers(&self) -> super::super::Ask<'_, HashMap<String, Usage>> {
            let l = self.0.clone();
            Box::pin(async move { Some(l) })
        }
    }

    fn u(bytes: u64, inodes: u64) -> Usage {
        Usage { bytes, inodes }
    }

    #[test]
    fn the_pods_total_is_layers_logs_and_disk_volumes() {
        let t = PodTrees {
            uid: "u".into(),
            containers: vec![
                ("a".into(), "id-a".into(), "/logs/a".into()),
                ("b".into(), "id-b".into(), "/logs/b".into()),
            ],
            volumes: vec![
                ("data".into(), "/vol/data".into()),
                ("new".into(), "/vol/new".into()),
            ],
        };
        let t0 = Instant::now();
        let t1 = t0 + std::time::Duration::from_secs(10);
        let figure = |p: &Path| {
            let (usage, at) = match p.to_str().unwrap() {
                "/logs/a" => (u(4096, 2), t1),
                "/logs/b" => (u(8192, 3), t1),
                "/vol/data" => (u(1 << 20, 5), t0),
                _ => return None,
            };
            Some(disk::Measured { usage, at })
        };
        let layers: HashMap<String, Usage> = [("id-a".to_owned(), u(32 << 10, 8))].into();
        let d = account(&t, figure, Some(&layers));
        assert_eq!(d.at, Some(t0), "the oldest figure's time");
        assert_eq!(d.containers[0].used(), u(4096 + (32 << 10), 10));
        assert_eq!(d.containers[1].rootfs, None, "the runtime did not say");
        assert_eq!(d.containers[1].used(), u(8192, 3));
        assert_eq!(
            d.volumes,
            [VolumeDisk {
                name: "data".into(),
                usage: u(1 << 20, 5)
            }],
            "a volume not measured yet is left out"
        );
        assert_eq!(d.total(), u(4096 + (32 << 10) + 8192 + (1 << 20), 18));
    }

    #[test]
    fn refresh_measures_the_directories_and_forgets_gone_pods() {
        let dir = std::env::temp_dir().join(format!("picolet-ephemeral-{}", std::process::id()));
        let (logs, vol) = (dir.join("logs/app"), dir.join("vol/scratch"));
        std::fs::create_dir_all(&logs).unwrap();
        std::fs::create_dir_all(&vol).unwrap();
        std::fs::write(logs.join("0.log"), vec![b'x'; 10_000]).unwrap();
        std::fs::write(vol.join("blob"), vec![0u8; 100_000]).unwrap();
        let s = Storage::new(disk::DEFAULT_BUDGET);
        let rt = Layers([("c1".to_owned(), u(1 << 20, 4))].into());
        let trees = vec![PodTrees {
            uid: "u1".into(),
            containers: vec![("app".into(), "c1".into(), logs.clone())],
            volumes: vec![("scratch".into(), vol.clone())],
        }];
        crate::rt::block_on(async {
            s.refresh(&trees, &rt).await;
            let d = s.pod("u1").unwrap();
            let c = &d.containers[0];
            assert_eq!(c.rootfs, Some(u(1 << 20, 4)));
            let l = c.logs.unwrap();
            assert_eq!(l.inodes, 2, "the directory and its file");
            assert!(l.bytes >= 10_000, "{l:?}");
            let v = d.volumes[0].usage;
            assert!(v.bytes >= 100_000 && v.inodes == 2, "{v:?}");
            assert_eq!(d.total(), c.used() + v);
            assert_eq!(s.last_pass().unwrap().completed, 2);
            s.refresh(&[], &rt).await;
            assert_eq!(s.pod("u1"), None);
        });
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
