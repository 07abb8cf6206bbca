//! The picolet binary joined to a fake apiserver, with the fake CRI runtime: the cluster paths a
//! real apiserver cannot be made to show on demand (every watch dropped at once, 410 Gone, 403,
//! the apiserver gone and back). The end-to-end cluster tests run a real kube-apiserver.

mod support;

use support::{IMAGE, NODE, agent, fake_apiserver, fake_cri, fakes, run, start_agent, until};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::Agent;
use fake_apiserver::FakeApi;
use fake_cri::{ContainerState, FakeCri, TempDir};
use picolet::rt;
use serde_json::{Value, json};

/// picolet in `<tmp>/a` joined to the fake apiserver.
/// Until the node's Lease has been renewed once (a patch of it).
async fn renewed_once(a: &Arc<Agent>, api: &FakeApi) {
    let lease = lease_path();
    until(
        a,
        "the lease renewed once",
        Duration::from_secs(30),
        async || api.count("PATCH", &lease) >= 1,
    )
    .await;
}

async fn start_joined(tmp: &TempDir, fake: &FakeCri, api: &FakeApi) -> Arc<Agent> {
    start_joined_with(tmp, fake, api, &[]).await
}

/// [`start_joined`] with more flags.
async fn start_joined_with(
    tmp: &TempDir,
    fake: &FakeCri,
    api: &FakeApi,
    more: &[&str],
) -> Arc<Agent> {
    let dir = tmp.path().join("a");
    std::fs::create_dir_all(&dir).unwrap();
    let kc = api.kubeconfig(&dir);
    let mut args = vec!["--kubeconfig".to_owned(), kc.display().to_string()];
    args.extend(more.iter().map(|a| (*a).to_owned()));
    start_agent(&dir, &fake.endpoint(), &args).await
}

fn api_pod(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": IMAGE, "command": ["sleep", "3600"]}]
        }
    })
}

fn running(fake: &FakeCri, pod: &str) -> usize {
    fake.running_containers_of(pod).len()
}

/// Waits until the pod `default/NAME` shows `phase` in the fake apiserver.
async fn until_phase(a: &Agent, api: &FakeApi, name: &str, phase: &str, secs: u64) {
    let key = format!("pods/default/{name}");
    let what = format!("pod {name} {phase} in the API");
    until(a, &what, Duration::from_secs(secs), async || {
        api.get(&key).is_some_and(|p| p["status"]["phase"] == phase)
    })
    .await;
}

#[test]
fn registers_renews_runs_api_pods_and_reports_their_status() {
    run(async {
        let (tmp, fake, api) = fakes("api");
        let a = start_joined(&tmp, &fake, &api).await;

        until(
            &a,
            "the node registered",
            Duration::from_secs(10),
            async || api.get(&format!("nodes/{NODE}")).is_some(),
        )
        .await;
        let node = api.get(&format!("nodes/{NODE}")).unwrap();
        assert_eq!(node["metadata"]["labels"]["kubernetes.io/hostname"], NODE);
        until(
            &a,
            "the node status posted Ready",
            Duration::from_secs(15),
            async || {
                api.get(&format!("nodes/{NODE}")).is_some_and(|n| {
                    n["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
                })
            },
        )
        .await;
        let lease_key = format!("leases/kube-node-lease/{NODE}");
        until(
            &a,
            "the lease created",
            Duration::from_secs(10),
            async || api.get(&lease_key).is_some(),
        )
        .await;
        let first = api.get(&lease_key).unwrap()["spec"]["renewTime"].clone();
        until(
            &a,
            "the lease renewed",
            Duration::from_secs(15),
            async || api.get(&lease_key).unwrap()["spec"]["renewTime"] != first,
        )
        .await;
        assert_eq!(
            api.get(&lease_key).unwrap()["spec"]["leaseDurationSeconds"],
            40
        );
        // Owned by its Node, as the kubelet's Lease is.
        assert_eq!(
            api.get(&lease_key).unwrap()["metadata"]["ownerReferences"],
            serde_json::json!([{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node["metadata"]["uid"]}])
        );

        api.create_pod(api_pod("web"));
        until(
            &a,
            "the API pod running",
            Duration::from_secs(10),
            async || running(&fake, "web") == 1,
        )
        .await;
        until(
            &a,
            "its status Running in the API",
            Duration::from_secs(10),
            async || {
                api.get("pods/default/web").is_some_and(|p| {
                    p["status"]["phase"] == "Running"
                        && p["status"]["containerStatuses"][0]["ready"] == true
                })
            },
        )
        .await;
        // Status is patched once it changed, not every second.
        let patches = api.count("PATCH", "/api/v1/namespaces/default/pods/web/status");
        rt::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            api.count("PATCH", "/api/v1/namespaces/default/pods/web/status"),
            patches,
            "no patch while nothing changed"
        );

        api.delete_pod("default", "web");
        until(
            &a,
            "the deleted pod stopped",
            Duration::from_secs(10),
            async || fake.sandboxes().is_empty() && fake.containers().is_empty(),
        )
        .await;
    });
}

