//! The picolet binary against the in-process fake CRI runtime: failure modes a real containerd
//! cannot be made to show on demand (a hung inspection, a registry that refuses pulls, a runtime
//! that is not there yet).

mod support;

use support::{IMAGE, Pod, agent, fake_cri, full, run, start_agent, until};

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::Agent;
use fake_cri::{ContainerState, FakeCri, TempDir};
use picolet::rt;

/// A JSON field of a pod from picolet's /pods, read off the executor's thread.
async fn pod_field(
    a: &Arc<Agent>,
    pod: &str,
    f: fn(&serde_json::Value) -> serde_json::Value,
) -> serde_json::Value {
    let (a, pod) = (a.clone(), pod.to_owned());
    rt::unblock(move || a.pod(&pod).map(|p| f(&p)).unwrap_or_default()).await
}

fn phase(p: &serde_json::Value) -> serde_json::Value {
    p["status"]["phase"].clone()
}

fn restarts(p: &serde_json::Value) -> serde_json::Value {
    p["status"]["containerStatuses"][0]["restartCount"].clone()
}

fn waiting_reason(p: &serde_json::Value) -> serde_json::Value {
    p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"].clone()
}

#[test]
fn a_hung_inspection_does_not_stall_other_pods() {
    run(async {
        let tmp = TempDir::new("hang");
        let fake = FakeCri::start(tmp.path());
        fake.add_image(IMAGE);
        let a = start_agent(&tmp.path().join("a"), &fake.endpoint(), &[]).await;
        a.write_manifest("a.yaml", &Pod::new("a").yaml());
        a.write_manifest("b.yaml", &Pod::new("b").yaml());
        until(
            &a,
            "both pods running",
            Duration::from_secs(30),
            async || {
                fake.running_container_of(&full("a"))
                    .map(|c| c.id)
                    .is_some()
                    && fake
                        .running_container_of(&full("b"))
                        .map(|c| c.id)
                        .is_some()
            },
        )
        .await;
        let (ca, cb) = (
            fake.running_container_of(&full("a")).map(|c| c.id).unwrap(),
            fake.running_container_of(&full("b")).map(|c| c.id).unwrap(),
        );

        // Pod a's container dies and every status call about it hangs from now on.
        fake.hang_container_status(&ca);
        fake.exit_container(&ca, 1);
        rt::sleep(Duration::from_millis(1500)).await; // a relist has started a's hung inspection

        // Pod b's container dies: it must be restarted promptly, not after a's inspection ends.
        let t0 = Instant::now();
        fake.exit_container(&cb, 1);
        until(
            &a,
            "pod b restarted while pod a's inspection hangs",
            Duration::from_secs(8),
            async || pod_field(&a, "b", restarts).await == 1,
        )
        .await;
        eprintln!(
            "pod b restarted {:?} after its container died",
            t0.elapsed()
        );
        let healthy = {
            let a = a.clone();
            rt::unblock(move || a.get("/healthz")).await
        };
        assert_eq!(healthy.as_deref(), Some("ok"));
        assert!(
            fake.running_container_of(&full("b"))
                .map(|c| c.id)
                .is_some_and(|c| c != cb),
            "b runs a new container"
        );
    });
}

#[test]
fn image_pull_failures_back_off_then_recover() {
    run(async {
        let tmp = TempDir::new("pull");
        let fake = FakeCri::start(tmp.path());
        let a = start_agent(&tmp.path().join("a"), &fake.endpoint(), &[]).await;
        let image = "registry.example/app:1.0";
        a.write_manifest("app.yaml", &Pod::new("app").image(image).yaml());

        until(
            &a,
            "ErrImagePull or ImagePullBackOff",
            Duration::from_secs(15),
            async || {
                let r = pod_field(&a, "app", waiting_reason).await;
                r == "ErrImagePull" || r == "ImagePullBackOff"
            },
        )
        .await;
        until(
            &a,
            "ImagePullBackOff",
            Duration::from_secs(15),
            async || pod_field(&a, "app", waiting_reason).await == "ImagePullBackOff",
        )
        .await;
        // After the second failure too, the reason turns back to ImagePullBackOff within the
        // back-off (now 20 s), not only at its end.
        until(&a, "a second pull", Duration::from_secs(20), async || {
            fake.calls("PullImage") >= 2
        })
        .await;
        until(
            &a,
            "ImagePullBackOff inside the second back-off",
            Duration::from_secs(8),
            async || pod_field(&a, "app", waiting_reason).await == "ImagePullBackOff",
        )
        .await;
        assert_eq!(pod_field(&a, "app", phase).await, "Pending");
        let pulls = fake.calls("PullImage");
        assert!(
            (1..=2).contains(&pulls),
            "{pulls} pulls: the retries must back off, not spin"
        );

        // The registry comes back: the next attempt after the backoff pulls and starts it.
        fake.set_pullable(image);
        until(
            &a,
            "the pod running after the image could be pulled",
            Duration::from_secs(40),
            async || pod_field(&a, "app", phase).await == "Running",
        )
        .await;
        assert!(
            fake.running_container_of(&full("app"))
                .map(|c| c.id)
                .is_some()
        );
    });
}

