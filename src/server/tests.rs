//! Both listeners against a fake host: the route table (every route, unknown paths, wrong
//! methods), the failures as HTTP, and, with the node API, authentication, authorization and
//! the streaming endpoints (their requests read, the runtime's URL proxied).

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{Request, Response, StatusCode};

use super::routes::{Endpoint, Listener, Path, ROUTES};
use super::*;
use crate::rt;
use crate::testdir::TestDir;

const NODE: &str = "fake-node";

/// A host over fixed state, recording what the server asks of it. One pod, `default/web`
/// (UID `u1`), runs `main`; its `side` container has not started; nothing else exists.
#[derive(Default)]
pub(super) struct FakeHost {
    /// `/healthz`'s failure, when set.
    pub unhealthy: RefCell<Option<String>>,
    /// What the streaming endpoints asked, in order.
    pub asked: RefCell<Vec<String>>,
    /// The runtime's streaming URL exec, attach and port-forward answer with.
    pub url: RefCell<String>,
    /// The live log file `main` writes.
    pub log: RefCell<std::path::PathBuf>,
}

impl FakeHost {
    fn web(&self) -> crate::api::Pod {
        let mut p = crate::api::Pod::default();
        p.metadata.name = "web".into();
        p.metadata.namespace = "default".into();
        p.metadata.uid = "u1".into();
        p
    }

    /// A running container of the one pod, as the kubelet's host finds it.
    #[cfg(feature = "node-api")]
    fn running(&self, namespace: &str, pod: &str, uid: Option<&str>) -> Result<(), Error> {
        if (namespace, pod) != ("default", "web") || uid.is_some_and(|u| u != "u1") {
            return Err(Error::NotFound("pod does not exist".into()));
        }
        Ok(())
    }

    #[cfg(feature = "node-api")]
    fn container(&self, t: Target) -> Result<(), Error> {
        self.running(t.namespace, t.pod, t.uid)?;
        if t.container != "main" {
            return Err(Error::NotFound(format!(
                "container not found ({:?})",
                t.container
            )));
        }
        Ok(())
    }

    #[cfg(feature = "node-api")]
    fn url_answer(&self, found: Result<(), Error>) -> Answer<String> {
        let url = self.url.borrow().clone();
        Box::pin(async move { found.map(|()| url) })
    }
}

impl Host for FakeHost {
    fn node_name(&self) -> String {
        NODE.into()
    }

    fn healthz(&self) -> Result<(), Error> {
        match &*self.unhealthy.borrow() {
            Some(m) => Err(Error::internal(m.clone())),
            None => Ok(()),
        }
    }

    fn pod_list(&self) -> crate::api::PodList {
        crate::api::PodList {
            api_version: "v1".into(),
            kind: "PodList".into(),
            items: vec![self.web()],
            ..Default::default()
        }
    }

    fn stats_pods(&self) -> Vec<crate::stats::PodRef> {
        vec![crate::stats::PodRef {
            uid: "u1".into(),
            name: "web".into(),
            namespace: "default".into(),
            start: 0,
            containers: Vec::new(),
        }]
    }

    fn metrics(&self) -> HostMetrics {
        HostMetrics {
            running_pods: 1,
            containers: [0, 1, 1, 0],
            relist: crate::pleg::RelistMetrics::default(),
            pod_start: crate::stats::prom::Histogram::new(crate::stats::prom::POD_START_BUCKETS),
        }
    }

    fn probe_counts(&self) -> Vec<crate::prober::ProbeCounts> {
        vec![crate::prober::ProbeCounts {
            kind: crate::prober::Kind::Liveness,
            container: "main".into(),
            pod: "web".into(),
            namespace: "default".into(),
            pod_uid: "u1".into(),
            results: [3, 0, 0],
            duration: crate::stats::prom::Histogram::new(crate::stats::prom::POD_START_BUCKETS),
        }]
    }

    fn locate_log(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        previous: bool,
    ) -> Result<crate::logs::Located, Error> {
        if (namespace, pod) != ("default", "web") {
            return Err(Error::NotFound(format!("pod {pod:?} does not exist")));
        }
        match (container, previous) {
            ("main", false) => Ok(crate::logs::Located {
                uid: "u1".into(),
                container_id: "c1".into(),
                path: self.log.borrow().clone(),
            }),
            ("main", true) => Err(Error::BadRequest(format!(
                "previous terminated container {container:?} in pod {pod:?} not found"
            ))),
            ("side", _) => Err(Error::BadRequest(format!(
                "container {container:?} in pod {pod:?} is waiting to start: ContainerCreating"
            ))),
            _ => Err(Error::NotFound(format!(
                "container {container:?} not found in pod {pod:?}"
            ))),
        }
    }

    fn stream_log(
        &self,
        at: crate::logs::Located,
        _reader: crate::logs::read::Reader,
        tx: async_channel::Sender<Bytes>,
    ) -> std::pin::Pin<Box<dyn Future<Output = ()>>> {
        Box::pin(async move {
            let _ = tx
                .send(Bytes::from(format!("log of {}\n", at.container_id)))
                .await;
        })
    }

