use std::collections::HashMap;

use super::*;
use crate::cri::RuntimeService;
use crate::cri::fake::FakeRuntime;
use crate::kuberuntime::NodeContext;
use crate::rt::FakeClock;
use crate::testdir::TestDir;

const MIN: Duration = Duration::from_secs(60);

fn img(id: &str, size: u64) -> ListedImage {
    ListedImage {
        id: id.into(),
        names: vec![format!("example.org/{id}:1")],
        size,
        pinned: false,
    }
}

fn refs(v: &[&str]) -> HashSet<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

fn rec(first: Instant, last: Option<Instant>, size: u64) -> ImageRecord {
    ImageRecord {
        first_detected: first,
        last_used: last,
        size,
        pinned: false,
        names: Vec::new(),
    }
}

fn ids(v: &[Candidate]) -> Vec<&str> {
    v.iter().map(|c| c.id.as_str()).collect()
}

fn policy(high: u8, low: u8, min_age: Duration) -> ImageGcPolicy {
    ImageGcPolicy {
        high_threshold_percent: high,
        low_threshold_percent: low,
        min_age,
        max_age: Duration::ZERO,
    }
}

const FULL: FsUsage = FsUsage {
    capacity: 1000,
    available: 100,
};

#[test]
fn defaults_are_upstreams_and_100_turns_collection_off() {
    let p = ImageGcPolicy::default();
    assert_eq!(
        (p.high_threshold_percent, p.low_threshold_percent),
        (85, 80)
    );
    assert_eq!(p.min_age, Duration::from_secs(120));
    assert!(p.max_age.is_zero());
    assert!(p.enabled());
    let off = policy(100, 80, MIN);
    assert!(!off.enabled());
    let aged = ImageGcPolicy {
        max_age: Duration::from_secs(3600),
        ..off
    };
    assert!(aged.enabled(), "the maximum age still collects");
}

#[test]
fn detect_records_first_sight_and_use_and_forgets_gone_images() {
    let t0 = Instant::now();
    let mut r = Records::new();
    detect(
        &mut r,
        &[img("a", 10), img("b", 20)],
        &refs(&["example.org/b:1"]),
        t0,
    );
    assert_eq!(r["a"].first_detected, t0);
    assert_eq!(r["a"].last_used, None);
    assert_eq!(r["b"].last_used, Some(t0), "used through its tag");
    assert_eq!(r["b"].names, vec!["example.org/b:1".to_owned()]);

    let t1 = t0 + MIN;
    let mut a = img("a", 11);
    a.pinned = true;
    detect(&mut r, &[a, img("c", 30)], &refs(&["a"]), t1);
    assert!(!r.contains_key("b"), "gone from the runtime: forgotten");
    assert_eq!(r["a"].first_detected, t0, "first detection stays");
    assert_eq!(r["a"].last_used, Some(t1), "used through its id");
    assert_eq!(r["a"].size, 11);
    assert!(r["a"].pinned);
    assert_eq!(r["c"].first_detected, t1);

    // Unused now: the last use stays what it was.
    detect(&mut r, &[img("a", 11)], &HashSet::new(), t1 + MIN);
    assert_eq!(r["a"].last_used, Some(t1));
}

#[test]
fn below_the_high_threshold_nothing_goes() {
    let t0 = Instant::now();
    let mut r = Records::new();
    r.insert("a".into(), rec(t0, None, 500));
    let now = t0 + Duration::from_secs(3600);
    let p = policy(85, 80, MIN);
    let at = |available| FsUsage {
        capacity: 1000,
        available,
    };
    // As upstream, usage is 100 minus the free percentage rounded down: 16 % free is 84 % used,
    // under 85; 15.9 % free is 85 % used.
    let none = select_for_space(&r, &Keep::default(), &p, at(160), now, &HashSet::new());
    assert_eq!(none, Ok(None));
    let plan = select_for_space(&r, &Keep::default(), &p, at(159), now, &HashSet::new())
        .unwrap()
        .unwrap();
    assert_eq!((plan.usage_percent, plan.bytes_to_free), (85, 41));
    // Exactly at the threshold collects (as upstream: usage >= high).
    let plan = select_for_space(&r, &Keep::default(), &p, at(150), now, &HashSet::new())
        .unwrap()
        .unwrap();
    assert_eq!(plan.usage_percent, 85);
    assert_eq!(plan.bytes_to_free, 50, "down to 80 %: 200 bytes free");
    assert_eq!(ids(&plan.remove), vec!["a"]);
}

