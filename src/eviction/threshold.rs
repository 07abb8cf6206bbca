//! Eviction signals and thresholds as the kubelet names and writes them: `evictionHard`,
//! `evictionSoft`, `evictionSoftGracePeriod`, `evictionMinimumReclaim`,
//! `evictionPressureTransitionPeriod`, `evictionMaxPodGracePeriod` and their flags
//! (`--eviction-hard=memory.available<100Mi,nodefs.available<10%`). Pure: text in, a checked
//! [`Config`] out, every error naming the field (or flag) and the value.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::api::Quantity;

/// What the eviction manager watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Signal {
    MemoryAvailable,
    NodeFsAvailable,
    NodeFsInodesFree,
    ImageFsAvailable,
    ImageFsInodesFree,
    PidAvailable,
    /// picolet's own: the node's memory PSI `some avg10`, percent (higher is worse).
    MemoryPsi,
}

/// The resource a signal starves, as eviction messages name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    Memory,
    EphemeralStorage,
    Inodes,
    Pids,
}

impl Resource {
    /// The name in "The node was low on resource: ..." (upstream's resource names).
    pub fn name(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::EphemeralStorage => "ephemeral-storage",
            Resource::Inodes => "inodes",
            Resource::Pids => "pids",
        }
    }
}

/// The node condition a signal drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Condition {
    MemoryPressure,
    DiskPressure,
    PidPressure,
}

impl Signal {
    pub const ALL: [Signal; 6] = [
        Signal::MemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::PidAvailable,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
            Signal::MemoryPsi => "memory.pressure",
        }
    }

    /// The signals a KubeletConfiguration may name (not picolet's PSI signal: it has a flag).
    pub fn parse(s: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|x| x.name() == s)
    }

    pub fn resource(self) -> Resource {
        match self {
            Signal::MemoryAvailable | Signal::MemoryPsi => Resource::Memory,
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => Resource::EphemeralStorage,
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => Resource::Inodes,
            Signal::PidAvailable => Resource::Pids,
        }
    }

    pub fn condition(self) -> Condition {
        match self {
            Signal::MemoryAvailable | Signal::MemoryPsi => Condition::MemoryPressure,
            Signal::PidAvailable => Condition::PidPressure,
            _ => Condition::DiskPressure,
        }
    }

    /// Whether node-level reclaim (dead containers, unused images) frees what the signal
    /// lacks: the disk signals, as upstream; memory and pids have nothing to reclaim.
    pub fn reclaimable(self) -> bool {
        matches!(
            self,
            Signal::NodeFsAvailable
                | Signal::NodeFsInodesFree
                | Signal::ImageFsAvailable
                | Signal::ImageFsInodesFree
        )
    }
}

/// A threshold's quantity: absolute (bytes, inodes, pids) or a percentage of capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    Absolute(i64),
    /// 0 to 100.
    Percent(f64),
}

impl Amount {
    /// The absolute value against a capacity.
    pub fn of(self, capacity: i64) -> i64 {
        match self {
            Amount::Absolute(v) => v,
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_precision_loss,
                reason = "a percentage of a capacity below 2^63 fits; rounding to a byte is fine"
            )]
            Amount::Percent(p) => (capacity as f64 * p / 100.0) as i64,
        }
    }

    fn parse(s: &str) -> Result<Amount, String> {
        if let Some(p) = s.strip_suffix('%') {
            let v: f64 = p.parse().map_err(|_| format!("invalid percentage {s:?}"))?;
            if !(0.0..=100.0).contains(&v) || !v.is_finite() {
                return Err(format!("percentage {s:?} must be between 0% and 100%"));
            }
            return Ok(Amount::Percent(v));
        }
        let q = Quantity::parse(s).map_err(|e| e.to_string())?;
        if q.is_negative() {
            return Err(format!("quantity {s:?} must not be negative"));
        }
        Ok(Amount::Absolute(q.value()))
    }
}

/// One threshold: the signal below `value` means pressure. Hard thresholds have no grace
/// period; soft ones must stay met for `grace` before a pod is evicted.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub value: Amount,
    pub hard: bool,
    pub grace: Duration,
    /// Once met, the threshold stays met until this much more than `value` is available.
    pub min_reclaim: Option<Amount>,
}

