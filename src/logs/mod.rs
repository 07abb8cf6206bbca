//! Container logs: the CRI log format (`format`), rotation by size and count (`rotate`), and
//! reading them for `/containerLogs` and `picolet logs` (`read`, `cli`).
//!
//! The runtime writes each container's log at `<podLogsDir>/<ns>_<pod>_<uid>/<container>/
//! <restart>.log`. Every 10 s the rotation task looks at the running containers the PLEG cache
//! knows (no runtime call) and rotates the logs that reached `containerLogMaxSize`; file work
//! runs on the blocking pool, the reopen goes to the runtime.

pub mod format;
pub mod read;
pub mod rotate;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::kubecontainer::ContainerState;
use crate::kuberuntime::{RuntimeManager, config};
use crate::pleg::Cache;
use crate::rt;

/// The running containers of the cache and their live logs.
pub fn running_logs(cache: &Cache, logs_dir: &Path) -> Vec<(String, PathBuf)> {
    let mut v = Vec::new();
    for uid in cache.uids() {
        let Some(c) = cache.get(&uid) else { continue };
        let st = &c.status;
        if st.name.is_empty() {
            continue;
        }
        for ct in st.running() {
            v.push((
                ct.id.to_string(),
                config::container_log_path(
                    logs_dir,
                    &st.namespace,
                    &st.name,
                    &st.uid,
                    &ct.name,
                    ct.restart_count,
                ),
            ));
        }
    }
    v.sort();
    v
}

/// What one check of a log found or did.
#[derive(Debug, PartialEq, Eq)]
pub enum Checked {
    Small,
    /// The log file was missing; the runtime was asked to reopen it.
    Reopened,
    /// Rotated to this file.
    Rotated(PathBuf),
    /// The runtime could not reopen the log: the rename was undone, to be tried again.
    Undone,
}

/// Checks one running container's log and rotates it if it reached the limit.
pub async fn check_one(
    rm: &RuntimeManager,
    id: &str,
    log: &Path,
    policy: rotate::Policy,
) -> Result<Checked, String> {
    let Some(max) = policy.max_size else {
        return Ok(Checked::Small);
    };
    let now = rt::now_nanos();
    let p = log.to_owned();
    let step = rt::unblock(move || -> std::io::Result<Option<Option<PathBuf>>> {
        match rotate::size(&p)? {
            None => Ok(None),
            Some(n) if n < max => Ok(Some(None)),
            Some(_) => {
                let dir = p.parent().unwrap_or(Path::new("."));
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                let plan = rotate::plan(name, &rotate::list_dir(dir)?, now, &policy);
                rotate::rotate_files(&p, &plan).map(|to| Some(Some(to)))
            }
        }
    })
    .await
    .map_err(|e| format!("rotating the log of container {id}: {e}"))?;
    match step {
        Some(None) => Ok(Checked::Small),
        None => {
            // As upstream: a running container's missing log is reopened.
            rm.reopen_container_log(id)
                .await
                .map_err(|e| format!("log {} is missing, reopening it: {e}", log.display()))?;
            Ok(Checked::Reopened)
        }
        Some(Some(to)) => match rm.reopen_container_log(id).await {
            Ok(()) => Ok(Checked::Rotated(to)),
            Err(e) => {
                log::warn!(
                    "reopening the log of container {id} after rotating it: {e}; trying again later"
                );
                let (from, back) = (to.clone(), log.to_owned());
                rt::unblock(move || std::fs::rename(&from, &back))
                    .await
                    .map_err(|e| {
                        format!("renaming {} back to {}: {e}", to.display(), log.display())
                    })?;
                Ok(Checked::Undone)
            }
        },
    }
}

