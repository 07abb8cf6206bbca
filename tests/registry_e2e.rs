//! Private registries against real parts: the Distribution registry (built from its pinned Go
//! module by `scripts/k8s-build.sh --tools`) serving TLS with a CA made here by openssl and
//! htpasswd (bcrypt) authentication, the test busybox image pushed to it with skopeo, and the
//! scratch containerd trusting that CA through a `hosts.toml` for the registry's host:port.
//! picolet passes the matching credentials as the CRI pull's auth: without them the registry's
//! refusal shows in the container's waiting state; with them in the node's
//! `<root-dir>/config.json` a static pod runs; on the real control plane, an API pod with the
//! right `imagePullSecrets` runs and one with a wrong secret shows `ErrImagePull`. Verified
//! pulls (KEP-2535): an image one pod pulled with its secret is not used by a pod of another
//! namespace without credentials for it, which pulls afresh and fails as upstream's kubelet
//! does, while a pod with credentials of its own pulls and runs; under `NeverVerify` the image
//! on the node serves every pod. A joined node's preload directory: its archives and its pull
//! list (the private image, pulled with `config.json`) show as Events on the Node.
//!
//! Needs root, containerd, Go (the registry's build), openssl, htpasswd (apache2-utils) and
//! skopeo (scripts/install-deps.sh); a missing one fails the test, naming it.

mod support;

use support::{NODE, Pod, agent, containerd, control_plane, describe, file_tail};

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use agent::{Agent, free_port, test_dir};
use containerd::ScratchContainerd;
use control_plane::{ControlPlane, NodeKey, Options};

const USER: &str = "edge-puller";
const PASSWORD: &str = "pw-Reg1stry-7";
/// A second account, for a pod of another namespace with credentials of its own.
const USER2: &str = "other-team";
const PASSWORD2: &str = "pw-0ther-team-3";

fn must(what: &str, cmd: &mut Command) -> Output {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what} (scripts/install-deps.sh installs it): {e}"));
    assert!(out.status.success(), "{what}: {}", describe(&out));
    out
}

/// The registry process, its address and CA. `Drop` stops it, by PID.
struct Registry {
    child: Child,
    host: String,
    ca: PathBuf,
    log: PathBuf,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    fn log_tail(&self) -> String {
        file_tail(&self.log, 30)
    }

