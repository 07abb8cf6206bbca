//! The probe results the workers record and the rest of the kubelet reads (upstream's
//! `pkg/kubelet/prober/results`): which probe, its result per container instance, and each
//! worker's running totals. A leaf: the runtime manager (liveness and startup failures), the
//! status generator and the metrics read it without reaching the prober's workers.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use crate::api::{Container, Probe};

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Liveness,
    Readiness,
    Startup,
}

impl Kind {
    /// As the kubelet names it in events: "Liveness probe failed: ...".
    pub fn name(self) -> &'static str {
        match self {
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
            Kind::Startup => "Startup",
        }
    }

    /// The result a new container instance starts with: not ready, alive, not yet started.
    pub fn initial(self) -> ProbeResult {
        match self {
            Kind::Readiness => ProbeResult::Failure,
            Kind::Liveness => ProbeResult::Success,
            Kind::Startup => ProbeResult::Unknown,
        }
    }

    pub fn spec(self, c: &Container) -> Option<&Probe> {
        match self {
            Kind::Liveness => c.liveness_probe.as_ref(),
            Kind::Readiness => c.readiness_probe.as_ref(),
            Kind::Startup => c.startup_probe.as_ref(),
        }
    }
}

/// The recorded result of a probe for one container instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    Unknown,
    Success,
    Failure,
}

/// Probe results per container instance (runtime container ID), shared by the workers that
/// write them, the runtime manager (liveness and startup failures) and the status generator
/// (readiness, started).
#[derive(Debug, Clone, Default)]
pub struct Results(Rc<RefCell<ResultMap>>);

type ResultMap = HashMap<(Box<str>, Kind), ProbeResult>;

impl Results {
    pub fn get(&self, container_id: &str, kind: Kind) -> Option<ProbeResult> {
        self.0.borrow().get(&(container_id.into(), kind)).copied()
    }

    /// Records a result; returns whether it changed.
    pub fn set(&self, container_id: &str, kind: Kind, r: ProbeResult) -> bool {
        self.0.borrow_mut().insert((container_id.into(), kind), r) != Some(r)
    }

    pub fn remove(&self, container_id: &str, kind: Kind) {
        self.0.borrow_mut().remove(&(container_id.into(), kind));
    }

    pub fn len(&self) -> usize {
        self.0.borrow().len()
    }

    /// Whether a running container instance has started: its startup probe succeeded, or it
    /// has none (the kubelet's UpdatePodStatus).
    pub fn started(&self, c: &Container, container_id: &str) -> bool {
        match self.get(container_id, Kind::Startup) {
            Some(r) => r == ProbeResult::Success,
            None => c.startup_probe.is_none(),
        }
    }

    /// Whether a running, started container instance is ready: its readiness probe succeeded,
    /// or it has none.
    pub fn ready(&self, c: &Container, container_id: &str) -> bool {
        match self.get(container_id, Kind::Readiness) {
            Some(r) => r == ProbeResult::Success,
            None => c.readiness_probe.is_none(),
        }
    }
}

/// One probe worker's running totals, for `/metrics/probes`: upstream's `prober_probe_total`
/// (by result) and `prober_probe_duration_seconds` (the successful probes' durations). A
/// worker's series go when it stops, as upstream deletes them.
#[derive(Debug, Clone)]
pub struct ProbeCounts {
    pub kind: Kind,
    pub container: String,
    pub pod: String,
    pub namespace: String,
    pub pod_uid: String,
    /// Probes that succeeded, failed, and ended unknown. A probe that could not be run (the
    /// prober's own error) is not counted, as upstream throws its result away.
    pub results: [u64; 3],
    pub duration: crate::stats::prom::Histogram,
}