#[test]
fn an_evicted_pod_keeps_the_evictions_disruption_target_in_its_final_status() {
    run(async {
        let (tmp, fake, api) = fakes("evict");
        let a = start_joined(&tmp, &fake, &api).await;
        api.create_pod(api_pod("web"));
        until_phase(&a, &api, "web", "Running", 15).await;
        // The Eviction API sets DisruptionTarget and deletes the pod; picolet stops it, posts
        // its final status and deletes it for good. A Job's pod failure policy reads the
        // condition on that final pod: a status patch that replaced the conditions whole would
        // drop it.
        api.evict("default", "web", 1);
        until(
            &a,
            "the evicted pod deleted for good",
            Duration::from_secs(15),
            async || !api.deleted_pods().is_empty(),
        )
        .await;
        let last = api.deleted_pods().pop().unwrap();
        let conditions = last["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let of = |t: &str| conditions.iter().find(|c| c["type"] == t).cloned();
        let d = of("DisruptionTarget").unwrap_or_else(|| panic!("no DisruptionTarget: {last:#}"));
        assert_eq!(d["reason"], "EvictionByEvictionAPI", "{last:#}");
        assert_eq!(
            of("Ready").map(|c| c["status"].clone()),
            Some(json!("False")),
            "{last:#}"
        );
        assert!(
            last["status"]["containerStatuses"][0]["state"]["terminated"].is_object(),
            "{last:#}"
        );
        // The final status went as what changed since the apiserver's copy: the stopped
        // containers, the Ready condition; not what stayed (the pod's IPs, QoS class, start),
        // nor the condition another writer set.
        let finals: Vec<Value> = api
            .requests()
            .into_iter()
            .zip(api.request_bodies())
            .filter(|((m, p), _)| m == "PATCH" && p == "/api/v1/namespaces/default/pods/web/status")
            .map(|(_, b)| b)
            .collect();
        let patch = &finals.last().expect("status patches")["status"];
        assert!(patch["containerStatuses"].is_array(), "{patch:#}");
        for unchanged in ["podIP", "podIPs", "hostIP", "qosClass", "startTime"] {
            assert!(
                patch.get(unchanged).is_none(),
                "{unchanged} sent again: {patch:#}"
            );
        }
        let sent: Vec<&Value> = patch["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .collect();
        assert!(sent.iter().any(|c| c["type"] == "Ready"), "{patch:#}");
        assert!(
            !sent.iter().any(|c| c["type"] == "DisruptionTarget"),
            "{patch:#}"
        );
    });
}

#[test]
fn a_pod_placed_by_a_label_added_to_the_node_since_start_is_admitted_after_one_read_of_the_node() {
    run(async {
        let (tmp, fake, api) = fakes("labels");
        let a = start_joined(&tmp, &fake, &api).await;
        renewed_once(&a, &api).await;
        let node_key = format!("nodes/{NODE}");
        let node_path = format!("/api/v1/nodes/{NODE}");
        // `kubectl label node`: the Node gets a label picolet was not started with.
        let mut node = api.get(&node_key).expect("the Node registered");
        node["metadata"]["labels"]["zone"] = json!("north");
        api.insert(&node_key, node);
        let reads = || {
            api.requests()
                .iter()
                .filter(|(m, p)| m == "GET" && *p == node_path)
                .count()
        };
        let before = reads();

        // A pod without a selector is admitted as it is: no read.
        api.create_pod(api_pod("plain"));
        let mut north = api_pod("north");
        north["spec"]["nodeSelector"] = json!({"zone": "north"});
        let mut south = api_pod("south");
        south["spec"]["nodeSelector"] = json!({"zone": "south"});
        until_phase(&a, &api, "plain", "Running", 15).await;
        assert_eq!(reads(), before, "{:?}", api.requests());

        // The scheduler placed it by the new label: one read of the Node, then it runs.
        api.create_pod(north);
        until_phase(&a, &api, "north", "Running", 15).await;
        assert_eq!(reads(), before + 1);

        // A pod that fits neither view is read for once and refused with upstream's reason.
        api.create_pod(south);
        until(
            &a,
            "the pod selecting a label the node lacks refused",
            Duration::from_secs(15),
            async || {
                api.get("pods/default/south").is_some_and(|p| {
                    p["status"]["phase"] == "Failed" && p["status"]["reason"] == "NodeAffinity"
                })
            },
        )
        .await;
        assert_eq!(reads(), before + 2);
        // Each pod is looked at once: the refused pod's status change came back on the watch
        // before the next pod did, and read nothing more.
        api.create_pod(api_pod("plain2"));
        until_phase(&a, &api, "plain2", "Running", 15).await;
        assert_eq!(reads(), before + 2, "{:?}", api.requests());
    });
}

#[test]
fn a_dropped_watch_resumes_without_listing_and_410_lists_again() {
    run(async {
        let (tmp, fake, api) = fakes("watch");
        api.create_pod(api_pod("one"));
        let a = start_joined(&tmp, &fake, &api).await;
        until(&a, "pod one running", Duration::from_secs(10), async || {
            running(&fake, "one") == 1
        })
        .await;
        let lists = || api.pod_lists();
        let watches = || api.pod_watches();
        assert_eq!(lists(), 1);
        let w0 = watches();

        // Every watch cut (an apiserver restart, a middlebox): resumed from the last
        // resourceVersion, no new list; and a pod created meanwhile still arrives.
        api.drop_watches();
        api.create_pod(api_pod("two"));
        until(
            &a,
            "pod two running after the watch came back",
            Duration::from_secs(40),
            async || running(&fake, "two") == 1,
        )
        .await;
        until(&a, "a new watch", Duration::from_secs(40), async || {
            watches() > w0
        })
        .await;
        assert_eq!(lists(), 1, "a broken watch resumes; it does not list again");
        let resumed = api
            .requests()
            .into_iter()
            .rfind(|(_, p)| p.contains("watch=true"))
            .unwrap()
            .1;
        assert!(
            !resumed.contains("resourceVersion=&"),
            "resumed from a version: {resumed}"
        );

        // History compacted: the resumed watch gets 410 Gone and lists once more.
        api.compact_and_drop_watches();
        until(
            &a,
            "a new list after 410",
            Duration::from_secs(40),
            async || lists() == 2,
        )
        .await;
        api.create_pod(api_pod("three"));
        until(
            &a,
            "pod three running",
            Duration::from_secs(10),
            async || running(&fake, "three") == 1,
        )
        .await;
        assert_eq!(
            running(&fake, "one") + running(&fake, "two"),
            2,
            "nothing restarted"
        );
        let restarts: usize = fake
            .containers()
            .iter()
            .filter(|c| {
                c.config
                    .labels
                    .get("io.kubernetes.pod.name")
                    .map(String::as_str)
                    == Some("one")
            })
            .count();
        assert_eq!(restarts, 1, "pod one was never recreated");
    });
}

#[test]
fn a_watch_that_keeps_expiring_backs_off_instead_of_listing_in_a_loop() {
    run(async {
        let (tmp, fake, api) = fakes("storm");
        api.create_pod(api_pod("one"));
        api.expire_every_watch();
        let a = start_joined(&tmp, &fake, &api).await;
        until(&a, "pod one running", Duration::from_secs(10), async || {
            running(&fake, "one") == 1
        })
        .await;
        rt::sleep(Duration::from_secs(6)).await;
        let lists = api.pod_lists();
        // Backoff windows of 2, 4, 8 s (a random wait below each): at most a handful of lists,
        // never hundreds.
        assert!(lists <= 6, "{lists} lists in ~6 s");
        assert!(lists >= 2, "it does keep trying: {lists}");
    });
}

#[test]
fn pods_keep_running_while_the_apiserver_is_down_and_statuses_land_after() {
    run(async {
        let (tmp, fake, api) = fakes("down");
        api.create_pod(api_pod("web"));
        let a = start_joined(&tmp, &fake, &api).await;
        until(&a, "web running", Duration::from_secs(10), async || {
            running(&fake, "web") == 1
        })
        .await;
        until_phase(&a, &api, "web", "Running", 10).await;
        api.set_down(true);
        // The container dies while the apiserver is away: restarted offline.
        let id = fake
            .containers()
            .into_iter()
            .find(|c| c.state == ContainerState::ContainerRunning)
            .unwrap()
            .id;
        fake.exit_container(&id, 1);
        until(
            &a,
            "web restarted offline",
            Duration::from_secs(10),
            async || running(&fake, "web") == 1,
        )
        .await;
        rt::sleep(Duration::from_secs(2)).await;
        let healthy = {
            let a = a.clone();
            rt::unblock(move || a.get("/healthz")).await
        };
        assert_eq!(
            healthy.as_deref(),
            Some("ok"),
            "healthy while the apiserver is down"
        );
        api.set_down(false);
        until(
            &a,
            "the restart count reaches the API",
            Duration::from_secs(40),
            async || {
                api.get("pods/default/web")
                    .is_some_and(|p| p["status"]["containerStatuses"][0]["restartCount"] == 1)
            },
        )
        .await;
    });
}

#[test]
fn events_made_while_the_apiserver_is_down_wait_and_a_repeat_bumps_the_count() {
    run(async {
        let (tmp, fake, api) = fakes("events");
        api.create_pod(api_pod("web"));
        let a = start_joined(&tmp, &fake, &api).await;
        let event = |reason: &str, message: &str| {
            api.events().into_iter().find(|e| {
                e["reason"] == reason && e["message"].as_str().is_some_and(|m| m.contains(message))
            })
        };
        // The node's NodeReady comes from the node status loop, in no set order with the pod's.
        until(
            &a,
            "Created, Started and NodeReady sent",
            Duration::from_secs(20),
            async || {
                event("Created", "Created container: main").is_some()
                    && event("Started", "Started container main").is_some()
                    && event("NodeReady", "status is now: NodeReady").is_some()
            },
        )
        .await;
        let created = event("Created", "Created container: main").unwrap();
        assert_eq!(created["involvedObject"]["kind"], "Pod");
        assert_eq!(created["involvedObject"]["name"], "web");
        assert_eq!(
            created["involvedObject"]["fieldPath"],
            "spec.containers{main}"
        );
        assert_eq!(created["source"]["component"], "kubelet");
        assert_eq!(created["count"], 1);
        assert!(event("NodeReady", "status is now: NodeReady").is_some());
        api.set_down(true);
        let id = fake
            .containers()
            .into_iter()
            .find(|c| c.state == ContainerState::ContainerRunning)
            .unwrap()
            .id;
        fake.exit_container(&id, 1);
        until(
            &a,
            "web restarted offline",
            Duration::from_secs(20),
            async || running(&fake, "web") == 1,
        )
        .await;
        rt::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            event("Started", "Started container main").map(|e| e["count"].clone()),
            Some(json!(1)),
            "nothing sent while down"
        );
        api.set_down(false);
        until(
            &a,
            "the offline events sent",
            Duration::from_secs(60),
            async || {
                event("Started", "Started container main").is_some_and(|e| e["count"] == 2)
                    && event("Created", "Created container: main").is_some_and(|e| e["count"] == 2)
            },
        )
        .await;
        // One object per distinct event: the repeats were counts, not new objects.
        for reason in ["Created", "Started"] {
            let n = api
                .events()
                .iter()
                .filter(|e| e["reason"] == reason)
                .count();
            assert_eq!(n, 1, "{reason}");
        }
    });
}

/// The node's Lease, as picolet requests it.
fn lease_path() -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}")
}

/// picolet joined with pod `web` running and its pod watch open.
async fn web_running_and_watched(tag: &str) -> (TempDir, FakeCri, FakeApi, Arc<Agent>) {
    let (tmp, fake, api) = fakes(tag);
    api.create_pod(api_pod("web"));
    let a = start_joined(&tmp, &fake, &api).await;
    until(&a, "web running", Duration::from_secs(10), async || {
        running(&fake, "web") == 1
    })
    .await;
    until(&a, "a watch open", Duration::from_secs(10), async || {
        api.pod_watches() == 1
    })
    .await;
    (tmp, fake, api, a)
}

#[test]
fn a_link_back_with_its_connections_dead_is_caught_up_without_waiting_out_the_watch() {
    run(async {
        let (_tmp, fake, api, a) = web_running_and_watched("deadlink").await;
        // The link goes silent and takes every connection with it, the open watch included
        // (which asked for 300 to 600 s). Lease renewals time out after 10 s each; the second
        // in a row closes every connection.
        let lease = lease_path();
        let lease_reads = api.count("GET", &lease);
        api.cut_link(true);
        until(
            &a,
            "picolet closing its connections after two unanswered renewals",
            Duration::from_secs(60),
            async || a.log_text().contains("closing every connection"),
        )
        .await;
        api.cut_link(false);
        api.create_pod(api_pod("late"));
        // Caught up by a new watch from where the old one was (no list), not after the dead
        // watch's 300 s or more: at most an attempt in flight (its answer's 30 s deadline) and
        // a backoff (at most 30 s).
        until(
            &a,
            "the pod created after the link came back running",
            Duration::from_secs(120),
            async || running(&fake, "late") == 1,
        )
        .await;
        assert_eq!(
            api.pod_lists(),
            1,
            "resumed from the last resourceVersion, not listed again"
        );
        until(
            &a,
            "the lease renewed again",
            Duration::from_secs(30),
            async || a.log_text().contains("the apiserver answers again"),
        )
        .await;
        assert_eq!(running(&fake, "web"), 1, "web kept running through the cut");
        assert_eq!(
            api.count("GET", &lease),
            lease_reads,
            "the Lease held was renewed at once, not read again first"
        );
    });
}

