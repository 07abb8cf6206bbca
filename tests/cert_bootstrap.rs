//! TLS bootstrap and client certificate rotation against the fake apiserver, whose fake CA
//! signs CertificateSigningRequests at once (for a lifetime of seconds, so rotation happens
//! inside a test) or when the test says. The real control plane's flow is in `cluster_e2e`.

mod support;

use support::{IMAGE, NODE, agent, fake_apiserver, fake_cri, fakes, run, start_agent, until};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::Agent;
use fake_apiserver::FakeApi;
use fake_cri::{FakeCri, TempDir};
use picolet::rt;
use serde_json::json;

const TOKEN: &str = "abcdef.0123456789abcdef";

/// The flags of a node that has only a bootstrap token: `--kubeconfig` names a file that does
/// not exist yet.
fn bootstrap_flags(dir: &Path, api: &FakeApi) -> Vec<String> {
    let boot = api.bootstrap_kubeconfig(dir, TOKEN);
    vec![
        "--kubeconfig".into(),
        dir.join("kubelet.conf").display().to_string(),
        "--bootstrap-kubeconfig".into(),
        boot.display().to_string(),
    ]
}

/// Starts picolet in `<tmp>/a` with only a bootstrap token.
async fn start_bootstrapping(tmp: &TempDir, fake: &FakeCri, api: &FakeApi) -> Arc<Agent> {
    let dir = tmp.path().join("a");
    std::fs::create_dir_all(&dir).unwrap();
    start_agent(&dir, &fake.endpoint(), &bootstrap_flags(&dir, api)).await
}

fn ready(api: &FakeApi) -> bool {
    api.get(&format!("nodes/{NODE}")).is_some_and(|n| {
        n["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
    })
}

fn pki(a: &Agent) -> PathBuf {
    a.dir.join("kubelet").join("pki")
}

fn current_link(a: &Agent) -> PathBuf {
    std::fs::read_link(pki(a).join("kubelet-client-current.pem")).unwrap_or_default()
}

/// The identity in `--kubeconfig` as picolet would load it: the current certificate, valid now.
fn valid_identity(a: &Agent) -> picolet::certificate::Identity {
    let conn = picolet::apiclient::kubeconfig::load(&a.dir.join("kubelet.conf"))
        .unwrap_or_else(|e| panic!("{e}\n--- picolet log ---\n{}", a.log_text()));
    let id = picolet::certificate::Identity::of(&conn.credentials).expect("a client certificate");
    let now = picolet::api::time::unix_nanos_now() / 1_000_000_000;
    assert!(id.valid_at(now), "{id:?} at {now}");
    id
}

fn running_ids(fake: &FakeCri, pod: &str) -> Vec<String> {
    fake.running_containers_of(pod)
        .into_iter()
        .map(|c| c.id)
        .collect()
}

#[test]
fn joins_from_a_bootstrap_token_and_rotates_without_a_restart() {
    run(async {
        let (tmp, fake, api) = fakes("cert-join");
        // 20 s certificates: a renewal comes 14 to 18 s after each is issued.
        api.auto_sign(Some(20));
        let t0 = Instant::now();
        let a = start_bootstrapping(&tmp, &fake, &api).await;
        until(&a, "the node Ready", Duration::from_secs(20), async || {
            ready(&api)
        })
        .await;
        eprintln!("bootstrap token to Node Ready: {:?}", t0.elapsed());
        let csrs = api.csrs();
        assert_eq!(csrs.len(), 1, "{csrs:?}");
        let spec = &csrs[0]["spec"];
        assert_eq!(
            spec["signerName"],
            "kubernetes.io/kube-apiserver-client-kubelet"
        );
        assert_eq!(spec["usages"], json!(["digital signature", "client auth"]));
        // The CSR went with the bootstrap token; everything after it with the certificate.
        let csr_path = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
        assert_eq!(api.auths_of("POST", csr_path), [format!("Bearer {TOKEN}")]);
        assert!(
            api.auths_of("POST", "/api/v1/nodes")
                .iter()
                .all(String::is_empty),
            "the node registered with its certificate, not the token"
        );
        // The request's subject, as the apiserver's CSR approver reads it.
        use base64::Engine;
        let req = base64::engine::general_purpose::STANDARD
            .decode(spec["request"].as_str().unwrap())
            .unwrap();
        let ca = picolet::pki::TestCa::new("check").unwrap();
        let cert = ca.issue(&req, 0, 10, false).unwrap();
        let der = &picolet::pki::pem_blocks(cert.as_bytes()).unwrap()[0].1;
        assert_eq!(
            picolet::pki::subject(der).unwrap(),
            (
                format!("system:node:{NODE}"),
                vec!["system:nodes".to_owned()]
            )
        );
        // The files: one owner-only PEM, the link naming it, the kubeconfig naming the link.
        use std::os::unix::fs::PermissionsExt;
        let first = current_link(&a);
        assert!(
            first.to_string_lossy().starts_with("kubelet-client-20"),
            "{first:?}"
        );
        let mode = std::fs::metadata(pki(&a).join(&first))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let kc = std::fs::read_to_string(a.dir.join("kubelet.conf")).unwrap();
        assert!(kc.contains("kubelet-client-current.pem"), "{kc}");
        let first_id = valid_identity(&a);

        api.create_pod(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": IMAGE, "command": ["sleep", "3600"]}]}
        }));
        until(
            &a,
            "the API pod running",
            Duration::from_secs(15),
            async || running_ids(&fake, "web").len() == 1,
        )
        .await;
        let container = running_ids(&fake, "web");
        let watches = api.pod_watches();

        // Two renewals, each with the node's own certificate (no token), no restart.
        until(&a, "two renewals", Duration::from_secs(60), async || {
            api.csrs().len() >= 3
        })
        .await;
        let auths = api.auths_of("POST", csr_path);
        assert_eq!(auths.len(), 3, "{auths:?}");
        assert!(auths[1..].iter().all(String::is_empty), "{auths:?}");
        until(
            &a,
            "the third certificate installed",
            Duration::from_secs(10),
            async || valid_identity(&a).not_before > first_id.not_before + 1,
        )
        .await;
        assert_ne!(current_link(&a), first);
        let log = a.log_text();
        assert_eq!(
            log.matches("starting: node").count(),
            1,
            "picolet did not restart"
        );
        // The pod ran on, the same container; the watch resumed on new connections; the
        // Lease kept renewing.
        assert_eq!(running_ids(&fake, "web"), container);
        until(
            &a,
            "the watch resumed",
            Duration::from_secs(10),
            async || api.pod_watches() > watches,
        )
        .await;
        let lease = format!("leases/kube-node-lease/{NODE}");
        let before = api.get(&lease).unwrap()["spec"]["renewTime"].clone();
        until(
            &a,
            "the Lease renewed",
            Duration::from_secs(15),
            async || api.get(&lease).unwrap()["spec"]["renewTime"] != before,
        )
        .await;
        assert!(ready(&api));
    });
}