impl Config {
    /// What the hard `memory.available` and `nodefs.available` thresholds keep from pods, in
    /// bytes against the node's memory and root filesystem: the Node's allocatable leaves them
    /// out, as upstream's (the kubepods cgroup limit does not).
    pub fn hard_reserved(&self, memory: i64, nodefs: i64) -> (i64, i64) {
        let hard = |sig: Signal, capacity: i64| {
            self.thresholds
                .iter()
                .filter(|t| t.hard && t.signal == sig)
                .map(|t| t.value.of(capacity).max(0))
                .max()
                .unwrap_or(0)
        };
        (
            hard(Signal::MemoryAvailable, memory),
            hard(Signal::NodeFsAvailable, nodefs),
        )
    }
}

/// Upstream's hard thresholds on Linux (kubelet v1.34 `DefaultEvictionHard`). pid.available
/// has no default there either.
pub const DEFAULT_HARD: [(&str, &str); 4] = [
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
    ("imagefs.available", "15%"),
];

/// The default `evictionPressureTransitionPeriod`.
pub const DEFAULT_TRANSITION: Duration = Duration::from_secs(300);

/// What the eviction manager runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub thresholds: Vec<Threshold>,
    pub pressure_transition_period: Duration,
    /// `evictionMaxPodGracePeriod`: the most a pod gets when a soft threshold evicts it.
    pub max_pod_grace_period: i64,
    /// `--eviction-memory-psi-threshold`: act on memory when the node's memory PSI `some avg10`
    /// reaches this percentage; `None` is off.
    pub memory_psi_threshold: Option<f64>,
}

impl Default for Config {
    fn default() -> Self {
        Settings::default()
            .build()
            .expect("the default thresholds are valid")
    }
}

/// One setting as given, with where it came from for errors (`--eviction-hard`, or
/// `/etc/picolet/config.yaml: evictionHard`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Given<T> {
    pub origin: String,
    pub value: T,
}

/// `signal -> value` pairs as given.
pub type Pairs = Vec<(String, String)>;

/// The eviction settings as the flags and the configuration file give them, before checking.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Settings {
    pub hard: Option<Given<Pairs>>,
    pub soft: Option<Given<Pairs>>,
    pub soft_grace_period: Option<Given<Pairs>>,
    pub minimum_reclaim: Option<Given<Pairs>>,
    pub pressure_transition_period: Option<Given<String>>,
    pub max_pod_grace_period: Option<Given<i64>>,
    pub memory_psi_threshold: Option<Given<String>>,
}

/// `memory.available<100Mi,nodefs.available<10%` (the flags of `--eviction-hard` and
/// `--eviction-soft`); `sep` is `'<'`, or `'='` for `--eviction-soft-grace-period` and
/// `--eviction-minimum-reclaim`.
pub fn parse_map(s: &str, sep: char) -> Result<Vec<(String, String)>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once(sep) {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.trim().to_owned())),
            _ => Err(format!("{p:?}: expected signal{sep}value")),
        })
        .collect()
}

