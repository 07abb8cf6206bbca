//! picolet's CRI client (`picolet::cri::Cri`) against an in-process fake runtime.

mod support;

use support::{fake_cri, run};

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fake_cri::{ContainerState, FakeCri, PodSandboxState, TempDir, code};
use picolet::cri::{Cri, CriError, Deadlines, v1};
use picolet::rt;

const BUSYBOX: &str = "docker.io/library/busybox:1.36";

fn client(fake: &FakeCri, request: Duration) -> Cri {
    Cri::new(
        &fake.endpoint(),
        None,
        Deadlines {
            request,
            pull: Duration::from_secs(5),
            connect: Duration::from_secs(1),
        },
    )
    .unwrap()
}

fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn sandbox_config(name: &str, uid: &str, host_network: bool) -> v1::PodSandboxConfig {
    v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: format!("/var/log/pods/default_{name}_{uid}"),
        labels: labels(&[
            ("io.kubernetes.pod.name", name),
            ("io.kubernetes.pod.uid", uid),
            ("picolet", "yes"),
        ]),
        annotations: labels(&[("note", "fake")]),
        linux: Some(v1::LinuxPodSandboxConfig {
            security_context: Some(v1::LinuxSandboxSecurityContext {
                namespace_options: Some(v1::NamespaceOption {
                    network: if host_network {
                        v1::NamespaceMode::Node
                    } else {
                        v1::NamespaceMode::Pod
                    } as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container_config(name: &str, image: &str) -> v1::ContainerConfig {
    v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(v1::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        command: vec!["sleep".into(), "3600".into()],
        labels: labels(&[("io.kubernetes.container.name", name)]),
        annotations: labels(&[("io.kubernetes.container.hash", "abc123")]),
        mounts: vec![v1::Mount {
            container_path: "/data".into(),
            host_path: "/var/lib/picolet/pods/x/volumes/data".into(),
            readonly: true,
            ..Default::default()
        }],
        log_path: format!("{name}/0.log"),
        ..Default::default()
    }
}

async fn run_sandbox(cri: &Cri, name: &str, uid: &str) -> String {
    cri.run_pod_sandbox(v1::RunPodSandboxRequest {
        config: Some(sandbox_config(name, uid, false)),
        runtime_handler: String::new(),
    })
    .await
    .unwrap()
    .pod_sandbox_id
}

async fn create(cri: &Cri, sandbox: &str, name: &str) -> Result<String, CriError> {
    cri.create_container(v1::CreateContainerRequest {
        pod_sandbox_id: sandbox.into(),
        config: Some(container_config(name, BUSYBOX)),
        sandbox_config: None,
    })
    .await
    .map(|r| r.container_id)
}

async fn container_status(cri: &Cri, id: &str) -> Result<v1::ContainerStatus, CriError> {
    cri.container_status(v1::ContainerStatusRequest {
        container_id: id.into(),
        verbose: false,
    })
    .await
    .map(|r| r.status.unwrap())
}

fn code_of(e: &CriError) -> Option<tonic::Code> {
    match e {
        CriError::Status { status, .. } => Some(status.code()),
        _ => None,
    }
}

#[test]
fn version_round_trip() {
    run(async {
        let dir = TempDir::new("cri");
        let fake = FakeCri::start(dir.path());
        let cri = client(&fake, Duration::from_secs(5));
        let v = cri
            .version(v1::VersionRequest {
                version: "0.1.0".into(),
            })
            .await
            .unwrap();
        assert_eq!(v.runtime_name, "containerd");
        assert_eq!(v.runtime_api_version, "v1");
        assert_eq!(v.version, "0.1.0");
        assert_eq!(fake.calls("Version"), 1);
        assert_eq!(fake.calls("version"), 1, "snake_case names work too");
        // The client tells the runtime its deadline.
        let t = fake.last_timeout("Version").expect("grpc-timeout sent");
        assert!(
            t <= Duration::from_secs(5) && t > Duration::from_secs(4),
            "{t:?}"
        );
        // Through the runtime seam, the request carries the kubelet's client version.
        picolet::cri::RuntimeService::version(&cri).await.unwrap();
        assert_eq!(fake.version_requests(), ["0.1.0", "0.1.0"]);

        let s = cri
            .status(v1::StatusRequest { verbose: false })
            .await
            .unwrap();
        let conds = s.status.unwrap().conditions;
        assert!(conds.iter().any(|c| c.r#type == "RuntimeReady" && c.status));
        assert!(conds.iter().any(|c| c.r#type == "NetworkReady" && c.status));
        fake.set_network_ready(false);
        let s = cri
            .status(v1::StatusRequest { verbose: false })
            .await
            .unwrap();
        let net = s
            .status
            .unwrap()
            .conditions
            .into_iter()
            .find(|c| c.r#type == "NetworkReady")
            .unwrap();
        assert!(!net.status);
        assert_eq!(net.reason, "NetworkPluginNotReady");
        assert_eq!(fake.connections(), 1, "calls share one connection");
    });
}

#[test]
fn sandbox_and_container_lifecycle() {
    run(async {
        let dir = TempDir::new("cri");
        let fake = FakeCri::start(dir.path());
        fake.add_image(BUSYBOX);
        let cri = client(&fake, Duration::from_secs(5));

        let sb = run_sandbox(&cri, "web", "uid-1").await;
        assert_eq!(sb.len(), 64);
        let other = run_sandbox(&cri, "db", "uid-2").await;
        let host = cri
            .run_pod_sandbox(v1::RunPodSandboxRequest {
                config: Some(sandbox_config("hostnet", "uid-3", true)),
                runtime_handler: String::new(),
            })
            .await
            .unwrap()
            .pod_sandbox_id;

        // The same pod name and attempt again: containerd's name reservation.
        let dup = cri
            .run_pod_sandbox(v1::RunPodSandboxRequest {
                config: Some(sandbox_config("web", "uid-1", false)),
                runtime_handler: String::new(),
            })
            .await
            .unwrap_err();
        assert_eq!(code_of(&dup), Some(tonic::Code::Unknown), "{dup}");
        assert!(dup.to_string().contains("reserve"), "{dup}");

        let st = cri
            .pod_sandbox_status(v1::PodSandboxStatusRequest {
                pod_sandbox_id: sb.clone(),
                verbose: false,
            })
            .await
            .unwrap()
            .status
            .unwrap();
        assert_eq!(st.state, v1::PodSandboxState::SandboxReady as i32);
        let ip = st.network.unwrap().ip;
        assert!(ip.starts_with("10.88.0."), "{ip}");
        assert_eq!(
            st.linux
                .unwrap()
                .namespaces
                .unwrap()
                .options
                .unwrap()
                .network,
            v1::NamespaceMode::Pod as i32
        );
        assert_eq!(st.metadata.unwrap().name, "web");
        let hst = cri
            .pod_sandbox_status(v1::PodSandboxStatusRequest {
                pod_sandbox_id: host.clone(),
                verbose: false,
            })
            .await
            .unwrap()
            .status
            .unwrap();
        assert_eq!(
            hst.network.unwrap().ip,
            "",
            "host-network pods get no pod IP"
        );
        assert_eq!(
            hst.linux
                .unwrap()
                .namespaces
                .unwrap()
                .options
                .unwrap()
                .network,
            v1::NamespaceMode::Node as i32
        );

        // Containers.
        let app = create(&cri, &sb, "app").await.unwrap();
        let side = create(&cri, &sb, "sidecar").await.unwrap();
        let db = create(&cri, &other, "db").await.unwrap();
        let missing = create(
            &cri,
            "0000000000000000000000000000000000000000000000000000000000000000",
            "x",
        )
        .await
        .unwrap_err();
        assert!(missing.is_not_found(), "{missing}");
        let no_image = cri
            .create_container(v1::CreateContainerRequest {
                pod_sandbox_id: sb.clone(),
                config: Some(container_config("noimg", "nope:1")),
                sandbox_config: None,
            })
            .await
            .unwrap_err();
        assert!(no_image.is_not_found(), "{no_image}");

        let st = container_status(&cri, &app).await.unwrap();
        assert_eq!(st.state, v1::ContainerState::ContainerCreated as i32);
        assert_eq!(st.started_at, 0);
        assert_eq!(st.mounts.len(), 1);
        assert_eq!(st.labels["io.kubernetes.container.name"], "app");
        assert_eq!(st.annotations["io.kubernetes.container.hash"], "abc123");
        assert_eq!(st.image.unwrap().image, BUSYBOX);
        assert_eq!(st.log_path, "/var/log/pods/default_web_uid-1/app/0.log");

        let before = rt::now_nanos();
        cri.start_container(v1::StartContainerRequest {
            container_id: app.clone(),
        })
        .await
        .unwrap();
        cri.start_container(v1::StartContainerRequest {
            container_id: db.clone(),
        })
        .await
        .unwrap();
        let again = cri
            .start_container(v1::StartContainerRequest {
                container_id: app.clone(),
            })
            .await
            .unwrap_err();
        assert_eq!(code_of(&again), Some(tonic::Code::Unknown), "{again}");
        let st = container_status(&cri, &app).await.unwrap();
        assert_eq!(st.state, v1::ContainerState::ContainerRunning as i32);
        assert!(st.started_at >= before && st.started_at <= rt::now_nanos());

        // Lists with filters.
        let by_label = cri
            .list_containers(v1::ListContainersRequest {
                filter: Some(v1::ContainerFilter {
                    label_selector: labels(&[("io.kubernetes.container.name", "app")]),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .containers;
        assert_eq!(by_label.len(), 1);
        assert_eq!(by_label[0].id, app);
        assert_eq!(by_label[0].pod_sandbox_id, sb);
        let in_pod = cri
            .list_containers(v1::ListContainersRequest {
                filter: Some(v1::ContainerFilter {
                    pod_sandbox_id: sb.clone(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .containers;
        assert_eq!(in_pod.len(), 2);
        let running = cri
            .list_containers(v1::ListContainersRequest {
                filter: Some(v1::ContainerFilter {
                    state: Some(v1::ContainerStateValue {
                        state: v1::ContainerState::ContainerRunning as i32,
                    }),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .containers;
        let mut ids: Vec<_> = running.iter().map(|c| c.id.clone()).collect();
        ids.sort();
        let mut want = vec![app.clone(), db.clone()];
        want.sort();
        assert_eq!(ids, want);
        let by_prefix = cri
            .list_containers(v1::ListContainersRequest {
                filter: Some(v1::ContainerFilter {
                    id: app[..12].to_owned(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .containers;
        assert_eq!(by_prefix.len(), 1);

        let web_pods = cri
            .list_pod_sandbox(v1::ListPodSandboxRequest {
                filter: Some(v1::PodSandboxFilter {
                    label_selector: labels(&[("io.kubernetes.pod.name", "web")]),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .items;
        assert_eq!(web_pods.len(), 1);
        assert_eq!(web_pods[0].id, sb);
        let all = cri
            .list_pod_sandbox(v1::ListPodSandboxRequest { filter: None })
            .await
            .unwrap()
            .items;
        assert_eq!(all.len(), 3);

        // Exec, stats.
        let out = cri
            .exec_sync(
                &app,
                vec!["echo".into(), "hi".into()],
                Duration::from_secs(1),
            )
            .await
            .unwrap();
        assert_eq!((out.exit_code, out.stdout.as_slice()), (0, &b"hi\n"[..]));
        let out = cri
            .exec_sync(&app, vec!["false".into()], Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(out.exit_code, 1);
        let stats = cri
            .container_stats(v1::ContainerStatsRequest {
                container_id: app.clone(),
            })
            .await
            .unwrap()
            .stats
            .unwrap();
        assert_eq!(stats.attributes.unwrap().id, app);

        // Stop the pod: running containers are killed, created ones stay created.
        cri.stop_pod_sandbox(v1::StopPodSandboxRequest {
            pod_sandbox_id: sb.clone(),
        })
        .await
        .unwrap();
        let st = container_status(&cri, &app).await.unwrap();
        assert_eq!(st.state, v1::ContainerState::ContainerExited as i32);
        assert_eq!(st.exit_code, 137);
        assert_eq!(st.reason, "Error");
        assert!(st.finished_at >= st.started_at);
        let st = container_status(&cri, &side).await.unwrap();
        assert_eq!(st.state, v1::ContainerState::ContainerCreated as i32);
        let ready = cri
            .list_pod_sandbox(v1::ListPodSandboxRequest {
                filter: Some(v1::PodSandboxFilter {
                    state: Some(v1::PodSandboxStateValue {
                        state: v1::PodSandboxState::SandboxReady as i32,
                    }),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .items;
        assert_eq!(ready.len(), 2);
        assert!(ready.iter().all(|p| p.id != sb));
        let st = cri
            .pod_sandbox_status(v1::PodSandboxStatusRequest {
                pod_sandbox_id: sb.clone(),
                verbose: false,
            })
            .await
            .unwrap()
            .status
            .unwrap();
        assert_eq!(st.state, v1::PodSandboxState::SandboxNotready as i32);
        // No new containers in a stopped pod.
        assert!(create(&cri, &sb, "late").await.unwrap_err().is_not_found());

        // Remove: the pod and its containers go; removing again is fine.
        cri.remove_pod_sandbox(v1::RemovePodSandboxRequest {
            pod_sandbox_id: sb.clone(),
        })
        .await
        .unwrap();
        cri.remove_pod_sandbox(v1::RemovePodSandboxRequest {
            pod_sandbox_id: sb.clone(),
        })
        .await
        .unwrap();
        let e = container_status(&cri, &app).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
        let e = cri
            .pod_sandbox_status(v1::PodSandboxStatusRequest {
                pod_sandbox_id: sb.clone(),
                verbose: false,
            })
            .await
            .unwrap_err();
        assert!(e.is_not_found(), "{e}");
        let left = cri
            .list_containers(v1::ListContainersRequest { filter: None })
            .await
            .unwrap()
            .containers;
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].id, db);
        assert_eq!(fake.sandboxes().len(), 2);
        // The name is free again.
        run_sandbox(&cri, "web", "uid-1").await;
    });
}

#[test]
fn container_exit_stop_and_remove() {
    run(async {
        let dir = TempDir::new("cri");
        let fake = FakeCri::start(dir.path());
        fake.add_image(BUSYBOX);
        let cri = client(&fake, Duration::from_secs(5));
        let sb = run_sandbox(&cri, "p", "u").await;
        let a = create(&cri, &sb, "a").await.unwrap();
        let b = create(&cri, &sb, "b").await.unwrap();
        for id in [&a, &b] {
            cri.start_container(v1::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .unwrap();
        }

        // The process exits by itself.
        fake.exit_container(&a, 3);
        let st = container_status(&cri, &a).await.unwrap();
        assert_eq!(
            (st.state, st.exit_code),
            (v1::ContainerState::ContainerExited as i32, 3)
        );
        let e = cri
            .exec_sync(&a, vec!["true".into()], Duration::from_secs(1))
            .await
            .unwrap_err();
        assert_eq!(code_of(&e), Some(tonic::Code::Unknown), "{e}");

        // A graceful stop with the code the test chose; stopping again is a no-op.
        fake.set_stop_exit_code(&b, 0);
        cri.stop_container(&b, 10).await.unwrap();
        cri.stop_container(&b, 10).await.unwrap();
        let st = container_status(&cri, &b).await.unwrap();
        assert_eq!(
            (st.state, st.exit_code, st.reason.as_str()),
            (v1::ContainerState::ContainerExited as i32, 0, "Completed")
        );
        assert!(
            cri.stop_container("no-such-container", 0)
                .await
                .unwrap_err()
                .is_not_found()
        );

        cri.remove_container(v1::RemoveContainerRequest {
            container_id: a.clone(),
        })
        .await
        .unwrap();
        cri.remove_container(v1::RemoveContainerRequest {
            container_id: a.clone(),
        })
        .await
        .unwrap();
        assert!(fake.container(&a).is_none());
        assert_eq!(
            fake.container(&b).unwrap().state,
            ContainerState::ContainerExited
        );
        assert_eq!(
            fake.sandbox(&sb).unwrap().state,
            PodSandboxState::SandboxReady
        );
        // The name of a removed container can be used again.
        create(&cri, &sb, "a").await.unwrap();
    });
}

#[test]
fn images() {
    run(async {
        let dir = TempDir::new("cri");
        let fake = FakeCri::start(dir.path());
        let cri = client(&fake, Duration::from_secs(5));
        let spec = |s: &str| {
            Some(v1::ImageSpec {
                image: s.into(),
                ..Default::default()
            })
        };

        let st = cri
            .image_status(v1::ImageStatusRequest {
                image: spec("busybox"),
                verbose: false,
            })
            .await
            .unwrap();
        assert!(st.image.is_none(), "a missing image is not an error");

        let e = cri
            .pull_image(v1::PullImageRequest {
                image: spec("busybox"),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("failed to pull and unpack image"),
            "{e}"
        );
        assert_eq!(fake.images().len(), 0);

        fake.set_pullable("docker.io/library/busybox:latest");
        let r = cri
            .pull_image(v1::PullImageRequest {
                image: spec("busybox"),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(r.image_ref.starts_with("sha256:"), "{}", r.image_ref);
        let img = cri
            .image_status(v1::ImageStatusRequest {
                image: spec("busybox:latest"),
                verbose: false,
            })
            .await
            .unwrap()
            .image
            .unwrap();
        assert_eq!(img.id, r.image_ref);
        assert_eq!(
            img.repo_tags,
            vec!["docker.io/library/busybox:latest".to_owned()]
        );
        // By id too.
        let by_id = cri
            .image_status(v1::ImageStatusRequest {
                image: spec(&img.id),
                verbose: false,
            })
            .await
            .unwrap();
        assert_eq!(by_id.image.unwrap().id, img.id);

        fake.add_image("registry.local:5000/team/app:v2");
        let all = cri
            .list_images(v1::ListImagesRequest { filter: None })
            .await
            .unwrap()
            .images;
        assert_eq!(all.len(), 2);
        let fs = cri.image_fs_info(v1::ImageFsInfoRequest {}).await.unwrap();
        let used = fs.image_filesystems[0].used_bytes.unwrap().value;
        assert_eq!(used, all.iter().map(|i| i.size).sum::<u64>());

        cri.remove_image(v1::RemoveImageRequest {
            image: spec("busybox"),
        })
        .await
        .unwrap();
        cri.remove_image(v1::RemoveImageRequest {
            image: spec("busybox"),
        })
        .await
        .unwrap();
        let all = cri
            .list_images(v1::ListImagesRequest { filter: None })
            .await
            .unwrap()
            .images;
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].repo_tags[0], "registry.local:5000/team/app:v2");
        assert_eq!(fake.calls("PullImage"), 2);
    });
}

#[test]
fn deadline_exceeded_is_a_timeout_and_the_client_recovers() {
    run(async {
        let dir = TempDir::new("cri");
        let fake = FakeCri::start(dir.path());
        let cri = client(&fake, Duration::from_millis(200));
        fake.set_delay("Version", Duration::from_secs(3));

        let t0 = Instant::now();
        let e = cri
            .version(v1::VersionRequest::default())
            .await
            .unwrap_err();
        let took = t0.elapsed();
        assert!(
            matches!(
                e,
                CriError::Timeout {
                    method: "version",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.is_unavailable());
        assert!(took < Duration::from_secs(2), "took {took:?}");
        assert!(took >= Duration::from_millis(200), "took {took:?}");

        // The next call, on the same connection, works.
        cri.status(v1::StatusRequest::default()).await.unwrap();
        fake.set_delay("Version", Duration::ZERO);
        cri.version(v1::VersionRequest::default()).await.unwrap();
        assert_eq!(fake.connections(), 1);
        // The client reset the abandoned stream, so the runtime dropped the work.
        assert_eq!(fake.cancelled("Version"), 1);
    });
}

/// Until `cond` holds, looked at every 10 ms; fails with `what` after 30 s (a busy machine is
/// slow, a broken client never gets there).
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(30), "{what}");
        rt::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn a_timed_out_call_is_cancelled_on_the_runtime_side() {
    run(async {
        let dir = TempDir::new("cri");
        let fake = FakeCri::start(dir.path());
        let cri = client(&fake, Duration::from_secs(1));
        fake.set_delay("RunPodSandbox", Duration::from_secs(3));
        let t0 = Instant::now();
        let e = cri
            .run_pod_sandbox(v1::RunPodSandboxRequest {
                config: Some(sandbox_config("slow", "u", false)),
                runtime_handler: String::new(),
            })
            .await
            .unwrap_err();
        assert!(matches!(e, CriError::Timeout { .. }), "{e:?}");
        // The runtime hears of the cancel (a busy machine may be slow to pass it on)...
        eventually("the runtime never heard the call was cancelled", || {
            fake.cancelled("RunPodSandbox") > 0
        })
        .await;
        assert_eq!(fake.cancelled("RunPodSandbox"), 1);
        // ...and the work is not done once its time has passed.
        if let Some(left) = Duration::from_secs(4).checked_sub(t0.elapsed()) {
            rt::sleep(left).await;
        }
        assert!(
            fake.sandboxes().is_empty(),
            "the abandoned RunPodSandbox never completed"
        );
    });
}

/// A runtime restart while the client is idle: the client notices its connection closed and
/// dials again on the next call.
#[test]
fn reconnects_after_a_runtime_restart() {
    run(async {
        let dir = TempDir::new("cri");
        let fake = FakeCri::start(dir.path());
        fake.add_image(BUSYBOX);
        let cri = client(&fake, Duration::from_secs(2));
        let sb = run_sandbox(&cri, "p", "u").await;
        assert_eq!(fake.connections(), 1);

        fake.restart();
        // Let the client's connection task see the EOF, as it would during a real restart.
        rt::sleep(Duration::from_millis(50)).await;
        let v = cri.version(v1::VersionRequest::default()).await.unwrap();
        assert_eq!(v.runtime_name, "containerd");
        assert_eq!(fake.connections(), 2);
        // State survived the restart.
        let items = cri
            .list_pod_sandbox(v1::ListPodSandboxRequest { filter: None })
            .await
            .unwrap()
            .items;
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].id, sb);

        // And again.
        fake.restart();
        rt::sleep(Duration::from_millis(50)).await;
        cri.version(v1::VersionRequest::default()).await.unwrap();
        assert_eq!(fake.connections(), 3);
    });
}

/// A call issued in the same executor tick as the restart, before the client's connection task
/// has run: the cached connection is dead, but the client does not know yet. hyper hands the
/// unsent request back, and the client sends it once more on a fresh connection.
#[test]
fn call_right_after_restart() {
    run(async {
        let dir = TempDir::new("cri");
        let fake = FakeCri::start(dir.path());
        let cri = client(&fake, Duration::from_secs(2));
        cri.version(v1::VersionRequest::default()).await.unwrap();
        fake.restart();
        let first = cri.version(v1::VersionRequest::default()).await;
        // Whatever the first call did, the one after it reconnects.
        let second = cri.version(v1::VersionRequest::default()).await;
        assert!(second.is_ok(), "{second:?}");
        assert!(
            first.is_ok(),
            "the call right after the restart failed: {:?}",
            first.unwrap_err()
        );
    });
}

#[test]
fn a_stopped_runtime_fails_fast_and_recovers() {
    run(async {
        let dir = TempDir::new("cri");
        let fake = FakeCri::start(dir.path());
        let cri = client(&fake, Duration::from_secs(5));
        cri.version(v1::VersionRequest::default()).await.unwrap();

        fake.stop();
        assert!(!fake.socket_path().exists());
        for _ in 0..3 {
            let t0 = Instant::now();
            let e = cri
                .version(v1::VersionRequest::default())
                .await
                .unwrap_err();
            let took = t0.elapsed();
            assert!(took < Duration::from_millis(900), "took {took:?}: {e}");
            assert!(matches!(e, CriError::Status { .. }), "{e:?}");
        }
        // Once the client knows the connection is gone, it dials, and says so.
        let e = cri
            .version(v1::VersionRequest::default())
            .await
            .unwrap_err();
        assert!(e.is_unavailable(), "{e:?}");
        assert!(e.to_string().contains("connecting to"), "{e}");
        // Also when the client had no connection yet.
        let fresh = client(&fake, Duration::from_secs(5));
        let e = fresh
            .version(v1::VersionRequest::default())
            .await
            .unwrap_err();
        assert!(e.is_unavailable(), "{e:?}");

        fake.start_again();
        cri.version(v1::VersionRequest::default()).await.unwrap();
        fresh.version(v1::VersionRequest::default()).await.unwrap();
        assert_eq!(fake.connections(), 3);
    });
}

/// Every error of a runtime that went away is `is_unavailable()`, including the first call on
/// the stale connection: the channel reports transport failures as UNAVAILABLE rather than
/// leaving tonic to turn them into UNKNOWN.
#[test]
fn errors_of_a_vanished_runtime_are_unavailable() {
    run(async {
        let dir = TempDir::new("cri");
        let fake = FakeCri::start(dir.path());
        let cri = client(&fake, Duration::from_secs(5));
        cri.version(v1::VersionRequest::default()).await.unwrap();
        fake.stop();
        let e = cri
            .version(v1::VersionRequest::default())
            .await
            .unwrap_err();
        assert!(e.is_unavailable(), "{e:?}");
    });
}

/// The runtime dies while a call waits for its answer: the call fails when the connection
/// closes, not when the answer would have come nor at its deadline.
#[test]
fn a_call_in_flight_fails_when_the_runtime_dies() {
    run(async {
        let dir = TempDir::new("cri");
        let fake = FakeCri::start(dir.path());
        let cri = client(&fake, Duration::from_secs(120));
        fake.set_delay("ListContainers", Duration::from_secs(60));
        let c = cri.clone();
        let call = rt::spawn(async move {
            c.list_containers(v1::ListContainersRequest::default())
                .await
        });
        // Until the call has reached the runtime (a busy machine may take a while to connect).
        eventually("the call never reached the runtime", || {
            fake.calls("ListContainers") > 0
        })
        .await;
        assert_eq!(fake.calls("ListContainers"), 1);
        let stopped = Instant::now();
        fake.stop();
        let e = call.await.unwrap_err();
        let took = stopped.elapsed();
        // Far from the 60 s the answer would take, whatever the machine's load.
        assert!(took < Duration::from_secs(20), "took {took:?}: {e:?}");
        assert!(matches!(e, CriError::Status { .. }), "{e:?}");
        // UNKNOWN "connection error" (hyper Io: broken pipe): unavailable, if only because
        // "connection" contains "connect".
        assert!(e.is_unavailable(), "{e:?}");
        fake.start_again();
        fake.set_delay("ListContainers", Duration::ZERO);
        cri.list_containers(v1::ListContainersRequest::default())
            .await
            .unwrap();
    });
}

#[test]
fn injected_errors_map_to_status_codes() {
    run(async {
        let dir = TempDir::new("cri");
        let fake = FakeCri::start(dir.path());
        fake.add_image(BUSYBOX);
        let cri = client(&fake, Duration::from_secs(5));
        let sb = run_sandbox(&cri, "p", "u").await;
        let c = create(&cri, &sb, "c").await.unwrap();

        fake.fail_next(
            "ContainerStatus",
            code::NOT_FOUND,
            "container \"x\" in namespace \"k8s.io\": not found",
        );
        let e = container_status(&cri, &c).await.unwrap_err();
        assert!(e.is_not_found(), "{e:?}");
        assert!(!e.is_unavailable());
        match &e {
            CriError::Status { method, status } => {
                assert_eq!(*method, "container_status");
                assert_eq!(
                    status.message(),
                    "container \"x\" in namespace \"k8s.io\": not found"
                );
            }
            other => panic!("{other:?}"),
        }
        // Only the next call failed.
        container_status(&cri, &c).await.unwrap();

        // Real NOT_FOUND from the state.
        let e = container_status(&cri, "no-such-container")
            .await
            .unwrap_err();
        assert!(e.is_not_found(), "{e:?}");

        // Other codes are not NOT_FOUND; messages survive percent-encoding.
        fake.fail_next(
            "list_containers",
            code::UNAVAILABLE,
            "connection refused: 100% ✗",
        );
        let e = cri
            .list_containers(v1::ListContainersRequest::default())
            .await
            .unwrap_err();
        assert!(!e.is_not_found());
        match &e {
            CriError::Status { status, .. } => {
                assert_eq!(status.code(), tonic::Code::Unavailable);
                assert_eq!(status.message(), "connection refused: 100% ✗");
            }
            other => panic!("{other:?}"),
        }
        fake.fail_next("PullImage", code::UNKNOWN, "registry exploded");
        fake.fail_next("PullImage", code::RESOURCE_EXHAUSTED, "rate limited");
        let spec = Some(v1::ImageSpec {
            image: BUSYBOX.into(),
            ..Default::default()
        });
        let e1 = cri
            .pull_image(v1::PullImageRequest {
                image: spec.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        let e2 = cri
            .pull_image(v1::PullImageRequest {
                image: spec,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(code_of(&e1), Some(tonic::Code::Unknown));
        assert_eq!(code_of(&e2), Some(tonic::Code::ResourceExhausted));
    });
}

#[test]
fn concurrent_calls_share_one_connection() {
    run(async {
        let dir = TempDir::new("cri");
        let fake = FakeCri::start(dir.path());
        let cri = client(&fake, Duration::from_secs(5));
        fake.set_delay("Version", Duration::from_millis(100));
        let t0 = Instant::now();
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let cri = cri.clone();
                rt::spawn(async move { cri.version(v1::VersionRequest::default()).await })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "calls were serialised: {:?}",
            t0.elapsed()
        );
        assert_eq!(fake.connections(), 1);
        assert_eq!(fake.calls("Version"), 20);
    });
}

#[test]
fn large_messages() {
    run(async {
        let dir = TempDir::new("cri");
        let fake = FakeCri::start(dir.path());
        let cri = client(&fake, Duration::from_secs(5));
        let big = "x".repeat(200_000);
        for i in 0..10 {
            let mut cfg = sandbox_config(&format!("pod{i}"), &format!("u{i}"), false);
            cfg.annotations.insert("big".into(), big.clone());
            cri.run_pod_sandbox(v1::RunPodSandboxRequest {
                config: Some(cfg),
                runtime_handler: String::new(),
            })
            .await
            .unwrap();
        }
        // About 2 MB back: many DATA frames, past the default flow-control windows.
        let items = cri
            .list_pod_sandbox(v1::ListPodSandboxRequest::default())
            .await
            .unwrap()
            .items;
        assert_eq!(items.len(), 10);
        assert!(items.iter().all(|p| p.annotations["big"].len() == 200_000));
    });
}

#[test]
fn exec_sync_timeout_and_handler() {
    run(async {
        let dir = TempDir::new("cri");
        let fake = FakeCri::start(dir.path());
        fake.add_image(BUSYBOX);
        let cri = client(&fake, Duration::from_secs(5));
        let sb = run_sandbox(&cri, "p", "u").await;
        let c = create(&cri, &sb, "c").await.unwrap();
        cri.start_container(v1::StartContainerRequest {
            container_id: c.clone(),
        })
        .await
        .unwrap();

        let e = cri
            .exec_sync(&c, vec!["sleep".into(), "5".into()], Duration::from_secs(1))
            .await
            .unwrap_err();
        assert_eq!(code_of(&e), Some(tonic::Code::DeadlineExceeded), "{e:?}");

        fake.set_exec_handler(|_, argv| {
            (argv.first().map(String::as_str) == Some("probe"))
                .then(|| fake_cri::ExecReply::stdout(7, "custom"))
        });
        let out = cri
            .exec_sync(&c, vec!["probe".into()], Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!((out.exit_code, out.stdout.as_slice()), (7, &b"custom"[..]));
        let e = cri
            .exec_sync(&c, vec!["nonexistent".into()], Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("executable file not found"), "{e}");
    });
}