#[test]
fn usage_is_computed_as_upstream_and_bad_capacity_is_an_error() {
    let t0 = Instant::now();
    let r = Records::new();
    let p = policy(85, 80, MIN);
    let k = Keep::default();
    let e = select_for_space(
        &r,
        &k,
        &p,
        FsUsage {
            capacity: 0,
            available: 0,
        },
        t0,
        &HashSet::new(),
    );
    assert_eq!(e, Err("invalid capacity 0 on image filesystem".into()));
    // More available than capacity counts as empty.
    let odd = FsUsage {
        capacity: 1000,
        available: 5000,
    };
    assert_eq!(
        select_for_space(&r, &k, &p, odd, t0, &HashSet::new()),
        Ok(None)
    );
    // Huge filesystems do not overflow.
    let big = FsUsage {
        capacity: u64::MAX,
        available: u64::MAX / 50,
    };
    let plan = select_for_space(&r, &k, &p, big, t0, &HashSet::new())
        .unwrap()
        .unwrap();
    assert_eq!(
        plan.usage_percent, 99,
        "just under 2 % free rounds down to 1"
    );
    assert!(plan.bytes_to_free > u64::MAX / 10);
    // A low threshold of 0 frees everything used.
    let p0 = policy(1, 0, MIN);
    let plan = select_for_space(&r, &k, &p0, FULL, t0, &HashSet::new())
        .unwrap()
        .unwrap();
    assert_eq!(plan.bytes_to_free, 900);
}

#[test]
fn least_recently_used_go_first_never_used_before_used_ties_by_detection() {
    let t0 = Instant::now();
    let mut r = Records::new();
    r.insert("used-late".into(), rec(t0, Some(t0 + 3 * MIN), 1));
    r.insert("used-early".into(), rec(t0 + MIN, Some(t0 + MIN), 1));
    r.insert("never-new".into(), rec(t0 + 2 * MIN, None, 1));
    r.insert("never-old".into(), rec(t0, None, 1));
    r.insert("never-old-b".into(), rec(t0, None, 1));
    r.insert("same-use-old".into(), rec(t0, Some(t0 + 2 * MIN), 1));
    r.insert("same-use-new".into(), rec(t0 + MIN, Some(t0 + 2 * MIN), 1));
    assert_eq!(
        ids(&eviction_order(&r, &Keep::default())),
        vec![
            "never-old",
            "never-old-b",
            "never-new",
            "used-early",
            "same-use-old",
            "same-use-new",
            "used-late"
        ]
    );
}

#[test]
fn collection_stops_once_enough_is_freed_and_keeps_the_rest_as_spares() {
    let t0 = Instant::now();
    let mut r = Records::new();
    r.insert("a".into(), rec(t0, Some(t0), 100));
    r.insert("b".into(), rec(t0, Some(t0 + MIN), 300));
    r.insert("c".into(), rec(t0, Some(t0 + 2 * MIN), 400));
    r.insert("d".into(), rec(t0, Some(t0 + 3 * MIN), 50));
    let now = t0 + 10 * MIN;
    // 900 of 1000 used; down to 50 % frees 400: a (100) and b (300) are enough.
    let p = policy(85, 50, MIN);
    let plan = select_for_space(&r, &Keep::default(), &p, FULL, now, &HashSet::new())
        .unwrap()
        .unwrap();
    assert_eq!(plan.bytes_to_free, 400);
    assert_eq!(ids(&plan.remove), vec!["a", "b"]);
    assert_eq!(ids(&plan.spare), vec!["c", "d"]);
    // One byte more takes the next one too.
    let p = policy(85, 49, MIN);
    let plan = select_for_space(&r, &Keep::default(), &p, FULL, now, &HashSet::new())
        .unwrap()
        .unwrap();
    assert_eq!(ids(&plan.remove), vec!["a", "b", "c"]);
    // Not enough eligible: everything eligible goes, no spares.
    let p = policy(85, 0, MIN);
    let plan = select_for_space(&r, &Keep::default(), &p, FULL, now, &HashSet::new())
        .unwrap()
        .unwrap();
    assert_eq!(ids(&plan.remove), vec!["a", "b", "c", "d"]);
    assert!(plan.spare.is_empty());
    // Images removed by age this round are not counted again.
    let plan = select_for_space(&r, &Keep::default(), &p, FULL, now, &refs(&["b"]))
        .unwrap()
        .unwrap();
    assert_eq!(ids(&plan.remove), vec!["a", "c", "d"]);
}