impl Settings {
    /// Checks the settings and builds the manager's configuration. As upstream, an
    /// `evictionHard` given at all replaces the defaults (a signal left out has no hard
    /// threshold); a soft threshold needs a grace period and a grace period a soft threshold.
    pub fn build(&self) -> Result<Config, String> {
        let defaults: Vec<(String, String)> = DEFAULT_HARD
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let hard = self.hard.clone().unwrap_or(Given {
            origin: "evictionHard (default)".into(),
            value: defaults,
        });
        let none = |origin: &str| Given {
            origin: origin.to_owned(),
            value: Vec::new(),
        };
        let soft = self.soft.clone().unwrap_or_else(|| none("evictionSoft"));
        let graces = self
            .soft_grace_period
            .clone()
            .unwrap_or_else(|| none("evictionSoftGracePeriod"));
        let reclaim = self
            .minimum_reclaim
            .clone()
            .unwrap_or_else(|| none("evictionMinimumReclaim"));

        let signal = |g: &Given<Pairs>, k: &str| {
            Signal::parse(k).ok_or_else(|| {
                format!(
                    "{}: unknown eviction signal {k:?} (one of {})",
                    g.origin,
                    Signal::ALL.map(Signal::name).join(", ")
                )
            })
        };
        let mut min_reclaim: BTreeMap<Signal, Amount> = BTreeMap::new();
        for (k, v) in &reclaim.value {
            let s = signal(&reclaim, k)?;
            let a = Amount::parse(v).map_err(|e| format!("{}: {k}: {e}", reclaim.origin))?;
            min_reclaim.insert(s, a);
        }
        let mut grace: BTreeMap<Signal, Duration> = BTreeMap::new();
        for (k, v) in &graces.value {
            let s = signal(&graces, k)?;
            let d = crate::api::parse_duration(v)
                .map_err(|e| format!("{}: {k}: invalid duration {v:?}: {e}", graces.origin))?;
            grace.insert(s, d);
        }
        let mut out = Vec::new();
        let mut add = |g: &Given<Pairs>, hard: bool| -> Result<(), String> {
            for (k, v) in &g.value {
                let s = signal(g, k)?;
                let value = Amount::parse(v).map_err(|e| format!("{}: {k}: {e}", g.origin))?;
                // "0%" or "0" disables a signal, as upstream.
                if value == Amount::Absolute(0) || value == Amount::Percent(0.0) {
                    continue;
                }
                let gp = if hard {
                    Duration::ZERO
                } else {
                    *grace.get(&s).ok_or_else(|| {
                        format!(
                            "{}: {k}: a soft threshold needs a grace period in {}",
                            g.origin, graces.origin
                        )
                    })?
                };
                out.push(Threshold {
                    signal: s,
                    value,
                    hard,
                    grace: gp,
                    min_reclaim: min_reclaim.get(&s).copied(),
                });
            }
            Ok(())
        };
        add(&hard, true)?;
        add(&soft, false)?;
        for s in grace.keys() {
            if !soft.value.iter().any(|(k, _)| k == s.name()) {
                return Err(format!(
                    "{}: {}: a grace period without a soft threshold in {}",
                    graces.origin,
                    s.name(),
                    soft.origin
                ));
            }
        }
        let transition = match &self.pressure_transition_period {
            Some(g) => crate::api::parse_duration(&g.value)
                .map_err(|e| format!("{}: invalid duration {:?}: {e}", g.origin, g.value))?,
            None => DEFAULT_TRANSITION,
        };
        let max_grace = match &self.max_pod_grace_period {
            Some(g) if g.value < 0 => {
                return Err(format!("{}: {} must not be negative", g.origin, g.value));
            }
            Some(g) => g.value,
            None => 0,
        };
        let psi = match &self.memory_psi_threshold {
            None => None,
            Some(g) => {
                let v: f64 = g
                    .value
                    .trim_end_matches('%')
                    .parse()
                    .map_err(|_| format!("{}: invalid percentage {:?}", g.origin, g.value))?;
                if !(0.0..=100.0).contains(&v) {
                    return Err(format!(
                        "{}: {:?} must be between 0 and 100 (0 is off)",
                        g.origin, g.value
                    ));
                }
                (v > 0.0).then_some(v)
            }
        };
        Ok(Config {
            thresholds: out,
            pressure_transition_period: transition,
            max_pod_grace_period: max_grace,
            memory_psi_threshold: psi,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given(origin: &str, s: &str, sep: char) -> Option<Given<Pairs>> {
        Some(Given {
            origin: origin.into(),
            value: parse_map(s, sep).unwrap(),
        })
    }

    #[test]
    fn the_hard_memory_and_nodefs_thresholds_are_kept_from_allocatable() {
        let gib = 1i64 << 30;
        assert_eq!(
            Config::default().hard_reserved(4 * gib, 100 * gib),
            (100 << 20, 10 * gib),
            "100Mi of memory, 10 % of the root filesystem"
        );
        let none = Settings {
            hard: given("--eviction-hard", "memory.available<0", '<'),
            ..Settings::default()
        }
        .build()
        .unwrap();
        assert_eq!(none.hard_reserved(4 * gib, 100 * gib), (0, 0));
    }

    #[test]
    fn defaults_are_upstreams() {
        let c = Config::default();
        let t: Vec<(&str, Amount, bool)> = c
            .thresholds
            .iter()
            .map(|t| (t.signal.name(), t.value, t.hard))
            .collect();
        assert_eq!(
            t,
            vec![
                ("memory.available", Amount::Absolute(100 << 20), true),
                ("nodefs.available", Amount::Percent(10.0), true),
                ("nodefs.inodesFree", Amount::Percent(5.0), true),
                ("imagefs.available", Amount::Percent(15.0), true),
            ]
        );
        assert_eq!(c.pressure_transition_period, Duration::from_secs(300));
        assert_eq!(c.max_pod_grace_period, 0);
        assert_eq!(c.memory_psi_threshold, None);
        assert!(c.thresholds.iter().all(|t| t.grace.is_zero()));
    }

    #[test]
    fn flag_syntax() {
        assert_eq!(
            parse_map("memory.available<100Mi, nodefs.available<10%", '<').unwrap(),
            vec![
                ("memory.available".to_owned(), "100Mi".to_owned()),
                ("nodefs.available".to_owned(), "10%".to_owned())
            ]
        );
        assert_eq!(parse_map("", '<').unwrap(), vec![]);
        let e = parse_map("memory.available=100Mi", '<').unwrap_err();
        assert_eq!(e, "\"memory.available=100Mi\": expected signal<value");
    }

    #[test]
    fn hard_replaces_the_defaults_and_soft_needs_grace() {
        let s = Settings {
            hard: given("--eviction-hard", "memory.available<1Gi", '<'),
            soft: given("--eviction-soft", "nodefs.available<20%", '<'),
            soft_grace_period: given(
                "--eviction-soft-grace-period",
                "nodefs.available=1m30s",
                '=',
            ),
            minimum_reclaim: given("--eviction-minimum-reclaim", "memory.available=500Mi", '='),
            ..Settings::default()
        };
        let c = s.build().unwrap();
        assert_eq!(c.thresholds.len(), 2);
        assert_eq!(c.thresholds[0].signal, Signal::MemoryAvailable);
        assert_eq!(c.thresholds[0].value, Amount::Absolute(1 << 30));
        assert_eq!(
            c.thresholds[0].min_reclaim,
            Some(Amount::Absolute(500 << 20))
        );
        assert!(!c.thresholds[1].hard);
        assert_eq!(c.thresholds[1].grace, Duration::from_secs(90));

        let e = Settings {
            soft: given("cfg.yaml: evictionSoft", "memory.available<1Gi", '<'),
            ..Settings::default()
        }
        .build()
        .unwrap_err();
        assert_eq!(
            e,
            "cfg.yaml: evictionSoft: memory.available: a soft threshold needs a grace period in evictionSoftGracePeriod"
        );
        let e = Settings {
            soft_grace_period: given("--eviction-soft-grace-period", "memory.available=1m", '='),
            ..Settings::default()
        }
        .build()
        .unwrap_err();
        assert_eq!(
            e,
            "--eviction-soft-grace-period: memory.available: a grace period without a soft threshold in evictionSoft"
        );
    }

    #[test]
    fn errors_name_the_field_and_value() {
        let bad = |hard: &str| {
            Settings {
                hard: given("--eviction-hard", hard, '<'),
                ..Settings::default()
            }
            .build()
            .unwrap_err()
        };
        assert!(bad("memory.free<1Gi").starts_with(
            "--eviction-hard: unknown eviction signal \"memory.free\" (one of memory.available"
        ));
        assert_eq!(
            bad("nodefs.available<120%"),
            "--eviction-hard: nodefs.available: percentage \"120%\" must be between 0% and 100%"
        );
        assert_eq!(
            bad("memory.available<-1Mi"),
            "--eviction-hard: memory.available: quantity \"-1Mi\" must not be negative"
        );
        assert!(bad("memory.available<lots").contains("\"lots\""));
        let e = Settings {
            pressure_transition_period: Some(Given {
                origin: "c.yaml: evictionPressureTransitionPeriod".into(),
                value: "soon".into(),
            }),
            ..Settings::default()
        }
        .build()
        .unwrap_err();
        assert!(
            e.starts_with("c.yaml: evictionPressureTransitionPeriod: invalid duration \"soon\""),
            "{e}"
        );
        let e = Settings {
            memory_psi_threshold: Some(Given {
                origin: "--eviction-memory-psi-threshold".into(),
                value: "250".into(),
            }),
            ..Settings::default()
        }
        .build()
        .unwrap_err();
        assert_eq!(
            e,
            "--eviction-memory-psi-threshold: \"250\" must be between 0 and 100 (0 is off)"
        );
    }

    #[test]
    fn zero_disables_and_pid_has_no_default() {
        let c = Settings {
            hard: given(
                "--eviction-hard",
                "memory.available<0,nodefs.available<0%,pid.available<1k",
                '<',
            ),
            ..Settings::default()
        }
        .build()
        .unwrap();
        assert_eq!(c.thresholds.len(), 1);
        assert_eq!(c.thresholds[0].signal, Signal::PidAvailable);
        assert_eq!(c.thresholds[0].value, Amount::Absolute(1000));
        assert!(
            !Config::default()
                .thresholds
                .iter()
                .any(|t| t.signal == Signal::PidAvailable)
        );
    }

    #[test]
    fn percent_of_capacity() {
        assert_eq!(Amount::Percent(10.0).of(1000), 100);
        assert_eq!(Amount::Absolute(7).of(1000), 7);
    }
}
