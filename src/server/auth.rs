//! Who may use the node API, as the kubelet decides it: a client certificate signed by
//! `--client-ca-file` names the user (CN) and groups (O); else a bearer token, checked with a
//! TokenReview (cached for `cacheTTL`); else `system:anonymous` if anonymous requests are on,
//! or 401. Each request is then authorized with a SubjectAccessReview on the Node's
//! subresource the path maps to (allowed answers cached 5 min, denied 30 s), or always allowed.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Error, routes};
use crate::apiclient::Client;
use crate::rt;

/// An authenticated user.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct User {
    pub username: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    fn anonymous() -> User {
        User {
            username: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            ..User::default()
        }
    }

    /// The user a verified client certificate's subject names.
    pub fn from_certificate(cert: &[u8]) -> Option<User> {
        let (cn, groups) = crate::pki::subject(cert)?;
        (!cn.is_empty()).then(|| User {
            username: cn,
            groups,
            ..User::default()
        })
    }
}

/// What a request asks of the node: the attributes a SubjectAccessReview carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attributes {
    pub verb: &'static str,
    /// The subresources that allow it, most specific first (the fine-grained one, then
    /// `proxy`, as the kubelet falls back).
    pub subresources: &'static [&'static str],
}

/// The kubelet's mapping of a request to the Node's subresources (the route's, see
/// [`super::routes`]) and a verb.
pub fn attributes(method: &hyper::Method, path: &str) -> Attributes {
    let verb = match *method {
        hyper::Method::POST => "create",
        hyper::Method::PUT => "update",
        hyper::Method::PATCH => "patch",
        hyper::Method::DELETE => "delete",
        _ => "get",
    };
    let subresources = routes::route_of(routes::Listener::NodeApi, path)
        .map_or_else(|| routes::unrouted_subresources(path), |r| r.subresources);
    Attributes { verb, subresources }
}

/// What a review answered.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default)]
pub struct ReviewStatus {
    pub authenticated: bool,
    pub allowed: bool,
    pub denied: bool,
    pub user: User,
    pub reason: String,
    pub error: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Review {
    status: ReviewStatus,
}

/// Why a review has no answer (the apiserver could not be asked).
pub type ReviewFailure = Box<dyn std::error::Error>;

/// Who answers TokenReviews and SubjectAccessReviews: the apiserver, through [`Client`].
pub trait Reviewer {
    /// POSTs the review `body` to `path` and answers its status.
    fn review(
        &self,
        path: &'static str,
        body: Vec<u8>,
    ) -> Pin<Box<dyn Future<Output = Result<ReviewStatus, ReviewFailure>>>>;
}

impl Reviewer for Client {
    fn review(
        &self,
        path: &'static str,
        body: Vec<u8>,
    ) -> Pin<Box<dyn Future<Output = Result<ReviewStatus, ReviewFailure>>>> {
        let c = self.clone();
        Box::pin(async move {
            rt::unblock(move || c.json::<Review>("POST", path, Some(("application/json", body))))
                .await
                .map(|r| r.status)
                .map_err(|e| Box::new(e) as ReviewFailure)
        })
    }
}

const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// Answers kept for a while, bounded so a stream of distinct tokens cannot grow it.
struct Cache<K, V> {
    entries: RefCell<HashMap<K, (V, Instant)>>,
}

const CACHE_MAX: usize = 1024;

impl<K: std::hash::Hash + Eq, V: Clone> Cache<K, V> {
    fn new() -> Self {
        Cache {
            entries: RefCell::new(HashMap::new()),
        }
    }

    fn get(&self, k: &K) -> Option<V> {
        let e = self.entries.borrow();
        let (v, until) = e.get(k)?;
        (rt::now() < *until).then(|| v.clone())
    }

