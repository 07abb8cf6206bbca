//! Image garbage collection against a real containerd: with the thresholds forced down
//! (`--image-gc-high-threshold=1 --image-gc-low-threshold=0 --minimum-image-ttl-duration=0s`,
//! so any usage triggers collection of every unused image), picolet's first collection after
//! its start removes the unused images and keeps the image of a running pod, the sandbox image,
//! an image only a static pod's manifest names (its container was never created), and an image
//! of a container picolet does not own. A removed pod's directories go with it, and its image
//! goes at the next collection (here: after a restart). The crash-loop bound of container GC is
//! tested in `e2e.rs` (restart_policies_and_crash_backoff).

mod support;

use support::{IMAGE, Pod, agent, containerd};

use std::path::Path;
use std::time::Duration;

use agent::{Agent, test_dir};
use containerd::{PAUSE_IMAGE, ScratchContainerd};

const T: Duration = Duration::from_secs(90);

const UNUSED: &str = "picolet.local/gc-unused:1";
const WAITING: &str = "picolet.local/gc-waiting:1";
const GONE: &str = "picolet.local/gc-gone:1";
const FOREIGN: &str = "picolet.local/gc-foreign:1";

/// Builds an image with its own config (so its own id) and imports it.
fn import(c: &ScratchContainerd, dir: &Path, name: &str, cmd: &[&str]) {
    let tar = dir.join(format!("{}.tar", name.replace(['/', ':'], "_")));
    containerd::build_image(&tar, name, &[], cmd);
    c.ctr(&["images", "import", tar.to_str().unwrap()]);
}

fn images(c: &ScratchContainerd) -> Vec<String> {
    c.ctr(&["images", "ls", "-q"])
        .lines()
        .map(str::to_owned)
        .filter(|l| l.starts_with("picolet.local/"))
        .collect()
}

fn has(c: &ScratchContainerd, name: &str) -> bool {
    images(c).iter().any(|i| i == name)
}

fn collections(a: &Agent) -> usize {
    a.log_text()
        .matches("image garbage collection removed")
        .count()
}

