//! The kubepods tree: `kubepods` (limited to node allocatable), `burstable` and `besteffort`
//! under it, and one cgroup per pod (`pod<uid>`, Guaranteed pods directly under kubepods), made
//! before the pod's sandbox and handed to the runtime as its cgroup parent.

use std::path::Path;

use super::config::{Allocatable, CgroupConfig};
use super::fs::{CgroupError, Hierarchy};
use super::name::{CgroupName, Driver};
use super::resources::{self, ResourceConfig};
use crate::api::Pod;
use crate::qos::{self, QosClass};

const KUBEPODS: &str = "kubepods";
const BURSTABLE: &str = "burstable";
const BESTEFFORT: &str = "besteffort";
const POD_PREFIX: &str = "pod";

#[derive(Debug, Clone)]
pub struct PodCgroups {
    pub hierarchy: Hierarchy,
    pub driver: Driver,
    kubepods: CgroupName,
    pod_pids_limit: i64,
    /// `memory.oom.group` for containers (cgroup v2, and `singleProcessOOMKill` false).
    oom_group: bool,
    single_process_oom_kill: Option<bool>,
}

/// A pod cgroup found on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub uid: String,
    /// Its path as the driver names it.
    pub path: String,
}

impl PodCgroups {
    /// The tree for `cfg` on the hierarchies under `root` (`/` on a host).
    pub fn new(cfg: &CgroupConfig, root: &Path) -> Result<PodCgroups, CgroupError> {
        Ok(PodCgroups::with_hierarchy(cfg, Hierarchy::detect(root)?))
    }

    pub fn with_hierarchy(cfg: &CgroupConfig, hierarchy: Hierarchy) -> PodCgroups {
        PodCgroups {
            hierarchy,
            driver: cfg.driver,
            kubepods: CgroupName::parse_root(&cfg.root, cfg.driver).child(KUBEPODS),
            pod_pids_limit: cfg.pod_pids_limit,
            oom_group: false,
            single_process_oom_kill: cfg.single_process_oom_kill,
        }
    }

    fn path(&self, n: &CgroupName) -> String {
        n.path(self.driver)
    }

    fn qos_name(&self, class: QosClass) -> CgroupName {
        match class {
            QosClass::Guaranteed => self.kubepods.clone(),
            QosClass::Burstable => self.kubepods.child(BURSTABLE),
            QosClass::BestEffort => self.kubepods.child(BESTEFFORT),
        }
    }

    fn pod_name(&self, pod: &Pod) -> CgroupName {
        self.qos_name(qos::qos_class(pod))
            .child(&format!("{POD_PREFIX}{}", pod.metadata.uid))
    }

    /// The pod's cgroup, as the runtime's `cgroup_parent` wants it.
    pub fn pod_path(&self, pod: &Pod) -> String {
        self.path(&self.pod_name(pod))
    }

    pub fn kubepods_path(&self) -> String {
        self.path(&self.kubepods)
    }

    /// Whether containers get `memory.oom.group = 1`.
    pub fn oom_group(&self) -> bool {
        self.oom_group
    }

    /// Creates kubepods and the QoS cgroups; limits kubepods to `allocatable` when `enforce`
    /// (cpu shares and memory, as upstream: no CFS quota on the node level), besteffort to
    /// the minimum shares. Also decides `memory.oom.group` from what the kernel offers.
    pub fn setup(
        &mut self,
        allocatable: Option<Allocatable>,
        pids: Option<i64>,
    ) -> Result<(), CgroupError> {
        let kubepods = self.path(&self.kubepods);
        self.hierarchy.create(&kubepods)?;
        if let Some(a) = allocatable {
            self.hierarchy.apply(
                &kubepods,
                &ResourceConfig {
                    cpu_shares: Some(qos::milli_cpu_to_shares(a.milli_cpu)),
                    memory: Some(a.memory),
                    pids,
                    ..Default::default()
                },
            )?;
        }
        for class in [QosClass::Burstable, QosClass::BestEffort] {
            let p = self.path(&self.qos_name(class));
            self.hierarchy.create(&p)?;
        }
        self.hierarchy.apply(
            &self.path(&self.qos_name(QosClass::BestEffort)),
            &ResourceConfig {
                cpu_shares: Some(qos::MIN_SHARES),
                ..Default::default()
            },
        )?;
        self.oom_group = self.single_process_oom_kill != Some(true)
            && self.hierarchy.v2_file_exists(&kubepods, "memory.oom.group");
        Ok(())
    }

