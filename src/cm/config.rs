//! The cgroup settings of the kubelet's flags and `KubeletConfiguration`, and node allocatable.

use std::collections::BTreeMap;

use super::name::Driver;
use crate::api::Quantity;

/// `--kube-reserved` / `--system-reserved` (`kubeReserved` / `systemReserved`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reserved {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub pids: i64,
}

impl Reserved {
    /// From `cpu=100m,memory=100Mi` (a flag) or a map (the configuration file).
    pub fn parse_flag(s: &str) -> Result<Reserved, String> {
        let mut map = BTreeMap::new();
        for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?} is not name=quantity"))?;
            map.insert(k.trim().to_owned(), v.trim().to_owned());
        }
        Reserved::from_map(&map)
    }

    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Reserved, String> {
        let mut r = Reserved::default();
        for (k, v) in map {
            let q = Quantity::parse(v).map_err(|e| format!("{k}: {v:?}: {e}"))?;
            if q.milli_value() < 0 {
                return Err(format!("{k}: {v:?} is negative"));
            }
            match k.as_str() {
                "cpu" => r.milli_cpu = q.milli_value(),
                "memory" => r.memory = q.value(),
                "ephemeral-storage" => r.ephemeral_storage = q.value(),
                "pid" => r.pids = q.value(),
                _ => {
                    return Err(format!(
                        "{k}: unknown resource (expected cpu, memory, ephemeral-storage or pid)"
                    ));
                }
            }
        }
        Ok(r)
    }

    pub fn plus(&self, o: &Reserved) -> Reserved {
        Reserved {
            milli_cpu: self.milli_cpu.saturating_add(o.milli_cpu),
            memory: self.memory.saturating_add(o.memory),
            ephemeral_storage: self.ephemeral_storage.saturating_add(o.ephemeral_storage),
            pids: self.pids.saturating_add(o.pids),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupConfig {
    pub driver: Driver,
    /// `--cgroups-per-qos`: the kubepods tree with QoS and pod cgroups.
    pub per_qos: bool,
    /// `--cgroup-root`, a cgroupfs path.
    pub root: String,
    pub kube_reserved: Reserved,
    pub system_reserved: Reserved,
    /// `enforceNodeAllocatable`: `pods` limits kubepods to node allocatable.
    pub enforce_node_allocatable: Vec<String>,
    /// `podPidsLimit` (`--pod-max-pids`): -1 or 0 for none.
    pub pod_pids_limit: i64,
    /// `singleProcessOOMKill`: when unset, false on cgroup v2 (the whole container is killed
    /// on OOM) and true on v1 (where only one process can be).
    pub single_process_oom_kill: Option<bool>,
}

impl Default for CgroupConfig {
    fn default() -> Self {
        CgroupConfig {
            driver: Driver::Cgroupfs,
            per_qos: true,
            root: "/".into(),
            kube_reserved: Reserved::default(),
            system_reserved: Reserved::default(),
            enforce_node_allocatable: vec!["pods".into()],
            pod_pids_limit: -1,
            single_process_oom_kill: None,
        }
    }
}

/// What the node offers and what pods may use of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Allocatable {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
}

impl Allocatable {
    /// This less what `r` reserves, never below zero: the one computation of allocatable
    /// (`CgroupConfig::allocatable`, `node::Facts::allocatable`).
    pub fn less(&self, r: &Reserved) -> Allocatable {
        Allocatable {
            milli_cpu: self.milli_cpu.saturating_sub(r.milli_cpu).max(0),
            memory: self.memory.saturating_sub(r.memory).max(0),
            ephemeral_storage: self
                .ephemeral_storage
                .saturating_sub(r.ephemeral_storage)
                .max(0),
        }
    }
}

impl CgroupConfig {
    pub fn reserved(&self) -> Reserved {
        self.kube_reserved.plus(&self.system_reserved)
    }

    pub fn enforces_pods(&self) -> bool {
        self.enforce_node_allocatable.iter().any(|e| e == "pods")
    }

    /// Capacity minus `kubeReserved` and `systemReserved` (upstream's allocatable before the
    /// eviction thresholds are taken off: the kubepods cgroup's limit).
    pub fn allocatable(&self, capacity: Allocatable) -> Allocatable {
        capacity.less(&self.reserved())
    }

    /// Checks the combination, naming the flag at fault.
    pub fn validate(&self) -> Result<(), String> {
        if self.per_qos && self.root.is_empty() {
            return Err("--cgroups-per-qos needs a --cgroup-root (default /)".into());
        }
        if !self.root.starts_with('/') {
            return Err(format!(
                "--cgroup-root {:?}: must be an absolute cgroup path",
                self.root
            ));
        }
        if self.root.split('/').any(|p| p == "..") {
            return Err(format!(
                "--cgroup-root {:?}: must not contain ..",
                self.root
            ));
        }
        for e in &self.enforce_node_allocatable {
            match e.as_str() {
                "pods" | "none" => {}
                "kube-reserved" | "system-reserved" => {
                    return Err(format!(
                        "--enforce-node-allocatable {e}: not supported by picolet (it needs \
                         --kube-reserved-cgroup/--system-reserved-cgroup); use pods"
                    ));
                }
                _ => {
                    return Err(format!(
                        "--enforce-node-allocatable {e:?}: expected pods or none"
                    ));
                }
            }
        }
        if self.enforces_pods() && !self.per_qos {
            return Err(
                "--enforce-node-allocatable=pods needs --cgroups-per-qos=true \
                 (or set --enforce-node-allocatable=none)"
                    .into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_flags() {
        let r = Reserved::parse_flag("cpu=100m,memory=100Mi").unwrap();
        assert_eq!((r.milli_cpu, r.memory), (100, 100 << 20));
        let r = Reserved::parse_flag("cpu=1, memory=1Gi ,pid=100,ephemeral-storage=1G").unwrap();
        assert_eq!(
            r,
            Reserved {
                milli_cpu: 1000,
                memory: 1 << 30,
                ephemeral_storage: 1_000_000_000,
                pids: 100
            }
        );
        assert_eq!(Reserved::parse_flag("").unwrap(), Reserved::default());
        for (bad, says) in [
            ("cpu", "not name=quantity"),
            ("gpu=1", "unknown resource"),
            ("memory=lots", "memory"),
            ("cpu=-1", "negative"),
        ] {
            let e = Reserved::parse_flag(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn allocatable_is_capacity_minus_both_reservations() {
        let c = CgroupConfig {
            kube_reserved: Reserved::parse_flag("cpu=100m,memory=100Mi").unwrap(),
            system_reserved: Reserved::parse_flag("cpu=200m,memory=50Mi").unwrap(),
            ..Default::default()
        };
        let a = c.allocatable(Allocatable {
            milli_cpu: 4000,
            memory: 1 << 30,
            ephemeral_storage: 10,
        });
        assert_eq!(a.milli_cpu, 3700);
        assert_eq!(a.memory, (1 << 30) - (150 << 20));
        assert_eq!(a.ephemeral_storage, 10);
        let all = CgroupConfig {
            kube_reserved: Reserved::parse_flag("cpu=8").unwrap(),
            ..Default::default()
        };
        assert_eq!(all.allocatable(Allocatable::default()).milli_cpu, 0);
    }

    #[test]
    fn validation_names_the_flag() {
        assert!(CgroupConfig::default().validate().is_ok());
        let c = CgroupConfig {
            root: "kubepods".into(),
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().contains("--cgroup-root"));
        let c = CgroupConfig {
            enforce_node_allocatable: vec!["system-reserved".into()],
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().contains("system-reserved"));
        let c = CgroupConfig {
            per_qos: false,
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().contains("--cgroups-per-qos"));
        let c = CgroupConfig {
            per_qos: false,
            enforce_node_allocatable: vec!["none".into()],
            ..Default::default()
        };
        assert!(c.validate().is_ok());
    }
}
