//! Container environment: fieldRef values and `$(VAR)` expansion in env, command and args, with
//! the kubelet's rules (`$$` escapes a `$`, an undefined reference stays as written).

use std::collections::{BTreeMap, HashMap};

use crate::api::{Container, Pod};
use crate::objects::{ObjectEnv, ResourceFieldSelector};
use crate::projection::{NodeAllocatable, container_resource};

/// Values the downward API can hand to a container through `fieldRef`.
#[derive(Debug, Clone, Default)]
pub struct PodFields<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub uid: &'a str,
    pub node_name: &'a str,
    pub service_account: &'a str,
    pub pod_ip: &'a str,
    pub host_ip: &'a str,
    pub labels: Option<&'a BTreeMap<String, String>>,
    pub annotations: Option<&'a BTreeMap<String, String>>,
}

impl PodFields<'_> {
    /// The value of a `fieldRef` path an env variable may name (upstream's list for env):
    /// a label or annotation by key (empty when the pod has none of that key, as upstream),
    /// and the pod's and host's IPs (one of each here: picolet runs single-stack pods, so
    /// `status.podIPs` and `status.hostIPs` are the one address).
    pub fn get(&self, path: &str) -> Option<&str> {
        let subscript = |prefix: &str| {
            path.strip_prefix(prefix)?
                .strip_prefix("['")?
                .strip_suffix("']")
                .filter(|k| !k.is_empty())
        };
        Some(match path {
            "metadata.name" => self.name,
            "metadata.namespace" => self.namespace,
            "metadata.uid" => self.uid,
            "spec.nodeName" => self.node_name,
            "spec.serviceAccountName" => self.service_account,
            "status.podIP" | "status.podIPs" => self.pod_ip,
            "status.hostIP" | "status.hostIPs" => self.host_ip,
            _ => {
                let (map, key) = if let Some(k) = subscript("metadata.labels") {
                    (self.labels, k)
                } else if let Some(k) = subscript("metadata.annotations") {
                    (self.annotations, k)
                } else {
                    return None;
                };
                map.and_then(|m| m.get(key)).map_or("", String::as_str)
            }
        })
    }
}