#[test]
fn at_rest_the_lease_is_renewed_with_a_patch_of_its_renew_time_on_the_open_connection() {
    // The answers' metadata in protobuf (the default) and in JSON.
    for encoding in ["application/vnd.kubernetes.protobuf", "application/json"] {
        renewed_with_patches(encoding);
    }
}

fn renewed_with_patches(encoding: &str) {
    run(async {
        let (tmp, fake, api) = fakes("restlease");
        let a = start_joined_with(&tmp, &fake, &api, &["--kube-api-content-type", encoding]).await;
        let lease = lease_path();
        renewed_once(&a, &api).await;
        let (connections, from) = (api.connections(), api.requests().len());
        until(
            &a,
            "two more renewals",
            Duration::from_secs(40),
            async || api.count("PATCH", &lease) >= 3,
        )
        .await;
        let (reqs, bodies) = (api.requests(), api.request_bodies());
        let renewals: Vec<_> = reqs[from..]
            .iter()
            .zip(&bodies[from..])
            .filter(|((_, p), _)| *p == lease)
            .collect();
        assert!(renewals.len() >= 2, "{renewals:?}");
        let held = api.get(&format!("leases/kube-node-lease/{NODE}")).unwrap();
        for ((method, _), body) in &renewals {
            assert_eq!(method, "PATCH", "no read, no whole write: {renewals:?}");
            // The renew time alone, with the resourceVersion picolet holds as a precondition.
            let keys = |v: &serde_json::Value| -> Vec<String> {
                v.as_object().unwrap().keys().cloned().collect()
            };
            assert_eq!(keys(body), ["metadata", "spec"], "{body}");
            assert_eq!(keys(&body["metadata"]), ["resourceVersion"], "{body}");
            assert_eq!(keys(&body["spec"]), ["renewTime"], "{body}");
        }
        // Each patch held the resourceVersion the one before it was answered with (the fake
        // refuses any other), and the Lease is still the node's.
        assert_eq!(held["spec"]["holderIdentity"], NODE);
        assert_eq!(held["spec"]["leaseDurationSeconds"], 40);
        assert_eq!(
            held["spec"]["renewTime"],
            renewals.last().unwrap().1["spec"]["renewTime"]
        );
        assert_eq!(
            api.connections(),
            connections,
            "the renewals went over a connection kept open, with no new handshake"
        );
    });
}

#[test]
fn a_lease_with_field_managers_records_has_them_cleared_by_its_first_renewal_only() {
    run(async {
        let (tmp, fake, api) = fakes("mflease");
        // The node's Lease as an apiserver keeps it: already the node's, with the record of
        // the field manager that wrote it.
        api.insert(
            &format!("leases/kube-node-lease/{NODE}"),
            json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": NODE,
                    "namespace": "kube-node-lease",
                    "resourceVersion": "7",
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "u"}],
                    "managedFields": [{
                        "manager": "kubelet",
                        "operation": "Update",
                        "apiVersion": "coordination.k8s.io/v1",
                        "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:spec": {"f:renewTime": {}}},
                    }],
                },
                "spec": {"holderIdentity": NODE, "leaseDurationSeconds": 40},
            }),
        );
        let a = start_joined(&tmp, &fake, &api).await;
        let lease = lease_path();
        until(&a, "three renewals", Duration::from_secs(60), async || {
            api.count("PATCH", &lease) >= 3
        })
        .await;
        let patches: Vec<serde_json::Value> = api
            .requests()
            .iter()
            .zip(api.request_bodies())
            .filter(|((m, p), _)| m == "PATCH" && *p == lease)
            .map(|(_, b)| b)
            .collect();
        // The first write clears them with a list of one empty entry (the API's way); the
        // apiserver keeps none after that, and the later renewals send no such list.
        assert_eq!(
            patches[0]["metadata"]["managedFields"],
            json!([{}]),
            "{patches:?}"
        );
        for p in &patches[1..] {
            assert!(p["metadata"].get("managedFields").is_none(), "{p}");
            assert_eq!(p["spec"].as_object().unwrap().len(), 1, "{p}");
        }
    });
}

#[test]
fn a_renewal_whose_answer_was_lost_is_read_again_and_renewed_at_once_after_the_conflict() {
    run(async {
        let (tmp, fake, api) = fakes("lostlease");
        let a = start_joined(&tmp, &fake, &api).await;
        let lease = lease_path();
        renewed_once(&a, &api).await;
        // The next renewal lands, and its answer is lost: picolet keeps the Lease it had,
        // whose resourceVersion then conflicts with the renewal that landed.
        let from = api.requests().len();
        api.lose_answers("PATCH", &lease, 1);
        until(
            &a,
            "the lost renewal, the conflict, a read and a renewal that lands",
            Duration::from_secs(40),
            async || {
                api.requests()[from..]
                    .iter()
                    .filter(|(_, p)| *p == lease)
                    .count()
                    >= 4
            },
        )
        .await;
        let (reqs, times) = (api.requests(), api.request_times());
        let seen: Vec<(&str, Instant)> = reqs[from..]
            .iter()
            .zip(&times[from..])
            .filter(|((_, p), _)| *p == lease)
            .map(|((m, _), t)| (m.as_str(), *t))
            .take(4)
            .collect();
        let methods: Vec<&str> = seen.iter().map(|(m, _)| *m).collect();
        assert_eq!(methods, ["PATCH", "PATCH", "GET", "PATCH"], "{reqs:?}");
        // The conflict reads again at once, and what was read is renewed at once: not after a
        // back-off or a renewal period (about 10 s).
        let after_conflict = seen[3].1 - seen[1].1;
        assert!(
            after_conflict < Duration::from_secs(5),
            "renewed {after_conflict:?} after the conflict"
        );
        let renewed = api.get(&format!("leases/kube-node-lease/{NODE}")).unwrap();
        assert_eq!(renewed["spec"]["holderIdentity"], NODE);
    });
}

#[test]
fn a_watch_that_falls_silent_alone_is_resumed_after_the_silence_deadline() {
    run(async {
        let (_tmp, fake, api, a) = web_running_and_watched("silent").await;
        // The watch (asking for 300 to 600 s) says nothing more while every other call is
        // answered, so the heartbeat never fails. A bookmark comes every minute on a live
        // watch: 150 s of silence ends it, and a new one resumes from its resourceVersion.
        api.silence_watches();
        api.create_pod(api_pod("late"));
        until(
            &a,
            "the pod created after the watch fell silent running",
            Duration::from_secs(240),
            async || running(&fake, "late") == 1,
        )
        .await;
        assert_eq!(api.pod_watches(), 2);
        assert_eq!(api.pod_lists(), 1, "resumed, not listed again");
        assert!(
            !a.log_text().contains("closing every connection"),
            "the heartbeat kept working"
        );
    });
}

#[test]
fn watches_without_bookmarks_ask_for_none_and_still_follow_the_pods() {
    for encoding in ["application/vnd.kubernetes.protobuf", "application/json"] {
        without_bookmarks(encoding);
    }
}

fn without_bookmarks(encoding: &str) {
    run(async {
        let (tmp, fake, api) = fakes("nobookmarks");
        api.create_pod(api_pod("web"));
        let flags = [
            "--apiserver-watch-bookmarks=false",
            "--kube-api-content-type",
            encoding,
        ];
        let a = start_joined_with(&tmp, &fake, &api, &flags).await;
        until(&a, "web running", Duration::from_secs(10), async || {
            running(&fake, "web") == 1
        })
        .await;
        until(&a, "a watch open", Duration::from_secs(10), async || {
            api.pod_watches() == 1
        })
        .await;
        // The pod created after the watch opened comes on it, with no bookmark before or after.
        api.create_pod(api_pod("late"));
        until(&a, "late running", Duration::from_secs(10), async || {
            running(&fake, "late") == 1
        })
        .await;
        let watches: Vec<String> = api
            .requests()
            .into_iter()
            .filter(|(m, p)| m == "GET" && p.contains("watch=true"))
            .map(|(_, p)| p)
            .collect();
        assert!(!watches.is_empty());
        for w in &watches {
            assert!(!w.contains("allowWatchBookmarks"), "{w}");
        }
        assert_eq!(api.bookmarks(), 0);
        assert_eq!(api.pod_watches(), 1, "the watch stayed open");
        assert_eq!(api.pod_lists(), 1);
    });
}

#[test]
fn watches_ask_for_bookmarks_by_default() {
    run(async {
        let (_tmp, _fake, api, a) = web_running_and_watched("bookmarks").await;
        // The pod and its status writes move the resourceVersion on: a bookmark follows.
        api.create_pod(api_pod("second"));
        until(&a, "a bookmark", Duration::from_secs(10), async || {
            api.bookmarks() > 0
        })
        .await;
        let watch = api
            .requests()
            .into_iter()
            .find(|(m, p)| m == "GET" && p.starts_with("/api/v1/pods?") && p.contains("watch=true"))
            .unwrap();
        assert!(watch.1.contains("allowWatchBookmarks=true"), "{}", watch.1);
    });
}