#[test]
fn runtime_absent_at_start_then_appears() {
    run(async {
        let tmp = TempDir::new("late");
        let cri_dir = tmp.path().to_owned();
        let endpoint = format!("unix://{}", cri_dir.join("fake.sock").display());
        let a = start_agent(&tmp.path().join("a"), &endpoint, &[]).await;
        a.write_manifest("early.yaml", &Pod::new("early").yaml());
        rt::sleep(Duration::from_secs(3)).await;
        let health = {
            let a = a.clone();
            rt::unblock(move || a.get("/healthz")).await
        };
        assert_eq!(
            health.as_deref(),
            Some("ok"),
            "a missing runtime is not a PLEG failure yet"
        );
        assert_eq!(pod_field(&a, "early", phase).await, "Pending");

        let fake = FakeCri::start(&cri_dir);
        assert_eq!(fake.endpoint(), endpoint);
        fake.add_image(IMAGE);
        until(
            &a,
            "the pod running once the runtime is up",
            Duration::from_secs(30),
            async || pod_field(&a, "early", phase).await == "Running",
        )
        .await;
        assert_eq!(fake.sandboxes().len(), 1, "exactly one sandbox");
    });
}

#[test]
fn removing_a_pod_cancels_its_slow_sync() {
    run(async {
        let tmp = TempDir::new("cancel");
        let fake = FakeCri::start(tmp.path());
        let image = "registry.example/slow:1";
        fake.set_pullable(image);
        fake.set_delay("PullImage", Duration::from_secs(60));
        let a = start_agent(&tmp.path().join("a"), &fake.endpoint(), &[]).await;
        a.write_manifest("slow.yaml", &Pod::new("slow").image(image).yaml());
        until(
            &a,
            "the pull to start",
            Duration::from_secs(15),
            async || fake.calls("PullImage") == 1,
        )
        .await;

        // The manifest goes while the pull hangs: the pod must go now, not after the pull.
        let t0 = Instant::now();
        a.remove_manifest("slow.yaml");
        until(
            &a,
            "the sandbox removed",
            Duration::from_secs(15),
            async || fake.sandboxes().is_empty() && pod_field(&a, "slow", phase).await.is_null(),
        )
        .await;
        eprintln!("removed {:?} after the manifest went", t0.elapsed());
        assert!(
            fake.containers().is_empty(),
            "no container was created for a removed pod"
        );
        assert_eq!(fake.cancelled("PullImage"), 1, "the pull was abandoned");
    });
}