/// Rotates the logs of running containers every [`rotate::CHECK_PERIOD`], forever.
pub async fn run_rotation(
    rm: std::rc::Rc<RuntimeManager>,
    cache: std::rc::Rc<RefCell<Cache>>,
    policy: rotate::Policy,
) {
    if policy.max_size.is_none() {
        return;
    }
    let mut tick = rt::interval(rotate::CHECK_PERIOD);
    loop {
        tick.tick().await;
        let logs = running_logs(&cache.borrow(), &rm.node().pod_logs_dir);
        for (id, log) in logs {
            match check_one(&rm, &id, &log, policy).await {
                Ok(Checked::Rotated(to)) => {
                    log::debug!("rotated {} to {}", log.display(), to.display())
                }
                Ok(_) => {}
                Err(e) => log::warn!("{e}"),
            }
        }
    }
}

/// How often a follower looks for new lines.
pub const FOLLOW_POLL: Duration = Duration::from_millis(500);

/// A container log to serve: where it is, and which container instance writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub uid: String,
    pub container_id: String,
    pub path: PathBuf,
}

/// Finds the log of `container` in pod `namespace/pod` as the kubelet's `/containerLogs` does:
/// 404 for a pod or container that is not there, 400 when it has no log (yet, or no previous
/// instance). The current instance is the newest; the previous one the instance before it.
pub fn locate(
    pod: Option<&crate::api::Pod>,
    cache: &Cache,
    rm: &RuntimeManager,
    name: &str,
    container: &str,
    previous: bool,
) -> Result<Located, (u16, String)> {
    let Some(p) = pod else {
        return Err((404, format!("pod {name:?} does not exist")));
    };
    let spec = &p.spec;
    if !spec
        .containers
        .iter()
        .chain(&spec.init_containers)
        .chain(&spec.ephemeral_containers)
        .any(|c| c.name == container)
    {
        return Err((
            404,
            format!("container {container:?} not found in pod {name:?}"),
        ));
    }
    let uid = &p.metadata.uid;
    let mut instances: Vec<_> = cache
        .get(uid)
        .map(|c| {
            c.status
                .containers
                .iter()
                .filter(|s| &*s.name == container)
                .collect()
        })
        .unwrap_or_default();
    instances.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    let pick = if previous {
        instances.get(1).ok_or_else(|| {
            (
                400,
                format!("previous terminated container {container:?} in pod {name:?} not found"),
            )
        })?
    } else {
        instances.first().ok_or_else(|| {
            let reason = rm
                .waiting(uid, container)
                .map_or_else(|| "ContainerCreating".to_owned(), |w| w.reason);
            (
                400,
                format!("container {container:?} in pod {name:?} is waiting to start: {reason}"),
            )
        })?
    };
    Ok(Located {
        uid: uid.clone(),
        container_id: pick.id.to_string(),
        path: config::container_log_path(
            &rm.node().pod_logs_dir,
            &p.metadata.namespace,
            &p.metadata.name,
            uid,
            container,
            pick.restart_count,
        ),
    })
}

/// True while the cache sees this container instance running.
pub fn is_running(cache: &Cache, uid: &str, container_id: &str) -> bool {
    cache.get(uid).is_some_and(|c| {
        c.status
            .containers
            .iter()
            .any(|s| &*s.id == container_id && s.state == ContainerState::Running)
    })
}

