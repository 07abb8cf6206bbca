use super::*;
use crate::qos::tests::{container, pod};

fn node(milli_cpu: i64, memory: i64) -> crate::cm::Allocatable {
    crate::cm::Allocatable {
        milli_cpu,
        memory,
        ephemeral_storage: 1 << 40,
    }
}

fn one(uid: &str, req: &[(&str, &str)], lim: &[(&str, &str)]) -> Pod {
    let mut p = pod(vec![container(req, lim)]);
    p.metadata.uid = uid.into();
    p.metadata.name = uid.into();
    p
}

#[test]
fn an_unchanged_spec_is_no_resize_and_equivalent_quantities_are_unchanged() {
    let p = one("a", &[("cpu", "1")], &[("cpu", "1"), ("memory", "64Mi")]);
    let alloc = from_spec(&p);
    let same = one(
        "a",
        &[("cpu", "1000m")],
        &[("cpu", "1"), ("memory", "64Mi")],
    );
    assert_eq!(
        decide(&same, &alloc, &[], &node(2000, 1 << 30)),
        Decision::Unchanged
    );
}

#[test]
fn a_resize_that_fits_is_allocated_and_one_that_does_not_is_deferred_with_the_predicate_message() {
    let p = one("a", &[("cpu", "500m")], &[("cpu", "500m")]);
    let alloc = from_spec(&p);
    let other = one("b", &[("cpu", "1")], &[]);
    let up = one("a", &[("cpu", "900m")], &[("cpu", "900m")]);
    assert_eq!(
        decide(&up, &alloc, &[&other], &node(2000, 1 << 30)),
        Decision::Allocate
    );
    let too_much = one("a", &[("cpu", "1500m")], &[("cpu", "1500m")]);
    assert_eq!(
        decide(&too_much, &alloc, &[&other], &node(2000, 1 << 30)),
        Decision::Pending(Pending {
            reason: DEFERRED,
            message: "Node didn't have enough resource: cpu, requested: 1500, used: 1000, \
                      capacity: 2000"
                .into(),
        })
    );
    // Memory is weighed in bytes.
    let mem = one(
        "a",
        &[("cpu", "500m"), ("memory", "2Gi")],
        &[("cpu", "500m")],
    );
    match decide(&mem, &alloc, &[], &node(2000, 1 << 30)) {
        Decision::Pending(p) => assert_eq!(
            p.message,
            "Node didn't have enough resource: memory, requested: 2147483648, used: 0, \
             capacity: 1073741824"
        ),
        d => panic!("{d:?}"),
    }
}

#[test]
fn a_resized_init_container_that_is_not_a_sidecar_is_infeasible() {
    let mut p = one("a", &[("cpu", "100m")], &[]);
    let mut init = container(&[("cpu", "100m")], &[]);
    init.name = "init".into();
    p.spec.init_containers.push(init);
    let alloc = from_spec(&p);
    p.spec.init_containers[0]
        .resources
        .requests
        .insert("cpu".into(), "200m".parse().unwrap());
    match decide(&p, &alloc, &[], &node(2000, 1 << 30)) {
        Decision::Pending(x) => assert_eq!(x.reason, INFEASIBLE),
        d => panic!("{d:?}"),
    }
    // A sidecar is resizable.
    p.spec.init_containers[0].restart_policy = Some("Always".into());
    assert_eq!(
        decide(&p, &alloc, &[], &node(2000, 1 << 30)),
        Decision::Allocate
    );
}

#[test]
fn the_manager_runs_the_allocated_resources_until_the_resize_fits() {
    let m = Manager::in_memory();
    let p = one("a", &[("cpu", "500m")], &[("cpu", "500m")]);
    assert_eq!(m.allocate(&p, &[], Some(&node(1000, 1 << 30))), p);
    let big = one("a", &[("cpu", "2")], &[("cpu", "2")]);
    let run = m.allocate(&big, &[], Some(&node(1000, 1 << 30)));
    assert_eq!(
        run.spec.containers[0].resources,
        p.spec.containers[0].resources
    );
    assert_eq!(m.pending("a").map(|p| p.reason), Some(DEFERRED));
    // The node grows (another pod left, or allocatable changed): the resize goes through.
    let run = m.allocate(&big, &[], Some(&node(4000, 1 << 30)));
    assert_eq!(run, big);
    assert_eq!(m.pending("a"), None);
    assert_eq!(
        m.get("a").unwrap().allocated["c"],
        big.spec.containers[0].resources
    );
}

#[test]
fn the_checkpoint_keeps_allocated_and_actuated_resources_across_a_restart() {
    let dir = std::env::temp_dir().join(format!("picolet-alloc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("checkpoints").join("allocated_pods_state");
    let p = one(
        "a",
        &[("cpu", "500m")],
        &[("cpu", "500m"), ("memory", "64Mi")],
    );
    let up = one(
        "a",
        &[("cpu", "700m")],
        &[("cpu", "700m"), ("memory", "64Mi")],
    );
    {
        let m = Manager::load(path.clone());
        m.allocate(&p, &[], None);
        m.set_actuated("a", "c", &p.spec.containers[0].resources);
        m.allocate(&up, &[], None);
    }
    let m = Manager::load(path.clone());
    let a = m.get("a").expect("kept");
    assert_eq!(a.allocated["c"], up.spec.containers[0].resources);
    assert_eq!(
        m.actuated("a", "c"),
        Some(p.spec.containers[0].resources.clone()),
        "what the container ran with before the restart"
    );
    m.remove("a");
    assert_eq!(Manager::load(path.clone()).get("a"), None);
    // A pod never resized is not written at all: starting pods costs no write.
    let _ = std::fs::remove_file(&path);
    let m = Manager::load(path.clone());
    m.allocate(&p, &[], None);
    m.set_actuated("a", "c", &p.spec.containers[0].resources);
    assert!(!path.exists(), "nothing written for a pod never resized");
    // A damaged checkpoint is set aside and named, not trusted.
    std::fs::write(&path, b"{not json").unwrap();
    let m = Manager::load(path.clone());
    assert_eq!(m.get("a"), None);
    assert!(path.with_extension("bad").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn changed_names_the_resources_a_resize_touches() {
    let a = container(&[("cpu", "1")], &[("memory", "1Gi")]).resources;
    let b = container(&[("cpu", "1")], &[("memory", "2Gi")]).resources;
    assert_eq!(changed(&a, &b), vec!["memory"]);
    let c = container(&[("cpu", "2")], &[("memory", "2Gi")]).resources;
    assert_eq!(changed(&a, &c), vec!["cpu", "memory"]);
    assert!(changed(&a, &a).is_empty());
}

#[test]
fn resize_events_say_what_upstreams_do() {
    let mut p = one("a", &[("cpu", "500m")], &[("cpu", "1")]);
    p.metadata.generation = Some(2);
    assert_eq!(
        event_message("Pod resize started", &p, None),
        r#"Pod resize started: {"containers":[{"name":"c","resources":{"limits":{"cpu":"1"},"requests":{"cpu":"500m"}}}],"generation":2}"#
    );
    assert_eq!(
        event_message("Pod resize Deferred", &p, Some("no room")),
        r#"Pod resize Deferred: {"containers":[{"name":"c","resources":{"limits":{"cpu":"1"},"requests":{"cpu":"500m"}}}],"generation":2,"error":"no room"}"#
    );
}