#[test]
fn a_pod_removed_and_restored_runs_again() {
    run(async {
        let tmp = TempDir::new("back");
        let fake = FakeCri::start(tmp.path());
        fake.add_image(IMAGE);
        let a = start_agent(&tmp.path().join("a"), &fake.endpoint(), &[]).await;
        let yaml = Pod::new("back").yaml();
        a.write_manifest("back.yaml", &yaml);
        until(&a, "the pod running", Duration::from_secs(30), async || {
            fake.running_container_of(&full("back"))
                .map(|c| c.id)
                .is_some()
        })
        .await;
        let first = fake
            .running_container_of(&full("back"))
            .map(|c| c.id)
            .unwrap();

        // Removed, and put back (same content, same UID) while it is still being stopped: it is
        // stopped completely, then runs again.
        fake.set_delay("StopContainer", Duration::from_secs(2));
        a.remove_manifest("back.yaml");
        until(
            &a,
            "the pod gone from /pods",
            Duration::from_secs(10),
            async || pod_field(&a, "back", phase).await.is_null(),
        )
        .await;
        a.write_manifest("back.yaml", &yaml);
        until(
            &a,
            "the restored pod running in a new container",
            Duration::from_secs(30),
            async || {
                fake.running_container_of(&full("back"))
                    .map(|c| c.id)
                    .is_some_and(|c| c != first)
                    && pod_field(&a, "back", phase).await == "Running"
            },
        )
        .await;
        rt::sleep(Duration::from_secs(2)).await;
        let ready = fake
            .sandboxes()
            .into_iter()
            .filter(|s| s.state == fake_cri::PodSandboxState::SandboxReady)
            .count();
        assert_eq!(ready, 1, "exactly one live sandbox");
        assert_eq!(
            fake.containers()
                .into_iter()
                .filter(|c| c.state == ContainerState::ContainerRunning)
                .count(),
            1
        );
    });
}

#[test]
fn a_sandbox_without_picolets_mark_is_adopted_by_its_pod() {
    run(async {
        let tmp = TempDir::new("unmarked");
        let fake = FakeCri::start(tmp.path());
        fake.add_image(IMAGE);
        // The pod as picolet will see it (same path, node name and so the same UID).
        let agent_dir = tmp.path().join("a");
        let manifest = agent_dir.join("manifests/old.yaml");
        std::fs::create_dir_all(manifest.parent().unwrap()).unwrap();
        std::fs::write(&manifest, Pod::new("old").yaml()).unwrap();
        let pod = picolet::config::file::load(&manifest, "e2e-node", "").unwrap();
        // Its sandbox, created earlier by something that did not mark it.
        let cri =
            picolet::cri::Cri::new(&fake.endpoint(), None, picolet::cri::Deadlines::default())
                .unwrap();
        let node = picolet::kuberuntime::NodeContext::default();
        let mut cfg = picolet::kuberuntime::config::sandbox_config(&pod, &node, 0);
        cfg.labels.remove(picolet::kuberuntime::labels::MANAGED);
        let req = picolet::cri::v1::RunPodSandboxRequest {
            config: Some(cfg),
            runtime_handler: String::new(),
        };
        let old = cri.run_pod_sandbox(req).await.unwrap().pod_sandbox_id;

        let a = start_agent(&agent_dir, &fake.endpoint(), &[]).await;
        until(&a, "the pod running", Duration::from_secs(30), async || {
            pod_field(&a, "old", phase).await == "Running"
        })
        .await;
        let sandboxes = fake.sandboxes();
        assert_eq!(sandboxes.len(), 1, "adopted, not duplicated");
        assert_eq!(sandboxes[0].id, old);
        let c = fake.containers();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].sandbox_id, old);
    });
}

#[test]
fn a_static_pod_pulls_with_the_nodes_registry_credentials() {
    run(async {
        let tmp = TempDir::new("creds");
        let fake = FakeCri::start(tmp.path());
        let image = "registry.example:5000/team/app:1.0";
        fake.set_pullable(image);
        fake.require_auth(image, "node-user", "s3cret-pw");
        let a = start_agent(&tmp.path().join("a"), &fake.endpoint(), &[]).await;
        a.write_manifest("app.yaml", &Pod::new("app").image(image).yaml());

        // No credentials: the pull is anonymous and the registry's refusal is shown.
        until(
            &a,
            "ErrImagePull naming the refusal",
            Duration::from_secs(15),
            async || {
                let m = pod_field(&a, "app", |p| {
                    p["status"]["containerStatuses"][0]["state"]["waiting"]["message"].clone()
                })
                .await;
                m.as_str().is_some_and(|m| m.contains("401 Unauthorized"))
            },
        )
        .await;
        assert!(
            fake.pull_auths().iter().all(|(_, u)| u.is_none()),
            "{:?}",
            fake.pull_auths()
        );

        // The node's config.json: the longer path's entry is tried first (a wrong one), then
        // the host's, which works.
        let config = serde_json::json!({"auths": {
            "registry.example:5000/team": {"username": "team-user", "password": "wrong-pw"},
            "https://registry.example:5000/v2/": {"auth": "bm9kZS11c2VyOnMzY3JldC1wdw=="},
            "other.example": {"username": "other", "password": "x"},
        }});
        std::fs::write(
            tmp.path().join("a/kubelet/config.json"),
            serde_json::to_vec(&config).unwrap(),
        )
        .unwrap();
        until(
            &a,
            "the pod running with the node's credentials",
            Duration::from_secs(60),
            async || pod_field(&a, "app", phase).await == "Running",
        )
        .await;
        let auths = fake.pull_auths();
        let with: Vec<Option<&str>> = auths
            .iter()
            .skip_while(|(_, u)| u.is_none())
            .map(|(_, u)| u.as_deref())
            .collect();
        assert_eq!(
            with,
            [Some("team-user"), Some("node-user")],
            "each match in order, the most specific first: {auths:?}"
        );
        let log = {
            let a = a.clone();
            rt::unblock(move || a.log_text()).await
        };
        assert!(!log.contains("s3cret-pw") && !log.contains("wrong-pw"));
    });
}