#[test]
fn images_younger_than_the_minimum_age_stay() {
    let t0 = Instant::now();
    let mut r = Records::new();
    r.insert("old".into(), rec(t0, None, 10));
    r.insert("edge".into(), rec(t0 + MIN, None, 10));
    r.insert(
        "young".into(),
        rec(t0 + MIN + Duration::from_secs(1), None, 10),
    );
    let now = t0 + 2 * MIN;
    let p = policy(85, 0, MIN);
    let plan = select_for_space(&r, &Keep::default(), &p, FULL, now, &HashSet::new())
        .unwrap()
        .unwrap();
    assert_eq!(
        ids(&plan.remove),
        vec!["old", "edge"],
        "exactly the minimum age may go"
    );
    // A minimum age of zero lets even a just-detected image go.
    let p = policy(85, 0, Duration::ZERO);
    let plan = select_for_space(
        &r,
        &Keep::default(),
        &p,
        FULL,
        t0 + MIN + Duration::from_secs(1),
        &HashSet::new(),
    )
    .unwrap()
    .unwrap();
    assert_eq!(plan.remove.len(), 3);
}

#[test]
fn in_use_pinned_sandbox_and_needed_images_never_go() {
    let t0 = Instant::now();
    let mut r = Records::new();
    let named = |n: &str| ImageRecord {
        names: vec![
            format!("example.org/{n}:1"),
            format!("example.org/{n}@sha256:00"),
        ],
        ..rec(t0, None, 10)
    };
    for n in [
        "running",
        "exited",
        "pause",
        "static",
        "checkpointed",
        "free",
    ] {
        r.insert(format!("sha256:{n}"), named(n));
    }
    r.insert(
        "sha256:pinned".into(),
        ImageRecord {
            pinned: true,
            ..named("pinned")
        },
    );
    let keep = Keep {
        // By id, as containerd's image_ref, and by the spec's reference.
        in_use: refs(&["sha256:running", "example.org/exited:1"]),
        // By digest.
        sandbox: refs(&["example.org/pause@sha256:00"]),
        needed: refs(&["example.org/static:1", "sha256:checkpointed"]),
    };
    let reasons: BTreeMap<&str, Option<&str>> = r
        .iter()
        .map(|(id, x)| (id.as_str(), keep.reason(id, x)))
        .collect();
    assert_eq!(reasons["sha256:running"], Some("used by a container"));
    assert_eq!(reasons["sha256:exited"], Some("used by a container"));
    assert_eq!(reasons["sha256:pause"], Some("the sandbox image"));
    assert_eq!(
        reasons["sha256:static"],
        Some("named by a pod of this node")
    );
    assert_eq!(
        reasons["sha256:checkpointed"],
        Some("named by a pod of this node")
    );
    assert_eq!(reasons["sha256:pinned"], Some("pinned by the runtime"));
    assert_eq!(reasons["sha256:free"], None);
    let p = policy(1, 0, Duration::ZERO);
    let plan = select_for_space(&r, &keep, &p, FULL, t0 + MIN, &HashSet::new())
        .unwrap()
        .unwrap();
    assert_eq!(ids(&plan.remove), vec!["sha256:free"]);
    let aged = ImageGcPolicy { max_age: MIN, ..p };
    let old = select_old(&r, &keep, &aged, t0 + 10 * MIN, t0);
    assert_eq!(ids(&old), vec!["sha256:free"]);
}

#[test]
fn the_maximum_age_removes_images_unused_that_long_once_picolet_ran_that_long() {
    let t0 = Instant::now();
    let hour = Duration::from_secs(3600);
    let mut r = Records::new();
    r.insert("stale".into(), rec(t0, Some(t0), 1));
    r.insert("fresh".into(), rec(t0, Some(t0 + hour), 1));
    r.insert("never-used".into(), rec(t0, None, 1));
    r.insert("new-never-used".into(), rec(t0 + hour, None, 1));
    let p = ImageGcPolicy {
        max_age: hour,
        ..policy(85, 80, MIN)
    };
    let k = Keep::default();
    // Off when zero.
    let off = ImageGcPolicy {
        max_age: Duration::ZERO,
        ..p.clone()
    };
    assert!(select_old(&r, &k, &off, t0 + 10 * hour, t0).is_empty());
    // Not before picolet itself ran for the maximum age.
    assert!(select_old(&r, &k, &p, t0 + hour, t0).is_empty());
    let now = t0 + hour + Duration::from_secs(1);
    assert_eq!(
        ids(&select_old(&r, &k, &p, now, t0)),
        vec!["never-used", "stale"]
    );
    // A picolet started later waits again.
    assert!(select_old(&r, &k, &p, now, t0 + Duration::from_secs(10)).is_empty());
}

