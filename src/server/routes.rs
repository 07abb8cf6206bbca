//! The one route table both listeners serve from: each route's path, the methods it takes, the
//! Node subresources a request of it is authorized on (as the kubelet's authorizer maps paths),
//! which listeners serve it, and the endpoint that answers it.

/// What answers a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Healthz,
    Pods,
    #[cfg(feature = "file-source")]
    Manifests,
    StatsSummary,
    Metrics,
    MetricsCadvisor,
    MetricsProbes,
    MetricsResource,
    ContainerLogs,
    Configz,
    Exec,
    Attach,
    PortForward,
    Run,
}

/// Which listener serves a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The local, read-only API on `--healthz-port`: no credentials, no TLS.
    Local,
    /// The node API on `--port`: authenticated and authorized.
    #[cfg_attr(not(feature = "node-api"), expect(dead_code, reason = "no node API"))]
    NodeApi,
}

/// How a route's path is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// This path exactly.
    Exact(&'static str),
    /// Any path under this prefix (which ends with `/`); the rest names the target.
    Under(&'static str),
}

impl Path {
    fn matches(self, path: &str) -> bool {
        match self {
            Path::Exact(p) => path == p,
            Path::Under(p) => path.starts_with(p),
        }
    }
}

/// One route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub paths: &'static [Path],
    /// The methods it takes; any other answers 405 with these in `Allow`.
    pub methods: &'static [&'static str],
    /// The Node subresources that allow it, most specific first (the fine-grained one, then
    /// `proxy`, as the kubelet falls back); the verb comes from the method.
    pub subresources: &'static [&'static str],
    /// Whether the local API serves it (the node API serves every route but `/manifests`).
    pub local: bool,
    pub node_api: bool,
    pub endpoint: Endpoint,
}

const GET: &[&str] = &["GET"];
const GET_POST: &[&str] = &["GET", "POST"];
const POST: &[&str] = &["POST"];

/// Every route of both listeners.
pub const ROUTES: &[Route] = &[
    Route {
        paths: &[Path::Exact("/healthz")],
        methods: GET,
        subresources: &["healthz", "proxy"],
        local: true,
        node_api: true,
        endpoint: Endpoint::Healthz,
    },
    Route {
        paths: &[Path::Exact("/pods"), Path::Exact("/pods/")],
        methods: GET,
        subresources: &["pods", "proxy"],
        local: true,
        node_api: true,
        endpoint: Endpoint::Pods,
    },
    #[cfg(feature = "file-source")]
    Route {
        paths: &[Path::Exact("/manifests")],
        methods: GET,
        subresources: &["proxy"],
        local: true,
        node_api: false,
        endpoint: Endpoint::Manifests,
    },
    Route {
        paths: &[
            Path::Exact("/stats/summary"),
            Path::Exact("/stats/summary/"),
        ],
        methods: GET,
        subresources: &["stats"],
        local: true,
        node_api: true,
        endpoint: Endpoint::StatsSummary,
    },
    Route {
        paths: &[Path::Exact("/metrics")],
        methods: GET,
        subresources: &["metrics"],
        local: true,
        node_api: true,
        endpoint: Endpoint::Metrics,
    },
    Route {
        paths: &[Path::Exact("/metrics/cadvisor")],
        methods: GET,
        subresources: &["metrics"],
        local: true,
        node_api: true,
        endpoint: Endpoint::MetricsCadvisor,
    },
    Route {
        paths: &[Path::Exact("/metrics/probes")],
        methods: GET,
        subresources: &["metrics"],
        local: true,
        node_api: true,
        endpoint: Endpoint::MetricsProbes,
    },
    Route {
        paths: &[Path::Exact("/metrics/resource")],
        methods: GET,
        subresources: &["metrics"],
        local: true,
        node_api: true,
        endpoint: Endpoint::MetricsResource,
    },
    Route {
        paths: &[Path::Under("/containerLogs/")],
        methods: GET,
        subresources: &["proxy"],
        local: true,
        node_api: true,
        endpoint: Endpoint::ContainerLogs,
    },
    Route {
        paths: &[Path::Exact("/configz")],
        methods: GET,
        subresources: &["configz", "proxy"],
        local: false,
        node_api: true,
        endpoint: Endpoint::Configz,
    },
    Route {
        paths: &[Path::Under("/exec/")],
        methods: GET_POST,
        subresources: &["proxy"],
        local: false,
        node_api: true,
        endpoint: Endpoint::Exec,
    },
    Route {
        paths: &[Path::Under("/attach/")],
        methods: GET_POST,
        subresources: &["proxy"],
        local: false,
        node_api: true,
        endpoint: Endpoint::Attach,
    },
    Route {
        paths: &[Path::Under("/portForward/")],
        methods: GET_POST,
        subresources: &["proxy"],
        local: false,
        node_api: true,
        endpoint: Endpoint::PortForward,
    },
    Route {
        paths: &[Path::Under("/run/")],
        methods: POST,
        subresources: &["proxy"],
        local: false,
        node_api: true,
        endpoint: Endpoint::Run,
    },
];

impl Route {
    fn serves(&self, on: Listener) -> bool {
        match on {
            Listener::Local => self.local,
            Listener::NodeApi => self.node_api,
        }
    }
}

/// The route a listener serves `path` with, whatever the method.
pub fn route_of(on: Listener, path: &str) -> Option<&'static Route> {
    ROUTES
        .iter()
        .find(|r| r.serves(on) && r.paths.iter().any(|p| p.matches(path)))
}

/// The route of a request: 404 when no route has its path, 405 when the route does not take
/// its method.
pub fn find(
    on: Listener,
    method: &hyper::Method,
    path: &str,
) -> Result<&'static Route, super::Error> {
    let r = route_of(on, path).ok_or_else(super::Error::no_route)?;
    if !r.methods.contains(&method.as_str()) {
        return Err(super::Error::MethodNotAllowed { allow: r.methods });
    }
    Ok(r)
}

/// The subresources of a path no route serves, by the kubelet's prefixes (its `/logs`, `/spec`
/// and `/checkpoint` are not served here, but a request of them is authorized as the kubelet
/// would, so a user who may not reach them is told so before being told they are missing).
#[cfg_attr(not(feature = "node-api"), expect(dead_code, reason = "no node API"))]
pub fn unrouted_subresources(path: &str) -> &'static [&'static str] {
    let under = |p: &str| path == p || path.starts_with(&format!("{p}/"));
    if under("/stats") {
        &["stats"]
    } else if under("/metrics") {
        &["metrics"]
    } else if under("/logs") {
        &["log"]
    } else if under("/spec") {
        &["spec"]
    } else if under("/checkpoint") {
        &["checkpoint"]
    } else if under("/pods") {
        &["pods", "proxy"]
    } else if under("/healthz") {
        &["healthz", "proxy"]
    } else if under("/configz") {
        &["configz", "proxy"]
    } else {
        &["proxy"]
    }
}