    #[cfg(feature = "node-api")]
    fn exec_url(&self, t: Target, cmd: Vec<String>, s: Streams) -> Answer<String> {
        self.asked
            .borrow_mut()
            .push(format!("exec {t:?} {cmd:?} {s:?}"));
        self.url_answer(self.container(t))
    }

    #[cfg(feature = "node-api")]
    fn attach_url(&self, t: Target, s: Streams) -> Answer<String> {
        self.asked.borrow_mut().push(format!("attach {t:?} {s:?}"));
        self.url_answer(self.container(t))
    }

    #[cfg(feature = "node-api")]
    fn port_forward_url(
        &self,
        namespace: &str,
        pod: &str,
        uid: Option<&str>,
        ports: Vec<i32>,
    ) -> Answer<String> {
        self.asked
            .borrow_mut()
            .push(format!("portForward {namespace}/{pod} {uid:?} {ports:?}"));
        self.url_answer(self.running(namespace, pod, uid))
    }

    #[cfg(feature = "node-api")]
    fn run(&self, t: Target, cmd: Vec<String>) -> Answer<Vec<u8>> {
        self.asked.borrow_mut().push(format!("run {t:?} {cmd:?}"));
        let found = self.container(t);
        Box::pin(async move { found.map(|()| format!("ran {}\n", cmd.join(" ")).into_bytes()) })
    }
}

struct NoFacts;

impl crate::stats::RuntimeFacts for NoFacts {
    fn container_pid(&self, _: &str) -> crate::stats::Ask<'_, u32> {
        Box::pin(async { None })
    }
    fn image_fs(&self) -> crate::stats::Ask<'_, crate::stats::ImageFs> {
        Box::pin(async { None })
    }
}

/// A context over a fake host, with a root without cgroups and a log for `main`, in a directory
/// that goes when the third is dropped.
fn context(tag: &str) -> (Rc<FakeHost>, Context, TestDir) {
    let dir = TestDir::new(&format!("server-{tag}"));
    let log = dir.join("0.log");
    std::fs::write(&log, "2024-05-01T12:00:00.000000000Z stdout F hello\n").unwrap();
    let host = Rc::new(FakeHost::default());
    *host.log.borrow_mut() = log;
    let ctx = Context {
        host: host.clone(),
        stats: Rc::new(StatsContext {
            provider: crate::stats::Provider::new(&dir, &dir, Rc::new(NoFacts)),
            ops: Rc::default(),
            machine: crate::stats::expose::Machine::default(),
        }),
        #[cfg(feature = "file-source")]
        report: Rc::default(),
    };
    (host, ctx, dir)
}

fn request(method: &str, uri: &str) -> Request<()> {
    Request::builder().method(method).uri(uri).body(()).unwrap()
}

/// A request asking to upgrade the connection, as exec, attach and port-forward clients send.
fn upgrade(method: &str, uri: &str) -> Request<()> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("connection", "Upgrade")
        .header("upgrade", "SPDY/3.1")
        .header("authorization", "Bearer secret")
        .header("x-stream-protocol-version", "v4.channel.k8s.io")
        .body(())
        .unwrap()
}

/// Status, content type, and the body as text.
async fn read(r: Response<Streamed>) -> (StatusCode, String, String) {
    let status = r.status();
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let b = r.into_body().collect().await.unwrap().to_bytes();
    (status, ct, String::from_utf8_lossy(&b).into_owned())
}

const CONFIGZ: &str = r#"{"kubeletconfig":{"port":10250}}"#;

async fn on(ctx: &Context, l: Listener, req: Request<()>) -> (StatusCode, String, String) {
    let configz = Bytes::from_static(CONFIGZ.as_bytes());
    read(dispatch(ctx, l, (l == Listener::NodeApi).then_some(&configz), req).await).await
}

/// A path a route serves, for each of its patterns.
fn sample_paths(r: &routes::Route) -> Vec<String> {
    r.paths
        .iter()
        .map(|p| match p {
            Path::Exact(p) => (*p).to_owned(),
            Path::Under(p) => format!("{p}default/web/main"),
        })
        .collect()
}

#[test]
fn every_endpoint_has_one_route_and_its_subresources_are_the_kubelets() {
    let all = [
        Endpoint::Healthz,
        Endpoint::Pods,
        #[cfg(feature = "file-source")]
        Endpoint::Manifests,
        Endpoint::StatsSummary,
        Endpoint::Metrics,
        Endpoint::MetricsCadvisor,
        Endpoint::MetricsProbes,
        Endpoint::MetricsResource,
        Endpoint::ContainerLogs,
        Endpoint::Configz,
        Endpoint::Exec,
        Endpoint::Attach,
        Endpoint::PortForward,
        Endpoint::Run,
    ];
    assert_eq!(ROUTES.len(), all.len());
    for e in all {
        let n = ROUTES.iter().filter(|r| r.endpoint == e).count();
        assert_eq!(n, 1, "{e:?} has {n} routes");
    }
    for r in ROUTES {
        assert!(r.local || r.node_api, "{r:?} is served nowhere");
        for p in sample_paths(r) {
            // The kubelet's authorizer maps paths by prefix; each route asks what it would.
            assert_eq!(
                r.subresources,
                routes::unrouted_subresources(&p),
                "{p}: the route's subresources differ from the kubelet's mapping"
            );
        }
    }
}