    /// Builds the registry if the cache lacks it, makes a CA and a server certificate for
    /// 127.0.0.1, a bcrypt htpasswd file, and starts it on `port`; returns once it accepts
    /// connections.
    fn start(dir: &Path, port: u16) -> Registry {
        let bin = control_plane::tool("registry");

        fs::create_dir_all(dir.join("data")).unwrap();
        let p = |f: &str| dir.join(f).display().to_string();
        must(
            "openssl (CA)",
            Command::new("openssl").args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=picolet test registry CA",
                "-keyout",
                &p("ca.key"),
                "-out",
                &p("ca.crt"),
            ]),
        );
        must(
            "openssl (server key and request)",
            Command::new("openssl").args([
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-subj",
                "/CN=127.0.0.1",
                "-keyout",
                &p("server.key"),
                "-out",
                &p("server.csr"),
            ]),
        );
        fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        must(
            "openssl (server certificate)",
            Command::new("openssl").args([
                "x509",
                "-req",
                "-in",
                &p("server.csr"),
                "-CA",
                &p("ca.crt"),
                "-CAkey",
                &p("ca.key"),
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &p("server.ext"),
                "-out",
                &p("server.crt"),
            ]),
        );
        let mut users = Vec::new();
        for (user, pw) in [(USER, PASSWORD), (USER2, PASSWORD2)] {
            let htpasswd = must(
                "htpasswd -B",
                Command::new("htpasswd").args(["-Bbn", user, pw]),
            );
            users.extend(
                String::from_utf8_lossy(&htpasswd.stdout)
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(str::to_owned),
            );
        }
        fs::write(dir.join("htpasswd"), users.join("\n") + "\n").unwrap();
        let host = format!("127.0.0.1:{port}");
        let config = format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {data}\n\
             http:\n  addr: {host}\n  secret: picolet-test\n  tls:\n    certificate: {crt}\n    key: {key}\n\
             auth:\n  htpasswd:\n    realm: picolet-test\n    path: {pw}\n",
            data = p("data"),
            crt = p("server.crt"),
            key = p("server.key"),
            pw = p("htpasswd"),
        );
        fs::write(dir.join("config.yml"), config).unwrap();
        let log = dir.join("registry.log");
        let log_file = fs::File::create(&log).unwrap();
        let child = Command::new(&bin)
            .arg("serve")
            .arg(dir.join("config.yml"))
            // no tracing exporter to dial
            .env("OTEL_TRACES_EXPORTER", "none")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let r = Registry {
            child,
            host,
            ca: dir.join("ca.crt"),
            log,
        };
        let t0 = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the registry did not listen on {} within 20 s\n{}",
                r.host,
                r.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        r
    }

    /// Pushes an OCI archive as `<host>/<repo>` with skopeo (verifying the CA, with the
    /// credentials).
    fn push(&self, dir: &Path, archive: &Path, repo: &str) {
        let certs = dir.join("skopeo-certs");
        fs::create_dir_all(&certs).unwrap();
        fs::copy(&self.ca, certs.join("ca.crt")).unwrap();
        must(
            "skopeo copy",
            Command::new("skopeo")
                .arg("copy")
                .arg("--quiet")
                .arg("--dest-cert-dir")
                .arg(&certs)
                .arg("--dest-creds")
                .arg(format!("{USER}:{PASSWORD}"))
                .arg(format!("oci-archive:{}", archive.display()))
                .arg(format!("docker://{}/{repo}", self.host)),
        );
    }

    /// containerd's host configuration for the registry: trust its CA.
    fn write_hosts(&self, hosts: &Path) {
        let d = hosts.join(&self.host);
        fs::create_dir_all(&d).unwrap();
        fs::write(
            d.join("hosts.toml"),
            format!(
                "server = \"https://{h}\"\n\n[host.\"https://{h}\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = \"{ca}\"\n",
                h = self.host,
                ca = self.ca.display()
            ),
        )
        .unwrap();
    }
}

/// The busybox OCI archive the scratch containerd built for itself.
fn busybox_archive(c: &ScratchContainerd) -> PathBuf {
    fs::read_dir(c.dir.join("images"))
        .expect("the scratch containerd's image cache")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("busybox-") && n.ends_with(".tar"))
        })
        .expect("no busybox-*.tar in the scratch containerd's image cache")
}

fn waiting(a: &Agent, pod: &str) -> (String, String) {
    let p = a.pod(pod).unwrap_or_default();
    let w = &p["status"]["containerStatuses"][0]["state"]["waiting"];
    (
        w["reason"].as_str().unwrap_or_default().to_owned(),
        w["message"].as_str().unwrap_or_default().to_owned(),
    )
}

#[test]
fn a_static_pod_pulls_from_a_private_registry_with_the_nodes_config_json() {
    let dir = test_dir("registry");
    let hosts = dir.join("hosts");
    for d in [&hosts, &dir.join("reg")] {
        let _ = fs::remove_dir_all(d);
    }
    fs::create_dir_all(&hosts).unwrap();
    let port = free_port();
    let c = ScratchContainerd::start_with_registry_hosts(&dir.join("c"), &hosts);
    let reg = Registry::start(&dir.join("reg"), port);
    reg.write_hosts(&hosts);
    reg.push(&dir.join("reg"), &busybox_archive(&c), "edge/busybox:1");
    let image = format!("{}/edge/busybox:1", reg.host);

    let a = Agent::start(&dir.join("a"), &c.endpoint());
    a.write_manifest(
        "private.yaml",
        &Pod::new("private").image(&image).pull_always().yaml(),
    );
    // No credentials: the pull is anonymous and the registry refuses it, which the waiting
    // state names (containerd 1.6 with the registry's 401, 2.x as "authorization failed").
    a.wait_for(
        "ErrImagePull naming the registry's refusal",
        Duration::from_secs(60),
        |a| {
            let (reason, message) = waiting(a, "private");
            (reason == "ErrImagePull" || reason == "ImagePullBackOff")
                && (message.contains("401") || message.contains("authorization failed"))
        },
    );
    a.wait_for("ImagePullBackOff", Duration::from_secs(30), |a| {
        waiting(a, "private").0 == "ImagePullBackOff"
    });

    // The node's credentials: the pull carries them and the pod runs.
    let config = serde_json::json!({"auths": {
        reg.host.clone(): {"username": USER, "password": PASSWORD},
        "other.example": {"username": "nobody", "password": "x"},
    }});
    fs::write(
        dir.join("a/kubelet/config.json"),
        serde_json::to_vec(&config).unwrap(),
    )
    .unwrap();
    a.wait_for("the pod running", Duration::from_secs(90), |a| {
        a.pod("private")
            .is_some_and(|p| p["status"]["phase"] == "Running")
    });
    let log = a.log_text();
    assert!(!log.contains(PASSWORD), "a password in picolet's log");
    assert!(
        c.ctr(&["images", "ls", "-q"]).contains(&image),
        "the image pulled into containerd"
    );
}

