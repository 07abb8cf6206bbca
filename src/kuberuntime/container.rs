//! Containers: starting one (image, backoff, config, create, start), stopping
//! and removing init containers, and the files it leaves on the node.

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;

use crate::api::{Container, Pod};
use crate::cri::{CriError, v1};
use crate::kubecontainer::{ContainerState, ContainerStatus, PodRuntimeStatus};
use crate::rt;
use crate::volume;

use super::config;
use super::error::SyncError;
use super::manager::{RuntimeManager, StartContext, SyncOutcome, termination_log_dir};

/// The Warning event of a container that could not be created or started (upstream's
/// FailedToCreateContainer and FailedToStartContainer, both "Failed").
fn failed_event(pod: &Pod, c: &Container, message: &str) {
    crate::events::record(
        &crate::events::ObjectRef::container(pod, &c.name),
        crate::events::Type::Warning,
        "Failed",
        &format!("Error: {message}"),
    );
}

fn backoff_key(uid: &str, container: &str) -> String {
    format!("{uid}/{container}")
}

impl RuntimeManager {
    pub(super) async fn start_container(
        &self,
        ctx: &StartContext<'_>,
        c: &Container,
        hash: u64,
        out: &mut SyncOutcome,
    ) {
        let pod = ctx.pod;
        let uid = pod.metadata.uid.as_str();
        let prev = ctx.st.latest(&c.name);
        let now = rt::now_nanos();
        let key = backoff_key(uid, &c.name);
        // The backoff counts from the newest instance that exited, as the kubelet's does: a
        // container killed in this very sync (a failed liveness probe) has none of its own.
        let exited = ctx
            .st
            .containers
            .iter()
            .filter(|x| *x.name == *c.name && x.state == ContainerState::Exited)
            .max_by_key(|x| x.created_at);
        if let Some(p) = exited {
            let mut b = self.restart_backoff.borrow_mut();
            if let Some(rem) = b.remaining(&key, p.finished_at, now) {
                let delay = b.delay(&key).unwrap_or_default();
                drop(b);
                self.set_waiting(
                    uid,
                    &c.name,
                    "CrashLoopBackOff",
                    format!(
                        "back-off {} restarting failed container={} pod={}_{}({uid})",
                        crate::api::format_duration(delay),
                        c.name,
                        pod.metadata.name,
                        config::namespace(pod)
                    ),
                );
                crate::events::record(
                    &crate::events::ObjectRef::container(pod, &c.name),
                    crate::events::Type::Warning,
                    "BackOff",
                    &format!(
                        "Back-off restarting failed container {} in pod {}_{}({uid})",
                        c.name,
                        pod.metadata.name,
                        config::namespace(pod)
                    ),
                );
                out.retry(rem);
                return;
            }
            b.next(&key, now);
        }

        let image_ref = match self.ensure_image(pod, c, now).await {
            Ok(r) => r,
            Err(f) => {
                self.wait_on(uid, &f.error);
                out.fail(f.error);
                out.retry(f.retry_after);
                return;
            }
        };
        // The image volumes it mounts (upstream's toKubeContainerImageVolumes): a volume whose
        // image is not there keeps the container waiting with the pull's reason.
        for vm in &c.volume_mounts {
            if let Some(Err(f)) = ctx.image_volumes.get(&vm.name) {
                let e = f.for_container(&c.name);
                failed_event(pod, c, &e.to_string());
                self.wait_on(uid, &e);
                out.fail(e);
                out.retry(f.retry_after);
                return;
            }
        }
        let config_error = |message: String| SyncError::CreateContainerConfig {
            container: c.name.to_string(),
            message,
        };
        let refuse = |e: SyncError, out: &mut SyncOutcome| {
            if let SyncError::CreateContainerConfig { message, .. } = &e {
                failed_event(pod, c, message);
            }
            self.wait_on(uid, &e);
            out.fail(e);
        };
        // runAsNonRoot against the image's user, as the kubelet checks it before creating (the
        // image is asked only when its user decides).
        let user = if super::image::needs_image_user(pod, c) {
            match self.image_user(&c.image).await {
                Ok(u) => u,
                Err(e) => {
                    let e = config_error(format!("reading the user of image {:?}: {e}", c.image));
                    return refuse(e, out);
                }
            }
        } else {
            super::image::ImageUser::Uid(0)
        };
        if let Err(m) = super::image::verify_run_as_non_root(pod, c, &user) {
            return refuse(config_error(m), out);
        }
        let mut object_env = match crate::objects::container_env(pod, c, &self.objects.lock()) {
            Ok(e) => e,
            Err(m) => return refuse(config_error(m), out),
        };
        match self.service_env(pod) {
            Ok(s) => object_env.services = s,
            Err(m) => return refuse(config_error(m), out),
        }
        match super::env::resource_refs(pod, c, self.allocatable()) {
            Ok(r) => object_env
                .refs
                .extend(r.into_iter().map(|(i, v)| (i, Some(v)))),
            Err(m) => return refuse(config_error(m), out),
        }
        let env = config::container_env(pod, &self.node, c, ctx.pod_ip, &object_env);
        let mut subpaths = HashMap::new();
        let mut image_mounts = HashMap::new();
        for vm in &c.volume_mounts {
            let sub = match config::mount_sub_path(vm, &env) {
                Ok(s) => s,
                Err(e) => {
                    let e = config_error(format!("volume mount {:?}: {e}", vm.name));
                    return refuse(e, out);
                }
            };
            if let Some(Ok(spec)) = ctx.image_volumes.get(&vm.name) {
                // The runtime resolves a subPath inside the image (and fails without it).
                image_mounts.insert(
                    vm.mount_path.clone(),
                    (spec.clone(), sub.unwrap_or_default()),
                );
                continue;
            }
            let (Some(sub), Some(base)) = (sub, ctx.volumes.get(&vm.name)) else {
                continue;
            };
            match volume::resolve_subpath(base, &sub) {
                Ok(p) => {
                    subpaths.insert(vm.mount_path.clone(), p);
                }
                Err(e) => {
                    let e = config_error(format!("volume mount {:?}: {e}", vm.name));
                    return refuse(e, out);
                }
            }
        }
        // An ephemeral container with a target joins the target's process namespace, which
        // must be running then.
        let pid_target = match c.target_container_name.as_deref() {
            None => None,
            Some(t) => match ctx.st.latest(t) {
                Some(s) if s.state == ContainerState::Running => Some(s.id.clone()),
                _ => {
                    let e = config_error(format!("unable to find target container {t}"));
                    return refuse(e, out);
                }
            },
        };
        let restart_count = prev.map_or(0, |p| p.restart_count.saturating_add(1));
        let files = {
            let tdir = termination_log_dir(&self.node.root_dir, uid, &c.name);
            let logs = config::pod_log_dir(&self.node.pod_logs_dir, pod).join(&c.name);
            let hosts = (pod.spec.host_network || !ctx.pod_ip.is_empty()).then(|| {
                (
                    volume::pod_dir(&self.node.root_dir, uid).join("etc-hosts"),
                    pod.clone(),
                    ctx.pod_ip.to_owned(),
                    self.node.cluster_dns.domain.clone(),
                )
            });
            rt::unblock(move || {
                let tlog = prepare_files(&tdir, &logs, restart_count)?;
                let hosts = hosts
                    .map(|(path, pod, ip, domain)| {
                        write_hosts_file(&path, &pod, &ip, &domain).map(|()| path)
                    })
                    .transpose()?;
                Ok::<_, FileError>((tlog, hosts))
            })
            .await
        };
        let (tlog, etc_hosts) = match files {
            Ok(p) => p,
            Err(e) => return refuse(config_error(e.to_string()), out),
        };
        let cfg = config::container_config(
            pod,
            &self.node,
            &config::ContainerInputs {
                object_env: &object_env,
                container: c,
                image_ref: &image_ref,
                restart_count,
                hash,
                pod_ip: ctx.pod_ip,
                volumes: ctx.volumes,
                subpaths: &subpaths,
                image_mounts: &image_mounts,
                termination_log: Some(&tlog),
                etc_hosts: etc_hosts.as_deref(),
                pid_target: pid_target.as_deref(),
            },
        );
        out.acted = true;
        let req = v1::CreateContainerRequest {
            pod_sandbox_id: ctx.sandbox_id.to_owned(),
            config: Some(cfg),
            sandbox_config: Some(ctx.sandbox_cfg.clone()),
        };
        let id = match self.runtime.create_container(req).await {
            Ok(r) => {
                crate::events::record(
                    &crate::events::ObjectRef::container(pod, &c.name),
                    crate::events::Type::Normal,
                    "Created",
                    &format!("Created container: {}", c.name),
                );
                // The container runs with the pod's allocated resources from now on.
                self.allocation.set_actuated(uid, &c.name, &c.resources);
                r.container_id
            }
            Err(source) => {
                failed_event(pod, c, &source.to_string());
                let e = SyncError::CreateContainer {
                    container: c.name.to_string(),
                    source,
                };
                self.wait_on(uid, &e);
                out.fail(e);
                return;
            }
        };
        match self.runtime.start_container(&id).await {
            Ok(()) => {
                log::info!(
                    "started container {} of pod {} (restart {restart_count})",
                    c.name,
                    pod.metadata.name
                );
                crate::events::record(
                    &crate::events::ObjectRef::container(pod, &c.name),
                    crate::events::Type::Normal,
                    "Started",
                    &format!("Started container {}", c.name),
                );
                self.clear_waiting(uid, &c.name);
                if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
                    self.post_start(ctx, c, h, &id, out).await;
                }
            }
            Err(source) => {
                failed_event(pod, c, &source.to_string());
                let e = SyncError::RunContainer {
                    container: c.name.to_string(),
                    source,
                };
                self.wait_on(uid, &e);
                out.fail(e);
            }
        }
    }

    /// Runs the postStart hook of a container just started; when it fails, the container is
    /// killed and waits with PostStartHookError, to be started again after its backoff.
    async fn post_start(
        &self,
        ctx: &StartContext<'_>,
        c: &Container,
        h: &crate::api::LifecycleHandler,
        id: &str,
        out: &mut SyncOutcome,
    ) {
        let pod = ctx.pod;
        let uid = pod.metadata.uid.as_str();
        let ip = if pod.spec.host_network || ctx.pod_ip.is_empty() {
            self.node.node_ip.clone()
        } else {
            ctx.pod_ip.to_owned()
        };
        let pod_ref = super::hooks::pod_ref(&pod.metadata.name, config::namespace(pod), uid);
        let Err(message) = self.run_hook(h, c, &pod_ref, id, &ip).await else {
            return;
        };
        // The kubelet's FailedPostStartHook event, then the kill.
        crate::events::record(
            &crate::events::ObjectRef::container(pod, &c.name),
            crate::events::Type::Warning,
            "FailedPostStartHook",
            &message,
        );
        let st = PodRuntimeStatus {
            uid: uid.into(),
            name: pod.metadata.name.as_str().into(),
            namespace: config::namespace(pod).into(),
            sandboxes: ctx.st.sandboxes.clone(),
            containers: Vec::new(),
        };
        let me = ContainerStatus {
            id: id.into(),
            sandbox_id: ctx.sandbox_id.into(),
            name: c.name.as_str().into(),
            state: ContainerState::Running,
            created_at: 0,
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            image: c.image.as_str().into(),
            image_ref: "".into(),
            reason: "".into(),
            message: "".into(),
            hash: 0,
            restart_count: 0,
        };
        crate::events::record(
            &crate::events::ObjectRef::container(pod, &c.name),
            crate::events::Type::Normal,
            "Killing",
            &format!("FailedPostStartHook: stopping container {}", c.name),
        );
        if let Err(e) = self
            .kill_container(Some(pod), &st, &me, config::grace_period(pod))
            .await
        {
            log::warn!(
                "killing container {} after its postStart hook failed: {e}",
                c.name
            );
        }
        let e = SyncError::PostStartHook {
            container: c.name.clone(),
            message,
        };
        self.wait_on(uid, &e);
        out.fail(e);
    }

    pub(super) async fn purge_init_containers(
        &self,
        pod: &Pod,
        st: &PodRuntimeStatus,
    ) -> Result<(), CriError> {
        let inits = &pod.spec.init_containers;
        for c in st
            .containers
            .iter()
            .filter(|c| inits.iter().any(|i| *i.name == *c.name))
        {
            match self.runtime.remove_container(&c.id).await {
                Err(e) if !e.is_not_found() => return Err(e),
                _ => self.remove_log(st, c),
            }
        }
        Ok(())
    }

    /// Removes a container's log and its rotated files (`<n>.log.*`), as upstream's Clean.
    pub(super) fn remove_log(&self, st: &PodRuntimeStatus, c: &ContainerStatus) {
        let log = config::container_log_path(
            &self.node.pod_logs_dir,
            &st.namespace,
            &st.name,
            &st.uid,
            &c.name,
            c.restart_count,
        );
        let name = format!("{}.log", c.restart_count);
        let rotated = log
            .parent()
            .and_then(|d| crate::logs::rotate::list_dir(d).ok())
            .unwrap_or_default()
            .into_iter()
            .filter(|n| n.strip_prefix(&name).is_some_and(|r| r.starts_with('.')));
        let dir = log
            .parent()
            .map(std::path::Path::to_path_buf)
            .unwrap_or_default();
        for p in std::iter::once(log).chain(rotated.map(|n| dir.join(n))) {
            if let Err(e) = fs::remove_file(&p)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                log::warn!("removing {}: {e}", p.display());
            }
        }
    }
}