#[test]
fn each_route_answers_on_the_listeners_that_serve_it() {
    rt::block_on(async {
        let (_, ctx, _dir) = context("routes");
        for l in [Listener::Local, Listener::NodeApi] {
            let get = |p: &'static str| on(&ctx, l, request("GET", p));
            let (s, ct, b) = get("/healthz").await;
            assert_eq!(
                (s, ct.as_str(), b.as_str()),
                (StatusCode::OK, "text/plain", "ok")
            );
            for p in ["/pods", "/pods/"] {
                let (s, ct, b) = get(p).await;
                assert_eq!((s, ct.as_str()), (StatusCode::OK, "application/json"));
                let v: serde_json::Value = serde_json::from_str(&b).unwrap();
                assert_eq!(v["kind"], "PodList");
                assert_eq!(v["items"][0]["metadata"]["name"], "web");
            }
            for p in ["/stats/summary", "/stats/summary/"] {
                let (s, _, b) = get(p).await;
                assert_eq!(s, StatusCode::OK, "{p}: {b}");
                let v: serde_json::Value = serde_json::from_str(&b).unwrap();
                assert_eq!(v["node"]["nodeName"], NODE);
                assert_eq!(v["pods"][0]["podRef"]["name"], "web");
            }
            let (s, ct, b) = get("/metrics").await;
            assert_eq!(
                (s, ct.as_str()),
                (StatusCode::OK, crate::stats::prom::CONTENT_TYPE)
            );
            assert!(
                b.contains("kubelet_node_name{node=\"fake-node\"} 1\n"),
                "{b}"
            );
            assert!(b.contains("kubelet_running_pods 1\n"), "{b}");
            let (s, _, b) = get("/metrics/probes").await;
            assert_eq!(s, StatusCode::OK);
            assert!(
                b.lines().any(|l| l.starts_with("prober_probe_total{")
                    && l.contains("pod=\"web\"")
                    && l.contains("result=\"successful\"")
                    && l.ends_with(" 3")),
                "{b}"
            );
            for p in ["/metrics/cadvisor", "/metrics/resource"] {
                let (s, ct, _) = get(p).await;
                assert_eq!(
                    (s, ct.as_str()),
                    (StatusCode::OK, crate::stats::prom::CONTENT_TYPE),
                    "{p}"
                );
            }
            let (s, ct, b) = get("/containerLogs/default/web/main").await;
            assert_eq!(
                (s, ct.as_str(), b.as_str()),
                (StatusCode::OK, "text/plain", "log of c1\n")
            );
            // What only one of them serves.
            let (s, _, b) = get("/configz").await;
            let (m, _, _) = get("/manifests").await;
            match l {
                Listener::NodeApi => {
                    assert_eq!((s, b.as_str()), (StatusCode::OK, CONFIGZ));
                    assert_eq!(m, StatusCode::NOT_FOUND);
                }
                Listener::Local => {
                    assert_eq!(
                        (s, b.as_str()),
                        (StatusCode::NOT_FOUND, "404 page not found\n")
                    );
                    #[cfg(feature = "file-source")]
                    assert_eq!(m, StatusCode::OK);
                    for p in [
                        "/exec/default/web/main?command=ls&output=1",
                        "/attach/default/web/main?output=1",
                        "/portForward/default/web?port=80",
                    ] {
                        let (s, _, _) = on(&ctx, l, upgrade("GET", p)).await;
                        assert_eq!(s, StatusCode::NOT_FOUND, "{p}");
                    }
                    let (s, _, _) =
                        on(&ctx, l, request("POST", "/run/default/web/main?cmd=ls")).await;
                    assert_eq!(s, StatusCode::NOT_FOUND);
                }
            }
        }
        #[cfg(feature = "file-source")]
        {
            let (s, ct, b) = on(&ctx, Listener::Local, request("GET", "/manifests")).await;
            assert_eq!(
                (s, ct.as_str(), b.as_str()),
                (StatusCode::OK, "application/json", "[]")
            );
        }
    });
}

#[test]
fn unknown_paths_answer_404_and_wrong_methods_405_with_the_allowed_ones() {
    rt::block_on(async {
        let (_, ctx, _dir) = context("methods");
        for l in [Listener::Local, Listener::NodeApi] {
            for p in [
                "/",
                "/podsx",
                "/stats",
                "/stats/summaryx",
                "/metrics/",
                "/containerLogs",
                "/exec",
                "/logs/syslog",
                "/runningpods/",
            ] {
                for m in ["GET", "POST"] {
                    let (s, ct, b) = on(&ctx, l, request(m, p)).await;
                    assert_eq!(
                        (s, ct.as_str(), b.as_str()),
                        (
                            StatusCode::NOT_FOUND,
                            "text/plain; charset=utf-8",
                            "404 page not found\n"
                        ),
                        "{l:?} {m} {p}"
                    );
                }
            }
            for r in ROUTES.iter().filter(|r| match l {
                Listener::Local => r.local,
                Listener::NodeApi => r.node_api,
            }) {
                for p in sample_paths(r) {
                    for m in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
                        if r.methods.contains(&m) {
                            continue;
                        }
                        let resp = dispatch(&ctx, l, None, request(m, &p)).await;
                        let allow = resp.headers().get("allow").cloned();
                        let (s, _, b) = read(resp).await;
                        assert_eq!(
                            (s, b.as_str()),
                            (StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n"),
                            "{l:?} {m} {p}"
                        );
                        assert_eq!(
                            allow.unwrap().to_str().unwrap(),
                            r.methods.join(", "),
                            "{m} {p}"
                        );
                    }
                }
            }
        }
    });
}

