//! A cluster of picolet nodes on this machine, for the cross-node tests: `scripts/cluster.sh`
//! (the control plane, two picolet nodes each in a network namespace of its own with its own
//! containerd 2.x, pod CIDR and kube-proxy, and CoreDNS; see docs/testing.md, "The cluster"),
//! run with this build's picolet, or with the upstream kubelet of the pinned release as the
//! nodes ([`Agent::Kubelet`], the script's `CLUSTER_AGENT=kubelet`: the reference the same checks
//! and specs are compared with). std only.
//!
//! `up` panics with the script's output when the cluster does not come up (a missing
//! prerequisite included: the test fails, it never skips); `Drop` runs `down`, which stops every
//! process by the PID `up` recorded, removes the namespaces, links, routes and the nat rule it
//! made and the stored images, then removes the directory unless the test failed (its logs and
//! reports are kept then). The node network's addresses are fixed, so one cluster runs on a machine at a time: a
//! second `up` is refused by the script while the first one's bridge exists.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// What runs on the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agent {
    /// This build's picolet.
    Picolet,
    /// The upstream kubelet `scripts/k8s-build.sh --e2e` cached (the script fails, naming that
    /// command, when it is not built).
    Kubelet,
}

impl Agent {
    /// The script's `CLUSTER_AGENT` for it.
    pub fn name(self) -> &'static str {
        match self {
            Agent::Picolet => "picolet",
            Agent::Kubelet => "kubelet",
        }
    }
}

/// A cluster that is up; `down` when dropped.
pub struct Cluster {
    /// The script's directory for it (logs, kubeconfigs, reports).
    pub dir: PathBuf,
    /// What runs on its nodes.
    pub agent: Agent,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cluster.sh")
}

fn run(args: &[&str], dir: &Path, agent: Agent) -> Output {
    run_with(args, dir, agent, &[])
}

fn run_with(args: &[&str], dir: &Path, agent: Agent, env: &[(&str, &str)]) -> Output {
    Command::new("bash")
        .arg(script())
        .args(args)
        .arg(dir)
        .env("PICOLET_BIN", env!("CARGO_BIN_EXE_picolet"))
        .env("CLUSTER_AGENT", agent.name())
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script().display()))
}

fn text(o: &Output) -> String {
    format!(
        "exit {}\n--- stdout\n{}--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

impl Cluster {
    /// `scripts/cluster.sh up` with picolet nodes, in a directory of this process's own under
    /// /tmp (short: unix sockets live under it).
    pub fn up() -> Cluster {
        Cluster::up_with(Agent::Picolet)
    }

    /// `scripts/cluster.sh up` with `agent` on the nodes.
    pub fn up_with(agent: Agent) -> Cluster {
        let dir = PathBuf::from(format!("/tmp/pcl-test-{}", std::process::id()));
        let o = run(&["up"], &dir, agent);
        let c = Cluster { dir, agent };
        assert!(
            o.status.success(),
            "scripts/cluster.sh up ({} nodes) failed: {}",
            agent.name(),
            text(&o)
        );
        c
    }

    /// The admin kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("cp/admin.kubeconfig")
    }

    /// `scripts/cluster.sh check`: its output, whatever its exit status.
    pub fn check(&self) -> Output {
        run(&["check"], &self.dir, self.agent)
    }

    /// `scripts/cluster.sh e2e` with `FOCUS` (a ginkgo regular expression; `SKIP` the script's
    /// default): its output, whatever its exit status. The script's summary (stdout) begins
    /// with "… cluster: selected N, passed N, failed N".
    pub fn e2e(&self, focus: &str) -> Output {
        run_with(&["e2e"], &self.dir, self.agent, &[("FOCUS", focus)])
    }

    /// The output as one text, for assertion messages.
    pub fn describe(o: &Output) -> String {
        text(o)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let o = run(&["down"], &self.dir, self.agent);
        if !o.status.success() {
            eprintln!("scripts/cluster.sh down failed: {}", text(&o));
        } else if !std::thread::panicking() {
            // A test that passed leaves nothing; one that failed leaves its logs and reports
            // (`down` has removed the stored images either way).
            if let Err(e) = std::fs::remove_dir_all(&self.dir) {
                eprintln!("removing {}: {e}", self.dir.display());
            }
        }
    }
}