/// Why a container's file on the node (its log directory, termination message file, hosts
/// file) could not be made: what was being done, to which file, and the io error.
#[derive(Debug)]
struct FileError {
    doing: &'static str,
    path: PathBuf,
    source: std::io::Error,
}

impl FileError {
    fn at(doing: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_owned();
        move |source| FileError {
            doing,
            path,
            source,
        }
    }
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.doing, self.path.display(), self.source)
    }
}

impl std::error::Error for FileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Makes a container's files on the node: its log directory, and its termination message file
/// (returned). Two message files per container alternate: the running instance's and the one
/// dead instance container GC keeps (whose message the status still shows); truncated on reuse.
fn prepare_files(
    termination_dir: &std::path::Path,
    logs: &std::path::Path,
    restart: u32,
) -> Result<PathBuf, FileError> {
    for d in [termination_dir, logs] {
        fs::create_dir_all(d).map_err(FileError::at("creating", d))?;
    }
    let path = termination_dir.join(format!("termination-log-{}", restart % 2));
    fs::File::create(&path).map_err(FileError::at("creating", &path))?;
    // Writable by a container running as any user, as the kubelet makes it.
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o666))
        .map_err(FileError::at("opening up", &path))?;
    Ok(path)
}

/// Writes the pod's hosts file in place (mode 0644), as the kubelet does before each container
/// starts: containers already running see the new content through their bind mount.
fn write_hosts_file(
    path: &std::path::Path,
    pod: &Pod,
    pod_ip: &str,
    cluster_domain: &str,
) -> Result<(), FileError> {
    let node_hosts = if pod.spec.host_network {
        Some(fs::read_to_string(config::ETC_HOSTS).map_err(FileError::at(
            "reading the node's",
            std::path::Path::new(config::ETC_HOSTS),
        ))?)
    } else {
        None
    };
    let text = config::hosts_file(pod, pod_ip, node_hosts.as_deref(), cluster_domain);
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(FileError::at("creating", dir))?;
    }
    fs::write(path, text).map_err(FileError::at("writing", path))?;
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o644))
        .map_err(FileError::at("chmod", path))
}