#[test]
fn each_failure_answers_its_status_and_the_message() {
    let cases: Vec<(Error, StatusCode, &str)> = vec![
        (
            Error::BadRequest("bad".into()),
            StatusCode::BAD_REQUEST,
            "bad\n",
        ),
        (
            Error::Unauthorized,
            StatusCode::UNAUTHORIZED,
            "Unauthorized\n",
        ),
        (Error::Forbidden("no".into()), StatusCode::FORBIDDEN, "no\n"),
        (
            Error::no_route(),
            StatusCode::NOT_FOUND,
            "404 page not found\n",
        ),
        (
            Error::MethodNotAllowed { allow: &["POST"] },
            StatusCode::METHOD_NOT_ALLOWED,
            "Method Not Allowed\n",
        ),
        (
            Error::Invalid("both".into()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "both\n",
        ),
        (
            Error::from_source(std::io::Error::other("disk on fire")),
            StatusCode::INTERNAL_SERVER_ERROR,
            "disk on fire\n",
        ),
        (
            Error::BadGateway("refused".into()),
            StatusCode::BAD_GATEWAY,
            "refused\n",
        ),
        (
            Error::GatewayTimeout("slow".into()),
            StatusCode::GATEWAY_TIMEOUT,
            "slow\n",
        ),
    ];
    for (e, status, body) in cases {
        let r = e.response();
        assert_eq!(r.status(), status, "{e:?}");
        assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");
        assert_eq!(
            r.headers().get("allow").map(|v| v.to_str().unwrap()),
            (status == StatusCode::METHOD_NOT_ALLOWED).then_some("POST")
        );
        let b = rt::block_on(r.into_body().collect()).unwrap().to_bytes();
        assert_eq!(b, body.as_bytes(), "{e:?}");
    }
    // The source is kept as the cause.
    let e = Error::from_source(std::io::Error::other("disk on fire"));
    assert_eq!(
        std::error::Error::source(&e).map(ToString::to_string),
        Some("disk on fire".into())
    );
}

#[test]
fn the_hosts_failures_and_bad_queries_answer_as_the_kubelet_does() {
    rt::block_on(async {
        let (host, ctx, _dir) = context("failures");
        let get = |p: &'static str| on(&ctx, Listener::Local, request("GET", p));
        *host.unhealthy.borrow_mut() = Some("PLEG is not healthy".into());
        assert_eq!(
            get("/healthz").await,
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain; charset=utf-8".into(),
                "PLEG is not healthy\n".into()
            )
        );
        for (p, status, body) in [
            (
                "/containerLogs/default/nope/main",
                StatusCode::NOT_FOUND,
                "pod \"nope\" does not exist\n",
            ),
            (
                "/containerLogs/default/web/db",
                StatusCode::NOT_FOUND,
                "container \"db\" not found in pod \"web\"\n",
            ),
            (
                "/containerLogs/default/web/side",
                StatusCode::BAD_REQUEST,
                "container \"side\" in pod \"web\" is waiting to start: ContainerCreating\n",
            ),
            (
                "/containerLogs/default/web/main?previous=true",
                StatusCode::BAD_REQUEST,
                "previous terminated container \"main\" in pod \"web\" not found\n",
            ),
            (
                "/containerLogs/default/web/main?tailLines=x",
                StatusCode::BAD_REQUEST,
                "tailLines: invalid value \"x\": not an integer\n",
            ),
            (
                "/containerLogs/default/web/main?sinceSeconds=0",
                StatusCode::UNPROCESSABLE_ENTITY,
                "sinceSeconds: Invalid value: 0: must be greater than 0\n",
            ),
            (
                "/containerLogs/default/web",
                StatusCode::BAD_REQUEST,
                "expected /containerLogs/{namespace}/{pod}/{container}\n",
            ),
            (
                "/containerLogs/default//main",
                StatusCode::BAD_REQUEST,
                "missing namespace, pod or container name\n",
            ),
        ] {
            let (s, _, b) = get(p).await;
            assert_eq!((s, b.as_str()), (status, body), "{p}");
        }
        // A log file that is gone: the reader's error, 400 as the kubelet answers it.
        std::fs::remove_file(&*host.log.borrow()).unwrap();
        let (s, _, b) = get("/containerLogs/default/web/main").await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
        assert!(b.contains("failed to open log file"), "{b}");
    });
}

#[cfg(feature = "node-api")]
mod node_api {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::server::auth::{Auth, ReviewFailure, ReviewStatus, Reviewer, User};
    use crate::server::node_api::{NodeApi, handle};