#[test]
fn a_forbidden_identity_is_reported_clearly() {
    run(async {
        let (tmp, fake, api) = fakes("403");
        api.forbid("/api/v1/pods");
        let a = start_joined(&tmp, &fake, &api).await;
        until(&a, "a clear error", Duration::from_secs(10), async || {
            a.log_text()
                .contains("the apiserver refuses this node's pods")
        })
        .await;
        rt::sleep(Duration::from_secs(3)).await;
        let said = a.log_text().matches("refuses this node's pods").count();
        assert_eq!(said, 1, "said once, not in a loop");
        let lists = api.count("GET", "/api/v1/pods?");
        // Random waits below 2, 4, 8 s: seldom more than 4 lists in ~4 s, never more than 7
        // (a loop without backoff makes hundreds).
        assert!(lists <= 7, "retries back off: {lists} lists in ~4 s");
    });
}

#[test]
fn a_static_pod_gets_a_mirror_pod_that_comes_back_and_follows_edits() {
    run(async {
        let (tmp, fake, api) = fakes("mirror");
        let a = start_joined(&tmp, &fake, &api).await;
        let manifest = |cmd: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: st\nspec:\n  containers:\n  - name: c\n    \
                 image: {IMAGE}\n    command: [sleep, \"{cmd}\"]\n"
            )
        };
        a.write_manifest("st.yaml", &manifest("3600"));
        let mirror = || {
            api.pods_with_annotation("kubernetes.io/config.mirror")
                .into_iter()
                .next()
        };
        until(
            &a,
            "the mirror pod created",
            Duration::from_secs(15),
            async || mirror().is_some(),
        )
        .await;
        let m = mirror().unwrap();
        assert_eq!(m["metadata"]["name"], "st-e2e-node");
        assert_eq!(m["spec"]["nodeName"], NODE);
        assert_eq!(m["metadata"]["ownerReferences"][0]["kind"], "Node");
        assert_eq!(m["metadata"]["ownerReferences"][0]["uid"], "uid-e2e-node");
        until(
            &a,
            "the static pod's status on its mirror",
            Duration::from_secs(15),
            async || mirror().is_some_and(|m| m["status"]["phase"] == "Running"),
        )
        .await;
        assert_eq!(
            running(&fake, "st-e2e-node"),
            1,
            "the mirror pod is not run as a pod"
        );

        // Another writer's condition on the mirror, then a restart of the static pod's
        // container: the mirror's status follows with a patch of what changed, and the
        // condition stays.
        api.add_condition(
            "default",
            "st-e2e-node",
            serde_json::json!({"type": "example.com/gate", "status": "True"}),
        );
        let status_path = "/api/v1/namespaces/default/pods/st-e2e-node/status";
        let patches_before = api.count("PATCH", status_path);
        let id = fake.running_container_of("st-e2e-node").unwrap().id;
        fake.exit_container(&id, 1);
        until(
            &a,
            "the restart on the mirror's status",
            Duration::from_secs(20),
            async || {
                mirror().is_some_and(|m| {
                    m["status"]["containerStatuses"][0]["restartCount"] == 1
                        && m["status"]["containerStatuses"][0]["state"]["running"].is_object()
                })
            },
        )
        .await;
        let conditions = mirror().unwrap()["status"]["conditions"].clone();
        assert!(
            conditions
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == "example.com/gate"),
            "another writer's condition is kept: {conditions}"
        );
        let patches: Vec<serde_json::Value> = api
            .requests()
            .into_iter()
            .zip(api.request_bodies())
            .filter(|((m, p), _)| m == "PATCH" && p == status_path)
            .map(|(_, b)| b)
            .skip(patches_before)
            .collect();
        assert!(!patches.is_empty());
        for b in &patches {
            let st = b["status"].as_object().unwrap();
            for unchanged in ["qosClass", "hostIPs", "podIPs", "startTime"] {
                assert!(
                    !st.contains_key(unchanged),
                    "a mirror status patch carries what changed, not {unchanged}: {b}"
                );
            }
            assert!(
                !b.to_string().contains("example.com/gate"),
                "another writer's condition is not written: {b}"
            );
        }

        // Deleted by someone: it comes back.
        api.delete_pod("default", "st-e2e-node");
        until(
            &a,
            "the mirror pod recreated",
            Duration::from_secs(15),
            async || mirror().is_some(),
        )
        .await;
        let hash =
            mirror().unwrap()["metadata"]["annotations"]["kubernetes.io/config.mirror"].clone();

        // The static pod edited: its mirror is replaced by one with the new hash.
        a.write_manifest("st.yaml", &manifest("7200"));
        until(
            &a,
            "the mirror pod replaced",
            Duration::from_secs(20),
            async || {
                mirror().is_some_and(|m| {
                    m["metadata"]["annotations"]["kubernetes.io/config.mirror"] != hash
                })
            },
        )
        .await;
        assert_eq!(
            api.pods_with_annotation("kubernetes.io/config.mirror")
                .len(),
            1
        );
        assert_eq!(running(&fake, "st-e2e-node"), 1);
    });
}

#[test]
fn restarted_while_the_apiserver_is_down_it_runs_the_checkpoint_then_reconciles() {
    run(async {
        let (tmp, fake, api) = fakes("offline");
        api.create_pod(api_pod("keep"));
        api.create_pod(api_pod("gone"));
        let a = start_joined(&tmp, &fake, &api).await;
        until(
            &a,
            "both running with their status in the API",
            Duration::from_secs(15),
            async || {
                ["keep", "gone"].iter().all(|n| {
                    running(&fake, n) == 1
                        && api
                            .get(&format!("pods/default/{n}"))
                            .is_some_and(|p| p["status"]["phase"] == "Running")
                })
            },
        )
        .await;
        let before: Vec<String> = fake.containers().into_iter().map(|c| c.id).collect();

        // picolet dies, the apiserver goes away, and a pod is deleted meanwhile.
        let mut agent = Arc::try_unwrap(a).ok().expect("one owner");
        agent.kill9();
        api.set_down(true);
        api.delete_pod("default", "gone");
        let a = Arc::new(
            rt::unblock(move || {
                agent.restart();
                agent
            })
            .await,
        );
        until(
            &a,
            "the checkpoint loaded",
            Duration::from_secs(10),
            async || a.log_text().contains("running 2 pods from the checkpoint"),
        )
        .await;
        rt::sleep(Duration::from_secs(3)).await;
        let after: Vec<String> = fake.containers().into_iter().map(|c| c.id).collect();
        assert_eq!(before, after, "running containers adopted, none restarted");

        // A container exits while offline: restarted with what the checkpoint holds.
        let keep = fake
            .containers()
            .into_iter()
            .find(|c| {
                c.config
                    .labels
                    .get("io.kubernetes.pod.name")
                    .map(String::as_str)
                    == Some("keep")
            })
            .unwrap()
            .id;
        fake.exit_container(&keep, 1);
        until(
            &a,
            "keep restarted offline",
            Duration::from_secs(10),
            async || running(&fake, "keep") == 1,
        )
        .await;

        // The link returns: the pod deleted meanwhile goes, keep's restart reaches the API.
        let patches = api.count("PATCH", "/api/v1/namespaces/default/pods/");
        api.set_down(false);
        until(&a, "gone removed", Duration::from_secs(40), async || {
            running(&fake, "gone") == 0
        })
        .await;
        until(
            &a,
            "keep's restart count in the API",
            Duration::from_secs(20),
            async || {
                api.get("pods/default/keep")
                    .is_some_and(|p| p["status"]["containerStatuses"][0]["restartCount"] == 1)
            },
        )
        .await;
        let sent: Vec<String> = api
            .requests()
            .into_iter()
            .filter(|(m, p)| m == "PATCH" && p.starts_with("/api/v1/namespaces/default/pods/"))
            .skip(patches)
            .map(|(_, p)| p)
            .collect();
        // keep's new status, and at most one attempt for the pod deleted meanwhile (404) before
        // the relist removes it.
        let keep_sent = sent.iter().filter(|p| p.contains("/pods/keep/")).count();
        let gone_sent = sent.iter().filter(|p| p.contains("/pods/gone/")).count();
        assert_eq!(keep_sent, 1, "{sent:?}");
        assert!(gone_sent <= 1, "no retries after a 404: {sent:?}");
        assert_eq!(
            keep_sent + gone_sent,
            sent.len(),
            "nothing else re-posted: {sent:?}"
        );
        assert!(
            std::fs::read(tmp.path().join("a/kubelet/checkpoints/pods.json")).is_ok(),
            "checkpoint under --root-dir"
        );
    });
}

/// A pod as admission leaves it: the service account's projected volume (token, the cluster's
/// CA, the namespace), plus a ConfigMap and a Secret as volumes and as environment.
fn pod_with_api_volumes(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main", "image": IMAGE, "command": ["sleep", "3600"],
                "env": [
                    {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "app", "key": "greeting"}}},
                    {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                    {"name": "NONE", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "nokey", "optional": true}}}
                ],
                "envFrom": [{"prefix": "CM_", "configMapRef": {"name": "app"}}],
                "volumeMounts": [
                    {"name": "cfg", "mountPath": "/etc/cfg"},
                    {"name": "creds", "mountPath": "/etc/creds"},
                    {"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}
                ]
            }],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "app"}},
                {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 256}},
                {"name": "kube-api-access-x", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                ]}}
            ]
        }
    })
}