#[test]
fn a_credential_provider_plugin_answers_and_is_asked_again_after_its_cache_duration() {
    use std::os::unix::fs::PermissionsExt as _;
    run(async {
        let tmp = TempDir::new("credplugin");
        let fake = FakeCri::start(tmp.path());
        let image = "plugin.example:5000/app:1";
        fake.set_pullable(image);
        fake.require_auth(image, "from-plugin", "plugin-pw");
        let bin = tmp.path().join("plugins");
        std::fs::create_dir_all(&bin).unwrap();
        let calls = tmp.path().join("calls");
        let script = format!(
            "#!/bin/sh\nread req\necho \"$req\" >> {}\n\
             echo '{{\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"kind\":\"CredentialProviderResponse\",\
             \"cacheKeyType\":\"Registry\",\"cacheDuration\":\"3s\",\
             \"auth\":{{\"plugin.example:5000\":{{\"username\":\"from-plugin\",\"password\":\"plugin-pw\"}}}}}}'\n",
            calls.display()
        );
        std::fs::write(bin.join("fake-provider"), script).unwrap();
        std::fs::set_permissions(
            bin.join("fake-provider"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let cfg = tmp.path().join("providers.yaml");
        std::fs::write(
            &cfg,
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n\
             - name: fake-provider\n  matchImages: ['*.example:5000']\n  defaultCacheDuration: 1h\n  \
             apiVersion: credentialprovider.kubelet.k8s.io/v1\n",
        )
        .unwrap();
        let args = vec![
            format!("--image-credential-provider-config={}", cfg.display()),
            format!("--image-credential-provider-bin-dir={}", bin.display()),
        ];
        let (dir, endpoint) = (tmp.path().join("a"), fake.endpoint());
        let a = Arc::new(rt::unblock(move || Agent::start_with(&dir, &endpoint, &args)).await);
        let n = || {
            std::fs::read_to_string(&calls)
                .unwrap_or_default()
                .lines()
                .count()
        };
        a.write_manifest("one.yaml", &Pod::new("one").image(image).yaml());
        until(
            &a,
            "the first pod running with the plugin's credentials",
            Duration::from_secs(20),
            async || pod_field(&a, "one", phase).await == "Running",
        )
        .await;
        assert_eq!(n(), 1);
        let req: serde_json::Value = serde_json::from_str(
            std::fs::read_to_string(&calls)
                .unwrap()
                .lines()
                .next()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(req["kind"], "CredentialProviderRequest");
        assert_eq!(req["image"], "plugin.example:5000/app");
        assert_eq!(
            fake.pull_auths()
                .last()
                .and_then(|(_, u)| u.clone())
                .as_deref(),
            Some("from-plugin")
        );
        // Past the answer's cache duration, the next pull asks the plugin again.
        rt::sleep(Duration::from_secs(4)).await;
        a.write_manifest(
            "two.yaml",
            &Pod::new("two").image(image).pull_always().yaml(),
        );
        until(
            &a,
            "the second pod running",
            Duration::from_secs(20),
            async || pod_field(&a, "two", phase).await == "Running",
        )
        .await;
        assert_eq!(n(), 2, "asked again once its answer expired");
        let log = {
            let a = a.clone();
            rt::unblock(move || a.log_text()).await
        };
        assert!(!log.contains("plugin-pw"));
        assert!(log.contains("image credential providers: fake-provider"));
    });
}

/// A static pod mounting the image `model` at /model (its `weights` directory).
fn image_volume_pod(model: &str) -> String {
    let mut s = Pod::new("app")
        .container_yaml(
            "    volumeMounts:\n    - {name: model, mountPath: /model, subPath: weights}\n",
        )
        .yaml();
    s.push_str(&format!(
        "  volumes:\n  - name: model\n    image: {{reference: \"{model}\", pullPolicy: IfNotPresent}}\n"
    ));
    s
}

#[test]
fn an_image_volume_is_pulled_for_the_pod_and_mounted_by_the_runtime() {
    run(async {
        let tmp = TempDir::new("imagevol");
        let fake = FakeCri::start(tmp.path());
        fake.add_image(IMAGE);
        fake.set_runtime_version("v2.1.0");
        let model = "registry.example:5000/models/small:1";
        let a = start_agent(&tmp.path().join("a"), &fake.endpoint(), &[]).await;
        a.write_manifest("app.yaml", &image_volume_pod(model));

        // The registry refuses it: the container waits with the pull's reason, naming the
        // volume, and is not created.
        until(
            &a,
            "ErrImagePull or ImagePullBackOff naming the volume",
            Duration::from_secs(15),
            async || {
                let (r, m) = pod_field(&a, "app", |p| {
                    p["status"]["containerStatuses"][0]["state"]["waiting"].clone()
                })
                .await
                .as_object()
                // A waiting state may carry no message (ContainerCreating).
                .map(|w| {
                    let field = |k: &str| w.get(k).cloned().unwrap_or_default();
                    (field("reason"), field("message"))
                })
                .unwrap_or_default();
                (r == "ErrImagePull" || r == "ImagePullBackOff")
                    && m.as_str()
                        .is_some_and(|m| m.starts_with("image volume \"model\": "))
            },
        )
        .await;
        assert!(fake.containers().is_empty(), "{:?}", fake.containers());

        fake.set_pullable(model);
        until(
            &a,
            "the pod running once its volume's image pulls",
            Duration::from_secs(60),
            async || pod_field(&a, "app", phase).await == "Running",
        )
        .await;
        let c = fake.containers();
        assert_eq!(c.len(), 1);
        let m = c[0]
            .config
            .mounts
            .iter()
            .find(|m| m.container_path == "/model")
            .expect("a mount at /model");
        let image = m.image.as_ref().expect("the mount names an image");
        assert!(image.image.starts_with("sha256:"), "{image:?}");
        assert_eq!(image.user_specified_image, model);
        // The pod's annotations go with it, as upstream's getImageVolumes passes them.
        assert_eq!(
            image
                .annotations
                .get("kubernetes.io/config.source")
                .map(String::as_str),
            Some("file"),
            "{image:?}"
        );
        assert_eq!(m.host_path, "");
        assert_eq!(m.image_sub_path, "weights");
        assert!(m.readonly, "image volumes are read-only");
    });
}

#[test]
fn a_runtime_that_cannot_mount_images_refuses_the_pod_naming_the_volume() {
    run(async {
        let tmp = TempDir::new("imagevol-old");
        let fake = FakeCri::start(tmp.path());
        fake.add_image(IMAGE);
        // The fake says it is containerd v1.7.0-fake: no image volumes before 2.1.
        let a = start_agent(&tmp.path().join("a"), &fake.endpoint(), &[]).await;
        a.write_manifest("app.yaml", &image_volume_pod("registry.example/m:1"));
        until(&a, "the pod refused", Duration::from_secs(15), async || {
            pod_field(&a, "app", phase).await == "Failed"
        })
        .await;
        let st = pod_field(&a, "app", |p| p["status"].clone()).await;
        assert_eq!(st["reason"], "ImageVolumeUnsupported", "{st}");
        let m = st["message"].as_str().unwrap_or_default();
        assert!(
            m.contains(
                "image volume \"model\" (image \"registry.example/m:1\") cannot be mounted: \
                 the container runtime containerd v1.7.0-fake cannot mount images \
                 (image volumes need containerd 2.1 or later)"
            ),
            "{m}"
        );
        assert!(fake.sandboxes().is_empty());
    });
}
