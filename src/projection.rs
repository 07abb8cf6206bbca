//! The files of configMap, secret, projected and downwardAPI volumes, computed from the pod and
//! the objects the node holds (ConfigMaps, Secrets, tokens, ClusterTrustBundles, pod
//! certificates): a pure function from (pod, volume, objects) to a payload that
//! `atomic_writer` puts on disk. The rules are upstream's: `items` pick and rename keys (a
//! missing key is an error unless the source is optional), `mode` beats `defaultMode` (0644),
//! an optional object that does not exist gives no files.

use std::collections::BTreeMap;

use crate::api::{Pod, Quantity};
use crate::objects::{
    ApiVolume, Contents, Data, DownwardApiFile, KeyToPath, Kind, ResourceFieldSelector, token_spec,
};

pub const DEFAULT_MODE: u32 = 0o644;

/// One file of a volume. `uid`/`gid`, when set, are its owner (a token for the pod's only
/// user, the pod's `fsGroup`).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct File {
    pub data: Vec<u8>,
    pub mode: u32,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "File({} bytes, {:o})", self.data.len(), self.mode)
    }
}

/// Relative path → file.
pub type Payload = BTreeMap<String, File>;

/// What the node knows that the downward API hands out besides the pod.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeAllocatable {
    pub milli_cpu: i64,
    pub memory: i64,
}

fn mode_of(m: Option<i32>, default: u32) -> Result<u32, String> {
    match m {
        None => Ok(default),
        Some(m) => u32::try_from(m)
            .ok()
            .filter(|m| *m <= 0o777)
            .ok_or_else(|| format!("mode {m} is not between 0 and 0777")),
    }
}

fn add_keys(
    out: &mut Payload,
    data: &Data,
    items: &[KeyToPath],
    mode: u32,
    optional: bool,
    what: &str,
) -> Result<(), String> {
    if items.is_empty() {
        for (k, v) in data {
            out.insert(
                k.clone(),
                File {
                    data: v.clone(),
                    mode,
                    ..File::default()
                },
            );
        }
        return Ok(());
    }
    for it in items {
        match data.get(&it.key) {
            Some(v) => {
                out.insert(
                    it.path.clone(),
                    File {
                        data: v.clone(),
                        mode: mode_of(it.mode, mode)?,
                        ..File::default()
                    },
                );
            }
            None if optional => {}
            None => return Err(format!("{what} has no key {:?}", it.key)),
        }
    }
    Ok(())
}

/// One ConfigMap or Secret as a volume or projection names it.
struct ObjectSource<'a> {
    kind: Kind,
    name: &'a str,
    items: &'a [KeyToPath],
    optional: Option<bool>,
}

fn object_files(
    out: &mut Payload,
    store: &Contents,
    pod: &Pod,
    src: ObjectSource<'_>,
    mode: u32,
) -> Result<(), String> {
    let ns = namespace(pod);
    let optional = src.optional.unwrap_or(false);
    if let Some(data) = store.data(src.kind, ns, src.name, optional)? {
        let what = format!("{} {ns}/{}", src.kind.as_str(), src.name);
        add_keys(out, &data, src.items, mode, optional, &what)?;
    }
    Ok(())
}

fn namespace(pod: &Pod) -> &str {
    if pod.metadata.namespace.is_empty() {
        "default"
    } else {
        &pod.metadata.namespace
    }
}

/// Labels and annotations as the downward API writes them: `key="value"` lines, sorted, the
/// value quoted as Go's `%q` does.
fn format_map(m: &BTreeMap<String, String>) -> String {
    let lines: Vec<String> = m.iter().map(|(k, v)| format!("{k}={}", quote(v))).collect();
    lines.join("\n")
}

fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn field_value(pod: &Pod, path: &str) -> Result<String, String> {
    let m = &pod.metadata;
    let subscript = |prefix: &str| -> Option<String> {
        let rest = path.strip_prefix(prefix)?.strip_prefix("['")?;
        rest.strip_suffix("']").map(str::to_owned)
    };
    Ok(match path {
        "metadata.name" => m.name.clone(),
        "metadata.namespace" => namespace(pod).to_owned(),
        "metadata.uid" => m.uid.clone(),
        "metadata.labels" => format_map(&m.labels),
        "metadata.annotations" => format_map(&m.annotations),
        _ => {
            if let Some(k) = subscript("metadata.labels") {
                m.labels.get(&k).cloned().unwrap_or_default()
            } else if let Some(k) = subscript("metadata.annotations") {
                m.annotations.get(&k).cloned().unwrap_or_default()
            } else {
                return Err(format!("fieldPath {path:?} is not supported in a volume"));
            }
        }
    })
}