/// Sends a log to `tx` in chunks: to its end, or when following until the container stops (then
/// what it wrote last) or the receiver goes away.
pub async fn stream(
    cache: std::rc::Rc<RefCell<Cache>>,
    at: Located,
    mut reader: read::Reader,
    tx: async_channel::Sender<bytes::Bytes>,
) {
    loop {
        let t = tx.clone();
        let (r, res) = rt::unblock(move || {
            let res = reader.pump(&mut |c| t.send_blocking(bytes::Bytes::from(c)).is_ok());
            (reader, res)
        })
        .await;
        reader = r;
        match res {
            Err(e) => {
                log::warn!("reading {}: {e}", at.path.display());
                return;
            }
            Ok(read::Pump::Done) => {
                log::debug!("{}: log sent", at.path.display());
                return;
            }
            Ok(read::Pump::More) => {}
        }
        if tx.is_closed() {
            log::debug!("{}: the follower went away", at.path.display());
            return;
        }
        if !is_running(&cache.borrow(), &at.uid, &at.container_id) {
            reader.stop_following();
            continue;
        }
        rt::sleep(FOLLOW_POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubecontainer::{ContainerStatus, PodRuntimeStatus};

    fn container(
        id: &str,
        name: &str,
        state: ContainerState,
        created: i64,
        restarts: u32,
    ) -> ContainerStatus {
        ContainerStatus {
            id: id.into(),
            sandbox_id: "s".into(),
            name: name.into(),
            state,
            created_at: created,
            started_at: created,
            finished_at: 0,
            exit_code: 0,
            image: "busybox".into(),
            image_ref: "sha256:1".into(),
            reason: "".into(),
            message: "".into(),
            hash: 0,
            restart_count: restarts,
        }
    }

    fn cache() -> Cache {
        let mut c = Cache::default();
        c.put(
            PodRuntimeStatus {
                uid: "u1".into(),
                name: "web-node".into(),
                namespace: "default".into(),
                sandboxes: vec![],
                containers: vec![
                    container("c2", "app", ContainerState::Running, 20, 1),
                    container("c1", "app", ContainerState::Exited, 10, 0),
                    container("s1", "side", ContainerState::Exited, 10, 0),
                ],
            },
            1,
            None,
        );
        c
    }

    #[test]
    fn only_running_containers_are_rotated() {
        let v = running_logs(&cache(), Path::new("/var/log/pods"));
        assert_eq!(
            v,
            vec![(
                "c2".to_owned(),
                PathBuf::from("/var/log/pods/default_web-node_u1/app/1.log")
            )]
        );
        assert!(is_running(&cache(), "u1", "c2"));
        assert!(!is_running(&cache(), "u1", "c1"));
        assert!(!is_running(&cache(), "u2", "c2"));
    }

    fn manager(logs: &Path) -> RuntimeManager {
        let f = std::rc::Rc::new(crate::cri::fake::FakeRuntime::new());
        let node = crate::kuberuntime::NodeContext {
            pod_logs_dir: logs.to_owned(),
            ..Default::default()
        };
        RuntimeManager::new(f.clone(), f, node)
    }

    fn pod(containers: &[&str]) -> crate::api::Pod {
        let mut p = crate::api::Pod::default();
        p.metadata.name = "web-node".into();
        p.metadata.namespace = "default".into();
        p.metadata.uid = "u1".into();
        for c in containers {
            p.spec.containers.push(crate::api::Container {
                name: (*c).into(),
                ..Default::default()
            });
        }
        p
    }

    #[test]
    fn locating_a_log_follows_the_kubelets_answers() {
        let rm = manager(Path::new("/logs"));
        let c = cache();
        let p = pod(&["app", "side", "new"]);
        let at = locate(Some(&p), &c, &rm, "web-node", "app", false).unwrap();
        assert_eq!(at.container_id, "c2");
        assert_eq!(
            at.path,
            PathBuf::from("/logs/default_web-node_u1/app/1.log")
        );
        let prev = locate(Some(&p), &c, &rm, "web-node", "app", true).unwrap();
        assert_eq!(
            prev.path,
            PathBuf::from("/logs/default_web-node_u1/app/0.log")
        );
        assert_eq!(
            locate(None, &c, &rm, "nope", "app", false),
            Err((404, "pod \"nope\" does not exist".into()))
        );
        assert_eq!(
            locate(Some(&p), &c, &rm, "web-node", "db", false),
            Err((404, "container \"db\" not found in pod \"web-node\"".into()))
        );
        assert_eq!(
            locate(Some(&p), &c, &rm, "web-node", "side", true),
            Err((
                400,
                "previous terminated container \"side\" in pod \"web-node\" not found".into()
            ))
        );
        assert_eq!(
            locate(Some(&p), &c, &rm, "web-node", "new", false),
            Err((
                400,
                "container \"new\" in pod \"web-node\" is waiting to start: ContainerCreating"
                    .into()
            ))
        );
    }

    #[test]
    fn a_running_containers_log_is_rotated_reopened_and_compressed_on_the_clock() {
        let clock = rt::FakeClock::install();
        let d = std::env::temp_dir().join(format!("picolet-logs-rot-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let fake = std::rc::Rc::new(crate::cri::fake::FakeRuntime::new());
        fake.add_image("busybox:1");
        let node = crate::kuberuntime::NodeContext {
            pod_logs_dir: d.join("logs"),
            root_dir: d.join("root"),
            ..Default::default()
        };
        let rm = RuntimeManager::new(fake.clone(), fake.clone(), node);
        let mut p = pod(&["app"]);
        p.spec.containers[0].image = "busybox:1".into();
        let empty = PodRuntimeStatus {
            uid: "u1".into(),
            ..Default::default()
        };
        let out = rt::block_on(rm.sync_pod(&p, &empty));
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        let id = rt::block_on(crate::cri::RuntimeService::list_containers(&*fake, None))
            .unwrap()
            .remove(0)
            .id;
        let log = d.join("logs/default_web-node_u1/app/0.log");
        let dir = log.parent().unwrap().to_owned();
        let policy = rotate::Policy {
            max_size: Some(100),
            max_files: 3,
        };
        let mut names = Vec::new();
        for round in 0..3 {
            std::fs::write(&log, format!("{round}").repeat(200)).unwrap();
            let r = rt::block_on(check_one(&rm, &id, &log, policy)).unwrap();
            let want = dir.join(format!("0.log.{}", rotate::suffix(rt::now_nanos())));
            assert_eq!(r, Checked::Rotated(want.clone()), "round {round}");
            names.push(want.file_name().unwrap().to_string_lossy().into_owned());
            assert_eq!(fake.calls("ReopenContainerLog"), round + 1);
            clock.advance(rotate::CHECK_PERIOD);
        }
        let mut left = rotate::list_dir(&dir).unwrap();
        left.sort();
        // The first rotated file went (max 3: live, newest rotated, one gzipped), the second
        // is gzipped, the third as it was; the live log is the runtime's to write again.
        assert_eq!(left, vec![format!("{}.gz", names[1]), names[2].clone()]);
        assert_eq!(
            read::gunzip(&dir.join(&left[0])).unwrap(),
            "1".repeat(200).into_bytes()
        );
        // A small log is left alone, and the runtime is not called.
        std::fs::write(&log, "x").unwrap();
        assert_eq!(
            rt::block_on(check_one(&rm, &id, &log, policy)).unwrap(),
            Checked::Small
        );
        assert_eq!(fake.calls("ReopenContainerLog"), 3);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_rotation_the_runtime_cannot_reopen_is_undone() {
        let _clock = rt::FakeClock::install();
        let d = std::env::temp_dir().join(format!("picolet-logs-undo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let log = d.join("0.log");
        std::fs::write(&log, "x".repeat(100)).unwrap();
        let rm = manager(&d);
        let policy = rotate::Policy {
            max_size: Some(10),
            max_files: 3,
        };
        // The fake runtime knows no such container: the reopen fails, the rename is undone.
        let r = rt::block_on(check_one(&rm, "nosuch", &log, policy)).unwrap();
        assert_eq!(r, Checked::Undone);
        assert_eq!(rotate::list_dir(&d).unwrap(), vec!["0.log".to_owned()]);
        // Below the limit nothing happens; with rotation off neither.
        let small = rotate::Policy {
            max_size: Some(1000),
            max_files: 3,
        };
        assert_eq!(
            rt::block_on(check_one(&rm, "nosuch", &log, small)).unwrap(),
            Checked::Small
        );
        let off = rotate::Policy {
            max_size: None,
            max_files: 3,
        };
        assert_eq!(
            rt::block_on(check_one(&rm, "nosuch", &log, off)).unwrap(),
            Checked::Small
        );
        // A missing log is reopened; the fake refuses an unknown container, and that is reported.
        let e = rt::block_on(check_one(&rm, "nosuch", &d.join("1.log"), policy)).unwrap_err();
        assert!(e.contains("1.log") && e.contains("reopening"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