    /// An apiserver answering reviews: `tokens` name their users, `allow` lists the
    /// (user, verb, subresource) it allows; `down` fails every review. Each review is recorded.
    #[derive(Default)]
    struct FakeReviewer {
        tokens: BTreeMap<&'static str, &'static str>,
        allow: Vec<(&'static str, &'static str, &'static str)>,
        down: bool,
        asked: RefCell<Vec<(String, serde_json::Value)>>,
    }

    impl Reviewer for FakeReviewer {
        fn review(
            &self,
            path: &'static str,
            body: Vec<u8>,
        ) -> std::pin::Pin<Box<dyn Future<Output = Result<ReviewStatus, ReviewFailure>>>> {
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            self.asked.borrow_mut().push((path.to_owned(), v.clone()));
            let answer = if self.down {
                Err("connection refused".into())
            } else if v["kind"] == "TokenReview" {
                let token = v["spec"]["token"].as_str().unwrap();
                Ok(match self.tokens.get(token) {
                    Some(u) => ReviewStatus {
                        authenticated: true,
                        user: User {
                            username: (*u).into(),
                            groups: vec!["system:authenticated".into()],
                            ..User::default()
                        },
                        ..ReviewStatus::default()
                    },
                    None => ReviewStatus {
                        error: "invalid bearer token".into(),
                        ..ReviewStatus::default()
                    },
                })
            } else {
                let a = &v["spec"]["resourceAttributes"];
                let allowed = self.allow.iter().any(|(u, verb, sub)| {
                    v["spec"]["user"] == *u && a["verb"] == *verb && a["subresource"] == *sub
                });
                Ok(ReviewStatus {
                    allowed,
                    ..ReviewStatus::default()
                })
            };
            Box::pin(async move { answer })
        }
    }