/// A container's resource as the downward API gives it in a volume: the container is named.
fn resource_value(
    pod: &Pod,
    r: &ResourceFieldSelector,
    node: NodeAllocatable,
) -> Result<String, String> {
    let c = pod
        .spec
        .containers
        .iter()
        .chain(&pod.spec.init_containers)
        .find(|c| c.name == r.container_name)
        .ok_or_else(|| format!("resourceFieldRef: no container {:?}", r.container_name))?;
    container_resource(c, &r.resource, r.divisor.as_ref(), node)
}

/// A container's resource as the downward API gives it (volume items and env): its limit (the
/// node's allocatable when unset) or request, divided by the divisor and rounded up. A zero
/// divisor is one unit: the apiserver writes an unset divisor as `"0"`, and upstream reads it so.
pub fn container_resource(
    c: &crate::api::Container,
    resource: &str,
    divisor: Option<&Quantity>,
    node: NodeAllocatable,
) -> Result<String, String> {
    let (set, name) = match resource.split_once('.') {
        Some(("limits", n)) => (&c.resources.limits, n),
        Some(("requests", n)) => (&c.resources.requests, n),
        _ => {
            return Err(format!(
                "resourceFieldRef: unsupported resource {resource:?}"
            ));
        }
    };
    let is_limit = resource.starts_with("limits.");
    let d = divisor
        .filter(|q| !q.is_zero())
        .map_or(1_000_000_000, Quantity::nanos);
    let div = |value_nanos: i128| -> Result<String, String> {
        if d < 0 {
            let shown = divisor.map(Quantity::as_str).unwrap_or_default();
            return Err(format!(
                "resourceFieldRef: divisor {shown:?} must not be negative"
            ));
        }
        // Ceiling division, as upstream's ExtractContainerResourceValue.
        let q = (value_nanos + d - 1).div_euclid(d);
        Ok(q.to_string())
    };
    let q = set.get(name);
    match (name, q) {
        (_, Some(q)) => div(q.nanos()),
        ("cpu", None) if is_limit => div(i128::from(node.milli_cpu) * 1_000_000),
        ("memory", None) if is_limit => div(i128::from(node.memory) * 1_000_000_000),
        ("cpu" | "memory" | "ephemeral-storage", None) => Ok("0".into()),
        _ => Err(format!(
            "resourceFieldRef: unsupported resource {resource:?}"
        )),
    }
}

fn downward_files(
    out: &mut Payload,
    pod: &Pod,
    items: &[DownwardApiFile],
    mode: u32,
    node: NodeAllocatable,
) -> Result<(), String> {
    for it in items {
        let value = match (&it.field_ref, &it.resource_field_ref) {
            (Some(f), None) => field_value(pod, &f.field_path)?,
            (None, Some(r)) => resource_value(pod, r, node)?,
            _ => {
                return Err(format!(
                    "downwardAPI item {:?}: exactly one of fieldRef and resourceFieldRef is required",
                    it.path
                ));
            }
        };
        out.insert(
            it.path.clone(),
            File {
                data: value.into_bytes(),
                mode: mode_of(it.mode, mode)?,
                ..File::default()
            },
        );
    }
    Ok(())
}