    /// Creates the pod's cgroup with its limits (made before its sandbox, refreshed on every
    /// sync, so a cgroup removed behind picolet's back comes back) and re-weighs the burstable
    /// cgroup by the CPU requests of `pods` (every pod picolet runs), as upstream does.
    pub fn ensure_pod<'a>(
        &self,
        pod: &Pod,
        pods: impl IntoIterator<Item = &'a Pod>,
    ) -> Result<String, CgroupError> {
        let path = self.pod_path(pod);
        self.hierarchy.create(&path)?;
        self.hierarchy
            .apply(&path, &resources::for_pod(pod, self.pod_pids_limit))?;
        self.update_qos(pods)?;
        Ok(path)
    }

    /// Before containers are resized in place: raises each of the pod cgroup's limits to the
    /// larger of the old and the new (`old` and `new` are the pod before and after), so that
    /// neither a container growing nor one shrinking is refused by its parent. `ensure_pod`
    /// sets the new limits once the containers have theirs.
    pub fn widen_pod(&self, old: &Pod, new: &Pod) -> Result<(), CgroupError> {
        let o = resources::for_pod(old, self.pod_pids_limit);
        let n = resources::for_pod(new, self.pod_pids_limit);
        self.hierarchy
            .apply(&self.pod_path(new), &resources::widest(&o, &n))
    }

    /// Weighs the burstable cgroup by the CPU requests of the Burstable pods among `pods`
    /// (every pod picolet runs), as upstream does on each pod start and removal.
    pub fn update_qos<'a>(
        &self,
        pods: impl IntoIterator<Item = &'a Pod>,
    ) -> Result<(), CgroupError> {
        let burstable: i64 = pods
            .into_iter()
            .filter(|p| qos::qos_class(p) == QosClass::Burstable)
            .map(resources::pod_cpu_request_milli)
            .sum();
        self.hierarchy.apply(
            &self.path(&self.qos_name(QosClass::Burstable)),
            &ResourceConfig {
                cpu_shares: Some(qos::milli_cpu_to_shares(burstable)),
                ..Default::default()
            },
        )
    }

    /// Every pod cgroup under picolet's kubepods tree.
    pub fn list(&self) -> Result<Vec<Found>, CgroupError> {
        let mut out = Vec::new();
        for class in [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ] {
            let parent = self.qos_name(class);
            for dir in self.hierarchy.children(&self.path(&parent))? {
                let Some(c) = CgroupName::component_of(&dir, self.driver) else {
                    continue;
                };
                if let Some(uid) = c.strip_prefix(POD_PREFIX) {
                    out.push(Found {
                        uid: uid.to_owned(),
                        path: self.path(&parent.child(&c)),
                    });
                }
            }
        }
        Ok(out)
    }

    /// Removes every cgroup of the pod (a pod that changed QoS class may have had two).
    pub fn remove_pod(&self, uid: &str) -> Result<usize, CgroupError> {
        let mut n = 0;
        for f in self.list()?.into_iter().filter(|f| f.uid == uid) {
            self.hierarchy.remove(&f.path)?;
            n += 1;
        }
        Ok(n)
    }

    /// Refuses `singleProcessOOMKill: false` where the kernel cannot kill a whole cgroup (v1),
    /// as upstream does.
    pub fn check_oom_setting(&self) -> Result<(), String> {
        if self.single_process_oom_kill == Some(false)
            && self.hierarchy.mode != super::detect::Mode::Unified
        {
            return Err(
                "singleProcessOOMKill: false needs cgroup v2 (this host runs v1 \
                 controllers); remove it or set it to true"
                    .into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::Reserved;
    use super::super::fixture;
    use super::*;
    use crate::api::Quantity;

    fn pod(uid: &str, cpu: Option<(&str, &str)>, mem_limit: Option<&str>) -> Pod {
        let mut p = Pod::default();
        p.metadata.uid = uid.into();
        let mut c = crate::api::Container {
            name: "c".into(),
            image: "i".into(),
            ..Default::default()
        };
        if let Some((req, lim)) = cpu {
            c.resources
                .requests
                .insert("cpu".into(), Quantity::parse(req).unwrap());
            if !lim.is_empty() {
                c.resources
                    .limits
                    .insert("cpu".into(), Quantity::parse(lim).unwrap());
            }
        }
        if let Some(m) = mem_limit {
            c.resources
                .limits
                .insert("memory".into(), Quantity::parse(m).unwrap());
            c.resources
                .requests
                .insert("memory".into(), Quantity::parse(m).unwrap());
        }
        p.spec.containers = vec![c];
        p
    }

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .trim()
            .to_owned()
    }

    fn cfg(driver: Driver, root: &str) -> CgroupConfig {
        CgroupConfig {
            driver,
            root: root.into(),
            pod_pids_limit: 256,
            kube_reserved: Reserved::parse_flag("cpu=500m,memory=128Mi").unwrap(),
            ..Default::default()
        }
    }

    const CAP: Allocatable = Allocatable {
        milli_cpu: 2000,
        memory: 1 << 30,
        ephemeral_storage: 0,
    };

    #[test]
    fn v2_tree_with_limits_and_removal() {
        let host = fixture::v2("cpuset cpu io memory hugetlb pids rdma misc");
        let c = cfg(Driver::Cgroupfs, "/");
        let mut pc = PodCgroups::with_hierarchy(&c, host.hierarchy.clone());
        pc.setup(Some(c.allocatable(CAP)), None).unwrap();
        let cg = host.root.join("sys/fs/cgroup");
        // Controllers enabled on the way down, io and the rest left alone.
        assert_eq!(read(&cg.join("cgroup.subtree_control")), "cpu memory pids");
        assert_eq!(
            read(&cg.join("kubepods/cgroup.subtree_control")),
            "cpu memory pids"
        );
        // kubepods: 1.5 CPUs of shares, memory capacity minus reserved.
        assert_eq!(read(&cg.join("kubepods/cpu.weight")), "138"); // 1536 shares
        assert_eq!(
            read(&cg.join("kubepods/memory.max")),
            ((1i64 << 30) - (128 << 20)).to_string()
        );
        assert_eq!(read(&cg.join("kubepods/besteffort/cpu.weight")), "1");
        assert!(pc.oom_group(), "the kernel offers memory.oom.group");

        let g = pod("g-1", Some(("500m", "500m")), Some("64Mi"));
        let b = pod("b-2", Some(("250m", "")), None);
        let be = pod("be-3", None, None);
        let all = [g.clone(), b.clone(), be.clone()];
        for p in &all {
            pc.ensure_pod(p, &all).unwrap();
        }
        assert_eq!(pc.pod_path(&g), "/kubepods/podg-1");
        assert_eq!(pc.pod_path(&b), "/kubepods/burstable/podb-2");
        assert_eq!(pc.pod_path(&be), "/kubepods/besteffort/podbe-3");
        let gd = cg.join("kubepods/podg-1");
        assert_eq!(read(&gd.join("cpu.max")), "50000 100000");
        assert_eq!(read(&gd.join("memory.max")), (64 << 20).to_string());
        assert_eq!(read(&gd.join("pids.max")), "256");
        assert_eq!(read(&gd.join("cpu.weight")), "59"); // 512 shares
        let bd = cg.join("kubepods/burstable/podb-2");
        assert_eq!(
            read(&bd.join("cpu.max")),
            "max 100000",
            "no limit: untouched"
        );
        assert_eq!(read(&bd.join("memory.max")), "max");
        // The burstable level weighs the burstable pods' requests (256 shares).
        assert_eq!(read(&cg.join("kubepods/burstable/cpu.weight")), "35");
        let bed = cg.join("kubepods/besteffort/podbe-3");
        assert_eq!(read(&bed.join("cpu.weight")), "1");

        // The burstable pod gone, its level drops back to the minimum.
        pc.update_qos([&g, &be]).unwrap();
        assert_eq!(read(&cg.join("kubepods/burstable/cpu.weight")), "1");
        pc.update_qos(&all).unwrap();
        let mut uids: Vec<String> = pc.list().unwrap().into_iter().map(|f| f.uid).collect();
        uids.sort();
        assert_eq!(uids, ["b-2", "be-3", "g-1"]);

        // A container cgroup still holding a process keeps its pod's cgroup.
        let ctr = gd.join("abc");
        pc.hierarchy.create("/kubepods/podg-1/abc").unwrap();
        std::fs::write(ctr.join("cgroup.procs"), "4242\n").unwrap();
        assert!(pc.remove_pod("g-1").is_err());
        assert!(gd.exists());
        std::fs::write(ctr.join("cgroup.procs"), "").unwrap();
        assert_eq!(pc.remove_pod("g-1").unwrap(), 1);
        assert!(!gd.exists());

        // What housekeeping sees and removes: the pods' cgroups only, never the levels.
        assert_eq!(pc.remove_pod("be-3").unwrap(), 1);
        assert_eq!(pc.remove_pod("be-3").unwrap(), 0, "gone is done");
        assert!(bd.exists() && !bed.exists());
        assert!(cg.join("kubepods/besteffort").exists());
    }

    #[test]
    fn v2_without_the_memory_controller_skips_memory() {
        let host = fixture::v2("cpuset cpu io pids");
        let c = cfg(Driver::Cgroupfs, "/");
        let mut pc = PodCgroups::with_hierarchy(&c, host.hierarchy.clone());
        pc.setup(Some(c.allocatable(CAP)), None).unwrap();
        assert!(!pc.oom_group());
        let g = pod("g", Some(("1", "1")), Some("64Mi"));
        pc.ensure_pod(&g, [&g]).unwrap();
        let gd = host.root.join("sys/fs/cgroup/kubepods/podg");
        assert_eq!(read(&gd.join("cpu.max")), "100000 100000");
        assert!(!gd.join("memory.max").exists());
    }

    #[test]
    fn hybrid_writes_v1_files_under_a_custom_root() {
        let host = fixture::hybrid();
        let c = cfg(Driver::Cgroupfs, "/picolet-e2e-7");
        let mut pc = PodCgroups::with_hierarchy(&c, host.hierarchy.clone());
        pc.setup(Some(c.allocatable(CAP)), Some(1000)).unwrap();
        let cg = host.root.join("sys/fs/cgroup");
        let cpu = cg.join("cpu,cpuacct/picolet-e2e-7/kubepods");
        let mem = cg.join("memory/picolet-e2e-7/kubepods");
        assert_eq!(read(&cpu.join("cpu.shares")), "1536");
        assert_eq!(
            read(&mem.join("memory.limit_in_bytes")),
            ((1i64 << 30) - (128 << 20)).to_string()
        );
        assert_eq!(
            read(&cg.join("pids/picolet-e2e-7/kubepods/pids.max")),
            "1000"
        );
        assert_eq!(read(&cpu.join("besteffort/cpu.shares")), "2");
        assert!(!pc.oom_group(), "v1 has no memory.oom.group");
        assert!(pc.check_oom_setting().is_ok());
        let strict = CgroupConfig {
            single_process_oom_kill: Some(false),
            ..c.clone()
        };
        let e = PodCgroups::with_hierarchy(&strict, host.hierarchy.clone())
            .check_oom_setting()
            .unwrap_err();
        assert!(e.contains("singleProcessOOMKill"), "{e}");

        let g = pod("g", Some(("250m", "250m")), Some("32Mi"));
        assert_eq!(
            pc.ensure_pod(&g, [&g]).unwrap(),
            "/picolet-e2e-7/kubepods/podg"
        );
        assert_eq!(read(&cpu.join("podg/cpu.shares")), "256");
        assert_eq!(read(&cpu.join("podg/cpu.cfs_quota_us")), "25000");
        assert_eq!(read(&cpu.join("podg/cpu.cfs_period_us")), "100000");
        assert_eq!(
            read(&mem.join("podg/memory.limit_in_bytes")),
            (32 << 20).to_string()
        );
        assert_eq!(
            read(&cg.join("pids/picolet-e2e-7/kubepods/podg/pids.max")),
            "256"
        );
        // The runtime makes the pod's directory in every hierarchy (systemd, unified too);
        // removal takes them all.
        for h in ["systemd", "unified"] {
            std::fs::create_dir_all(cg.join(h).join("picolet-e2e-7/kubepods/podg/ctr")).unwrap();
        }
        assert_eq!(pc.remove_pod("g").unwrap(), 1);
        for h in ["cpu,cpuacct", "memory", "pids", "systemd", "unified"] {
            assert!(
                !cg.join(h).join("picolet-e2e-7/kubepods/podg").exists(),
                "{h}"
            );
        }
        assert!(cpu.exists(), "kubepods stays");
    }

    #[test]
    fn systemd_driver_lays_out_slices() {
        let host = fixture::v2("cpu memory pids");
        let c = cfg(Driver::Systemd, "/");
        let mut pc = PodCgroups::with_hierarchy(&c, host.hierarchy.clone());
        pc.setup(Some(c.allocatable(CAP)), None).unwrap();
        let b = pod("12ab-34cd", Some(("100m", "")), None);
        let path = pc.ensure_pod(&b, [&b]).unwrap();
        assert_eq!(
            path,
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12ab_34cd.slice"
        );
        let cg = host.root.join("sys/fs/cgroup");
        assert!(
            cg.join(path.trim_start_matches('/'))
                .join("cpu.weight")
                .exists()
        );
        assert_eq!(
            read(&cg.join("kubepods.slice/kubepods-besteffort.slice/cpu.weight")),
            "1"
        );
        assert_eq!(pc.list().unwrap()[0].uid, "12ab-34cd");
        assert_eq!(pc.remove_pod("12ab-34cd").unwrap(), 1);
        assert!(pc.list().unwrap().is_empty());
    }
}