fn api_pod_with_secret(name: &str, image: &str, secret: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  \
         nodeName: {NODE}\n  terminationGracePeriodSeconds: 1\n  tolerations:\n  - operator: Exists\n  \
         imagePullSecrets:\n  - name: {secret}\n  containers:\n  - name: main\n    image: {image}\n    \
         imagePullPolicy: Always\n    command: [sleep, '3600']\n"
    )
}

#[test]
fn api_pods_pull_with_their_image_pull_secrets_on_a_real_control_plane() {
    let dir = test_dir("regapi");
    let (cp, c, reg) = joined_with_registry(&dir);
    reg.push(&dir.join("reg"), &busybox_archive(&c), "fleet/busybox:1");
    let image = format!("{}/fleet/busybox:1", reg.host);

    // A docker-registry Secret with the right password, one with a wrong one.
    for (name, pw) in [("regcred", PASSWORD), ("wrongcred", "not-the-password")] {
        cp.admin(&[
            "create",
            "secret",
            "docker-registry",
            name,
            "--namespace=default",
            &format!("--docker-server={}", reg.host),
            &format!("--docker-username={USER}"),
            &format!("--docker-password={pw}"),
        ]);
    }
    let kc = cp.node_kubeconfig(NODE, NodeKey::EcSec1);
    let a = Agent::start_with(
        &dir.join("a"),
        &c.endpoint(),
        &["--kubeconfig".into(), kc.display().to_string()],
    );
    cp.admin_stdin(
        &["apply", "-f", "-"],
        &api_pod_with_secret("good", &image, "regcred"),
    );
    cp.admin_stdin(
        &["apply", "-f", "-"],
        &api_pod_with_secret("bad", &image, "wrongcred"),
    );
    let get = |args: &[&str]| {
        let mut v: Vec<&str> = args.to_vec();
        v.push("--ignore-not-found");
        cp.kubectl_with(&cp.admin_kubeconfig(), &v, None)
            .stdout
            .trim()
            .to_owned()
    };
    let t0 = Instant::now();
    loop {
        let phase = get(&["get", "pod", "good", "-o", "jsonpath={.status.phase}"]);
        let bad = get(&[
            "get",
            "pod",
            "bad",
            "-o",
            "jsonpath={.status.containerStatuses[0].state.waiting.reason} {.status.containerStatuses[0].state.waiting.message}",
        ]);
        let refused = (bad.starts_with("ErrImagePull") || bad.starts_with("ImagePullBackOff"))
            && bad.contains("401");
        if phase == "Running" && refused {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "good: {phase:?}, bad: {bad:?}\n--- picolet log ---\n{}\n--- registry ---\n{}",
            a.log_text(),
            reg.log_tail()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let log = a.log_text();
    assert!(!log.contains(PASSWORD) && !log.contains("not-the-password"));
    // Kept for an offline restart, 0600.
    let ckpt = dir.join("a/kubelet/checkpoints/objects.json");
    let text = fs::read_to_string(&ckpt).unwrap();
    assert!(text.contains("default/regcred"));
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        fs::metadata(&ckpt).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

/// An API pod in `namespace`, `IfNotPresent`, with the image pull secrets named (none when empty).
fn api_pod(name: &str, namespace: &str, image: &str, secrets: &[&str]) -> String {
    let mut pull = String::new();
    if !secrets.is_empty() {
        pull.push_str("  imagePullSecrets:\n");
        for s in secrets {
            pull.push_str(&format!("  - name: {s}\n"));
        }
    }
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  \
         nodeName: {NODE}\n  terminationGracePeriodSeconds: 1\n  tolerations:\n  - operator: Exists\n\
         {pull}  containers:\n  - name: main\n    image: {image}\n    \
         imagePullPolicy: IfNotPresent\n    command: [sleep, '3600']\n"
    )
}

/// A control plane with its controllers for one node, a scratch containerd whose registry
/// hosts trust the private registry, and that registry, all under `dir` (emptied first).
fn joined_with_registry(dir: &std::path::Path) -> (ControlPlane, ScratchContainerd, Registry) {
    let hosts = dir.join("hosts");
    for d in [&hosts, &dir.join("reg"), &dir.join("a")] {
        let _ = fs::remove_dir_all(d);
    }
    fs::create_dir_all(&hosts).unwrap();
    let cp = ControlPlane::start(
        &dir.join("cp"),
        &Options {
            nodes: vec![NODE.into()],
            controllers: true,
            ..Default::default()
        },
    );
    let port = free_port();
    let c = ScratchContainerd::start_with_registry_hosts(&dir.join("c"), &hosts);
    let reg = Registry::start(&dir.join("reg"), port);
    reg.write_hosts(&hosts);
    (cp, c, reg)
}

#[test]
fn verified_pulls_a_pod_without_credentials_pulls_afresh_and_fails() {
    let dir = test_dir("regverify");
    let (cp, c, reg) = joined_with_registry(&dir);
    reg.push(&dir.join("reg"), &busybox_archive(&c), "private/busybox:1");
    let image = format!("{}/private/busybox:1", reg.host);

    cp.admin(&["create", "namespace", "other"]);
    for (ns, name, user, pw) in [
        ("default", "regcred", USER, PASSWORD),
        ("other", "owncred", USER2, PASSWORD2),
    ] {
        cp.admin(&[
            "create",
            "secret",
            "docker-registry",
            name,
            &format!("--namespace={ns}"),
            &format!("--docker-server={}", reg.host),
            &format!("--docker-username={user}"),
            &format!("--docker-password={pw}"),
        ]);
    }
    let kc = cp.node_kubeconfig(NODE, NodeKey::EcSec1);
    let flags = ["--kubeconfig".into(), kc.display().to_string()];
    // The default policy, NeverVerifyPreloadedImages: images picolet pulled are verified.
    let mut a = Agent::start_with(&dir.join("a"), &c.endpoint(), &flags);
    let get = |args: &[&str]| {
        let mut v: Vec<&str> = args.to_vec();
        v.push("--ignore-not-found");
        cp.kubectl_with(&cp.admin_kubeconfig(), &v, None)
            .stdout
            .trim()
            .to_owned()
    };
    let wait = |what: &str, a: &Agent, limit: u64, ok: &dyn Fn() -> bool| {
        let t0 = Instant::now();
        while !ok() {
            assert!(
                t0.elapsed() < Duration::from_secs(limit),
                "{what}\n--- picolet log ---\n{}\n--- registry ---\n{}",
                a.log_text(),
                reg.log_tail()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    let phase = |ns: &str, pod: &str| {
        get(&[
            "get",
            "pod",
            pod,
            "-n",
            ns,
            "-o",
            "jsonpath={.status.phase}",
        ])
    };
    let waiting = |ns: &str, pod: &str| {
        get(&[
            "get",
            "pod",
            pod,
            "-n",
            ns,
            "-o",
            "jsonpath={.status.containerStatuses[0].state.waiting.reason} {.status.containerStatuses[0].state.waiting.message}",
        ])
    };
    let events = |ns: &str, pod: &str| {
        get(&[
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            &format!("involvedObject.name={pod}"),
            "-o",
            "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
        ])
    };

    // A: pulls the private image with its secret and runs.
    cp.admin_stdin(
        &["apply", "-f", "-"],
        &api_pod("a", "default", &image, &["regcred"]),
    );
    wait("pod a running", &a, 120, &|| {
        phase("default", "a") == "Running"
    });
    // The record names the secret and a hash of its credential, never the credential.
    let pulled = dir.join("a/kubelet/image_manager/pulled");
    let records: Vec<String> = fs::read_dir(&pulled)
        .expect("the pulled records")
        .filter_map(Result::ok)
        .map(|e| fs::read_to_string(e.path()).unwrap())
        .collect();
    assert!(
        records
            .iter()
            .any(|r| r.contains("\"kind\":\"ImagePulledRecord\"")
                && r.contains("\"namespace\":\"default\"")
                && r.contains("\"name\":\"regcred\"")
                && r.contains("private/busybox")),
        "{records:#?}"
    );
    assert!(
        !records.iter().any(|r| r.contains(PASSWORD)),
        "{records:#?}"
    );

    // B: another namespace, no credentials for the image, which is on the node. It is not
    // let use it: it pulls afresh (anonymously) and the registry refuses, as upstream's kubelet
    // reports it: ErrImagePull, then ImagePullBackOff.
    cp.admin_stdin(&["apply", "-f", "-"], &api_pod("b", "other", &image, &[]));
    wait("pod b refused by the registry", &a, 120, &|| {
        let w = waiting("other", "b");
        (w.starts_with("ErrImagePull ") || w.starts_with("ImagePullBackOff "))
            && (w.contains("401") || w.contains("authorization failed"))
    });
    assert_ne!(phase("other", "b"), "Running");
    wait("pod b's fresh pull in its events", &a, 60, &|| {
        let ev = events("other", "b");
        ev.contains(&format!("Pulling: Pulling image \"{image}\""))
            && ev.contains(&format!("Failed: Failed to pull image \"{image}\""))
    });
    let ev = events("other", "b");
    assert!(
        !ev.contains("already present on machine"),
        "b must not use the image a pulled: {ev}"
    );
    wait("ImagePullBackOff for b", &a, 60, &|| {
        waiting("other", "b").starts_with("ImagePullBackOff")
    });

    // C: the same namespace as B, with valid credentials of its own (another account): it
    // pulls with them and runs; the record then holds both secrets.
    cp.admin_stdin(
        &["apply", "-f", "-"],
        &api_pod("c", "other", &image, &["owncred"]),
    );
    wait("pod c running", &a, 120, &|| {
        phase("other", "c") == "Running"
    });
    let ev = events("other", "c");
    assert!(
        ev.contains(&format!("Pulling: Pulling image \"{image}\""))
            && ev.contains(&format!("Pulled: Successfully pulled image \"{image}\"")),
        "c pulls with its own credentials: {ev}"
    );
    let records: Vec<String> = fs::read_dir(&pulled)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| fs::read_to_string(e.path()).unwrap())
        .collect();
    assert!(
        records
            .iter()
            .any(|r| r.contains("\"name\":\"regcred\"") && r.contains("\"name\":\"owncred\"")),
        "{records:#?}"
    );
    // A new pod of A's namespace with A's secret uses the image without a pull.
    cp.admin_stdin(
        &["apply", "-f", "-"],
        &api_pod("a2", "default", &image, &["regcred"]),
    );
    wait("pod a2 running", &a, 60, &|| {
        phase("default", "a2") == "Running"
    });
    assert!(
        events("default", "a2").contains(&format!(
            "Pulled: Container image \"{image}\" already present on machine and can be accessed by the pod"
        )),
        "{}",
        events("default", "a2")
    );
    assert_ne!(phase("other", "b"), "Running", "b still has no credentials");
    let log = a.log_text();
    assert!(!log.contains(PASSWORD) && !log.contains(PASSWORD2));

    // NeverVerify: every pod may use any image on the node; B runs from the image A pulled.
    drop(a);
    a = Agent::start_configured(
        &dir.join("a"),
        &c.endpoint(),
        &flags,
        "imagePullCredentialsVerificationPolicy: NeverVerify\n",
    );
    wait("pod b running under NeverVerify", &a, 120, &|| {
        phase("other", "b") == "Running"
    });
    assert!(
        events("other", "b").contains(&format!(
            "Pulled: Container image \"{image}\" already present on machine and can be accessed by the pod"
        )),
        "{}",
        events("other", "b")
    );
}

/// A joined node with a preload directory: an archive, a truncated one and a pull list naming
/// the private image. The archive is imported and pinned, the list's image pulled with the
/// node's `config.json` credentials and pinned, and each shows as an Event on the Node
/// (`Preloaded`, `FailedPreload`, `Pulled`) in the apiserver.
#[test]
fn a_joined_nodes_preload_events_and_an_authenticated_pull_list() {
    let dir = test_dir("regpreload");
    let (cp, c, reg) = joined_with_registry(&dir);
    reg.push(&dir.join("reg"), &busybox_archive(&c), "fleet/listed:1");
    let listed = format!("{}/fleet/listed:1", reg.host);

    let images = dir.join("a/preload");
    fs::create_dir_all(&images).unwrap();
    const ARCHIVED: &str = "picolet.local/joined-preload:1";
    let tar = dir.join("joined.tar");
    must(
        "build-image.sh",
        Command::new("bash")
            .arg(support::script("build-image.sh"))
            .arg(&tar)
            .arg(ARCHIVED)
            .args(["sleep", "3605"]),
    );
    fs::copy(&tar, images.join("app.tar")).unwrap();
    let whole = fs::read(&tar).unwrap();
    fs::write(images.join("broken.tar"), &whole[..whole.len() / 3]).unwrap();
    fs::write(images.join("fleet.txt"), format!("{listed}\n")).unwrap();
    fs::create_dir_all(dir.join("a/kubelet")).unwrap();
    let config = serde_json::json!({"auths": {
        reg.host.clone(): {"username": USER, "password": PASSWORD},
    }});
    fs::write(
        dir.join("a/kubelet/config.json"),
        serde_json::to_vec(&config).unwrap(),
    )
    .unwrap();

    let kc = cp.node_kubeconfig(NODE, NodeKey::EcSec1);
    let a = Agent::start_with(
        &dir.join("a"),
        &c.endpoint(),
        &[
            "--kubeconfig".into(),
            kc.display().to_string(),
            format!("--image-preload-dir={}", images.display()),
        ],
    );
    let events = || {
        cp.kubectl_with(
            &cp.admin_kubeconfig(),
            &[
                "get",
                "events",
                "-n",
                "default",
                "--field-selector",
                &format!("involvedObject.kind=Node,involvedObject.name={NODE}"),
                "-o",
                "jsonpath={range .items[*]}{.type} {.reason}: {.message}{\"\\n\"}{end}",
            ],
            None,
        )
        .stdout
    };
    let want = [
        format!(
            "Normal Preloaded: Imported image {ARCHIVED} from {}; pinned",
            images.join("app.tar").display()
        ),
        format!(
            "Warning FailedPreload: image archive {}: truncated",
            images.join("broken.tar").display()
        ),
        format!("Normal Pulled: Successfully pulled image \"{listed}\" in "),
    ];
    let t0 = Instant::now();
    loop {
        let ev = events();
        if want.iter().all(|w| ev.contains(w.as_str())) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "node events: {ev}\nwanted: {want:#?}\n--- picolet log ---\n{}",
            a.log_text()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(events().contains("; pinned"), "{}", events());
    let records = c.ctr(&["images", "ls"]);
    for name in [ARCHIVED, listed.as_str()] {
        assert!(
            records
                .lines()
                .any(|l| l.starts_with(name) && l.contains("io.cri-containerd.pinned=pinned")),
            "{name} pinned:\n{records}"
        );
    }
    assert!(!a.log_text().contains(PASSWORD));
}