/// The objects `pod_with_api_volumes` reads: the ConfigMaps `app` and `kube-root-ca.crt` and
/// the Secret `creds`.
fn put_api_volume_objects(api: &FakeApi) {
    api.put_object("configmaps", "default", "app", json!({"greeting": "hello"}));
    // "s3cret" and "CA PEM", base64.
    api.put_object(
        "secrets",
        "default",
        "creds",
        json!({"password": "czNjcmV0"}),
    );
    api.put_object(
        "configmaps",
        "default",
        "kube-root-ca.crt",
        json!({"ca.crt": "CA PEM"}),
    );
}

/// The container of the pod `vols` once it runs.
async fn running_vols(a: &Arc<Agent>, fake: &FakeCri) -> picolet::cri::fake::FakeContainer {
    until(a, "the pod running", Duration::from_secs(15), async || {
        fake.running_container_of("vols").is_some()
    })
    .await;
    fake.running_container_of("vols").unwrap()
}

fn file_in(c: &picolet::cri::fake::FakeContainer, mount: &str, file: &str) -> String {
    let m = c
        .config
        .mounts
        .iter()
        .find(|m| m.container_path == mount)
        .unwrap_or_else(|| panic!("no mount at {mount}"));
    assert!(m.readonly, "{mount} is mounted read-only");
    std::fs::read_to_string(std::path::Path::new(&m.host_path).join(file)).unwrap()
}

fn env_of(c: &picolet::cri::fake::FakeContainer) -> Vec<(String, String)> {
    c.config
        .envs
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect()
}

#[test]
fn api_volumes_and_env_come_from_the_apiserver_and_survive_an_offline_restart() {
    run(async {
        let (tmp, fake, api) = fakes("apivol");
        put_api_volume_objects(&api);
        api.create_pod(pod_with_api_volumes("vols"));
        // Another pod waits for a ConfigMap that does not exist, and says so.
        let mut waiting = api_pod("waits");
        waiting["spec"]["volumes"] = json!([{"name": "c", "configMap": {"name": "absent"}}]);
        api.create_pod(waiting);
        let a = start_joined(&tmp, &fake, &api).await;

        let c = running_vols(&a, &fake).await;
        let env = env_of(&c);
        for (k, v) in [
            ("GREETING", "hello"),
            ("PW", "s3cret"),
            ("CM_greeting", "hello"),
        ] {
            assert!(
                env.iter().any(|(ek, ev)| ek == k && ev == v),
                "{k}={v} in {env:?}"
            );
        }
        assert!(
            !env.iter().any(|(k, _)| k == "NONE"),
            "optional key left out"
        );
        assert_eq!(file_in(&c, "/etc/cfg", "greeting"), "hello");
        assert_eq!(file_in(&c, "/etc/creds", "password"), "s3cret");
        let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
        assert_eq!(file_in(&c, sa, "token"), "fake-token-1");
        assert_eq!(file_in(&c, sa, "ca.crt"), "CA PEM");
        assert_eq!(file_in(&c, sa, "namespace"), "default");

        // The token is bound to the pod, with the lifetime admission asked for.
        let reqs = api.token_requests();
        assert_eq!(reqs.len(), 1, "{reqs:?}");
        let uid = api.get("pods/default/vols").unwrap()["metadata"]["uid"].clone();
        assert_eq!(reqs[0].0, "token/default/default");
        assert_eq!(reqs[0].1["spec"]["expirationSeconds"], 3607);
        assert_eq!(
            reqs[0].1["spec"]["boundObjectRef"],
            json!({"apiVersion": "v1", "kind": "Pod", "name": "vols", "uid": uid})
        );
        // Objects are read one by one (a node may not list them).
        let reads: Vec<String> = api
            .requests()
            .into_iter()
            .filter(|(_, p)| p.contains("/configmaps") || p.contains("/secrets"))
            .map(|(m, p)| format!("{m} {p}"))
            .collect();
        assert!(
            reads
                .iter()
                .all(|r| r.starts_with("GET /api/v1/namespaces/default/")
                    && !r.ends_with("/configmaps")
                    && !r.ends_with("/secrets")),
            "{reads:?}"
        );
        // The pod whose ConfigMap is missing does not run; as upstream, its container waits
        // in ContainerCreating and a FailedMount event says why.
        until(
            &a,
            "the waiting pod's FailedMount event",
            Duration::from_secs(15),
            async || {
                api.events().iter().any(|e| {
                    e["reason"] == "FailedMount"
                        && e["involvedObject"]["name"] == "waits"
                        && e["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("configmap default/absent not found"))
                })
            },
        )
        .await;
        // The status follows on the next publishing tick (the event may come first).
        until(
            &a,
            "the waiting pod's status",
            Duration::from_secs(5),
            async || {
                api.get("pods/default/waits").unwrap()["status"]["containerStatuses"][0]["state"]
                    ["waiting"]["reason"]
                    == "ContainerCreating"
            },
        )
        .await;
        assert_eq!(running(&fake, "waits"), 0);

        let ckpt = tmp.path().join("a/kubelet/checkpoints/objects.json");
        until(
            &a,
            "the objects checkpointed",
            Duration::from_secs(5),
            async || std::fs::read(&ckpt).is_ok(),
        )
        .await;
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&ckpt).unwrap().permissions().mode() & 0o777,
            0o600
        );

        // Offline restart: the apiserver is gone, picolet starts again and runs what it had.
        let before = c.id.clone();
        let mut agent = Arc::try_unwrap(a).ok().expect("one owner");
        agent.kill9();
        api.set_down(true);
        let a = Arc::new(
            rt::unblock(move || {
                agent.restart();
                agent
            })
            .await,
        );
        until(
            &a,
            "the checkpoint loaded",
            Duration::from_secs(10),
            async || a.log_text().contains("from the checkpoint"),
        )
        .await;
        rt::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            fake.running_container_of("vols").map(|c| c.id),
            Some(before.clone()),
            "adopted, not restarted"
        );
        // Its container exits while offline: it comes back with the content and token it had.
        fake.exit_container(&before, 1);
        until(
            &a,
            "restarted offline",
            Duration::from_secs(15),
            async || {
                fake.running_container_of("vols")
                    .is_some_and(|c| c.id != before)
            },
        )
        .await;
        let c = fake.running_container_of("vols").unwrap();
        assert_eq!(file_in(&c, sa, "token"), "fake-token-1");
        assert_eq!(file_in(&c, "/etc/creds", "password"), "s3cret");
        assert!(env_of(&c).contains(&("PW".to_owned(), "s3cret".to_owned())));
        let log = a.log_text();
        assert!(
            !log.contains("s3cret") && !log.contains("fake-token-1"),
            "no secret in the log"
        );
        api.set_down(false);
    });
}

#[test]
fn a_configmap_change_reaches_the_files_through_its_watch_and_at_rest_nothing_is_read_again() {
    run(async {
        let (tmp, fake, api) = fakes("apiwatch");
        put_api_volume_objects(&api);
        api.create_pod(pod_with_api_volumes("vols"));
        let a = start_joined(&tmp, &fake, &api).await;
        let c = running_vols(&a, &fake).await;
        assert_eq!(file_in(&c, "/etc/cfg", "greeting"), "hello");
        // Each object listed by name, then watched: nothing read with a GET of its own.
        let reads = || -> Vec<String> {
            api.requests()
                .into_iter()
                .filter(|(_, p)| p.contains("/configmaps") || p.contains("/secrets"))
                .map(|(m, p)| format!("{m} {p}"))
                .collect()
        };
        let first = reads();
        for name in ["app", "kube-root-ca.crt"] {
            let by_name = format!(
                "GET /api/v1/namespaces/default/configmaps?fieldSelector=metadata.name%3D{name}"
            );
            assert!(first.contains(&by_name), "{name} listed: {first:?}");
            assert!(
                first
                    .iter()
                    .any(|r| r.starts_with(&format!("{by_name}&watch=true"))),
                "{name} watched: {first:?}"
            );
        }
        assert!(
            !first
                .iter()
                .any(|r| r.contains("/configmaps/") || r.contains("/secrets/")),
            "{first:?}"
        );
        // At rest: no request for them at all.
        rt::sleep(Duration::from_secs(5)).await;
        assert_eq!(reads(), first, "nothing read again at rest");
        // A change reaches the file through the watch, long before any re-read would.
        api.put_object(
            "configmaps",
            "default",
            "app",
            json!({"greeting": "bonjour"}),
        );
        until(
            &a,
            "the change in the file",
            Duration::from_secs(10),
            async || file_in(&c, "/etc/cfg", "greeting") == "bonjour",
        )
        .await;
        assert_eq!(reads(), first, "the change came on the open watch");
    });
}