#[test]
fn a_denied_request_is_retried_and_a_pending_one_waits_for_approval() {
    run(async {
        let (tmp, fake, api) = fakes("cert-deny");
        let a = start_bootstrapping(&tmp, &fake, &api).await;
        until(&a, "a CSR", Duration::from_secs(10), async || {
            api.csrs().len() == 1
        })
        .await;
        let name = api.csrs()[0]["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_owned();
        rt::sleep(Duration::from_secs(2)).await;
        assert!(
            api.get(&format!("nodes/{NODE}")).is_none(),
            "no identity, no node yet"
        );
        api.deny_csr(&name);
        until(
            &a,
            "the denial logged",
            Duration::from_secs(10),
            async || {
                a.log_text()
                    .contains(&format!("CertificateSigningRequest {name} was denied"))
            },
        )
        .await;
        until(
            &a,
            "a new CSR after the denial",
            Duration::from_secs(15),
            async || api.csrs().len() == 2,
        )
        .await;
        let second = api.csrs()[1]["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_owned();
        api.approve_csr(&second, 3600);
        until(&a, "the node Ready", Duration::from_secs(20), async || {
            ready(&api)
        })
        .await;
        valid_identity(&a);
    });
}

#[test]
fn a_lost_answer_to_the_request_is_sent_again() {
    run(async {
        let (tmp, fake, api) = fakes("cert-lost");
        api.auto_sign(Some(3600));
        api.lose_answers("POST", "/apis/certificates.k8s.io", 1);
        let a = start_bootstrapping(&tmp, &fake, &api).await;
        until(&a, "the node Ready", Duration::from_secs(30), async || {
            ready(&api)
        })
        .await;
        assert_eq!(api.csrs().len(), 2, "the lost one and the one sent again");
        valid_identity(&a);
    });
}

#[test]
fn expired_with_a_refused_token_pods_run_on_and_the_log_says_what_to_do() {
    run(async {
        let (tmp, fake, api) = fakes("cert-expired");
        api.auto_sign(Some(6));
        let a = start_bootstrapping(&tmp, &fake, &api).await;
        until(&a, "the node Ready", Duration::from_secs(20), async || {
            ready(&api)
        })
        .await;
        api.create_pod(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": IMAGE, "command": ["sleep", "3600"]}]}
        }));
        until(
            &a,
            "the API pod running",
            Duration::from_secs(15),
            async || running_ids(&fake, "web").len() == 1,
        )
        .await;
        let container = running_ids(&fake, "web");
        // The apiserver goes away past the certificate's end; the token is revoked meanwhile.
        api.set_down(true);
        rt::sleep(Duration::from_secs(8)).await;
        api.refuse_token(TOKEN);
        api.set_down(false);
        until(
            &a,
            "the operator told",
            Duration::from_secs(40),
            async || a.log_text().contains("refuses the bootstrap credential"),
        )
        .await;
        rt::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            a.log_text()
                .matches("refuses the bootstrap credential")
                .count(),
            1,
            "said once"
        );
        assert_eq!(running_ids(&fake, "web"), container, "the pod ran on");
    });
}