    impl FakeReviewer {
        /// The (verb, subresource) of each SubjectAccessReview asked, after checking it names
        /// this node's `nodes` resource.
        fn access_asked(&self) -> Vec<(String, String)> {
            self.asked
                .borrow()
                .iter()
                .filter(|(p, _)| p.ends_with("/subjectaccessreviews"))
                .map(|(_, v)| {
                    let a = &v["spec"]["resourceAttributes"];
                    assert_eq!(a["resource"], "nodes");
                    assert_eq!(a["name"], NODE);
                    (
                        a["verb"].as_str().unwrap().to_owned(),
                        a["subresource"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        }

        fn token_reviews(&self) -> usize {
            self.asked
                .borrow()
                .iter()
                .filter(|(p, _)| p.ends_with("/tokenreviews"))
                .count()
        }
    }

    fn node_api(
        tag: &str,
        anonymous: bool,
        reviewer: Option<Rc<FakeReviewer>>,
    ) -> (Rc<FakeHost>, NodeApi, TestDir) {
        let (host, ctx, dir) = context(tag);
        let r = reviewer.map(|r| r as Rc<dyn Reviewer>);
        let ttl = Duration::from_secs(60);
        let auth = Auth::with_reviewers(anonymous, r.clone(), ttl, r, ttl, ttl, NODE.into());
        let api = NodeApi {
            ctx: Rc::new(ctx),
            auth,
            configz: Bytes::from_static(CONFIGZ.as_bytes()),
        };
        (host, api, dir)
    }

    fn bearer(method: &str, uri: &str, token: &str) -> Request<()> {
        Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", format!("Bearer {token}"))
            .body(())
            .unwrap()
    }

    fn admin() -> User {
        User {
            username: "kube-apiserver-kubelet-client".into(),
            groups: vec!["system:masters".into()],
            ..User::default()
        }
    }

    #[test]
    fn a_client_certificate_names_the_user_and_each_path_asks_its_subresource() {
        rt::block_on(async {
            let rv = Rc::new(FakeReviewer {
                allow: vec![
                    ("kube-apiserver-kubelet-client", "get", "stats"),
                    ("kube-apiserver-kubelet-client", "get", "metrics"),
                    ("kube-apiserver-kubelet-client", "get", "proxy"),
                    ("kube-apiserver-kubelet-client", "create", "proxy"),
                ],
                ..FakeReviewer::default()
            });
            let (_, api, _dir) = node_api("cert", false, Some(rv.clone()));
            let u = admin();
            for (m, p, status) in [
                ("GET", "/stats/summary", StatusCode::OK),
                ("GET", "/metrics/cadvisor", StatusCode::OK),
                // `pods` refused, `proxy` allowed: the kubelet's fallback.
                ("GET", "/pods", StatusCode::OK),
                ("GET", "/healthz", StatusCode::OK),
                ("GET", "/configz", StatusCode::OK),
                ("GET", "/containerLogs/default/web/main", StatusCode::OK),
                (
                    "POST",
                    "/run/default/web/main?cmd=echo%20hi",
                    StatusCode::OK,
                ),
            ] {
                let (s, _, b) = read(handle(&api, Some(&u), request(m, p)).await).await;
                assert_eq!(s, status, "{m} {p}: {b}");
            }
            // No token reviewed: the certificate is enough.
            assert_eq!(rv.token_reviews(), 0);
            let asked = rv.access_asked();
            let pairs: Vec<(&str, &str)> = asked
                .iter()
                .map(|(v, s)| (v.as_str(), s.as_str()))
                .collect();
            assert_eq!(
                pairs,
                [
                    ("get", "stats"),
                    ("get", "metrics"),
                    ("get", "pods"),
                    ("get", "proxy"),
                    ("get", "healthz"),
                    ("get", "proxy"),
                    ("get", "configz"),
                    ("get", "proxy"),
                    ("get", "proxy"),
                    ("create", "proxy"),
                ]
            );
            // The SubjectAccessReview carries the user's name and groups.
            let first = &rv.asked.borrow()[0].1;
            assert_eq!(first["spec"]["user"], "kube-apiserver-kubelet-client");
            assert_eq!(first["spec"]["groups"][0], "system:masters");
        });
    }

    #[test]
    fn a_bearer_token_is_reviewed_once_and_a_bad_one_is_unauthorized() {
        rt::block_on(async {
            let rv = Rc::new(FakeReviewer {
                tokens: BTreeMap::from([("good", "system:serviceaccount:monitoring:scraper")]),
                allow: vec![("system:serviceaccount:monitoring:scraper", "get", "metrics")],
                ..FakeReviewer::default()
            });
            let (_, api, _dir) = node_api("token", false, Some(rv.clone()));
            for _ in 0..2 {
                let (s, _, _) =
                    read(handle(&api, None, bearer("GET", "/metrics", "good")).await).await;
                assert_eq!(s, StatusCode::OK);
            }
            // Reviewed once, then cached; so was the decision.
            assert_eq!(rv.token_reviews(), 1);
            assert_eq!(rv.access_asked().len(), 1);
            let (s, _, b) = read(handle(&api, None, bearer("GET", "/metrics", "bad")).await).await;
            assert_eq!(
                (s, b.as_str()),
                (StatusCode::UNAUTHORIZED, "Unauthorized\n")
            );
            // Without credentials and with anonymous requests off.
            let (s, _, b) = read(handle(&api, None, request("GET", "/metrics")).await).await;
            assert_eq!(
                (s, b.as_str()),
                (StatusCode::UNAUTHORIZED, "Unauthorized\n")
            );
            // A refused user is told which subresources were asked.
            let (s, _, b) = read(handle(&api, None, bearer("GET", "/pods", "good")).await).await;
            assert_eq!(
                (s, b.as_str()),
                (
                    StatusCode::FORBIDDEN,
                    "Forbidden (user=system:serviceaccount:monitoring:scraper, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
                )
            );
        });
    }

    #[test]
    fn anonymous_requests_are_authorized_as_system_anonymous_or_refused() {
        rt::block_on(async {
            let rv = Rc::new(FakeReviewer {
                allow: vec![("system:anonymous", "get", "healthz")],
                ..FakeReviewer::default()
            });
            let (_, api, _dir) = node_api("anonymous", true, Some(rv.clone()));
            let (s, _, b) = read(handle(&api, None, request("GET", "/healthz")).await).await;
            assert_eq!((s, b.as_str()), (StatusCode::OK, "ok"));
            let (s, _, b) = read(handle(&api, None, request("GET", "/stats/summary")).await).await;
            assert_eq!(
                (s, b.as_str()),
                (
                    StatusCode::FORBIDDEN,
                    "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource(s)=[stats])\n"
                )
            );
            // A verb of its method: POST is `create`.
            let (s, _, b) =
                read(handle(&api, None, request("POST", "/run/default/web/main?cmd=id")).await)
                    .await;
            assert_eq!(
                (s, b.as_str()),
                (
                    StatusCode::FORBIDDEN,
                    "Forbidden (user=system:anonymous, verb=create, resource=nodes, subresource(s)=[proxy])\n"
                )
            );
            // Authorization comes before routing: a path nothing serves is refused on the
            // subresource the kubelet maps it to, not answered 404.
            let (s, _, b) = read(handle(&api, None, request("GET", "/logs/syslog")).await).await;
            assert_eq!(s, StatusCode::FORBIDDEN, "{b}");
            assert!(b.contains("subresource(s)=[log]"), "{b}");
            // A bearer token with no token review configured is not anonymous.
            let (_, api, _dir) = node_api("anonymous-token", true, None);
            let (s, _, _) = read(handle(&api, None, bearer("GET", "/healthz", "x")).await).await;
            assert_eq!(s, StatusCode::UNAUTHORIZED);
            // AlwaysAllow: an anonymous request reaches the route.
            let (s, _, b) = read(handle(&api, None, request("GET", "/nothing")).await).await;
            assert_eq!(
                (s, b.as_str()),
                (StatusCode::NOT_FOUND, "404 page not found\n")
            );
            let (_, api, _dir) = node_api("anonymous-off", false, None);
            let (s, _, _) = read(handle(&api, None, request("GET", "/healthz")).await).await;
            assert_eq!(s, StatusCode::UNAUTHORIZED);
        });
    }

    #[test]
    fn an_apiserver_that_cannot_review_is_an_authorization_error() {
        rt::block_on(async {
            let rv = Rc::new(FakeReviewer {
                down: true,
                ..FakeReviewer::default()
            });
            let (_, api, _dir) = node_api("down", false, Some(rv.clone()));
            let u = admin();
            let (s, _, b) = read(handle(&api, Some(&u), request("GET", "/metrics")).await).await;
            assert_eq!(
                (s, b.as_str()),
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Authorization error (user=kube-apiserver-kubelet-client, verb=get, resource=nodes, subresource=metrics)\n"
                )
            );
            // Not cached: the next request asks again.
            let _ = handle(&api, Some(&u), request("GET", "/metrics")).await;
            assert_eq!(rv.access_asked().len(), 2);
            // A token that cannot be reviewed is unauthorized, and asked again next time.
            for _ in 0..2 {
                let (s, _, _) =
                    read(handle(&api, None, bearer("GET", "/metrics", "t")).await).await;
                assert_eq!(s, StatusCode::UNAUTHORIZED);
            }
            assert_eq!(rv.token_reviews(), 2);
        });
    }

    /// A runtime streaming server on loopback answering one request with `answer`, then
    /// closing; the request head it read comes back on the channel.
    fn streaming_server(answer: &'static str) -> (String, std::sync::mpsc::Receiver<String>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            let Ok((mut c, _)) = l.accept() else { return };
            let mut head = Vec::new();
            let mut b = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match c.read(&mut b) {
                    Ok(n) if n > 0 => head.extend_from_slice(&b[..n]),
                    _ => break,
                }
            }
            let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
            let _ = c.write_all(answer.as_bytes());
        });
        (format!("http://{addr}"), rx)
    }