/// The files of one volume. An error says what is missing (object, key or token) and is
/// prefixed by the caller with the volume's name.
pub fn payload(
    pod: &Pod,
    volume: &str,
    v: &ApiVolume,
    store: &Contents,
    node: NodeAllocatable,
) -> Result<Payload, String> {
    let mut out = Payload::new();
    match v {
        ApiVolume::ConfigMap(c) => {
            let mode = mode_of(c.default_mode, DEFAULT_MODE)?;
            object_files(
                &mut out,
                store,
                pod,
                ObjectSource {
                    kind: Kind::ConfigMap,
                    name: &c.name,
                    items: &c.items,
                    optional: c.optional,
                },
                mode,
            )?;
        }
        ApiVolume::Secret(s) => {
            let mode = mode_of(s.default_mode, DEFAULT_MODE)?;
            object_files(
                &mut out,
                store,
                pod,
                ObjectSource {
                    kind: Kind::Secret,
                    name: &s.secret_name,
                    items: &s.items,
                    optional: s.optional,
                },
                mode,
            )?;
        }
        ApiVolume::DownwardApi(d) => {
            let mode = mode_of(d.default_mode, DEFAULT_MODE)?;
            downward_files(&mut out, pod, &d.items, mode, node)?;
        }
        ApiVolume::Projected(p) => {
            let mode = mode_of(p.default_mode, DEFAULT_MODE)?;
            for (i, s) in p.sources.iter().enumerate() {
                if let Some(c) = &s.config_map {
                    object_files(
                        &mut out,
                        store,
                        pod,
                        ObjectSource {
                            kind: Kind::ConfigMap,
                            name: &c.name,
                            items: &c.items,
                            optional: c.optional,
                        },
                        mode,
                    )?;
                } else if let Some(c) = &s.secret {
                    object_files(
                        &mut out,
                        store,
                        pod,
                        ObjectSource {
                            kind: Kind::Secret,
                            name: &c.name,
                            items: &c.items,
                            optional: c.optional,
                        },
                        mode,
                    )?;
                } else if let Some(d) = &s.downward_api {
                    downward_files(&mut out, pod, &d.items, mode, node)?;
                } else if let Some(t) = &s.service_account_token {
                    let spec = token_spec(pod, t);
                    let tok = store.tokens.get(&spec.key()).ok_or_else(|| {
                        format!(
                            "no token for service account {}/{} yet",
                            spec.namespace, spec.service_account
                        )
                    })?;
                    out.insert(
                        t.path.clone(),
                        owned_file(pod, tok.token.as_bytes().to_vec(), mode),
                    );
                } else if let Some(b) = &s.cluster_trust_bundle {
                    let data = store.trust_anchors(b)?;
                    out.insert(b.path.clone(), owned_file(pod, data, mode));
                } else if let Some(c) = &s.pod_certificate {
                    pod_certificate_files(&mut out, pod, volume, i, c, store, mode)?;
                } else {
                    return Err(format!("sources[{i}]: empty projections are not supported"));
                }
            }
        }
    }
    // With an fsGroup every file belongs to it and is group-readable (upstream's
    // SetVolumeOwnership on a read-only volume).
    if let Some(g) = fs_group(pod) {
        for f in out.values_mut() {
            f.gid = Some(g);
            f.mode |= 0o440;
        }
    }
    Ok(out)
}

/// The files of a podCertificate source, as upstream's projected volume writes them: the
/// credential bundle (the PKCS#8 key, then the chain, in one file, so one read gets a key and
/// the chain issued for it), the key alone, the chain alone, each at its path when set; owned as
/// a token is.
fn pod_certificate_files(
    out: &mut Payload,
    pod: &Pod,
    volume: &str,
    index: usize,
    c: &crate::objects::PodCertificateProjection,
    store: &Contents,
    mode: u32,
) -> Result<(), String> {
    let key = crate::objects::pod_certificate_key(&pod.metadata.uid, volume, index);
    let (private_key, chain) = store.pod_certificate(&key)?;
    if !c.credential_bundle_path.is_empty() {
        let bundle = [private_key.as_slice(), chain.as_slice()].concat();
        out.insert(
            c.credential_bundle_path.clone(),
            owned_file(pod, bundle, mode),
        );
    }
    if !c.key_path.is_empty() {
        out.insert(
            c.key_path.clone(),
            owned_file(pod, private_key.to_vec(), mode),
        );
    }
    if !c.certificate_chain_path.is_empty() {
        out.insert(
            c.certificate_chain_path.clone(),
            owned_file(pod, chain.to_vec(), mode),
        );
    }
    Ok(())
}