#[test]
fn a_secret_the_apiserver_refuses_is_reported_once_and_the_pod_waits() {
    run(async {
        let (tmp, fake, api) = fakes("apivol403");
        api.forbid("/api/v1/namespaces/default/secrets");
        let mut p = api_pod("needs-secret");
        p["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": "locked"}}]);
        p["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "s", "mountPath": "/s"}]);
        api.create_pod(p);
        let a = start_joined(&tmp, &fake, &api).await;
        // Listed and watched by name (`configMapAndSecretChangeDetectionStrategy: Watch`).
        let by_name = "/api/v1/namespaces/default/secrets?fieldSelector=metadata.name%3Dlocked";
        let told =
            format!("the apiserver refuses this node's secrets (GET {by_name}: 403 Forbidden");
        let told = told.as_str();
        until(
            &a,
            "the refusal reported",
            Duration::from_secs(15),
            async || a.log_text().contains(told),
        )
        .await;
        rt::sleep(Duration::from_secs(4)).await;
        let log = a.log_text();
        assert_eq!(log.matches(told).count(), 1, "said once, not per retry");
        assert!(log.contains(
            "secret default/locked: the pods using it wait; a node may read only what the pods \
             bound to it use"
        ));
        assert!(api.count("GET", by_name) >= 2, "retried");
        assert_eq!(
            running(&fake, "needs-secret"),
            0,
            "never run without its volume"
        );
    });
}

#[test]
fn memory_pressure_evicts_an_api_pod_reports_it_failed_and_sets_the_node_condition() {
    run(async {
        let (tmp, fake, api) = fakes("evict");
        let dir = tmp.path().join("a");
        std::fs::create_dir_all(&dir).unwrap();
        let kc = api.kubeconfig(&dir);
        let endpoint = fake.endpoint();
        // Never satisfied on this machine: the real memory.available is below its total.
        let total_kib: u64 = std::fs::read_to_string("/proc/meminfo")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap();
        let args = vec![
            "--kubeconfig".to_owned(),
            kc.display().to_string(),
            format!("--eviction-hard=memory.available<{total_kib}Ki"),
        ];
        let a = Arc::new(rt::unblock(move || Agent::start_with(&dir, &endpoint, &args)).await);
        api.create_pod(api_pod("hog"));
        until(
            &a,
            "the API pod evicted in the API",
            Duration::from_secs(40),
            async || {
                api.get("pods/default/hog").is_some_and(|p| {
                    p["status"]["phase"] == "Failed" && p["status"]["reason"] == "Evicted"
                })
            },
        )
        .await;
        let p = api.get("pods/default/hog").unwrap();
        let msg = p["status"]["message"].as_str().unwrap();
        assert!(
            msg.starts_with("The node was low on resource: memory. Threshold quantity: "),
            "{msg}"
        );
        assert!(
            p["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == "DisruptionTarget" && c["status"] == "True"),
            "{p}"
        );
        until(
            &a,
            "its containers gone",
            Duration::from_secs(10),
            async || running(&fake, "hog") == 0 && fake.sandboxes().is_empty(),
        )
        .await;
        until(
            &a,
            "MemoryPressure on the Node",
            Duration::from_secs(20),
            async || {
                api.get(&format!("nodes/{NODE}")).is_some_and(|n| {
                    n["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c["type"] == "MemoryPressure"
                                && c["status"] == "True"
                                && c["reason"] == "KubeletHasInsufficientMemory"
                        })
                    })
                })
            },
        )
        .await;
        // An evicted pod is not started again while it stays bound.
        rt::sleep(Duration::from_secs(3)).await;
        assert_eq!(running(&fake, "hog"), 0);
        assert!(fake.sandboxes().is_empty());
    });
}

#[test]
fn an_api_pod_pulls_with_its_image_pull_secret_also_offline_from_the_checkpoint() {
    use base64::Engine as _;
    run(async {
        let (tmp, fake, api) = fakes("pullsecret");
        let image = "registry.example:5000/app:2";
        fake.set_pullable(image);
        fake.require_auth(image, "pod-user", "pod-pw-9");
        let cfg = json!({"auths": {"registry.example:5000": {"username": "pod-user", "password": "pod-pw-9"}}});
        let b64 = base64::engine::general_purpose::STANDARD;
        api.put_object(
            "secrets",
            "default",
            "regcred",
            json!({".dockerconfigjson": b64.encode(cfg.to_string())}),
        );
        let mut p = api_pod("private");
        p["spec"]["containers"][0]["image"] = json!(image);
        p["spec"]["containers"][0]["imagePullPolicy"] = json!("Always");
        p["spec"]["imagePullSecrets"] = json!([{"name": "absent"}, {"name": "regcred"}]);
        api.create_pod(p);
        let a = start_joined(&tmp, &fake, &api).await;
        until(
            &a,
            "the private pod running",
            Duration::from_secs(20),
            async || running(&fake, "private") == 1,
        )
        .await;
        let auths = fake.pull_auths();
        assert_eq!(
            auths.last().map(|(r, u)| (r.as_str(), u.as_deref())),
            Some(("registry.example:5000/app:2", Some("pod-user"))),
            "{auths:?}"
        );
        // Listed and watched by name (`configMapAndSecretChangeDetectionStrategy: Watch`).
        assert!(
            api.count(
                "GET",
                "/api/v1/namespaces/default/secrets?fieldSelector=metadata.name%3Dregcred"
            ) >= 1,
            "read by a list of its own name"
        );
        // Kept in the checkpoint (0600) for a restart without the apiserver; never logged.
        let ckpt = tmp.path().join("a/kubelet/checkpoints/objects.json");
        until(
            &a,
            "the secret checkpointed",
            Duration::from_secs(10),
            async || std::fs::read_to_string(&ckpt).is_ok_and(|s| s.contains("default/regcred")),
        )
        .await;
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&ckpt).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!a.log_text().contains("pod-pw-9"));

        // Restarted while the apiserver is away: the container exits, and the pull it needs
        // (policy Always) uses the secret from the checkpoint.
        let mut agent = Arc::try_unwrap(a).ok().expect("one owner");
        agent.kill9();
        api.set_down(true);
        let a = Arc::new(
            rt::unblock(move || {
                agent.restart();
                agent
            })
            .await,
        );
        until(
            &a,
            "the checkpoint loaded",
            Duration::from_secs(10),
            async || a.log_text().contains("from the checkpoint"),
        )
        .await;
        let pulls = fake.pull_auths().len();
        let id = fake
            .containers()
            .into_iter()
            .find(|c| {
                c.state == ContainerState::ContainerRunning
                    && c.config
                        .labels
                        .get("io.kubernetes.pod.name")
                        .map(String::as_str)
                        == Some("private")
            })
            .expect("the private container")
            .id;
        fake.exit_container(&id, 1);
        until(
            &a,
            "pulled again offline and running",
            Duration::from_secs(30),
            async || fake.pull_auths().len() > pulls && running(&fake, "private") == 1,
        )
        .await;
        assert_eq!(
            fake.pull_auths()
                .last()
                .and_then(|(_, u)| u.clone())
                .as_deref(),
            Some("pod-user")
        );
    });
}

fn container_named(fake: &FakeCri, pod: &str) -> picolet::cri::fake::FakeContainer {
    fake.containers()
        .into_iter()
        .filter(|c| {
            c.config
                .labels
                .get("io.kubernetes.pod.name")
                .map(String::as_str)
                == Some(pod)
        })
        .max_by_key(|c| c.created_at)
        .unwrap_or_else(|| panic!("no container of {pod}"))
}

fn with_env(name: &str, links: Option<bool>) -> serde_json::Value {
    let mut p = api_pod(name);
    p["spec"]["containers"][0]["env"] = json!([
        {"name": "URL", "value": "http://$(WEB_SERVICE_HOST):$(WEB_SERVICE_PORT)"},
        {"name": "WEB_SERVICE_PORT", "value": "8080"},
    ]);
    if let Some(l) = links {
        p["spec"]["enableServiceLinks"] = json!(l);
    }
    p
}