    #[test]
    fn exec_attach_and_port_forward_are_read_from_the_request_and_proxied_to_the_runtime() {
        rt::block_on(async {
            let (host, api, _dir) = node_api("stream", false, None);
            let u = admin();
            let (base, heads) = streaming_server(
                "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n",
            );
            *host.url.borrow_mut() = format!("{base}/exec/Zm9v");
            let resp = handle(
                &api,
                Some(&u),
                upgrade(
                    "POST",
                    "/exec/default/web/u1/main?command=sh&command=-c&command=echo%20hi&input=1&output=1&tty=1",
                ),
            )
            .await;
            assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
            assert_eq!(
                resp.headers()["x-stream-protocol-version"],
                "v4.channel.k8s.io"
            );
            assert_eq!(
                host.asked.borrow().last().unwrap(),
                &format!(
                    "exec {:?} {:?} {:?}",
                    Target {
                        namespace: "default",
                        pod: "web",
                        uid: Some("u1"),
                        container: "main"
                    },
                    ["sh", "-c", "echo hi"],
                    Streams {
                        stdin: true,
                        stdout: true,
                        stderr: false,
                        tty: true
                    }
                )
            );
            // The runtime got the client's upgrade at its URL, without the client's
            // credentials.
            let head = heads.recv_timeout(Duration::from_secs(5)).unwrap();
            let host_line = format!("Host: {}\r\n", base.trim_start_matches("http://"));
            assert!(head.starts_with("POST /exec/Zm9v HTTP/1.1\r\n"), "{head}");
            assert!(head.contains(&host_line), "{head}");
            assert!(
                head.to_ascii_lowercase().contains("upgrade: spdy/3.1\r\n"),
                "{head}"
            );
            assert!(
                !head.to_ascii_lowercase().contains("authorization"),
                "{head}"
            );

            // An answer before the upgrade is passed on, status and body.
            let (base, _heads) = streaming_server(
                "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n\r\nsession not found",
            );
            *host.url.borrow_mut() = format!("{base}/attach/YmFy");
            let (s, _, b) = read(
                handle(
                    &api,
                    Some(&u),
                    upgrade("GET", "/attach/default/web/main?output=1&error=1"),
                )
                .await,
            )
            .await;
            assert_eq!(
                (s, b.as_str()),
                (StatusCode::NOT_FOUND, "session not found")
            );
            assert!(
                host.asked.borrow().last().unwrap().starts_with("attach "),
                "{:?}",
                host.asked
            );

            // Port-forward: the ports of the query, comma-separated or repeated.
            let (base, heads) = streaming_server("HTTP/1.1 101 Switching Protocols\r\n\r\n");
            *host.url.borrow_mut() = format!("{base}/portforward/cXV4");
            let (s, _, _) = read(
                handle(
                    &api,
                    Some(&u),
                    upgrade("GET", "/portForward/default/web?port=80,443&port=8080"),
                )
                .await,
            )
            .await;
            assert_eq!(s, StatusCode::SWITCHING_PROTOCOLS);
            assert_eq!(
                host.asked.borrow().last().unwrap(),
                "portForward default/web None [80, 443, 8080]"
            );
            let head = heads.recv_timeout(Duration::from_secs(5)).unwrap();
            assert!(
                head.starts_with("GET /portforward/cXV4 HTTP/1.1\r\n"),
                "{head}"
            );

            // `/run`: what the command wrote.
            let (s, _, b) = read(
                handle(
                    &api,
                    Some(&u),
                    request("POST", "/run/default/web/main?cmd=echo+hi+there"),
                )
                .await,
            )
            .await;
            assert_eq!((s, b.as_str()), (StatusCode::OK, "ran echo hi there\n"));
        });
    }