/// A token or trust-bundle file: owner-only when it can be given to the pod's user or group
/// (as upstream: fsGroup then adds group read), owned by the pod's only user.
fn owned_file(pod: &Pod, data: Vec<u8>, mode: u32) -> File {
    let user = fs_user(pod);
    let mode = if user.is_some() || fs_group(pod).is_some() {
        0o600
    } else {
        mode
    };
    File {
        data,
        mode,
        uid: user,
        gid: None,
    }
}

fn fs_group(pod: &Pod) -> Option<u32> {
    let g = pod.spec.security_context.as_ref()?.fs_group?;
    u32::try_from(g).ok()
}

/// The user every container of the pod runs as, when they all run as one (upstream's
/// `FsUserFrom`): the token is then owned by it.
fn fs_user(pod: &Pod) -> Option<u32> {
    let pod_user = pod
        .spec
        .security_context
        .as_ref()
        .and_then(|s| s.run_as_user);
    let mut user = None;
    for c in pod.spec.init_containers.iter().chain(&pod.spec.containers) {
        let u = c
            .security_context
            .as_ref()
            .and_then(|s| s.run_as_user)
            .or(pod_user)?;
        if user.is_some_and(|x| x != u) {
            return None;
        }
        user = Some(u);
    }
    u32::try_from(user?).ok()
}