#[test]
fn service_variables_come_from_one_list_and_the_watch_and_survive_an_offline_restart() {
    run(async {
        let (tmp, fake, api) = fakes("svcenv");
        let port = |name: &str, n: u16| json!({"name": name, "port": n, "protocol": "TCP", "targetPort": 8080});
        api.put_service(
            "default",
            "kubernetes",
            json!({"clusterIP": "10.96.0.1", "ports": [port("https", 443)]}),
        );
        api.put_service(
            "default",
            "web",
            json!({"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}),
        );
        api.put_service(
            "default",
            "headless",
            json!({"clusterIP": "None", "ports": [{"port": 80}]}),
        );
        api.put_service(
            "other",
            "db",
            json!({"clusterIP": "10.96.0.20", "ports": [{"port": 5432}]}),
        );
        api.create_pod(with_env("first", None));
        let a = start_joined(&tmp, &fake, &api).await;
        until(&a, "first running", Duration::from_secs(15), async || {
            running(&fake, "first") == 1
        })
        .await;
        let env: BTreeMap<String, String> = env_of(&container_named(&fake, "first"))
            .into_iter()
            .collect();
        assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
        assert_eq!(env["KUBERNETES_SERVICE_PORT_HTTPS"], "443");
        assert_eq!(env["KUBERNETES_PORT_443_TCP"], "tcp://10.96.0.1:443");
        assert_eq!(env["WEB_SERVICE_HOST"], "10.96.0.10");
        assert_eq!(env["WEB_PORT_80_TCP_PROTO"], "tcp");
        // The container's own variable wins, and `$(VAR)` sees the service's before it is set.
        assert_eq!(env["WEB_SERVICE_PORT"], "8080");
        assert_eq!(env["URL"], "http://10.96.0.10:80");
        assert!(!env.keys().any(|k| k.starts_with("HEADLESS_")), "{env:?}");
        assert!(!env.keys().any(|k| k.starts_with("DB_")), "{env:?}");
        assert_eq!(
            env.keys()
                .filter(|k| k.starts_with("KUBERNETES_") || k.starts_with("WEB_"))
                .count(),
            8 + 7,
            "{env:?}"
        );

        // A service made afterwards arrives through the watch: no second list.
        api.put_service(
            "default",
            "later",
            json!({"clusterIP": "10.96.0.30", "ports": [{"port": 9000, "protocol": "UDP"}]}),
        );
        let ckpt = tmp.path().join("a/kubelet/checkpoints/services.json");
        until(
            &a,
            "later in the checkpoint",
            Duration::from_secs(10),
            async || std::fs::read_to_string(&ckpt).is_ok_and(|t| t.contains("later")),
        )
        .await;
        api.create_pod(with_env("second", Some(true)));
        api.create_pod(with_env("nolinks", Some(false)));
        until(
            &a,
            "second and nolinks running",
            Duration::from_secs(15),
            async || running(&fake, "second") == 1 && running(&fake, "nolinks") == 1,
        )
        .await;
        let second: BTreeMap<String, String> = env_of(&container_named(&fake, "second"))
            .into_iter()
            .collect();
        assert_eq!(second["LATER_PORT"], "udp://10.96.0.30:9000");
        let nolinks: BTreeMap<String, String> = env_of(&container_named(&fake, "nolinks"))
            .into_iter()
            .collect();
        assert_eq!(nolinks["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
        assert!(!nolinks.contains_key("WEB_SERVICE_HOST"), "{nolinks:?}");
        assert!(!nolinks.contains_key("LATER_PORT"), "{nolinks:?}");
        // enableServiceLinks off: $(WEB_SERVICE_HOST) is not defined and stays as written.
        assert_eq!(
            nolinks["URL"],
            "http://$(WEB_SERVICE_HOST):$(WEB_SERVICE_PORT)"
        );
        assert_eq!(api.service_lists(), 1, "{:?}", api.requests());

        // Restarted while the apiserver is down: a container that exits then starts again
        // with the services of the checkpoint.
        let mut agent = Arc::try_unwrap(a).ok().expect("one owner");
        agent.kill9();
        api.set_down(true);
        let a = Arc::new(
            rt::unblock(move || {
                agent.restart();
                agent
            })
            .await,
        );
        until(
            &a,
            "the services checkpoint loaded",
            Duration::from_secs(10),
            async || a.log_text().contains("4 Services from the checkpoint"),
        )
        .await;
        let old = container_named(&fake, "second").id;
        fake.exit_container(&old, 1);
        until(
            &a,
            "second restarted offline",
            Duration::from_secs(15),
            async || running(&fake, "second") == 1 && container_named(&fake, "second").id != old,
        )
        .await;
        let again: BTreeMap<String, String> = env_of(&container_named(&fake, "second"))
            .into_iter()
            .collect();
        assert_eq!(again, second, "the same variables offline");
        api.set_down(false);
    });
}

/// A PEM certificate block of `b64` (its DER bytes are not parsed by the node).
fn cert(b64: &str) -> String {
    format!("-----BEGIN CERTIFICATE-----\n{b64}\n-----END CERTIFICATE-----\n")
}

/// The certificates of a projected trust-bundle file, sorted (the node shuffles them).
fn certs_in(c: &picolet::cri::fake::FakeContainer, mount: &str, file: &str) -> Vec<String> {
    let text = file_in(c, mount, file);
    let mut v: Vec<String> = text
        .split_inclusive("-----END CERTIFICATE-----\n")
        .map(str::to_owned)
        .collect();
    v.sort();
    v
}

#[test]
fn cluster_trust_bundles_are_projected_by_name_and_by_signer_and_follow_their_changes() {
    run(async {
        let (tmp, fake, api) = fakes("apictb");
        let (a_pem, b_pem, c_pem, d_pem, e_pem) = (
            cert("AAEC"),
            cert("AwQF"),
            cert("BgcI"),
            cert("CQoL"),
            cert("DA0O"),
        );
        api.put_bundle("one", "", json!({}), &a_pem);
        api.put_bundle(
            "x.io:s:1",
            "x.io/s",
            json!({"alive": "true"}),
            &format!("{b_pem}{a_pem}"),
        );
        api.put_bundle("x.io:s:2", "x.io/s", json!({"alive": "false"}), &c_pem);
        let mut p = api_pod("ctb");
        p["spec"]["volumes"] = json!([
            {"name": "named", "projected": {"sources": [
                {"clusterTrustBundle": {"name": "one", "path": "a.pem"}},
                {"clusterTrustBundle": {"name": "nope", "path": "none.pem", "optional": true}}
            ]}},
            {"name": "signed", "projected": {"sources": [
                {"clusterTrustBundle": {"signerName": "x.io/s", "labelSelector": {"matchLabels": {"alive": "true"}}, "path": "b.crt"}}
            ]}}
        ]);
        p["spec"]["containers"][0]["volumeMounts"] = json!([
            {"name": "named", "mountPath": "/named"},
            {"name": "signed", "mountPath": "/signed"}
        ]);
        api.create_pod(p);
        let mut waits = api_pod("ctb-waits");
        waits["spec"]["volumes"] = json!([{"name": "v", "projected": {"sources": [
            {"clusterTrustBundle": {"name": "does-not-exist", "path": "t.pem", "optional": false}}
        ]}}]);
        waits["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "v", "mountPath": "/v"}]);
        api.create_pod(waits);
        let a = start_joined(&tmp, &fake, &api).await;
        until(&a, "the pod running", Duration::from_secs(15), async || {
            fake.running_container_of("ctb").is_some()
        })
        .await;
        let c = fake.running_container_of("ctb").unwrap();
        assert_eq!(certs_in(&c, "/named", "a.pem"), vec![a_pem.clone()]);
        assert_eq!(
            file_in(&c, "/named", "none.pem"),
            "",
            "optional: an empty file"
        );
        let mut want = vec![a_pem.clone(), b_pem.clone()];
        want.sort();
        assert_eq!(certs_in(&c, "/signed", "b.crt"), want);
        // All of them listed once and watched, as the kubelet's informer.
        let path = "/apis/certificates.k8s.io/v1/clustertrustbundles";
        let reads = || -> Vec<String> {
            api.requests()
                .into_iter()
                .filter(|(_, p)| p.starts_with(path))
                .map(|(m, p)| format!("{m} {p}"))
                .collect()
        };
        let first = reads();
        assert_eq!(first[0], format!("GET {path}"), "{first:?}");
        assert!(
            first
                .iter()
                .any(|r| r.starts_with(&format!("GET {path}?watch=true"))),
            "{first:?}"
        );
        // A required bundle that does not exist: no container, upstream's words in the event.
        until(
            &a,
            "the waiting pod's FailedMount event",
            Duration::from_secs(15),
            async || {
                api.events().iter().any(|e| {
                    e["reason"] == "FailedMount"
                        && e["involvedObject"]["name"] == "ctb-waits"
                        && e["message"].as_str().is_some_and(|m| {
                            m.contains(
                                "while getting ClusterTrustBundle: \
                                 clustertrustbundles.certificates.k8s.io \"does-not-exist\" \
                                 not found",
                            )
                        })
                })
            },
        )
        .await;
        assert_eq!(running(&fake, "ctb-waits"), 0);
        // Changes come on the watch: a new certificate, a new bundle of the signer, one gone.
        api.put_bundle("x.io:s:1", "x.io/s", json!({"alive": "true"}), &d_pem);
        api.put_bundle("x.io:s:3", "x.io/s", json!({"alive": "true"}), &e_pem);
        let mut want = vec![d_pem.clone(), e_pem.clone()];
        want.sort();
        until(
            &a,
            "the changed bundles in the file",
            Duration::from_secs(10),
            async || certs_in(&c, "/signed", "b.crt") == want,
        )
        .await;
        // The bundle appears: the waiting pod starts.
        api.put_bundle("does-not-exist", "", json!({}), &c_pem);
        until(
            &a,
            "the waiting pod running",
            Duration::from_secs(15),
            async || fake.running_container_of("ctb-waits").is_some(),
        )
        .await;
        let w = fake.running_container_of("ctb-waits").unwrap();
        assert_eq!(certs_in(&w, "/v", "t.pem"), vec![c_pem.clone()]);
        assert_eq!(
            reads().iter().filter(|r| !r.contains("watch=true")).count(),
            1,
            "listed once: {:?}",
            reads()
        );
        api.delete_bundle("x.io:s:3");
        until(
            &a,
            "the deleted bundle gone from the file",
            Duration::from_secs(10),
            async || certs_in(&c, "/signed", "b.crt") == vec![d_pem.clone()],
        )
        .await;
    });
}

/// The DER bytes of the only PEM block of `label` in `text`.
fn der_in(text: &str, label: &str) -> Vec<Vec<u8>> {
    picolet::pki::pem_blocks(text.as_bytes())
        .unwrap()
        .into_iter()
        .filter(|(l, _)| l == label)
        .map(|(_, d)| d)
        .collect()
}

/// The stub request of the PodCertificateRequest `name`.
fn first_csr(api: &FakeApi, name: &str) -> serde_json::Value {
    api.pod_certificate_requests()
        .into_iter()
        .find(|r| r["metadata"]["name"] == name)
        .unwrap()["spec"]["stubPKCS10Request"]
        .clone()
}

/// The uncompressed P-256 point of the first `subjectPublicKey` (BIT STRING of 66 bytes) in a
/// DER object.
fn p256_point(der: &[u8]) -> Vec<u8> {
    let at = der
        .windows(4)
        .position(|w| w == [0x03, 0x42, 0x00, 0x04])
        .expect("a P-256 public key");
    der[at + 3..at + 3 + 65].to_vec()
}

#[test]
fn a_pod_certificate_volume_waits_for_its_request_then_holds_the_key_and_its_chain() {
    run(async {
        let (tmp, fake, api) = fakes("apipcr");
        let with_source = |name: &str, source: serde_json::Value| {
            let mut p = api_pod(name);
            p["spec"]["serviceAccountName"] = json!("web");
            p["spec"]["volumes"] =
                json!([{"name": "tls", "projected": {"sources": [{"podCertificate": source}]}}]);
            p["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "tls", "mountPath": "/tls"}]);
            p
        };
        api.create_pod(with_source(
            "pcr",
            json!({"signerName": "x.io/s", "keyType": "ECDSAP256", "maxExpirationSeconds": 3600,
                   "credentialBundlePath": "bundle.pem", "keyPath": "key.pem",
                   "certificateChainPath": "chain.pem", "userAnnotations": {"x.io/path": "/p"}}),
        ));
        api.create_pod(with_source(
            "pcr-refresh",
            json!({"signerName": "x.io/s", "keyType": "ECDSAP384", "keyPath": "key.pem",
                   "certificateChainPath": "chain.pem"}),
        ));
        api.create_pod(with_source(
            "pcr-rsa",
            json!({"signerName": "x.io/s", "keyType": "RSA3072", "credentialBundlePath": "b.pem"}),
        ));
        api.create_pod(with_source(
            "pcr-denied",
            json!({"signerName": "x.io/s", "keyType": "ED25519", "credentialBundlePath": "b.pem"}),
        ));
        let a = start_joined(&tmp, &fake, &api).await;
        let request_of = |pod: &str| {
            api.pod_certificate_requests()
                .into_iter()
                .find(|r| r["spec"]["podName"] == pod)
        };
        until(
            &a,
            "the pods' requests",
            Duration::from_secs(15),
            async || request_of("pcr").is_some() && request_of("pcr-denied").is_some(),
        )
        .await;
        let r = request_of("pcr").unwrap();
        let pod = api.get("pods/default/pcr").unwrap();
        assert_eq!(r["metadata"]["generateName"], "req-");
        assert_eq!(
            r["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Pod", "name": "pcr", "uid": pod["metadata"]["uid"]}])
        );
        let spec = &r["spec"];
        assert_eq!(spec["podUID"], pod["metadata"]["uid"]);
        assert_eq!(spec["nodeName"], NODE);
        assert_eq!(spec["nodeUID"], format!("uid-{NODE}"));
        assert_eq!(spec["serviceAccountName"], "web");
        assert_eq!(spec["serviceAccountUID"], "sa-uid-default-web");
        assert_eq!(spec["signerName"], "x.io/s");
        assert_eq!(spec["maxExpirationSeconds"], 3600);
        assert_eq!(
            spec["unverifiedUserAnnotations"],
            json!({"x.io/path": "/p"})
        );
        // Pending: the volume is not ready and no container starts.
        rt::sleep(Duration::from_secs(3)).await;
        assert_eq!(running(&fake, "pcr"), 0);
        let name = r["metadata"]["name"].as_str().unwrap().to_owned();
        let chain = api.issue_pcr("default", &name, 86400);
        until(&a, "the pod running", Duration::from_secs(15), async || {
            fake.running_container_of("pcr").is_some()
        })
        .await;
        let c = fake.running_container_of("pcr").unwrap();
        let key = file_in(&c, "/tls", "key.pem");
        assert_eq!(file_in(&c, "/tls", "chain.pem"), chain);
        assert_eq!(file_in(&c, "/tls", "bundle.pem"), format!("{key}{chain}"));
        // The key is the one the certificate was issued for.
        let key_der = der_in(&key, "PRIVATE KEY");
        let cert_der = der_in(&chain, "CERTIFICATE");
        assert_eq!((key_der.len(), cert_der.len()), (1, 1));
        let point = p256_point(&cert_der[0]);
        assert!(
            key_der[0].windows(65).any(|w| w == point.as_slice()),
            "the private key holds the certificate's public key"
        );
        // One request for the pod, no second one while it is fresh.
        let for_pod = || {
            api.pod_certificate_requests()
                .iter()
                .filter(|r| r["spec"]["podName"] == "pcr")
                .count()
        };
        assert_eq!(for_pod(), 1);
        // The node's requests listed and watched by its name, as the Node authorizer allows.
        let path = format!(
            "/apis/certificates.k8s.io/v1/podcertificaterequests?fieldSelector=spec.nodeName%3D{NODE}"
        );
        let reads: Vec<String> = api
            .requests()
            .into_iter()
            .filter(|(_, p)| p.starts_with(&path))
            .map(|(_, p)| p)
            .collect();
        assert_eq!(
            reads.iter().filter(|p| !p.contains("watch=true")).count(),
            1,
            "{reads:?}"
        );
        assert!(reads.iter().any(|p| p.contains("watch=true")), "{reads:?}");
        // A certificate due for refresh: a new key and request, the files unchanged until it
        // is issued, then the new key and chain at once.
        let first = request_of("pcr-refresh").unwrap();
        let first = first["metadata"]["name"].as_str().unwrap().to_owned();
        let old_chain = api.issue_pcr_due("default", &first);
        until(
            &a,
            "the refreshing pod running",
            Duration::from_secs(15),
            async || fake.running_container_of("pcr-refresh").is_some(),
        )
        .await;
        let r = fake.running_container_of("pcr-refresh").unwrap();
        let old_key = file_in(&r, "/tls", "key.pem");
        assert_eq!(file_in(&r, "/tls", "chain.pem"), old_chain);
        let second = || {
            api.pod_certificate_requests()
                .into_iter()
                .filter(|q| q["spec"]["podName"] == "pcr-refresh")
                .nth(1)
        };
        until(
            &a,
            "the refresh request",
            Duration::from_secs(15),
            async || second().is_some(),
        )
        .await;
        assert_eq!(
            file_in(&r, "/tls", "key.pem"),
            old_key,
            "kept while the refresh waits"
        );
        let second = second().unwrap();
        assert_ne!(
            second["spec"]["stubPKCS10Request"],
            first_csr(&api, &first),
            "a new key"
        );
        let new_chain = api.issue_pcr(
            "default",
            second["metadata"]["name"].as_str().unwrap(),
            86400,
        );
        until(
            &a,
            "the new key and chain in the files",
            Duration::from_secs(15),
            async || file_in(&r, "/tls", "chain.pem") == new_chain,
        )
        .await;
        assert_ne!(file_in(&r, "/tls", "key.pem"), old_key);
        assert_eq!(
            running(&fake, "pcr-refresh"),
            1,
            "the container kept running"
        );
        // A key type ring cannot make: no request, the event names pod, volume, field, value.
        until(&a, "the RSA pod's FailedMount event", Duration::from_secs(15), async || {
            api.events().iter().any(|e| {
                e["reason"] == "FailedMount"
                    && e["involvedObject"]["name"] == "pcr-rsa"
                    && e["message"].as_str().is_some_and(|m| {
                        m.contains("pod default/pcr-rsa: volume \"tls\": sources[0].podCertificate.keyType \"RSA3072\": not supported by picolet")
                    })
            })
        })
        .await;
        assert!(request_of("pcr-rsa").is_none());
        assert_eq!(running(&fake, "pcr-rsa"), 0);
        // A denied request: a Denied event once, the volume fails with the reason.
        let denied = request_of("pcr-denied").unwrap();
        let denied = denied["metadata"]["name"].as_str().unwrap();
        api.deny_pcr("default", denied, "NotThisPod", "the signer says no");
        until(&a, "the Denied and FailedMount events", Duration::from_secs(15), async || {
            let ev = api.events();
            let of = |reason: &str, text: &str| {
                ev.iter().any(|e| {
                    e["reason"] == reason
                        && e["involvedObject"]["name"] == "pcr-denied"
                        && e["message"].as_str().is_some_and(|m| m.contains(text))
                })
            };
            of("Denied", "reason=\"NotThisPod\", message=\"the signer says no\"")
                && of(
                    "FailedMount",
                    "PodCertificateRequest was permanently denied: reason=\"NotThisPod\" message=\"the signer says no\"",
                )
        })
        .await;
        assert_eq!(running(&fake, "pcr-denied"), 0);
        assert_eq!(
            api.pod_certificate_requests()
                .iter()
                .filter(|r| r["spec"]["podName"] == "pcr-denied")
                .count(),
            1,
            "no new request after a denial"
        );
    });
}