/// A power cut (SIGKILL) at each point of the switch: picolet started again has a valid
/// identity, the old one or the new one, and joins.
#[test]
fn a_power_cut_during_the_switch_leaves_a_valid_identity() {
    for point in [
        "cert-written",
        "link-made",
        "link-renamed",
        "kubeconfig-written",
    ] {
        run(async {
            let (tmp, fake, api) = fakes(&format!("cert-cut-{point}"));
            api.auto_sign(Some(3600));
            let dir = tmp.path().join("a");
            std::fs::create_dir_all(&dir).unwrap();
            let args = bootstrap_flags(&dir, &api);
            let endpoint = fake.endpoint();
            let env = vec![("PICOLET_CRASH_AT".to_owned(), point.to_owned())];
            let (d, e, g) = (dir.clone(), endpoint.clone(), args.clone());
            let mut a = rt::unblock(move || Agent::start_env(&d, &e, &g, &env)).await;
            let (st, mut a) = rt::unblock(move || (a.wait_exit(Duration::from_secs(30)), a)).await;
            let st = st.unwrap_or_else(|| panic!("{point}: not killed\n{}", a.log_text()));
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(st.signal(), Some(9), "{point}: {st:?}");
            a.env.clear();
            let a = rt::unblock(move || {
                a.restart();
                a
            })
            .await;
            until(
                &a,
                "the node Ready after the cut",
                Duration::from_secs(30),
                async || ready(&api),
            )
            .await;
            valid_identity(&a);
            // No temporary file or link is read; at most one extra request was needed.
            assert!(api.csrs().len() <= 2, "{point}: {:?}", api.csrs().len());
        });
    }
}

/// The certificate the node API presents to a new connection: openssl's issuer and serial.
fn presented(port: u16) -> String {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect 127.0.0.1:{port} </dev/null 2>/dev/null \
             | openssl x509 -noout -issuer -serial"
        ))
        .output()
        .expect("openssl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_serving_certificate_is_self_signed_until_issued_then_rotated() {
    run(async {
        let (tmp, fake, api) = fakes("cert-serving");
        let dir = tmp.path().join("a");
        std::fs::create_dir_all(&dir).unwrap();
        let kc = api.kubeconfig(&dir);
        let port = agent::free_port();
        let args = vec![
            "--kubeconfig".to_owned(),
            kc.display().to_string(),
            "--port".to_owned(),
            port.to_string(),
            "--node-ip".to_owned(),
            "127.0.0.1".to_owned(),
        ];
        let endpoint = fake.endpoint();
        let a = Arc::new(
            rt::unblock(move || {
                Agent::start_configured(&dir, &endpoint, &args, "serverTLSBootstrap: true\n")
            })
            .await,
        );
        until(&a, "the serving CSR", Duration::from_secs(15), async || {
            !api.csrs().is_empty()
        })
        .await;
        let csr = api.csrs()[0].clone();
        assert_eq!(csr["spec"]["signerName"], "kubernetes.io/kubelet-serving");
        assert_eq!(
            csr["spec"]["usages"],
            json!(["digital signature", "server auth"])
        );
        let before = rt::unblock(move || presented(port)).await;
        assert!(
            before.contains(&format!("{NODE}-ca@")),
            "self-signed first: {before}"
        );
        api.approve_csr(csr["metadata"]["name"].as_str().unwrap(), 20);
        api.auto_sign(Some(3600));
        let mut issued = String::new();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(15) {
            issued = rt::unblock(move || presented(port)).await;
            if issued.contains("fake-cluster-ca") {
                break;
            }
            rt::sleep(Duration::from_millis(300)).await;
        }
        assert!(
            issued.contains("fake-cluster-ca"),
            "issued: {issued}\n{}",
            a.log_text()
        );
        // Renewed at 70 to 90 % of its 20 s: a second request, and a new certificate presented.
        until(
            &a,
            "the serving certificate renewed",
            Duration::from_secs(30),
            async || api.csrs().len() >= 2,
        )
        .await;
        let t0 = Instant::now();
        let mut renewed = String::new();
        while t0.elapsed() < Duration::from_secs(15) {
            renewed = rt::unblock(move || presented(port)).await;
            if renewed != issued && renewed.contains("fake-cluster-ca") {
                break;
            }
            rt::sleep(Duration::from_millis(300)).await;
        }
        assert_ne!(renewed, issued, "a new certificate presented");
        let link = std::fs::read_link(pki(&a).join("kubelet-server-current.pem")).unwrap();
        assert!(
            link.to_string_lossy().starts_with("kubelet-server-20"),
            "{link:?}"
        );
    });
}
