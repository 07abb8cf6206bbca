//! The patch of a pod's status: what changed since the apiserver's copy, as the kubelet's
//! status manager sends it (upstream's `statusutil.PatchPodStatus`, a two-way strategic merge
//! patch), so a change of one condition does not carry the whole status over the link.

use serde_json::{Map, Value};

use crate::api::PodStatus;

/// The lists of a pod's status the API merges by a key in a strategic merge patch
/// (`patchStrategy: merge`), and their keys; every other list is replaced whole.
const MERGED_LISTS: [(&str, &str); 3] =
    [("conditions", "type"), ("podIPs", "ip"), ("hostIPs", "ip")];

/// The strategic merge patch that turns the apiserver's copy into `current`, with the pod's UID
/// as a precondition. `bases` are what the apiserver may hold: the watched copy, and the
/// statuses picolet wrote since that the watch may not have brought back yet; a field is left
/// out only when `current` has it as every base has it, so a watch lagging behind picolet's
/// own writes never makes a change look like none.
///
/// Every field of `current` whose value differs goes whole, except the lists the API merges by
/// a key (`conditions` by `type`, `podIPs` and `hostIPs` by `ip`): of those, the entries that
/// are new or changed, and a `$patch: delete` for each key a base has and `current` does not
/// (a resize's condition once it is done, a pod IP that changed; conditions others set are
/// merged into `current` from the watched copy before, so they are kept, and are weighed
/// against the watched copy alone: picolet only copies them). A field `current`
/// lacks is left as the apiserver has it, as a whole-status patch leaves it; a merged list
/// `current` lacks altogether is left too, but for `conditions`, whose entries are deleted.
pub fn status_patch(uid: &str, bases: &[&PodStatus], current: &PodStatus) -> Value {
    let bases: Vec<Map<String, Value>> = bases.iter().map(|b| to_map(b)).collect();
    let mut status = Map::new();
    for (k, now) in to_map(current) {
        let before: Vec<Option<&Value>> = bases.iter().map(|b| b.get(&k)).collect();
        if before.iter().all(|b| *b == Some(&now)) {
            continue;
        }
        match MERGED_LISTS.iter().find(|(list, _)| *list == k) {
            Some((_, key)) => {
                let changed = merged_list_patch(&before, items(Some(&now)), key, &k);
                if !changed.is_empty() {
                    status.insert(k, Value::Array(changed));
                }
            }
            None => {
                status.insert(k, now);
            }
        }
    }
    if current.conditions.is_empty() {
        let before: Vec<Option<&Value>> = bases.iter().map(|b| b.get("conditions")).collect();
        let gone = merged_list_patch(&before, &[], "type", "conditions");
        if !gone.is_empty() {
            status.insert("conditions".into(), Value::Array(gone));
        }
    }
    serde_json::json!({"metadata": {"uid": uid}, "status": status})
}

fn to_map(s: &PodStatus) -> Map<String, Value> {
    match serde_json::to_value(s) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

fn key_of<'a>(entry: &'a Value, key: &str) -> Option<&'a str> {
    entry.get(key).and_then(Value::as_str)
}

fn delete_directive(entry: &Value, key: &str) -> Option<Value> {
    key_of(entry, key).map(|k| {
        let mut d = Map::new();
        d.insert(key.to_owned(), Value::String(k.to_owned()));
        d.insert("$patch".into(), Value::String("delete".into()));
        Value::Object(d)
    })
}

/// A list field's entries (none when it is absent).
fn items(v: Option<&Value>) -> &[Value] {
    match v {
        Some(Value::Array(v)) => v,
        _ => &[],
    }
}

/// Whether an entry of the list `list` is only copied from the watched copy (a condition
/// another writer sets): the statuses picolet wrote are no base for it, so an entry the watched
/// copy has as it is goes unsent, and one it lacks is not deleted.
fn copied(list: &str, entry: &Value) -> bool {
    list == "conditions"
        && key_of(entry, "type").is_some_and(|t| !crate::status::generate::written_by_the_node(t))
}