#[test]
fn the_sandbox_image_is_read_from_containerds_configuration() {
    let info = |json: &str| HashMap::from([("config".to_owned(), json.to_owned())]);
    assert_eq!(
        sandbox_image_from_info(&info(
            r#"{"sandboxImage":"registry.k8s.io/pause:3.6","x":1}"#
        )),
        Some("registry.k8s.io/pause:3.6".into())
    );
    assert_eq!(
        sandbox_image_from_info(&info(
            r#"{"pinnedImages":{"sandbox":"registry.k8s.io/pause:3.10"}}"#
        )),
        Some("registry.k8s.io/pause:3.10".into())
    );
    assert_eq!(
        sandbox_image_from_info(&info(r#"{"sandboxImage":""}"#)),
        None
    );
    assert_eq!(sandbox_image_from_info(&info("not json")), None);
    assert_eq!(sandbox_image_from_info(&HashMap::new()), None);
}

// --- the manager, against the fake runtime under a fake clock ---------------------------------

/// A node whose directories are in one that goes when the second is dropped.
fn node(tag: &str) -> (NodeContext, TestDir) {
    let dir = TestDir::new(&format!("imagegc-{tag}"));
    let node = NodeContext {
        root_dir: dir.join("root"),
        pod_logs_dir: dir.join("logs"),
        ..Default::default()
    };
    (node, dir)
}

/// Runs a container from `image` in a new sandbox of the fake; exits it when `exited`.
async fn run_container(fake: &FakeRuntime, pod: &str, image: &str, exited: bool) -> String {
    let sb = fake
        .run_pod_sandbox(v1::RunPodSandboxRequest {
            config: Some(v1::PodSandboxConfig {
                metadata: Some(v1::PodSandboxMetadata {
                    name: pod.into(),
                    uid: format!("uid-{pod}"),
                    namespace: "default".into(),
                    attempt: 0,
                }),
                ..Default::default()
            }),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .pod_sandbox_id;
    let c = fake
        .create_container(v1::CreateContainerRequest {
            pod_sandbox_id: sb,
            config: Some(v1::ContainerConfig {
                metadata: Some(v1::ContainerMetadata {
                    name: "main".into(),
                    attempt: 0,
                }),
                image: Some(v1::ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .container_id;
    fake.start_container(&c).await.unwrap();
    if exited {
        fake.exit_container(&c, 0);
    }
    c
}

/// A filesystem of 100 MB holding the fake's images and nothing else.
fn fs_of(fake: &FakeRuntime) -> FsStat {
    let fake = fake.clone();
    Rc::new(move |_| {
        let used: u64 = fake.images().iter().map(|i| i.size).sum();
        Box::pin(std::future::ready(Ok(FsUsage {
            capacity: 100_000_000,
            available: 100_000_000 - used,
        })))
    })
}

fn names(fake: &FakeRuntime) -> Vec<String> {
    let mut v: Vec<String> = fake
        .images()
        .into_iter()
        .flat_map(|i| i.repo_tags)
        .collect();
    v.sort();
    v
}

#[test]
fn the_manager_frees_space_through_the_runtime_and_keeps_what_must_stay() {
    let clock = FakeClock::install();
    rt::block_on(async {
        let fake = FakeRuntime::new();
        let mb = 1_000_000;
        for (name, size) in [
            ("example.org/running:1", 10 * mb),
            ("example.org/exited:1", 10 * mb),
            ("example.org/static:1", 10 * mb),
            ("example.org/pause:1", mb),
            ("example.org/pinned:1", mb),
            ("docker.io/library/alpine:3", mb),
            ("example.org/old:1", 20 * mb),
            ("example.org/older:1", 20 * mb),
            ("example.org/newer:1", 20 * mb),
        ] {
            fake.add_image(name);
            fake.set_image_size(name, size);
        }
        fake.set_sandbox_image("example.org/pause:1");
        fake.pin_image("example.org/pinned:1");
        run_container(&fake, "a", "example.org/running:1", false).await;
        run_container(&fake, "b", "example.org/exited:1", true).await;
        let svc = Rc::new(fake.clone());
        let (node, _dir) = node("space");
        let rm = Rc::new(RuntimeManager::new(svc.clone(), svc, node));
        // 93 MB of 100 used; 85 % high, 50 % low: 43 MB to free.
        let gc = ImageGcManager::new(rm, policy(85, 50, Duration::from_secs(120)), None)
            .with_fs_stat(fs_of(&fake));
        // A pod names alpine as "alpine:3": the runtime resolves it.
        let needed = vec!["example.org/static:1".to_owned(), "alpine:3".to_owned()];

        // Everything was just detected: too young to go.
        let r = gc.garbage_collect(&needed).await.unwrap();
        assert!(r.removed.is_empty(), "nothing eligible yet: {r:?}");
        assert_eq!(r.wanted, 43 * mb);
        assert_eq!(
            r.shortfall().unwrap(),
            "failed to garbage collect required amount of images: wanted to free 43000000 \
             bytes, but only 0 bytes were eligible and removed"
        );
        assert_eq!(fake.calls("RemoveImage"), 0);

        // "newer" is used a minute in, then its container goes: "old" and "older", never
        // used, go before it.
        clock.advance(MIN);
        let c = run_container(&fake, "c", "example.org/newer:1", false).await;
        gc.detect_images().await.unwrap();
        fake.remove_container(&c).await.unwrap();
        let newer = fake
            .images()
            .into_iter()
            .find(|i| i.repo_tags[0] == "example.org/newer:1")
            .unwrap()
            .id;

        clock.advance(2 * MIN);
        let r = gc.garbage_collect(&needed).await.unwrap();
        assert_eq!(r.wanted, 43 * mb);
        // The two never used free 40 MB, not yet 43: the least recently used one goes too.
        assert_eq!(r.removed.len(), 3, "{r:?}");
        assert_eq!(r.removed[2], newer, "used most recently: last");
        assert_eq!(r.freed, 60 * mb);
        assert_eq!(r.shortfall(), None);
        assert_eq!(
            names(&fake),
            vec![
                "docker.io/library/alpine:3",
                "example.org/exited:1",
                "example.org/pause:1",
                "example.org/pinned:1",
                "example.org/running:1",
                "example.org/static:1",
            ],
            "in use (running or exited), sandbox, pinned and needed images stay"
        );
        assert_eq!(gc.records().len(), 6, "removed images are forgotten");

        // Below the threshold now: nothing more goes.
        let r = gc.garbage_collect(&needed).await.unwrap();
        assert!(r.removed.is_empty());
        assert_eq!(fake.calls("RemoveImage"), 3);
    });
}

#[test]
fn removal_stops_once_enough_is_freed_and_a_failed_removal_takes_the_next() {
    let clock = FakeClock::install();
    rt::block_on(async {
        let fake = FakeRuntime::new();
        let mb = 1_000_000;
        for name in [
            "example.org/a:1",
            "example.org/b:1",
            "example.org/c:1",
            "example.org/d:1",
        ] {
            fake.add_image(name);
            fake.set_image_size(name, 22 * mb);
        }
        let svc = Rc::new(fake.clone());
        let (node, _dir) = node("stop");
        let rm = Rc::new(RuntimeManager::new(svc.clone(), svc, node));
        // 88 MB used, down to 70 %: 18 MB to free, one image is enough.
        let gc = ImageGcManager::new(rm, policy(85, 70, Duration::ZERO), None)
            .with_fs_stat(fs_of(&fake));
        gc.detect_images().await.unwrap();
        clock.advance(MIN);
        fake.fail_next("RemoveImage", tonic::Code::Unavailable, "busy");
        let r = gc.garbage_collect(&[]).await.unwrap();
        assert_eq!(r.wanted, 18 * mb);
        assert_eq!(r.removed.len(), 1, "one image frees enough: {r:?}");
        assert_eq!(
            fake.calls("RemoveImage"),
            2,
            "the failed one, then the next"
        );
        assert_eq!(fake.images().len(), 3);
    });
}

#[test]
fn the_manager_honours_the_maximum_age_and_the_infra_image_flag() {
    let clock = FakeClock::install();
    rt::block_on(async {
        let fake = FakeRuntime::new();
        let ids = [
            ("example.org/a:1", fake.add_image("example.org/a:1")),
            ("example.org/infra:1", fake.add_image("example.org/infra:1")),
        ];
        let svc = Rc::new(fake.clone());
        let (node, _dir) = node("age");
        let rm = Rc::new(RuntimeManager::new(svc.clone(), svc, node));
        let p = ImageGcPolicy {
            max_age: Duration::from_secs(600),
            ..policy(100, 80, MIN)
        };
        let gc = ImageGcManager::new(rm.clone(), p, Some("example.org/infra:1".into()))
            .with_fs_stat(fs_of(&fake));
        let r = gc.garbage_collect(&[]).await.unwrap();
        assert!(r.removed.is_empty());
        // Both images pulled by picolet, so each has a pull record.
        for (name, id) in &ids {
            rm.pull_records.record_pull_intent(name).unwrap();
            rm.pull_records.record_image_pulled(
                name,
                id,
                crate::kuberuntime::pullmanager::PulledWith::Node,
                rt::now_nanos(),
            );
        }
        let pulled = |name: &str| {
            let id = &ids.iter().find(|(n, _)| *n == name).unwrap().1;
            let hex = crate::sha256::digest(id.as_bytes());
            rm.node
                .root_dir
                .join("image_manager/pulled")
                .join(format!("sha256-{}", hex.trim_start_matches("sha256:")))
        };
        assert!(pulled("example.org/a:1").exists() && pulled("example.org/infra:1").exists());
        clock.advance(Duration::from_secs(601));
        let r = gc.garbage_collect(&[]).await.unwrap();
        assert_eq!(r.removed.len(), 1);
        assert_eq!(names(&fake), vec!["example.org/infra:1"]);
        assert!(
            !pulled("example.org/a:1").exists(),
            "the removed image's pull record goes with it"
        );
        assert!(
            pulled("example.org/infra:1").exists(),
            "the kept image's stays"
        );
        assert_eq!(
            fake.calls("ImageFsInfo"),
            0,
            "high threshold 100: no measurement"
        );
    });
}

#[test]
fn the_loop_waits_for_the_sources_and_then_collects_every_five_minutes() {
    let clock = FakeClock::install();
    rt::block_on(async {
        let fake = FakeRuntime::new();
        fake.add_image("example.org/a:1");
        let svc = Rc::new(fake.clone());
        let (node, _dir) = node("loop");
        let rm = Rc::new(RuntimeManager::new(svc.clone(), svc, node));
        let gc = Rc::new(
            ImageGcManager::new(rm, policy(1, 0, Duration::ZERO), None).with_fs_stat(fs_of(&fake)),
        );
        let ready = Rc::new(std::cell::Cell::new(false));
        let r = ready.clone();
        let _task = rt::spawn(gc.clone().run(move || r.get().then(Vec::new)));
        rt::settle().await;
        clock.advance(Duration::from_secs(10));
        rt::settle().await;
        assert_eq!(
            fake.calls("ListImages"),
            0,
            "sources not seen: no collection"
        );
        ready.set(true);
        clock.advance(READY_POLL);
        rt::settle().await;
        assert_eq!(fake.calls("ListImages"), 1);
        assert!(fake.images().is_empty());
        fake.add_image("example.org/b:1");
        clock.advance(IMAGE_GC_PERIOD - Duration::from_secs(1));
        rt::settle().await;
        assert_eq!(fake.calls("ListImages"), 1);
        clock.advance(Duration::from_secs(1));
        rt::settle().await;
        assert_eq!(fake.calls("ListImages"), 2);
        // Detected just now and removed in the same round (minimum age 0).
        assert!(fake.images().is_empty());
    });
}

#[test]
fn under_disk_pressure_every_unused_image_old_enough_goes_whatever_the_usage() {
    let t0 = Instant::now();
    let mut r = Records::new();
    r.insert("used-long-ago".into(), rec(t0, Some(t0), 5));
    r.insert("never-used".into(), rec(t0, None, 7));
    r.insert("just-pulled".into(), rec(t0 + 9 * MIN, None, 9));
    r.insert("running".into(), rec(t0, Some(t0 + 9 * MIN), 11));
    let keep = Keep {
        in_use: refs(&["running"]),
        ..Keep::default()
    };
    // High thresholds of 100 would never collect for space; disk pressure removes anyway.
    let p = policy(100, 99, 2 * MIN);
    let got = select_unused(&r, &keep, &p, t0 + 10 * MIN);
    assert_eq!(
        ids(&got),
        vec!["never-used", "used-long-ago"],
        "never used before used, the image in use and the one younger than the minimum age kept"
    );
}

#[test]
fn a_running_pods_image_volume_is_in_use_until_the_pod_is_gone() {
    let clock = FakeClock::install();
    rt::block_on(async {
        let fake = FakeRuntime::new();
        fake.add_image("example.org/app:1");
        let model = fake.add_image("example.org/model:1");
        fake.add_image("example.org/unused:1");
        let svc = Rc::new(fake.clone());
        let (node, _dir) = node("volume");
        let rm = Rc::new(RuntimeManager::new(svc.clone(), svc, node));
        let mut pod = crate::api::Pod::default();
        pod.metadata.name = "web".into();
        pod.metadata.uid = "u-vol".into();
        pod.spec.containers = vec![crate::api::Container {
            name: "app".into(),
            image: "example.org/app:1".into(),
            volume_mounts: vec![crate::api::VolumeMount {
                name: "model".into(),
                mount_path: "/model".into(),
                ..Default::default()
            }],
            ..Default::default()
        }];
        pod.spec.volumes = vec![crate::api::Volume {
            name: "model".into(),
            image: Some(crate::api::ImageVolumeSource {
                reference: "example.org/model:1".into(),
                pull_policy: None,
            }),
            ..Default::default()
        }];
        let st = crate::kubecontainer::PodRuntimeStatus {
            uid: "u-vol".into(),
            ..Default::default()
        };
        let out = rm.sync_pod(&pod, &st).await;
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        assert_eq!(rm.volume_images(), vec![model.clone()]);
        let gc =
            ImageGcManager::new(rm.clone(), policy(100, 80, MIN), None).with_fs_stat(fs_of(&fake));
        // First seen now; collectable once older than the minimum age.
        gc.detect_images().await.unwrap();
        clock.advance(2 * MIN);
        // Disk pressure: every unused image goes, but not the one the pod's volume mounts,
        // which no container of the runtime names.
        gc.delete_unused_images(&[]).await.unwrap();
        assert_eq!(
            names(&fake),
            vec!["example.org/app:1", "example.org/model:1"]
        );
        assert!(gc.records()[&model].last_used.is_some());
        // Once the pod is gone from the runtime, its volume's image is not used any more.
        for c in fake.containers() {
            fake.stop_container(&c.id, 0).await.unwrap();
            fake.remove_container(&c.id).await.unwrap();
        }
        rm.forget("u-vol", "web", "default").await;
        assert!(rm.volume_images().is_empty());
        clock.advance(2 * MIN);
        gc.delete_unused_images(&[]).await.unwrap();
        assert_eq!(names(&fake), Vec::<String>::new());
    });
}

#[test]
fn preloaded_images_are_kept_where_the_runtime_does_not_report_their_pin() {
    let _clock = FakeClock::install();
    rt::block_on(async {
        let fake = FakeRuntime::new();
        // Neither is reported pinned (a containerd before 1.6.22); one came from an archive.
        fake.add_image("example.org/preloaded:1");
        fake.add_image("example.org/other:1");
        let svc = Rc::new(fake.clone());
        let (node, _dir) = node("preloaded");
        let rm = Rc::new(RuntimeManager::new(svc.clone(), svc, node));
        // Every unused image is to go: any usage is over the high threshold.
        let gc = ImageGcManager::new(rm, policy(1, 0, Duration::ZERO), None)
            .with_fs_stat(fs_of(&fake))
            .with_preloaded(Rc::new(|| vec!["example.org/preloaded:1".to_owned()]));
        let r = gc.garbage_collect(&[]).await.unwrap();
        assert_eq!(r.removed.len(), 1, "{r:?}");
        assert_eq!(names(&fake), vec!["example.org/preloaded:1"]);
        // Under disk pressure too.
        fake.add_image("example.org/third:1");
        gc.delete_unused_images(&[]).await.unwrap();
        assert_eq!(names(&fake), vec!["example.org/preloaded:1"]);
    });
}