    #[test]
    fn streaming_requests_the_server_cannot_use_are_refused_before_the_host_is_asked() {
        rt::block_on(async {
            let (host, api, _dir) = node_api("stream-bad", false, None);
            let u = admin();
            for (req, status, body) in [
                (
                    upgrade("GET", "/exec/default/web/main?command=ls"),
                    StatusCode::BAD_REQUEST,
                    "you must specify at least 1 of stdin, stdout, stderr\n",
                ),
                (
                    request("GET", "/exec/default/web/main?command=ls&output=1"),
                    StatusCode::BAD_REQUEST,
                    "Upgrade request required\n",
                ),
                (
                    upgrade("GET", "/exec/default/web/main?output=1"),
                    StatusCode::BAD_REQUEST,
                    "you must specify a command\n",
                ),
                (
                    upgrade("GET", "/exec/default/web?output=1&command=ls"),
                    StatusCode::BAD_REQUEST,
                    "expected /{exec|attach}/{namespace}/{pod}[/{uid}]/{container}\n",
                ),
                (
                    upgrade("GET", "/attach/default//main?output=1"),
                    StatusCode::BAD_REQUEST,
                    "expected /{exec|attach}/{namespace}/{pod}[/{uid}]/{container}\n",
                ),
                (
                    upgrade("GET", "/portForward/default/web?port=http"),
                    StatusCode::BAD_REQUEST,
                    "invalid port in the query\n",
                ),
                (
                    upgrade("GET", "/portForward/default"),
                    StatusCode::BAD_REQUEST,
                    "expected /portForward/{namespace}/{pod}[/{uid}]\n",
                ),
                (
                    request("GET", "/portForward/default/web?port=80"),
                    StatusCode::BAD_REQUEST,
                    "Upgrade request required\n",
                ),
                (
                    request("POST", "/run/default/web/main"),
                    StatusCode::BAD_REQUEST,
                    "you must specify a command (cmd)\n",
                ),
                (
                    request("GET", "/run/default/web/main?cmd=ls"),
                    StatusCode::METHOD_NOT_ALLOWED,
                    "Method Not Allowed\n",
                ),
                (
                    upgrade("PUT", "/exec/default/web/main?command=ls&output=1"),
                    StatusCode::METHOD_NOT_ALLOWED,
                    "Method Not Allowed\n",
                ),
            ] {
                let what = format!("{} {}", req.method(), req.uri());
                let (s, _, b) = read(handle(&api, Some(&u), req).await).await;
                assert_eq!((s, b.as_str()), (status, body), "{what}");
            }
            assert!(host.asked.borrow().is_empty(), "{:?}", host.asked);
        });
    }

    #[test]
    fn the_hosts_and_the_runtimes_failures_answer_their_status() {
        rt::block_on(async {
            let (host, api, _dir) = node_api("stream-fail", false, None);
            let u = admin();
            let ask = |r: Request<()>| handle(&api, Some(&u), r);
            *host.url.borrow_mut() = "http://127.0.0.1:1/exec/x".into();
            let (s, _, b) = read(
                ask(upgrade(
                    "GET",
                    "/exec/default/nope/main?command=ls&output=1",
                ))
                .await,
            )
            .await;
            assert_eq!(
                (s, b.as_str()),
                (StatusCode::NOT_FOUND, "pod does not exist\n")
            );
            // A UID that is not the pod's.
            let (s, _, _) = read(
                ask(upgrade(
                    "GET",
                    "/exec/default/web/u2/main?command=ls&output=1",
                ))
                .await,
            )
            .await;
            assert_eq!(s, StatusCode::NOT_FOUND);
            let (s, _, b) =
                read(ask(upgrade("GET", "/attach/default/web/db?output=1")).await).await;
            assert_eq!(
                (s, b.as_str()),
                (StatusCode::NOT_FOUND, "container not found (\"db\")\n")
            );
            // Nothing listens where the runtime's URL points.
            let (s, _, b) =
                read(ask(upgrade("GET", "/exec/default/web/main?command=ls&output=1")).await).await;
            assert_eq!(s, StatusCode::BAD_GATEWAY, "{b}");
            assert!(
                b.starts_with("connecting to the runtime's streaming server 127.0.0.1:1: "),
                "{b}"
            );
            // A URL the proxy cannot use.
            *host.url.borrow_mut() = "https://127.0.0.1:1/exec/x".into();
            let (s, _, b) =
                read(ask(upgrade("GET", "/exec/default/web/main?command=ls&output=1")).await).await;
            assert_eq!(
                (s, b.as_str()),
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "streaming URL \"https://127.0.0.1:1/exec/x\": only http:// is supported\n"
                )
            );
            // A runtime that hangs up before answering.
            let (base, _heads) = streaming_server("");
            *host.url.borrow_mut() = format!("{base}/exec/x");
            let (s, _, b) =
                read(ask(upgrade("GET", "/exec/default/web/main?command=ls&output=1")).await).await;
            assert_eq!(
                (s, b.as_str()),
                (
                    StatusCode::BAD_GATEWAY,
                    "the runtime's streaming server closed the connection\n"
                )
            );
        });
    }
}