/// The volumes of the pod whose content comes from the API or the pod's metadata: always
/// mounted read-only, as upstream mounts them.
pub fn is_api_data(pod: &Pod, volume: &str) -> bool {
    pod.spec
        .volumes
        .iter()
        .any(|v| v.name == volume && crate::objects::api_volume(v).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::{Object, Token};
    use std::sync::Arc;

    fn pod(yaml: &str) -> Pod {
        yaml_serde::from_str(yaml).unwrap()
    }

    fn vol(p: &Pod, i: usize) -> ApiVolume {
        ApiVolume::of(&p.spec.volumes[i]).unwrap().unwrap()
    }

    fn store() -> Contents {
        let mut s = Contents::default();
        let data = |pairs: &[(&str, &[u8])]| {
            Object::Present(Arc::new(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), v.to_vec()))
                    .collect(),
            ))
        };
        s.objects.insert(
            (Kind::ConfigMap, "ns/cm".into()),
            data(&[("a", b"1"), ("b", b"2")]),
        );
        s.objects.insert(
            (Kind::ConfigMap, "ns/kube-root-ca.crt".into()),
            data(&[("ca.crt", b"PEM")]),
        );
        s.objects
            .insert((Kind::Secret, "ns/sec".into()), data(&[("pw", b"\x00bin")]));
        s.objects
            .insert((Kind::Secret, "ns/gone".into()), Object::Missing);
        s
    }

    const POD: &str = "metadata:
  name: p
  namespace: ns
  uid: u1
  labels: {app: web, tier: \"a\\\"b\"}
spec:
  containers:
  - name: c
    image: i
    resources: {limits: {memory: 64Mi}, requests: {cpu: 250m}}
  volumes:
  - {name: all, configMap: {name: cm}}
  - {name: some, configMap: {name: cm, defaultMode: 256, items: [{key: b, path: sub/b.txt, mode: 384}]}}
  - {name: s, secret: {secretName: sec}}
  - {name: opt, secret: {secretName: gone, optional: true}}
  - {name: req, secret: {secretName: gone}}
  - {name: nokey, configMap: {name: cm, items: [{key: zz, path: z}]}}
  - {name: nokey-opt, configMap: {name: cm, optional: true, items: [{key: zz, path: z}, {key: a, path: a}]}}
  - name: kube-api-access
    projected:
      defaultMode: 420
      sources:
      - serviceAccountToken: {expirationSeconds: 3607, path: token}
      - configMap: {name: kube-root-ca.crt, items: [{key: ca.crt, path: ca.crt}]}
      - downwardAPI: {items: [{path: namespace, fieldRef: {apiVersion: v1, fieldPath: metadata.namespace}}]}
  - name: info
    downwardAPI:
      items:
      - {path: labels, fieldRef: {fieldPath: metadata.labels}}
      - {path: app, fieldRef: {fieldPath: \"metadata.labels['app']\"}}
      - {path: mem, resourceFieldRef: {containerName: c, resource: limits.memory, divisor: 1Mi}}
      - {path: cpu, resourceFieldRef: {containerName: c, resource: limits.cpu}}
      - {path: cpu-req, resourceFieldRef: {containerName: c, resource: requests.cpu, divisor: 1m}}
  - name: podinfo
    downwardAPI:
      items:
      - {path: mem, resourceFieldRef: {containerName: c, resource: limits.memory, divisor: \"0\"}}
      - {path: cpu-req, resourceFieldRef: {containerName: c, resource: requests.cpu, divisor: \"0\"}}
      - {path: cpu, resourceFieldRef: {containerName: c, resource: limits.cpu, divisor: \"0\"}}
";

    fn names(p: &Payload) -> Vec<(&str, u32)> {
        p.iter().map(|(k, f)| (k.as_str(), f.mode)).collect()
    }

    #[test]
    fn config_maps_and_secrets_with_items_modes_and_optional() {
        let p = pod(POD);
        let s = store();
        let node = NodeAllocatable::default();
        let all = payload(&p, "", &vol(&p, 0), &s, node).unwrap();
        assert_eq!(names(&all), vec![("a", 0o644), ("b", 0o644)]);
        assert_eq!(all["a"].data, b"1");
        let some = payload(&p, "", &vol(&p, 1), &s, node).unwrap();
        assert_eq!(names(&some), vec![("sub/b.txt", 0o600)]);
        let sec = payload(&p, "", &vol(&p, 2), &s, node).unwrap();
        assert_eq!(sec["pw"].data, b"\x00bin");
        assert!(payload(&p, "", &vol(&p, 3), &s, node).unwrap().is_empty());
        assert_eq!(
            payload(&p, "", &vol(&p, 4), &s, node).unwrap_err(),
            "secret ns/gone not found"
        );
        assert_eq!(
            payload(&p, "", &vol(&p, 5), &s, node).unwrap_err(),
            "configmap ns/cm has no key \"zz\""
        );
        let opt = payload(&p, "", &vol(&p, 6), &s, node).unwrap();
        assert_eq!(names(&opt), vec![("a", 0o644)]);
        assert!(!format!("{sec:?}").contains("bin"), "no value in Debug");
    }

    #[test]
    fn the_admission_projection_needs_its_token() {
        let p = pod(POD);
        let mut s = store();
        let v = vol(&p, 7);
        assert_eq!(
            payload(&p, "", &v, &s, NodeAllocatable::default()).unwrap_err(),
            "no token for service account ns/default yet"
        );
        let ApiVolume::Projected(pv) = &v else {
            panic!("projected")
        };
        let spec = token_spec(&p, pv.sources[0].service_account_token.as_ref().unwrap());
        s.tokens.insert(
            spec.key(),
            Token {
                token: "eyJ".into(),
                issued: 0,
                expires: 3607,
            },
        );
        let files = payload(&p, "", &v, &s, NodeAllocatable::default()).unwrap();
        assert_eq!(
            names(&files),
            vec![("ca.crt", 0o644), ("namespace", 0o644), ("token", 0o644)]
        );
        assert_eq!(files["token"].data, b"eyJ");
        assert_eq!(files["namespace"].data, b"ns");
        assert_eq!(files["ca.crt"].data, b"PEM");
        // Not read yet: the pod waits, and says for what.
        s.objects
            .remove(&(Kind::ConfigMap, "ns/kube-root-ca.crt".into()));
        assert_eq!(
            payload(&p, "", &v, &s, NodeAllocatable::default()).unwrap_err(),
            "configmap ns/kube-root-ca.crt not read from the apiserver yet"
        );
    }

    #[test]
    fn fs_group_and_the_pods_only_user_own_the_files() {
        let mut p = pod(POD);
        let mut s = store();
        let v = vol(&p, 7);
        let ApiVolume::Projected(pv) = &v else {
            panic!("projected")
        };
        let spec = token_spec(&p, pv.sources[0].service_account_token.as_ref().unwrap());
        s.tokens.insert(
            spec.key(),
            Token {
                token: "t".into(),
                issued: 0,
                expires: 3607,
            },
        );
        p.spec.security_context = Some(crate::api::PodSecurityContext {
            run_as_user: Some(1000),
            fs_group: Some(2000),
            ..Default::default()
        });
        let node = NodeAllocatable::default();
        let files = payload(&p, "", &v, &s, node).unwrap();
        let tok = &files["token"];
        // 0600 for the user, group-readable for the fsGroup.
        assert_eq!(
            (tok.mode, tok.uid, tok.gid),
            (0o640, Some(1000), Some(2000))
        );
        assert_eq!(
            (
                files["ca.crt"].mode,
                files["ca.crt"].uid,
                files["ca.crt"].gid
            ),
            (0o644, None, Some(2000))
        );
        let some = payload(&p, "", &vol(&p, 1), &s, node).unwrap();
        assert_eq!(some["sub/b.txt"].mode, 0o640, "0600 plus group read");
        // Two containers running as different users: the token has no single owner.
        let mut two = p.clone();
        let mut c2 = two.spec.containers[0].clone();
        c2.name = "other".into();
        c2.security_context = Some(crate::api::SecurityContext {
            run_as_user: Some(1001),
            ..Default::default()
        });
        two.spec.containers.push(c2);
        let files = payload(&two, "", &v, &s, node).unwrap();
        assert_eq!(files["token"].uid, None);
    }

    /// A self-signed certificate's PEM as upstream's tests make them (the DER is arbitrary
    /// bytes here: the node never parses the certificate).
    fn pem(der: &[u8]) -> String {
        use base64::Engine as _;
        let b = base64::engine::general_purpose::STANDARD.encode(der);
        format!("-----BEGIN CERTIFICATE-----\n{b}\n-----END CERTIFICATE-----\n")
    }

    fn bundle(signer: &str, labels: &[(&str, &str)], ders: &[&[u8]]) -> crate::objects::Bundle {
        crate::objects::Bundle {
            signer_name: signer.into(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            trust_bundle: ders.iter().map(|d| pem(d)).collect(),
        }
    }

    const CTB_POD: &str = "metadata: {name: p, namespace: ns, uid: u1}
spec:
  containers: [{name: c, image: i}]
  volumes:
  - name: by-name
    projected: {sources: [{clusterTrustBundle: {name: one, path: a.pem}}]}
  - name: by-name-opt
    projected: {sources: [{clusterTrustBundle: {name: nope, path: a.pem, optional: true}}]}
  - name: by-name-req
    projected: {sources: [{clusterTrustBundle: {name: nope, path: a.pem, optional: false}}]}
  - name: alive
    projected: {sources: [{clusterTrustBundle: {signerName: x.io/s, labelSelector: {matchLabels: {alive: 'true'}}, path: b.crt}}]}
  - name: everything
    projected: {defaultMode: 256, sources: [{clusterTrustBundle: {signerName: x.io/s, labelSelector: {}, path: b.crt}}]}
  - name: nil-selector
    projected: {sources: [{clusterTrustBundle: {signerName: x.io/s, path: b.crt}}]}
  - name: nil-selector-opt
    projected: {sources: [{clusterTrustBundle: {signerName: x.io/s, path: b.crt, optional: true}}]}
  - name: nothing-opt
    projected: {sources: [{clusterTrustBundle: {signerName: x.io/s, labelSelector: {matchLabels: {no: thing}}, path: b.crt, optional: true}}]}
  - name: exprs
    projected: {sources: [{clusterTrustBundle: {signerName: x.io/s, labelSelector: {matchExpressions: [{key: alive, operator: NotIn, values: ['true']}]}, path: b.crt}}]}
  - name: bad-op
    projected: {sources: [{clusterTrustBundle: {signerName: x.io/s, labelSelector: {matchExpressions: [{key: alive, operator: Equals, values: ['x']}]}, path: b.crt}}]}
";

    fn ctb_store() -> Contents {
        let mut s = Contents::default();
        let all: crate::objects::Bundles = [
            ("one", bundle("", &[("alive", "true")], &[b"D4", b"D1"])),
            (
                "x.io:s:1",
                bundle("x.io/s", &[("alive", "true")], &[b"D1", b"D2"]),
            ),
            (
                "x.io:s:2",
                bundle("x.io/s", &[("alive", "false")], &[b"D3"]),
            ),
            ("x.io:s:3", bundle("x.io/s", &[], &[b"D5", b"D2"])),
            ("y.io:t:1", bundle("y.io/t", &[("alive", "true")], &[b"D9"])),
        ]
        .into_iter()
        .map(|(n, b)| (n.to_owned(), b))
        .collect();
        s.bundles = Some(Arc::new(all));
        s
    }

    /// The certificates of a file, in its order, each checked to be written back as upstream's
    /// `pem.EncodeToMemory` writes it.
    fn certs(f: &File) -> Vec<Vec<u8>> {
        let text = String::from_utf8(f.data.clone()).unwrap();
        let ders = crate::objects::pem_blocks(&text);
        let again: String = ders.iter().map(|d| pem(d)).collect();
        assert_eq!(text, again, "one CERTIFICATE block per certificate");
        ders
    }

    fn sorted(mut v: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        v.sort();
        v
    }

    #[test]
    fn cluster_trust_bundles_by_name_and_by_signer_and_labels() {
        let p = pod(CTB_POD);
        let s = ctb_store();
        let node = NodeAllocatable::default();
        let files = |i: usize| payload(&p, "", &vol(&p, i), &s, node);
        let d = |x: &[&[u8]]| x.iter().map(|b| b.to_vec()).collect::<Vec<_>>();

        let f = files(0).unwrap();
        assert_eq!(names(&f), vec![("a.pem", 0o644)]);
        assert_eq!(sorted(certs(&f["a.pem"])), d(&[b"D1", b"D4"]));
        // Optional and not there: an empty file, as upstream writes it.
        let f = files(1).unwrap();
        assert_eq!(names(&f), vec![("a.pem", 0o644)]);
        assert!(f["a.pem"].data.is_empty());
        assert_eq!(
            files(2).unwrap_err(),
            "while getting ClusterTrustBundle: clustertrustbundles.certificates.k8s.io \"nope\" not found"
        );
        // The signer's bundles the labels pick, duplicates once; another signer's never.
        let f = files(3).unwrap();
        assert_eq!(sorted(certs(&f["b.crt"])), d(&[b"D1", b"D2"]));
        let f = files(4).unwrap();
        assert_eq!(names(&f), vec![("b.crt", 0o400)]);
        assert_eq!(sorted(certs(&f["b.crt"])), d(&[b"D1", b"D2", b"D3", b"D5"]));
        // No selector matches nothing; an empty one everything.
        assert_eq!(
            files(5).unwrap_err(),
            "combination of signerName and labelSelector matched zero ClusterTrustBundles"
        );
        assert!(files(6).unwrap()["b.crt"].data.is_empty());
        assert!(files(7).unwrap()["b.crt"].data.is_empty());
        // NotIn holds for a bundle without the label.
        let f = files(8).unwrap();
        assert_eq!(sorted(certs(&f["b.crt"])), d(&[b"D2", b"D3", b"D5"]));
        assert_eq!(
            files(9).unwrap_err(),
            "while parsing label selector: \"Equals\" is not a valid label selector operator"
        );
        // One set of certificates, one order.
        assert_eq!(files(4).unwrap(), files(4).unwrap());
    }

    #[test]
    fn cluster_trust_bundles_wait_for_the_list_and_follow_fs_group() {
        let mut p = pod(CTB_POD);
        let node = NodeAllocatable::default();
        let e = payload(&p, "", &vol(&p, 1), &Contents::default(), node).unwrap_err();
        assert_eq!(e, "ClusterTrustBundles not read from the apiserver yet");
        assert!(e.ends_with(" yet"), "waiting, not a failure");
        p.spec.security_context = Some(crate::api::PodSecurityContext {
            run_as_user: Some(1000),
            fs_group: Some(2000),
            ..Default::default()
        });
        let f = payload(&p, "", &vol(&p, 0), &ctb_store(), node).unwrap();
        let a = &f["a.pem"];
        assert_eq!((a.mode, a.uid, a.gid), (0o640, Some(1000), Some(2000)));
    }

    #[test]
    fn pod_certificates_give_the_bundle_key_then_chain_and_each_alone() {
        let mut p = pod("metadata: {name: p, namespace: ns, uid: u1}
spec:
  containers: [{name: c, image: i}]
  volumes:
  - name: tls
    projected:
      sources:
      - downwardAPI: {items: [{path: name, fieldRef: {fieldPath: metadata.name}}]}
      - podCertificate: {signerName: x.io/s, keyType: ED25519, credentialBundlePath: b.pem, keyPath: k.pem, certificateChainPath: c.pem}
  - name: only-bundle
    projected: {sources: [{podCertificate: {signerName: x.io/s, keyType: ED25519, credentialBundlePath: b.pem}}]}
");
        let node = NodeAllocatable::default();
        let mut s = Contents::default();
        // Not issued yet: the volume waits (the pod does not start).
        let e = payload(&p, "tls", &vol(&p, 0), &s, node).unwrap_err();
        assert_eq!(e, "credential bundle is not issued yet");
        let key = b"-----BEGIN PRIVATE KEY-----\nKEY\n-----END PRIVATE KEY-----\n".to_vec();
        let chain = b"-----BEGIN CERTIFICATE-----\nLEAF\n-----END CERTIFICATE-----\n\
                      -----BEGIN CERTIFICATE-----\nMID\n-----END CERTIFICATE-----\n"
            .to_vec();
        // The source's key names the volume and the source's index.
        s.pod_certificates.insert(
            "u1/tls/1".into(),
            crate::objects::PodCredential::Issued {
                key: Arc::new(key.clone()),
                chain: Arc::new(chain.clone()),
            },
        );
        let f = payload(&p, "tls", &vol(&p, 0), &s, node).unwrap();
        assert_eq!(
            names(&f),
            vec![
                ("b.pem", 0o644),
                ("c.pem", 0o644),
                ("k.pem", 0o644),
                ("name", 0o644)
            ]
        );
        assert_eq!(f["b.pem"].data, [key.clone(), chain.clone()].concat());
        assert_eq!(f["k.pem"].data, key);
        assert_eq!(f["c.pem"].data, chain);
        assert_eq!(
            payload(&p, "only-bundle", &vol(&p, 1), &s, node).unwrap_err(),
            "credential bundle is not issued yet",
            "another volume's source is another credential"
        );
        // A refused source fails the volume with its reason.
        s.pod_certificates.insert(
            "u1/only-bundle/0".into(),
            crate::objects::PodCredential::Refused("denied".into()),
        );
        assert_eq!(
            payload(&p, "only-bundle", &vol(&p, 1), &s, node).unwrap_err(),
            "denied"
        );
        // Owned as a token: the pod's only user, owner-only, group-readable for the fsGroup.
        p.spec.security_context = Some(crate::api::PodSecurityContext {
            run_as_user: Some(1000),
            fs_group: Some(2000),
            ..Default::default()
        });
        let f = payload(&p, "tls", &vol(&p, 0), &s, node).unwrap();
        let b = &f["b.pem"];
        assert_eq!((b.mode, b.uid, b.gid), (0o640, Some(1000), Some(2000)));
        assert!(!format!("{s:?}").contains("KEY"), "no key in Debug");
    }

    #[test]
    fn downward_api_fields_and_resources() {
        let p = pod(POD);
        let node = NodeAllocatable {
            milli_cpu: 1500,
            memory: 1 << 30,
        };
        let f = payload(&p, "", &vol(&p, 8), &Contents::default(), node).unwrap();
        let text = |k: &str| String::from_utf8(f[k].data.clone()).unwrap();
        assert_eq!(text("labels"), "app=\"web\"\ntier=\"a\\\"b\"");
        assert_eq!(text("app"), "web");
        assert_eq!(text("mem"), "64");
        // No CPU limit: the node's allocatable, rounded up to whole cores.
        assert_eq!(text("cpu"), "2");
        assert_eq!(text("cpu-req"), "250");
    }

    #[test]
    fn a_zero_divisor_as_the_apiserver_sends_an_unset_one_counts_as_one() {
        let p = pod(POD);
        let node = NodeAllocatable {
            milli_cpu: 1500,
            memory: 1 << 30,
        };
        let f = payload(&p, "", &vol(&p, 9), &Contents::default(), node).unwrap();
        let text = |k: &str| String::from_utf8(f[k].data.clone()).unwrap();
        assert_eq!(text("mem"), (64u64 << 20).to_string());
        assert_eq!(text("cpu-req"), "1", "250m rounded up to a whole core");
        assert_eq!(text("cpu"), "2");
    }
}