/// A sandbox and a running container made directly through the CRI, without picolet's mark:
/// picolet leaves them alone, and image GC must keep their image.
/// Returns the ids of the sandbox and the container.
fn run_foreign(c: &ScratchContainerd, logs: &Path) -> [String; 2] {
    use picolet::cri::v1;
    std::fs::create_dir_all(logs).unwrap();
    let cri =
        picolet::cri::Cri::new(&c.endpoint(), None, picolet::cri::Deadlines::default()).unwrap();
    picolet::rt::block_on(async {
        let sandbox_config = v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: "foreign".into(),
                uid: "foreign-0000".into(),
                namespace: "other".into(),
                attempt: 0,
            }),
            log_directory: logs.display().to_string(),
            linux: Some(v1::LinuxPodSandboxConfig {
                security_context: Some(v1::LinuxSandboxSecurityContext {
                    namespace_options: Some(v1::NamespaceOption {
                        network: v1::NamespaceMode::Node.into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let sb = cri
            .run_pod_sandbox(v1::RunPodSandboxRequest {
                config: Some(sandbox_config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .expect("foreign sandbox")
            .pod_sandbox_id;
        let id = cri
            .create_container(v1::CreateContainerRequest {
                pod_sandbox_id: sb.clone(),
                config: Some(v1::ContainerConfig {
                    metadata: Some(v1::ContainerMetadata {
                        name: "main".into(),
                        attempt: 0,
                    }),
                    image: Some(v1::ImageSpec {
                        image: FOREIGN.into(),
                        ..Default::default()
                    }),
                    command: vec!["sleep".into(), "3600".into()],
                    log_path: "main.log".into(),
                    ..Default::default()
                }),
                sandbox_config: Some(sandbox_config),
            })
            .await
            .expect("foreign container")
            .container_id;
        cri.start_container(v1::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .expect("start foreign container");
        [sb, id]
    })
}

#[test]
fn unused_images_are_collected_and_needed_ones_kept() {
    let d = test_dir("imagegc");
    let c = ScratchContainerd::start(&d.join("c"));
    let build = d.join("a").join("images");
    std::fs::create_dir_all(&build).unwrap();
    import(&c, &build, UNUSED, &["true"]);
    import(&c, &build, WAITING, &["sleep", "1"]);
    import(&c, &build, GONE, &["sleep", "2"]);
    import(&c, &build, FOREIGN, &["sleep", "3"]);
    let foreign = run_foreign(&c, &d.join("a").join("foreign-logs"));

    // A running pod; a pod whose init container never ends, so the app container's image is
    // named only by the manifest; a pod that is removed later.
    let gc_flags: Vec<String> = [
        "--image-gc-high-threshold=1",
        "--image-gc-low-threshold=0",
        "--minimum-image-ttl-duration=0s",
    ]
    .map(String::from)
    .to_vec();
    // In place before picolet starts: the first collection, a second after the start, must
    // already know the images they need, however slowly this test gets to write them.
    let manifests = d.join("a").join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::write(
        manifests.join("run.yaml"),
        Pod::new("run").image(IMAGE).yaml(),
    )
    .unwrap();
    std::fs::write(
        manifests.join("gone.yaml"),
        Pod::new("gone").image(GONE).yaml(),
    )
    .unwrap();
    std::fs::write(
        manifests.join("waiting.yaml"),
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: waiting\nspec:\n  \
             terminationGracePeriodSeconds: 1\n  initContainers:\n  - name: init\n    \
             image: {IMAGE}\n    command: [sleep, '3600']\n  containers:\n  \
             - name: main\n    image: {WAITING}\n    command: [sleep, '3600']\n"
        ),
    )
    .unwrap();
    let mut a = Agent::start_with(&d.join("a"), &c.endpoint(), &gc_flags);

    a.wait_for("the first image collection", T, |a| collections(a) >= 1);
    let left = images(&c);
    eprintln!("images after the first collection: {left:?}");
    assert!(!has(&c, UNUSED), "the unused image is removed: {left:?}");
    for keep in [PAUSE_IMAGE, IMAGE, WAITING, GONE, FOREIGN] {
        assert!(has(&c, keep), "{keep} is kept: {left:?}");
    }
    let log = a.log_text();
    assert!(
        log.contains("trying to free") && log.contains("down to the low threshold (0%)"),
        "collection for space was logged\n{log}"
    );

    // The removed pod goes with its directories.
    a.wait_for("pod gone running", T, |a| {
        a.pod("gone")
            .is_some_and(|p| p["status"]["phase"] == "Running")
    });
    let uid = a.pod("gone").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let pod_dir = a.dir.join("kubelet/pods").join(&uid);
    let log_dir = a.dir.join(format!("logs/default_gone-e2e-node_{uid}"));
    assert!(pod_dir.exists() && log_dir.exists());
    a.remove_manifest("gone.yaml");
    a.wait_for("the removed pod's directories to be cleaned", T, |a| {
        a.pod("gone").is_none() && !pod_dir.exists() && !log_dir.exists()
    });
    assert!(has(&c, GONE), "no collection ran since: still there");

    // The next collection (the first after a restart) removes the removed pod's image; the
    // rest stays, the waiting pod's image too, although its container still does not exist.
    a.restart();
    a.wait_for("the collection after the restart", T, |a| {
        collections(a) >= 2
    });
    let left = images(&c);
    eprintln!("images after the second collection: {left:?}");
    assert!(
        !has(&c, GONE),
        "the removed pod's image is collected: {left:?}"
    );
    for keep in [PAUSE_IMAGE, IMAGE, WAITING, FOREIGN] {
        assert!(has(&c, keep), "{keep} is kept: {left:?}");
    }
    assert!(
        a.pod("waiting").is_some_and(|p| {
            p["status"]["initContainerStatuses"][0]["state"]["running"].is_object()
        }),
        "the waiting pod still waits on its init container"
    );
    let running = c.running_task_ids();
    assert!(
        foreign.iter().all(|id| running.contains(id)),
        "the foreign sandbox and container are left alone and run: {foreign:?} {running:?}"
    );
}