    fn put(&self, k: K, v: V, ttl: Duration) {
        let now = rt::now();
        let mut e = self.entries.borrow_mut();
        if e.len() >= CACHE_MAX {
            e.retain(|_, (_, until)| *until > now);
            if e.len() >= CACHE_MAX {
                e.clear();
            }
        }
        e.insert(k, (v, now + ttl));
    }
}

/// The authentication and authorization settings, and the apiserver that answers reviews.
pub struct Auth {
    pub anonymous: bool,
    /// TokenReview through this reviewer, when on.
    pub token_webhook: Option<Rc<dyn Reviewer>>,
    pub token_ttl: Duration,
    /// SubjectAccessReview through this reviewer; `None`: AlwaysAllow.
    pub authz_webhook: Option<Rc<dyn Reviewer>>,
    pub allowed_ttl: Duration,
    pub denied_ttl: Duration,
    pub node_name: String,
    tokens: Cache<[u8; 32], Option<User>>,
    decisions: Cache<(User, Attributes), bool>,
}

impl Auth {
    pub fn new(
        anonymous: bool,
        token_webhook: Option<Client>,
        token_ttl: Duration,
        authz_webhook: Option<Client>,
        allowed_ttl: Duration,
        denied_ttl: Duration,
        node_name: String,
    ) -> Auth {
        let rc = |c: Client| Rc::new(c) as Rc<dyn Reviewer>;
        Auth::with_reviewers(
            anonymous,
            token_webhook.map(rc),
            token_ttl,
            authz_webhook.map(rc),
            allowed_ttl,
            denied_ttl,
            node_name,
        )
    }

    /// [`Auth::new`] with reviewers of any kind.
    pub fn with_reviewers(
        anonymous: bool,
        token_webhook: Option<Rc<dyn Reviewer>>,
        token_ttl: Duration,
        authz_webhook: Option<Rc<dyn Reviewer>>,
        allowed_ttl: Duration,
        denied_ttl: Duration,
        node_name: String,
    ) -> Auth {
        Auth {
            anonymous,
            token_webhook,
            token_ttl,
            authz_webhook,
            allowed_ttl,
            denied_ttl,
            node_name,
            tokens: Cache::new(),
            decisions: Cache::new(),
        }
    }

    /// Who sends a request: the connection's certificate user, else the bearer token's, else
    /// anonymous (when allowed); else 401.
    pub async fn authenticate(
        &self,
        cert_user: Option<&User>,
        authorization: Option<&str>,
    ) -> Result<User, Error> {
        if let Some(u) = cert_user {
            return Ok(u.clone());
        }
        let token = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty());
        if let (Some(token), Some(reviewer)) = (token, &self.token_webhook) {
            let key: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
                .as_ref()
                .try_into()
                .unwrap_or([0; 32]);
            if let Some(cached) = self.tokens.get(&key) {
                return cached.ok_or(Error::Unauthorized);
            }
            let body = serde_json::json!({
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            })
            .to_string()
            .into_bytes();
            return match reviewer.review(TOKEN_REVIEWS, body).await {
                Ok(r) => {
                    let user = (r.authenticated && !r.user.username.is_empty()).then_some(r.user);
                    if user.is_none() && !r.error.is_empty() {
                        log::debug!("node API: token refused: {}", r.error);
                    }
                    self.tokens.put(key, user.clone(), self.token_ttl);
                    user.ok_or(Error::Unauthorized)
                }
                Err(e) => {
                    // Not cached: the next request asks again.
                    log::warn!("node API: TokenReview failed: {e}");
                    Err(Error::Unauthorized)
                }
            };
        }
        if token.is_none() && self.anonymous {
            return Ok(User::anonymous());
        }
        Err(Error::Unauthorized)
    }