/// A merged list's part of the patch: the entries new or changed against any base, and a
/// delete directive for each key a base has and `now` does not (the first base, the watched
/// copy, alone for the entries picolet only copies).
fn merged_list_patch(
    before: &[Option<&Value>],
    now: &[Value],
    key: &str,
    list: &str,
) -> Vec<Value> {
    let before: Vec<&[Value]> = before.iter().map(|b| items(*b)).collect();
    // The bases an entry is weighed against: the watched copy alone for one picolet copies.
    let bases_of = |e: &Value| -> &[&[Value]] {
        if copied(list, e) {
            &before[..before.len().min(1)]
        } else {
            &before
        }
    };
    let mut out: Vec<Value> = now
        .iter()
        .filter(|c| bases_of(c).iter().any(|b| !b.contains(c)))
        .cloned()
        .collect();
    let mut gone: Vec<&str> = Vec::new();
    for (i, base) in before.iter().enumerate() {
        for b in base.iter().filter(|b| i < bases_of(b).len()) {
            if let Some(k) = key_of(b, key)
                && !now.iter().any(|c| key_of(c, key) == Some(k))
                && !gone.contains(&k)
            {
                gone.push(k);
                out.extend(delete_directive(b, key));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(v: Value) -> PodStatus {
        serde_json::from_value(v).unwrap()
    }

    fn running() -> Value {
        serde_json::json!({
            "phase": "Running",
            "hostIP": "10.0.0.2", "hostIPs": [{"ip": "10.0.0.2"}],
            "podIP": "10.88.0.5", "podIPs": [{"ip": "10.88.0.5"}],
            "startTime": "2026-01-01T00:00:00Z",
            "qosClass": "BestEffort",
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
                {"type": "PodScheduled", "status": "True"},
                {"type": "example.com/gate", "status": "True"}
            ],
            "containerStatuses": [{"name": "main", "image": "busybox", "imageID": "",
                "ready": false, "restartCount": 0, "started": true,
                "state": {"running": {"startedAt": "2026-01-01T00:00:01Z"}}}]
        })
    }

    #[test]
    fn only_what_changed_is_sent_and_conditions_by_type() {
        let base = status(running());
        let mut now = running();
        now["conditions"][1] = serde_json::json!({"type": "Ready", "status": "True"});
        now["containerStatuses"][0]["ready"] = Value::Bool(true);
        let p = status_patch("u1", &[&base], &status(now.clone()));
        assert_eq!(p["metadata"]["uid"], "u1");
        let s = p["status"].as_object().unwrap();
        let mut keys: Vec<&str> = s.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["conditions", "containerStatuses"], "{p}");
        assert_eq!(
            s["conditions"],
            serde_json::json!([{"type": "Ready", "status": "True"}])
        );
        // The container statuses are a list replaced whole (atomic in the API).
        let now = status(now);
        assert_eq!(
            s["containerStatuses"],
            serde_json::to_value(&now).unwrap()["containerStatuses"]
        );
        // Smaller than the whole status.
        let whole = serde_json::to_vec(&now).unwrap().len();
        let diff = serde_json::to_vec(&p).unwrap().len();
        assert!(diff < whole, "patch {diff} B, status {whole} B");
    }

    #[test]
    fn a_condition_current_lacks_is_deleted_and_a_field_it_lacks_is_left_alone() {
        let mut with_resize = running();
        with_resize["conditions"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"type": "PodResizeInProgress", "status": "True"}));
        let base = status(with_resize);
        let mut now = running();
        now.as_object_mut().unwrap().remove("podIPs");
        let p = status_patch("u1", &[&base], &status(now));
        assert_eq!(
            p["status"],
            serde_json::json!({"conditions": [{"type": "PodResizeInProgress", "$patch": "delete"}]})
        );
        // Every condition gone: one directive each.
        let mut none = running();
        none.as_object_mut().unwrap().remove("conditions");
        let p = status_patch("u1", &[&status(running())], &status(none));
        assert_eq!(
            p["status"]["conditions"].as_array().unwrap().len(),
            4,
            "{p}"
        );
        assert!(
            p["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["$patch"] == "delete")
        );
    }

    #[test]
    fn a_changed_pod_ip_replaces_the_old_one_in_the_merged_list() {
        let base = status(running());
        let mut now = running();
        now["podIP"] = "10.88.0.9".into();
        now["podIPs"] = serde_json::json!([{"ip": "10.88.0.9"}]);
        let p = status_patch("u1", &[&base], &status(now));
        assert_eq!(
            p["status"],
            serde_json::json!({
                "podIP": "10.88.0.9",
                "podIPs": [{"ip": "10.88.0.9"}, {"ip": "10.88.0.5", "$patch": "delete"}]
            })
        );
    }

    #[test]
    fn a_field_back_to_the_watched_value_is_sent_while_the_watch_lags_behind_a_write() {
        // The watch still shows Ready False (a); picolet wrote Ready True (b) since; now Ready
        // is False again, with a restart counted. Against a alone, Ready would look unchanged.
        let a = status(running());
        let mut written = running();
        written["conditions"][1] = serde_json::json!({"type": "Ready", "status": "True"});
        let b = status(written);
        let mut again = running();
        again["containerStatuses"][0]["restartCount"] = 1.into();
        let again = status(again);
        let p = status_patch("u1", &[&a, &b], &again);
        assert_eq!(
            p["status"]["conditions"],
            serde_json::json!([{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}])
        );
        assert!(p["status"]["containerStatuses"].is_array(), "{p}");
        // Against the watched copy alone the Ready condition would have been left out.
        let p = status_patch("u1", &[&a], &again);
        assert!(p["status"].get("conditions").is_none(), "{p}");
        // Nothing changed against any base: nothing to send.
        let p = status_patch("u1", &[&b, &b], &b);
        assert_eq!(p["status"], serde_json::json!({}));
    }

    #[test]
    fn another_writers_condition_is_compared_with_the_watched_copy_alone() {
        // picolet wrote a status (b) before another writer set a condition of its own; the
        // watch (a) brought that condition; now Ready changed. The condition, copied into
        // the new status from the watched copy, is no change: against b it would look new.
        let mut before = running();
        before["conditions"].as_array_mut().unwrap().pop();
        let b = status(before.clone());
        let a = status(running());
        let mut now = running();
        now["conditions"][1] = serde_json::json!({"type": "Ready", "status": "True"});
        let p = status_patch("u1", &[&a, &b], &status(now));
        assert_eq!(
            p["status"]["conditions"],
            serde_json::json!([{"type": "Ready", "status": "True"}])
        );
        // The writer removed it again (the watch shows it gone; b, written while the watch
        // still had it, holds it): no delete for it, the writer's removal stands either way.
        let with_it = status(running());
        let mut now = before;
        now["containerStatuses"][0]["restartCount"] = 1.into();
        let p = status_patch("u1", &[&b, &with_it], &status(now));
        assert!(p["status"].get("conditions").is_none(), "{p}");
        // The node's own conditions are still deleted against every base.
        let mut gone = running();
        gone["conditions"].as_array_mut().unwrap().remove(1);
        let p = status_patch("u1", &[&a, &b], &status(gone));
        assert_eq!(
            p["status"]["conditions"],
            serde_json::json!([{"type": "Ready", "$patch": "delete"}])
        );
    }

    #[test]
    fn a_pod_first_reported_sends_its_whole_status() {
        let now = status(running());
        let p = status_patch("u1", &[&PodStatus::default()], &now);
        assert_eq!(p["status"], serde_json::to_value(&now).unwrap());
        let same = status_patch("u1", &[&now], &now);
        assert_eq!(same["status"], serde_json::json!({}));
    }
}
