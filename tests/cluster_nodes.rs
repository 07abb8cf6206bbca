//! Two picolet nodes as a cluster (`scripts/cluster.sh`, through `support::cluster`): a pod on
//! one node reaches a pod on the other by its IP and one beside it, a Service through
//! kube-proxy, the Service's name through CoreDNS with the pod's own resolv.conf (the node's
//! `clusterDNS`), and the Service by its short name (the `ClusterFirst` search path); then
//! `down` leaves none of the namespaces, the bridge or the routes behind. In between, the quick
//! cross-node specs of upstream's `[Conformance]` set run on the cluster (`CROSS_NODE_SPECS`,
//! e2e.test of the pinned release): each must be selected and pass.
mod support;

use std::process::Command;

use support::cluster::Cluster;

/// Upstream `[Conformance]` specs that need two nodes (a pod on each, traffic between them, a
/// Service or a name served from the other node) and take seconds, not minutes: the pairs of
/// the granular checks span the nodes, the Service and proxy specs reach a backend from the
/// other node or through the apiserver. Names as e2e.test of v1.37.2 gives them.
const CROSS_NODE_SPECS: &[&str] = &[
    "[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: http [Conformance]",
    "[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: udp [Conformance]",
    "[sig-network] Networking Granular Checks: Pods should function for node-pod communication: http [LinuxOnly] [Conformance]",
    "[sig-network] Networking Granular Checks: Pods should function for node-pod communication: udp [LinuxOnly] [Conformance]",
    "[sig-network] Services should serve a basic endpoint from pods [Conformance]",
    "[sig-network] Services should be able to create a functioning NodePort service [Conformance]",
    "[sig-network] DNS should provide DNS for services [Conformance]",
    "[sig-network] Proxy version v1 should proxy through a service and a pod [Conformance]",
];

/// A ginkgo focus that matches exactly the given spec names (every regular expression
/// character escaped).
fn focus_of(names: &[&str]) -> String {
    let escaped: Vec<String> = names
        .iter()
        .map(|n| {
            let mut e = String::new();
            for c in n.chars() {
                if "\\.+*?()|[]{}^$".contains(c) {
                    e.push('\\');
                }
                e.push(c);
            }
            e
        })
        .collect();
    escaped.join("|")
}

/// "selected N, passed N, failed N" from the script's summary line.
fn counts(summary: &str) -> Option<(usize, usize, usize)> {
    let line = summary.lines().find(|l| l.contains("cluster: selected "))?;
    let mut n = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse::<usize>().ok());
    Some((n.next()??, n.next()??, n.next()??))
}

#[test]
fn the_focus_matches_only_the_names() {
    let f = focus_of(&["[sig-x] a.b (c) [Conformance]"]);
    assert_eq!(f, "\\[sig-x\\] a\\.b \\(c\\) \\[Conformance\\]");
    assert_eq!(
        counts("x\npicolet cluster: selected 8, passed 7, failed 1 (ginkgo ran 90.5 s)\n"),
        Some((8, 7, 1))
    );
    assert_eq!(counts("no summary"), None);
}

#[test]
fn pods_reach_pods_services_and_names_across_nodes() {
    let cluster = Cluster::up();
    let o = cluster.check();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", Cluster::describe(&o));
    let ok: Vec<&str> = out.lines().filter(|l| l.starts_with("ok ")).collect();
    assert_eq!(ok.len(), 5, "five checks expected: {out}");
    assert!(ok[0].contains("across nodes"), "{out}");

    let o = cluster.e2e(&focus_of(CROSS_NODE_SPECS));
    let summary = String::from_utf8_lossy(&o.stdout).into_owned();
    let (selected, passed, failed) =
        counts(&summary).unwrap_or_else(|| panic!("no summary: {}", Cluster::describe(&o)));
    assert_eq!(
        (selected, passed, failed),
        (CROSS_NODE_SPECS.len(), CROSS_NODE_SPECS.len(), 0),
        "every cross-node spec selected and passed: {}",
        Cluster::describe(&o)
    );
    assert!(o.status.success(), "{}", Cluster::describe(&o));
    drop(cluster);
    let netns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let netns = String::from_utf8_lossy(&netns.stdout);
    assert!(!netns.contains("pcl-node"), "namespaces left: {netns}");
    let bridge = Command::new("ip")
        .args(["link", "show", "pcl0"])
        .output()
        .unwrap();
    assert!(!bridge.status.success(), "the bridge pcl0 is still there");
    let routes = Command::new("ip").arg("route").output().unwrap();
    let routes = String::from_utf8_lossy(&routes.stdout);
    assert!(
        !routes.contains("10.251."),
        "pod CIDR routes left: {routes}"
    );
}