    /// Whether `user` may do what the request asks: 403 when every subresource is refused,
    /// 500 when the apiserver could not answer, in the kubelet's words.
    pub async fn authorize(&self, user: &User, a: &Attributes) -> Result<(), Error> {
        let Some(reviewer) = &self.authz_webhook else {
            return Ok(());
        };
        let key = (user.clone(), a.clone());
        let allowed = match self.decisions.get(&key) {
            Some(v) => v,
            None => {
                let mut allowed = false;
                for sub in a.subresources {
                    let body = serde_json::json!({
                        "apiVersion": "authorization.k8s.io/v1",
                        "kind": "SubjectAccessReview",
                        "spec": {
                            "user": user.username,
                            "uid": user.uid,
                            "groups": user.groups,
                            "extra": user.extra,
                            "resourceAttributes": {
                                "verb": a.verb,
                                "version": "v1",
                                "resource": "nodes",
                                "subresource": sub,
                                "name": self.node_name,
                            },
                        },
                    })
                    .to_string()
                    .into_bytes();
                    match reviewer.review(ACCESS_REVIEWS, body).await {
                        Ok(r) if r.allowed && !r.denied => {
                            allowed = true;
                            break;
                        }
                        Ok(r) => {
                            if !r.reason.is_empty() {
                                log::debug!("node API: {} refused: {}", user.username, r.reason);
                            }
                        }
                        Err(e) => {
                            log::warn!("node API: SubjectAccessReview failed: {e}");
                            return Err(Error::internal(format!(
                                "Authorization error (user={}, verb={}, resource=nodes, subresource={sub})",
                                user.username, a.verb
                            )));
                        }
                    }
                }
                let ttl = if allowed {
                    self.allowed_ttl
                } else {
                    self.denied_ttl
                };
                self.decisions.put(key, allowed, ttl);
                allowed
            }
        };
        if allowed {
            return Ok(());
        }
        Err(Error::Forbidden(format!(
            "Forbidden (user={}, verb={}, resource=nodes, subresource(s)=[{}])",
            user.username,
            a.verb,
            a.subresources.join(" ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_the_kubelets_subresources() {
        let get = |p| attributes(&hyper::Method::GET, p);
        assert_eq!(get("/stats/summary").subresources, ["stats"]);
        assert_eq!(get("/metrics/cadvisor").subresources, ["metrics"]);
        assert_eq!(get("/metrics").subresources, ["metrics"]);
        assert_eq!(get("/pods").subresources, ["pods", "proxy"]);
        assert_eq!(get("/healthz").subresources, ["healthz", "proxy"]);
        assert_eq!(get("/configz").subresources, ["configz", "proxy"]);
        assert_eq!(get("/containerLogs/a/b/c").subresources, ["proxy"]);
        assert_eq!(get("/exec/a/b/c").subresources, ["proxy"]);
        assert_eq!(get("/statsx").subresources, ["proxy"]);
        assert_eq!(get("/logs/syslog").subresources, ["log"]);
        assert_eq!(
            attributes(&hyper::Method::POST, "/run/a/b/c").verb,
            "create"
        );
        assert_eq!(get("/exec/a/b/c").verb, "get");
    }

    #[test]
    fn without_credentials_a_request_is_refused_unless_anonymous_is_on() {
        rt::block_on(async {
            let off = Auth::new(
                false,
                None,
                Duration::ZERO,
                None,
                Duration::ZERO,
                Duration::ZERO,
                "n".into(),
            );
            let e = off.authenticate(None, None).await.unwrap_err();
            assert!(matches!(e, Error::Unauthorized), "{e:?}");
            // A token nobody can review is refused too.
            let e = off
                .authenticate(None, Some("Bearer abc"))
                .await
                .unwrap_err();
            assert!(matches!(e, Error::Unauthorized), "{e:?}");
            let on = Auth::new(
                true,
                None,
                Duration::ZERO,
                None,
                Duration::ZERO,
                Duration::ZERO,
                "n".into(),
            );
            let u = on.authenticate(None, None).await.unwrap();
            assert_eq!(u.username, "system:anonymous");
            assert_eq!(u.groups, ["system:unauthenticated"]);
            let cert = User {
                username: "kube-apiserver-kubelet-client".into(),
                groups: vec!["system:masters".into()],
                ..User::default()
            };
            assert_eq!(off.authenticate(Some(&cert), None).await.unwrap(), cert);
            // AlwaysAllow.
            off.authorize(&u, &attributes(&hyper::Method::GET, "/pods"))
                .await
                .unwrap();
        });
    }

    #[test]
    fn the_cache_expires_and_stays_bounded() {
        let clock = rt::FakeClock::install();
        let c: Cache<u32, bool> = Cache::new();
        c.put(1, true, Duration::from_secs(30));
        assert_eq!(c.get(&1), Some(true));
        clock.advance(Duration::from_secs(31));
        assert_eq!(c.get(&1), None);
        for i in 0..3000 {
            c.put(i, false, Duration::from_secs(300));
        }
        assert!(c.entries.borrow().len() <= CACHE_MAX);
        assert_eq!(c.get(&2999), Some(false));
    }
}
