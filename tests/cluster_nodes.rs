//! Two picolet nodes as a cluster (`scripts/cluster.sh`, through `support::cluster`): a pod on
//! one node reaches a pod on the other by its IP and one beside it, a Service through
//! kube-proxy, the Service's name through CoreDNS with the pod's own resolv.conf (the node's
//! `clusterDNS`), and the Service by its short name (the `ClusterFirst` search path); then
//! `down` leaves none of the namespaces, the bridge or the routes behind.
mod support;

use std::process::Command;

use support::cluster::Cluster;

#[test]
fn pods_reach_pods_services_and_names_across_nodes() {
    let cluster = Cluster::up();
    let o = cluster.check();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", Cluster::describe(&o));
    let ok: Vec<&str> = out.lines().filter(|l| l.starts_with("ok ")).collect();
    assert_eq!(ok.len(), 5, "five checks expected: {out}");
    assert!(ok[0].contains("across nodes"), "{out}");
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