/// Expands `$(NAME)` references from `vars`.
pub fn expand(input: &str, vars: &HashMap<&str, String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('(') {
            match body.find(')') {
                Some(end) => {
                    let name = &body[..end];
                    match vars.get(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &body[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = body;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The resolved environment: `envFrom` first, then `env` in spec order (later duplicates win,
/// as in a shell), then the service variables not set by either. A `configMapKeyRef`/`secretKeyRef` that is optional and absent is left out.
pub fn resolve(
    c: &Container,
    fields: &PodFields<'_>,
    objects: &ObjectEnv,
) -> Vec<(String, String)> {
    // References resolve to the container's own variables first, then the service variables.
    let mut vars: HashMap<&str, String> = objects
        .services
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    let mut out: Vec<(String, String)> = Vec::with_capacity(c.env.len() + objects.from.len());
    for (k, v) in &objects.from {
        vars.insert(k, v.clone());
        match out.iter_mut().find(|(n, _)| n == k) {
            Some(slot) => slot.1 = v.clone(),
            None => out.push((k.clone(), v.clone())),
        }
    }
    for (i, e) in c.env.iter().enumerate() {
        let value = if let Some(field) = e.value_from.as_ref().and_then(|f| f.field_ref.as_ref()) {
            fields.get(&field.field_path).unwrap_or_default().to_owned()
        } else if let Some(from_object) = objects.refs.get(&i) {
            match from_object {
                Some(v) => v.clone(),
                None => continue,
            }
        } else {
            expand(e.value.as_deref().unwrap_or_default(), &vars)
        };
        vars.insert(&e.name, value.clone());
        match out.iter_mut().find(|(k, _)| *k == e.name) {
            Some(slot) => slot.1 = value,
            None => out.push((e.name.clone(), value)),
        }
    }
    // Then the service variables the container does not set itself, by name.
    let own = out.len();
    for (k, v) in &objects.services {
        if !out[..own].iter().any(|(n, _)| n == k) {
            out.push((k.clone(), v.clone()));
        }
    }
    out
}

/// The values of the container's `resourceFieldRef` variables, by index in `env`: the named
/// container's resources (this container's when none is named), as the downward API gives them.
/// An error names the variable (the container's CreateContainerConfigError).
pub fn resource_refs(
    pod: &Pod,
    c: &Container,
    node: NodeAllocatable,
) -> Result<HashMap<usize, String>, String> {
    let mut out = HashMap::new();
    for (i, e) in c.env.iter().enumerate() {
        let Some(r) = e
            .value_from
            .as_ref()
            .and_then(|f| f.resource_field_ref.as_ref())
        else {
            continue;
        };
        let fail = |m: String| format!("env {:?}: {m}", e.name);
        let r: ResourceFieldSelector = serde_json::from_value(r.clone())
            .map_err(|err| fail(format!("resourceFieldRef: {err}")))?;
        let target = if r.container_name.is_empty() {
            c
        } else {
            pod.spec
                .containers
                .iter()
                .chain(&pod.spec.init_containers)
                .find(|x| x.name == r.container_name)
                .ok_or_else(|| {
                    fail(format!(
                        "resourceFieldRef: no container {:?}",
                        r.container_name
                    ))
                })?
        };
        let v = container_resource(target, &r.resource, r.divisor.as_ref(), node).map_err(fail)?;
        out.insert(i, v);
    }
    Ok(out)
}

/// Command and args with `$(VAR)` references to the container's env expanded.
pub fn command_and_args(c: &Container, env: &[(String, String)]) -> (Vec<String>, Vec<String>) {
    let vars: HashMap<&str, String> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let ex = |v: &Vec<String>| v.iter().map(|s| expand(s, &vars)).collect();
    (ex(&c.command), ex(&c.args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{EnvVar, EnvVarSource, ObjectFieldSelector};

    fn vars(pairs: &[(&'static str, &str)]) -> HashMap<&'static str, String> {
        pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
    }

    #[test]
    fn env_from_objects_comes_first_and_env_overrides_it() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c",
            "env": [
                {"name": "A", "value": "literal-$(FROM_CM)"},
                {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
                {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": true}}},
            ]
        }))
        .unwrap();
        let objects = ObjectEnv {
            from: vec![
                ("FROM_CM".into(), "from-envFrom".into()),
                ("X".into(), "x".into()),
            ],
            refs: [(1, Some("from-ref".to_owned())), (2, None)]
                .into_iter()
                .collect(),
            ..Default::default()
        };
        let e = resolve(&c, &PodFields::default(), &objects);
        assert_eq!(
            e,
            vec![
                ("FROM_CM".to_owned(), "from-ref".to_owned()),
                ("X".to_owned(), "x".to_owned()),
                ("A".to_owned(), "literal-from-envFrom".to_owned()),
            ]
        );
    }

    /// Upstream's makeEnvironmentVariables: `$(VAR)` sees the container's variables first, then
    /// the service variables; the container's own override the service's; the service
    /// variables it does not set come after its own; command and args see them all.
    #[test]
    fn service_variables_come_last_and_give_way_to_the_containers() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c",
            "command": ["echo", "$(TEST_SERVICE_HOST)"],
            "args": ["$(KUBERNETES_SERVICE_PORT)", "$(TEST_PORT)"],
            "env": [
                {"name": "URL", "value": "http://$(TEST_SERVICE_HOST):$(TEST_SERVICE_PORT)"},
                {"name": "TEST_SERVICE_PORT", "value": "9999"},
                {"name": "AFTER", "value": "$(TEST_SERVICE_PORT)"},
            ]
        }))
        .unwrap();
        let objects = ObjectEnv {
            from: vec![("TEST_PORT".into(), "from-envFrom".into())],
            services: [
                ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
                ("KUBERNETES_SERVICE_PORT", "443"),
                ("TEST_PORT", "tcp://10.0.0.3:8083"),
                ("TEST_SERVICE_HOST", "10.0.0.3"),
                ("TEST_SERVICE_PORT", "8083"),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
            ..Default::default()
        };
        let e = resolve(&c, &PodFields::default(), &objects);
        let pairs: Vec<(&str, &str)> = e.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            pairs,
            vec![
                ("TEST_PORT", "from-envFrom"),
                // Before TEST_SERVICE_PORT is set, the service's value is the one referenced.
                ("URL", "http://10.0.0.3:8083"),
                ("TEST_SERVICE_PORT", "9999"),
                ("AFTER", "9999"),
                ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
                ("KUBERNETES_SERVICE_PORT", "443"),
                ("TEST_SERVICE_HOST", "10.0.0.3"),
            ]
        );
        let (command, args) = command_and_args(&c, &e);
        assert_eq!(command, vec!["echo", "10.0.0.3"]);
        assert_eq!(args, vec!["443", "from-envFrom"]);
    }

    #[test]
    fn expansion_rules() {
        let v = vars(&[("A", "1"), ("B", "two")]);
        assert_eq!(expand("x$(A)y$(B)", &v), "x1ytwo");
        assert_eq!(expand("$$(A)", &v), "$(A)");
        assert_eq!(expand("$(MISSING)", &v), "$(MISSING)");
        assert_eq!(expand("cost $5", &v), "cost $5");
        assert_eq!(expand("open $(A", &v), "open $(A");
        assert_eq!(expand("$", &v), "$");
        assert_eq!(expand("$$", &v), "$");
        assert_eq!(expand("", &v), "");
    }

    fn env(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        }
    }

    fn field(name: &str, path: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: path.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn resolves_fields_and_references() {
        let c = Container {
            name: "c".into(),
            env: vec![
                field("POD", "metadata.name"),
                field("IP", "status.podIP"),
                env("GREETING", "hi $(POD) at $(IP)"),
                env("LATER", "$(UNSET)"),
            ],
            command: vec!["echo".into(), "$(GREETING)".into()],
            args: vec!["$$(POD)".into()],
            ..Default::default()
        };
        let f = PodFields {
            name: "web",
            pod_ip: "10.1.2.3",
            ..Default::default()
        };
        assert_eq!(f.get("spec.serviceAccountName"), Some(""));
        assert_eq!(f.get("metadata.labels"), None);
        assert_eq!(f.get("status.podIPs"), Some("10.1.2.3"));
        let labels = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
        let annotations = BTreeMap::from([("mysubpath".to_owned(), "mypath".to_owned())]);
        let g = PodFields {
            labels: Some(&labels),
            annotations: Some(&annotations),
            host_ip: "192.0.2.1",
            ..Default::default()
        };
        assert_eq!(g.get("metadata.labels['app']"), Some("web"));
        assert_eq!(g.get("metadata.annotations['mysubpath']"), Some("mypath"));
        assert_eq!(g.get("metadata.annotations['absent']"), Some(""));
        assert_eq!(g.get("metadata.annotations['']"), None);
        assert_eq!(g.get("metadata.annotations"), None);
        assert_eq!(g.get("status.hostIPs"), Some("192.0.2.1"));
        let e = resolve(&c, &f, &ObjectEnv::default());
        assert_eq!(e[0], ("POD".into(), "web".into()));
        assert_eq!(e[2].1, "hi web at 10.1.2.3");
        assert_eq!(e[3].1, "$(UNSET)");
        let (cmd, args) = command_and_args(&c, &e);
        assert_eq!(cmd, vec!["echo", "hi web at 10.1.2.3"]);
        assert_eq!(args, vec!["$(POD)"]);
    }

    #[test]
    fn duplicate_names_keep_last_value() {
        let c = Container {
            env: vec![env("A", "1"), env("A", "2")],
            ..Default::default()
        };
        assert_eq!(
            resolve(&c, &PodFields::default(), &ObjectEnv::default()),
            vec![("A".to_owned(), "2".to_owned())]
        );
    }
}
