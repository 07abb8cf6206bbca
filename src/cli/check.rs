//! Preflight: what the host must offer before pods can run, each problem named with its fix.
//! `picolet check` prints every finding and exits non-zero on a fatal one; `run` logs one line
//! naming the problems and goes on (a node with a wrong clock or no memory controller still runs
//! its static pods, worse).

use std::fmt;
use std::path::Path;
use std::time::Duration;

use crate::cli::options::Options;
use crate::cm::detect::{self, Mode};
use crate::cri::RuntimeService;

/// Seconds since the epoch when this binary was built (`SOURCE_DATE_EPOCH` when set).
const BUILD_EPOCH: &str = env!("PICOLET_BUILD_EPOCH");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Ok,
    Warn,
    Fatal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub level: Level,
    pub what: &'static str,
    pub detail: String,
    /// The exact fix, for a problem.
    pub fix: Option<String>,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = match self.level {
            Level::Ok => "ok",
            Level::Warn => "WARN",
            Level::Fatal => "FAIL",
        };
        write!(f, "{tag:4} {}: {}", self.what, self.detail)?;
        if let Some(fix) = &self.fix {
            write!(f, "; fix: {fix}")?;
        }
        Ok(())
    }
}

fn ok(what: &'static str, detail: impl Into<String>) -> Finding {
    Finding {
        level: Level::Ok,
        what,
        detail: detail.into(),
        fix: None,
    }
}

fn problem(
    level: Level,
    what: &'static str,
    detail: impl Into<String>,
    fix: impl Into<String>,
) -> Finding {
    Finding {
        level,
        what,
        detail: detail.into(),
        fix: Some(fix.into()),
    }
}

/// The proleptic Gregorian year of a unix time (days-to-civil, Howard Hinnant's algorithm).
fn year_of(unix_secs: i64) -> i64 {
    let z = unix_secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    yoe + era * 400 + i64::from(month <= 2)
}

/// The host checks, reading `/proc` and `/sys` under `root` (`/` on a host).
pub fn host(o: &Options, root: &Path, now_unix_secs: i64) -> Vec<Finding> {
    let mut out = Vec::new();
    cgroups(root, &mut out);
    out.push(kubepods(&o.cgroups, root));
    out.push(overlayfs(root));
    out.push(manifests(o));
    out.push(root_dir(&o.root_dir));
    out.push(clock(now_unix_secs, BUILD_EPOCH.parse().unwrap_or(0)));
    #[cfg(feature = "apiserver")]
    out.extend(client_certificate(o, now_unix_secs));
    out
}

/// The client certificate picolet would use (the kubeconfig's, or the newer current one of
/// `<root-dir>/pki` with rotation on): its expiry and whether rotation is on.
#[cfg(feature = "apiserver")]
fn client_certificate(o: &Options, now: i64) -> Option<Finding> {
    use crate::certificate::{CLIENT_PREFIX, Identity, Store};
    const WHAT: &str = "client certificate";
    let kubeconfig = o.kubeconfig.as_ref()?;
    let rotation = if o.rotation() { "on" } else { "off" };
    let store = Store::new(&o.root().pki(), CLIENT_PREFIX);
    let from_store = store.current().ok().flatten();
    let loaded = crate::apiclient::kubeconfig::load(kubeconfig);
    let from_kubeconfig = loaded
        .as_ref()
        .ok()
        .and_then(|c| Identity::of(&c.credentials));
    let id = match (from_kubeconfig, from_store) {
        (Some(k), Some(s)) if o.rotation() && s.not_after > k.not_after => Some(s),
        (Some(k), _) => Some(k),
        (None, s) if loaded.is_err() => s,
        (None, _) => None,
    };
    let when = |t: i64| crate::api::rfc3339(t.saturating_mul(1_000_000_000));
    let node = o.hostname_override.as_deref().unwrap_or("<node>");
    let fix_expired = match &o.bootstrap_kubeconfig {
        Some(b) => format!(
            "none needed if the bootstrap token in {} is valid: picolet bootstraps again when              the apiserver answers; else put a new one there (kubeadm token create)",
            b.display()
        ),
        None => format!(
            "put a valid client certificate for system:node:{node} (group system:nodes) in {},              or set --bootstrap-kubeconfig with a valid bootstrap token",
            kubeconfig.display()
        ),
    };
    Some(match (id, &loaded) {
        (Some(i), _) if now >= i.not_after => problem(
            if o.bootstrap_kubeconfig.is_some() {
                Level::Warn
            } else {
                Level::Fatal
            },
            WHAT,
            format!("expired at {}, rotation {rotation}", when(i.not_after)),
            fix_expired,
        ),
        (Some(i), _) => {
            let left = (i.not_after - now) / 86_400;
            let detail = format!(
                "valid until {} ({left} days left), rotation {rotation}",
                when(i.not_after)
            );
            if !o.rotation() && now >= i.renew_at(0.9) {
                problem(
                    Level::Warn,
                    WHAT,
                    detail,
                    "turn rotation on (--rotate-certificates, rotateCertificates: true) or                      replace the certificate before it expires",
                )
            } else {
                ok(WHAT, detail)
            }
        }
        (None, Ok(_)) => ok(WHAT, "none: the kubeconfig authenticates with a token"),
        (None, Err(e)) => match &o.bootstrap_kubeconfig {
            Some(b) => ok(
                WHAT,
                format!(
                    "none yet: joins with the bootstrap token of {}, rotation {rotation}",
                    b.display()
                ),
            ),
            None => problem(
                Level::Fatal,
                WHAT,
                e.clone(),
                "give --kubeconfig a kubeconfig with the node's credentials, or set                  --bootstrap-kubeconfig",
            ),
        },
    })
}

fn cgroups(root: &Path, out: &mut Vec<Finding>) {
    let c = match detect::detect(root) {
        Ok(c) => c,
        Err(e) => {
            out.push(problem(
                Level::Fatal,
                "cgroups",
                e.to_string(),
                "mount cgroup2 at /sys/fs/cgroup (mount -t cgroup2 none /sys/fs/cgroup) or boot \
                 with systemd, which mounts it",
            ));
            return;
        }
    };
    let names: Vec<&str> = c.controllers.iter().map(|(n, _)| n.as_str()).collect();
    out.push(ok(
        "cgroups",
        format!("{}, controllers {}", c.mode.as_str(), names.join(" ")),
    ));
    for m in c.missing() {
        out.push(problem(
            Level::Fatal,
            "cgroups",
            format!("the {m} controller is not available"),
            detect::fix(m, c.mode),
        ));
    }
    if c.mode != Mode::Unified {
        out.push(problem(
            Level::Warn,
            "cgroups",
            "cgroup v1 is deprecated by Kubernetes (1.31) and systemd",
            "boot with `systemd.unified_cgroup_hierarchy=1` on the kernel command line",
        ));
    }
}

/// The kubepods tree: where it goes, whether picolet can make it, what the driver needs.
fn kubepods(c: &crate::cm::CgroupConfig, root: &Path) -> Finding {
    use crate::cm::{Driver, PodCgroups};
    if !c.per_qos {
        return ok(
            "kubepods",
            "--cgroups-per-qos=false: no pod cgroups, the runtime places pods",
        );
    }
    let pc = match PodCgroups::new(c, root) {
        Ok(pc) => pc,
        Err(e) => {
            return problem(
                Level::Fatal,
                "kubepods",
                e.to_string(),
                "mount cgroup2 at /sys/fs/cgroup, or pass --cgroups-per-qos=false \
                 --enforce-node-allocatable=none",
            );
        }
    };
    if c.driver == Driver::Systemd && !root.join("run/systemd/system").is_dir() {
        return problem(
            Level::Fatal,
            "kubepods",
            "--cgroup-driver=systemd, but systemd is not the init system (no /run/systemd/system)",
            "use --cgroup-driver=cgroupfs, and SystemdCgroup = false in the runtime's runc options",
        );
    }
    let tree = pc.kubepods_path();
    // The nearest existing level of the tree must be writable in each hierarchy.
    for dir in pc.hierarchy.dirs(&tree) {
        let mut probe = dir.as_path();
        while !probe.exists() {
            match probe.parent() {
                Some(p) => probe = p,
                None => break,
            }
        }
        if let Err(e) = nix::unistd::access(probe, nix::unistd::AccessFlags::W_OK) {
            return problem(
                Level::Fatal,
                "kubepods",
                format!("cannot create {} under {}: {e}", tree, probe.display()),
                "run picolet as root (it owns the kubepods cgroup tree)",
            );
        }
    }
    let needs = match c.driver {
        Driver::Cgroupfs => "the runtime must use cgroupfs too (containerd: SystemdCgroup = false)",
        Driver::Systemd => "the runtime must use systemd too (containerd: SystemdCgroup = true)",
    };
    ok(
        "kubepods",
        format!("{} driver, pods under {tree}; {needs}", c.driver),
    )
}

/// The runtime's cgroup driver against `--cgroup-driver`.
pub async fn cgroup_driver(cri: &dyn RuntimeService, configured: crate::cm::Driver) -> Finding {
    use crate::cm::runtime;
    let rt = runtime::runtime_driver(cri).await;
    match runtime::decide(configured, rt) {
        Ok((d, None)) => ok(
            "cgroup driver",
            format!("{d}; the runtime: {}", rt.describe()),
        ),
        Ok((d, Some(w))) => problem(
            Level::Warn,
            "cgroup driver",
            format!("{d}: {w}"),
            format!("--cgroup-driver={d}"),
        ),
        Err(e) => problem(
            Level::Fatal,
            "cgroup driver",
            e,
            "make --cgroup-driver and the runtime's driver agree",
        ),
    }
}

fn overlayfs(root: &Path) -> Finding {
    let path = root.join("proc/filesystems");
    match std::fs::read_to_string(&path) {
        Ok(s)
            if s.lines()
                .any(|l| l.split_whitespace().last() == Some("overlay")) =>
        {
            ok("overlayfs", "overlay is in /proc/filesystems")
        }
        Ok(_) => problem(
            Level::Fatal,
            "overlayfs",
            format!("overlay is not in {}", path.display()),
            "modprobe overlay (and add `overlay` to /etc/modules-load.d/), or build the kernel \
             with CONFIG_OVERLAY_FS",
        ),
        Err(e) => problem(
            Level::Fatal,
            "overlayfs",
            format!("reading {}: {e}", path.display()),
            "mount /proc",
        ),
    }
}

fn manifests(o: &Options) -> Finding {
    let Some(p) = &o.pod_manifest_path else {
        return ok("manifests", "no --pod-manifest-path: static pods off");
    };
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => match std::fs::read_dir(p) {
            Ok(_) => ok(
                "manifests",
                format!("{} is a readable directory", p.display()),
            ),
            Err(e) => problem(
                Level::Fatal,
                "manifests",
                format!("reading {}: {e}", p.display()),
                format!("make {} readable by picolet's user", p.display()),
            ),
        },
        // A single file is a valid manifest path for the kubelet too.
        Ok(m) if m.is_file() => ok("manifests", format!("{} is a manifest file", p.display())),
        Ok(_) => problem(
            Level::Fatal,
            "manifests",
            format!("{} is neither a directory nor a file", p.display()),
            "point --pod-manifest-path at a directory",
        ),
        Err(e) => problem(
            Level::Warn,
            "manifests",
            format!("{}: {e}", p.display()),
            format!("mkdir -p {}", p.display()),
        ),
    }
}

fn root_dir(p: &Path) -> Finding {
    use std::os::unix::fs::PermissionsExt;
    // The directory is created at start when missing: then its nearest existing parent counts.
    let mut probe = p;
    while !probe.exists() {
        match probe.parent() {
            Some(parent) => probe = parent,
            None => break,
        }
    }
    let writable = nix::unistd::access(
        probe,
        nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
    );
    if let Err(e) = writable {
        return problem(
            Level::Fatal,
            "root-dir",
            format!("{} is not writable: {e}", probe.display()),
            format!("run picolet as root, or chown its user {}", probe.display()),
        );
    }
    if probe == p {
        match std::fs::metadata(p) {
            Ok(m) if !m.is_dir() => {
                return problem(
                    Level::Fatal,
                    "root-dir",
                    format!("{} is not a directory", p.display()),
                    "point --root-dir at a directory",
                );
            }
            // Pod volumes and checkpoints (secrets, service account tokens) live here.
            Ok(m) if m.permissions().mode() & 0o002 != 0 => {
                return problem(
                    Level::Warn,
                    "root-dir",
                    format!("{} is world-writable", p.display()),
                    format!("chmod o-w {}", p.display()),
                );
            }
            _ => {}
        }
        ok("root-dir", format!("{} is writable", p.display()))
    } else {
        ok(
            "root-dir",
            format!("{} will be created under {}", p.display(), probe.display()),
        )
    }
}

fn clock(now: i64, built: i64) -> Finding {
    let (year, build_year) = (year_of(now), year_of(built));
    if year < build_year {
        problem(
            Level::Warn,
            "clock",
            format!(
                "the clock says {year}, before this build ({build_year}): no RTC, or NTP has not synced"
            ),
            "enable time sync (systemctl enable --now systemd-timesyncd) or fit an RTC; \
             certificates and the apiserver refuse a clock in the past",
        )
    } else {
        ok("clock", format!("year {year}"))
    }
}

/// The runtime releases picolet's end-to-end tests run against (name, `major.minor`): the
/// machine's containerd 1.6 and the 2.x release `scripts/k8s-build.sh --containerd` builds.
pub const TESTED_RUNTIMES: &[(&str, &str)] = &[("containerd", "1.6"), ("containerd", "2.4")];

/// Whether `name` `version` (as CRI `Version` reports it: `v2.4.2`, `1.6.20~ds1`) is of a
/// release series in [`TESTED_RUNTIMES`].
pub fn runtime_tested(name: &str, version: &str) -> bool {
    let v = version.strip_prefix('v').unwrap_or(version);
    TESTED_RUNTIMES.iter().any(|(n, series)| {
        *n == name
            && v.strip_prefix(series)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '-', '~', '+']))
    })
}

fn tested_list() -> String {
    let names: Vec<String> = TESTED_RUNTIMES
        .iter()
        .map(|(n, s)| format!("{n} {s}"))
        .collect();
    names.join(", ")
}

/// The runtime: reachable, speaking CRI v1, and of a release picolet is tested with.
pub async fn runtime(cri: &dyn RuntimeService, endpoint: &str) -> Finding {
    let sock = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    // What picolet refuses on this runtime, said beside it.
    let image_volumes = |v: &crate::cri::v1::VersionResponse| {
        let runtime = format!("{}://{}", v.runtime_name, v.runtime_version);
        crate::kuberuntime::image::runtime_mounts_images(&runtime)
            .err()
            .map(|why| format!("; pods with image volumes are refused: {why}"))
            .unwrap_or_default()
    };
    match crate::rt::timeout(Duration::from_secs(5), cri.version()).await {
        Ok(Ok(v))
            if v.runtime_api_version == "v1"
                && runtime_tested(&v.runtime_name, &v.runtime_version) =>
        {
            ok(
                "runtime",
                format!(
                    "{} {} at {endpoint}, CRI {}; a release picolet is tested with{}",
                    v.runtime_name,
                    v.runtime_version,
                    v.runtime_api_version,
                    image_volumes(&v)
                ),
            )
        }
        Ok(Ok(v)) if v.runtime_api_version == "v1" => problem(
            Level::Warn,
            "runtime",
            format!(
                "{} {} at {endpoint}, CRI {}: not a release picolet is tested with ({}){}",
                v.runtime_name,
                v.runtime_version,
                v.runtime_api_version,
                tested_list(),
                image_volumes(&v)
            ),
            "it speaks CRI v1 and should work; for a tested setup use one of those releases",
        ),
        Ok(Ok(v)) => problem(
            Level::Fatal,
            "runtime",
            format!(
                "{} {} at {endpoint} speaks CRI {:?}, not v1",
                v.runtime_name, v.runtime_version, v.runtime_api_version
            ),
            "upgrade the runtime (containerd 1.7 or later)",
        ),
        Ok(Err(e)) => problem(
            Level::Fatal,
            "runtime",
            format!("{endpoint}: {e}"),
            format!(
                "start containerd (systemctl enable --now containerd), check that {sock} exists, \
                 and that its CRI plugin is not in disabled_plugins of /etc/containerd/config.toml"
            ),
        ),
        Err(_) => problem(
            Level::Fatal,
            "runtime",
            format!("{endpoint}: no answer to Version within 5s"),
            "restart containerd",
        ),
    }
}

/// The image preload directory, each archive in it and its state by the record of the last
/// imports (imported, refused and why, or not imported yet), and each pull list.
fn preload(o: &Options) -> Vec<Finding> {
    use crate::images::{preload, pull_list, record};
    let dir = o
        .image_preload_dir
        .clone()
        .unwrap_or_else(|| o.root().images());
    let record_path = o.root().preloaded_images_record();
    let files = match preload::archives(&dir) {
        Ok(f) => f,
        Err(e) => {
            return vec![problem(
                Level::Warn,
                "image preload",
                e,
                format!(
                    "make {} readable by picolet's user (no image is preloaded)",
                    dir.display()
                ),
            )];
        }
    };
    if !dir.exists() {
        return vec![ok(
            "image preload",
            format!("{} does not exist: nothing to preload", dir.display()),
        )];
    }
    let lists = pull_list::lists(&dir);
    let (rec, rec_note) = match record::Record::read(&record_path) {
        Ok(r) => (r, format!("record {}", record_path.display())),
        Err(e) => (
            record::Record::default(),
            format!("{e}: dropped at the next start, every archive read again"),
        ),
    };
    let mut out = vec![ok(
        "image preload",
        format!(
            "{}: {} archives, {} pull lists; {rec_note}",
            dir.display(),
            files.len(),
            lists.len()
        ),
    )];
    for f in files {
        let name = f.to_string_lossy();
        let version = std::fs::metadata(&f).map(|m| record::Version::of(&m));
        let entry = version
            .as_ref()
            .ok()
            .and_then(|v| rec.matching(&f, *v).cloned());
        out.push(match (entry, version) {
            (_, Err(e)) => problem(
                Level::Warn,
                "image archive",
                format!("{}: {e}", f.display()),
                format!("make {} readable by picolet's user", f.display()),
            ),
            (
                Some(record::Entry {
                    refused: Some(reason),
                    ..
                }),
                _,
            ) => problem(
                Level::Warn,
                "image archive",
                format!("{}: refused: {reason}", f.display()),
                "replace it with a whole archive (docker save or an OCI image layout, a plain \
                 or gzip-compressed tar, with an image for this node's platform)",
            ),
            (Some(e), _) => {
                let images: Vec<String> = e
                    .images
                    .iter()
                    .map(|i| format!("{} ({})", i.name, i.digest))
                    .collect();
                ok(
                    "image archive",
                    format!(
                        "{}: imported and pinned: {}",
                        f.display(),
                        images.join(", ")
                    ),
                )
            }
            (None, _)
                if !cfg!(feature = "zstd")
                    && (name.ends_with(".zst") || name.ends_with(".tzst")) =>
            {
                problem(
                    Level::Warn,
                    "image archive",
                    format!(
                        "{}: zstd-compressed archives are not supported by this build (built \
                     without the zstd feature): it will be refused",
                        f.display()
                    ),
                    format!("zstd -d {} (or compress with gzip instead)", f.display()),
                )
            }
            (None, _) => ok(
                "image archive",
                format!(
                    "{}: not imported yet (new, or replaced since its import): imported at the \
                     next start, or within a minute while picolet runs",
                    f.display()
                ),
            ),
        });
    }
    for l in lists {
        out.push(match std::fs::read_to_string(&l) {
            Ok(text) => {
                let (wanted, errors) = pull_list::parse(&l, &text);
                if errors.is_empty() {
                    ok(
                        "image pull list",
                        format!(
                            "{}: {} images, pulled and pinned while picolet runs",
                            l.display(),
                            wanted.len()
                        ),
                    )
                } else {
                    problem(
                        Level::Warn,
                        "image pull list",
                        format!("{} images; {}", wanted.len(), errors.join("; ")),
                        "one image reference a line (registry/name:tag or name@sha256:<digest>); \
                         comments start with #",
                    )
                }
            }
            Err(e) => problem(
                Level::Warn,
                "image pull list",
                format!("{}: {e}", l.display()),
                format!("make {} readable by picolet's user", l.display()),
            ),
        });
    }
    out
}

/// Every check, for `picolet check`.
pub fn all(o: &Options) -> Vec<Finding> {
    let now = crate::rt::now_nanos().div_euclid(1_000_000_000);
    let mut out = host(o, Path::new("/"), now);
    out.extend(preload(o));
    let deadlines = crate::cri::Deadlines {
        request: o.runtime_request_timeout,
        ..crate::cri::Deadlines::default()
    };
    match crate::cri::Cri::new(&o.container_runtime_endpoint, None, deadlines) {
        Ok(cri) => {
            let rt = crate::rt::block_on(runtime(&cri, &o.container_runtime_endpoint));
            let reachable = rt.level == Level::Ok;
            out.push(rt);
            if reachable {
                out.push(crate::rt::block_on(cgroup_driver(&cri, o.cgroups.driver)));
            }
        }
        Err(e) => out.push(problem(
            Level::Fatal,
            "runtime",
            e.to_string(),
            "pass --container-runtime-endpoint unix:///run/containerd/containerd.sock",
        )),
    }
    #[cfg(feature = "graceful-shutdown")]
    out.push(match crate::nodeshutdown::manager::check(o) {
        Ok(detail) => Finding {
            level: Level::Ok,
            what: "graceful shutdown",
            detail,
            fix: None,
        },
        Err((detail, fix)) => Finding {
            level: Level::Warn,
            what: "graceful shutdown",
            detail,
            fix: Some(fix),
        },
    });
    #[cfg(not(feature = "graceful-shutdown"))]
    if o.shutdown.enabled() {
        out.push(problem(
            Level::Warn,
            "graceful shutdown",
            format!(
                "{}, but this picolet was built without the graceful-shutdown feature",
                o.shutdown.describe()
            ),
            "build with the graceful-shutdown feature (on by default), or set \
             shutdownGracePeriod: 0",
        ));
    }
    out
}

/// One line naming each problem with its fix, or None when there is none.
pub fn summary(findings: &[Finding]) -> Option<String> {
    let problems: Vec<String> = findings
        .iter()
        .filter(|f| f.level != Level::Ok)
        .map(|f| {
            format!(
                "{}: {} (fix: {})",
                f.what,
                f.detail,
                f.fix.as_deref().unwrap_or("")
            )
        })
        .collect();
    (!problems.is_empty()).then(|| format!("preflight: {}", problems.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn year_of_known_dates() {
        assert_eq!(year_of(0), 1970);
        assert_eq!(year_of(951_782_400), 2000); // 2000-02-29
        assert_eq!(year_of(1_735_689_599), 2024); // 2024-12-31T23:59:59
        assert_eq!(year_of(1_735_689_600), 2025);
    }

    #[test]
    fn clock_in_1970_is_flagged() {
        let f = clock(120, 1_735_689_600);
        assert_eq!(f.level, Level::Warn);
        assert!(
            f.detail.contains("1970") && f.detail.contains("2025"),
            "{f}"
        );
        assert_eq!(clock(1_735_689_600, 1_735_689_600).level, Level::Ok);
        let built: i64 = BUILD_EPOCH.parse().unwrap();
        assert!(year_of(built) >= 2024, "{built}");
    }

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("picolet-check-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("proc/self")).unwrap();
        d
    }

    #[test]
    fn overlayfs_from_proc_filesystems() {
        let d = tmp("overlay");
        std::fs::write(
            d.join("proc/filesystems"),
            "nodev\tsysfs\n\text4\nnodev\toverlay\n",
        )
        .unwrap();
        assert_eq!(overlayfs(&d).level, Level::Ok);
        std::fs::write(d.join("proc/filesystems"), "nodev\tsysfs\n\text4\n").unwrap();
        let f = overlayfs(&d);
        assert_eq!(f.level, Level::Fatal);
        assert!(f.fix.unwrap().contains("modprobe overlay"));
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn pi_without_memory_controller_is_fatal_with_the_cmdline_fix() {
        let d = tmp("pi");
        std::fs::write(
            d.join("proc/self/mountinfo"),
            "26 28 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n",
        )
        .unwrap();
        std::fs::create_dir_all(d.join("sys/fs/cgroup")).unwrap();
        std::fs::write(
            d.join("sys/fs/cgroup/cgroup.controllers"),
            "cpuset cpu io pids\n",
        )
        .unwrap();
        let mut out = Vec::new();
        cgroups(&d, &mut out);
        let f = out.iter().find(|f| f.level == Level::Fatal).unwrap();
        assert!(f.detail.contains("memory"), "{f}");
        assert!(
            f.to_string()
                .contains("cgroup_enable=memory cgroup_memory=1"),
            "{f}"
        );
        let line = summary(&out).unwrap();
        assert!(
            line.starts_with("preflight: cgroups: the memory controller"),
            "{line}"
        );
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn manifests_and_root_dir() {
        let d = tmp("dirs");
        let mut o = Options {
            pod_manifest_path: Some(d.join("missing")),
            ..Options::default()
        };
        assert_eq!(manifests(&o).level, Level::Warn);
        o.pod_manifest_path = Some(d.clone());
        assert_eq!(manifests(&o).level, Level::Ok);
        assert_eq!(root_dir(&d).level, Level::Ok);
        assert!(root_dir(&d.join("a/b")).detail.contains("will be created"));
        std::fs::write(d.join("file"), "").unwrap();
        assert_eq!(root_dir(&d.join("file")).level, Level::Fatal);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn the_preload_directory_each_archive_and_its_state() {
        use crate::images::record::{Entry, Named, Record, Version};
        let d = tmp("preload");
        let o = Options {
            root_dir: d.join("root"),
            image_preload_dir: Some(d.join("images")),
            ..Options::default()
        };
        let missing = preload(&o);
        assert_eq!(missing.len(), 1);
        assert!(
            missing[0]
                .detail
                .ends_with("does not exist: nothing to preload"),
            "{}",
            missing[0]
        );
        let dir = d.join("images");
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["a.tar", "b.tar", "c.tar.gz", "d.tar.zst"] {
            std::fs::write(dir.join(f), f).unwrap();
        }
        std::fs::write(dir.join("fleet.txt"), "# x\nreg.local/app:1\nnot one\n").unwrap();
        let version = |f: &str| Version::of(&std::fs::metadata(dir.join(f)).unwrap());
        let mut rec = Record::default();
        rec.archives.insert(
            dir.join("a.tar"),
            Entry {
                version: version("a.tar"),
                images: vec![Named {
                    name: "reg.local/app:1".into(),
                    digest: "sha256:ab".into(),
                }],
                refused: None,
            },
        );
        rec.archives.insert(
            dir.join("b.tar"),
            Entry {
                version: version("b.tar"),
                images: Vec::new(),
                refused: Some("image archive b.tar: truncated".into()),
            },
        );
        // c.tar.gz's entry is for an older version of it: not imported yet.
        rec.archives.insert(
            dir.join("c.tar.gz"),
            Entry {
                version: Version { size: 1, mtime: 1 },
                images: Vec::new(),
                refused: None,
            },
        );
        rec.save(&o.root().preloaded_images_record()).unwrap();
        let f = preload(&o);
        let lines: Vec<String> = f.iter().map(ToString::to_string).collect();
        assert_eq!(f.len(), 6, "{lines:#?}");
        assert!(
            lines[0].starts_with(&format!(
                "ok   image preload: {}: 4 archives, 1 pull lists; record ",
                dir.display()
            )),
            "{lines:#?}"
        );
        assert_eq!(
            lines[1],
            format!(
                "ok   image archive: {}: imported and pinned: reg.local/app:1 (sha256:ab)",
                dir.join("a.tar").display()
            )
        );
        assert_eq!(f[2].level, Level::Warn);
        assert!(
            lines[2].contains("b.tar: refused: image archive b.tar: truncated; fix: replace it"),
            "{lines:#?}"
        );
        assert_eq!(f[3].level, Level::Ok);
        assert!(
            lines[3].contains("c.tar.gz: not imported yet"),
            "{lines:#?}"
        );
        if cfg!(feature = "zstd") {
            assert_eq!(f[4].level, Level::Ok);
            assert!(
                lines[4].contains("d.tar.zst: not imported yet"),
                "{lines:#?}"
            );
        } else {
            assert_eq!(f[4].level, Level::Warn);
            assert!(
                lines[4].contains(
                    "d.tar.zst: zstd-compressed archives are not supported by this build"
                ),
                "{lines:#?}"
            );
        }
        assert_eq!(f[5].level, Level::Warn);
        assert!(
            lines[5].contains("image pull list: 1 images; image pull list ")
                && lines[5].contains("line 3: \"not one\" is not an image reference"),
            "{lines:#?}"
        );
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn runtime_version_from_the_fake() {
        let fake = crate::cri::fake::FakeRuntime::new();
        let f = crate::rt::block_on(runtime(&fake, "unix:///x.sock"));
        // The fake is no tested release: reachable and CRI v1, with a warning naming them.
        assert_eq!(f.level, Level::Warn, "{f}");
        assert!(f.detail.contains("CRI v1"), "{f}");
        assert!(f.detail.contains("containerd 1.6, containerd 2.4"), "{f}");
        assert!(
            f.detail.ends_with(
                "; pods with image volumes are refused: the container runtime containerd \
                 v1.7.0-fake cannot mount images (image volumes need containerd 2.1 or later)"
            ),
            "{f}"
        );
        fake.set_runtime_version("v2.4.2");
        let f = crate::rt::block_on(runtime(&fake, "unix:///x.sock"));
        assert_eq!(f.level, Level::Ok, "{f}");
        assert!(!f.detail.contains("image volumes"), "{f}");
    }

    #[test]
    fn tested_runtime_releases() {
        for (name, v) in [
            ("containerd", "1.6.20~ds1"),
            ("containerd", "v1.6.20"),
            ("containerd", "v2.4.2"),
            ("containerd", "2.4.0-rc.1"),
            ("containerd", "1.6"),
        ] {
            assert!(runtime_tested(name, v), "{name} {v}");
        }
        for (name, v) in [
            ("containerd", "v1.7.27"),
            ("containerd", "v2.41.0"),
            ("containerd", "v1.60.1"),
            ("cri-o", "1.6.2"),
            ("containerd", ""),
        ] {
            assert!(!runtime_tested(name, v), "{name} {v}");
        }
    }

    #[cfg(feature = "apiserver")]
    #[test]
    fn the_client_certificate_shows_its_expiry_and_rotation() {
        let dir = std::env::temp_dir().join(format!("picolet-check-cert-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let now = 1_780_000_000;
        let store = crate::certificate::Store::new(&dir.join("pki"), "kubelet-client");
        let c = crate::pki::self_signed("n", &[], &[], now).unwrap();
        store
            .save(c.cert_pem.as_bytes(), c.key_pem.as_bytes(), now)
            .unwrap();
        let kc = dir.join("kubelet.conf");
        let conn = crate::apiclient::kubeconfig::Connection {
            server: "https://10.0.0.1:6443".into(),
            ca: None,
            insecure_skip_tls_verify: false,
            tls_server_name: None,
            credentials: crate::apiclient::kubeconfig::Credentials::None,
            namespace: String::new(),
        };
        crate::certificate::write_kubeconfig(&kc, &conn, &store.current_path()).unwrap();
        let mut o = Options {
            root_dir: dir.clone(),
            kubeconfig: Some(kc.clone()),
            ..Options::default()
        };
        let f = client_certificate(&o, now).unwrap();
        assert_eq!(f.level, Level::Ok);
        assert_eq!(
            f.detail,
            "valid until 2027-05-28T20:26:40Z (365 days left), rotation off"
        );
        o.rotate_certificates = Some(true);
        assert!(
            client_certificate(&o, now)
                .unwrap()
                .detail
                .ends_with("rotation on")
        );
        let late = now + 400 * 86_400;
        let f = client_certificate(&o, late).unwrap();
        assert_eq!(f.level, Level::Fatal);
        assert!(
            f.detail.starts_with("expired at 2027-05-28T20:26:40Z"),
            "{f}"
        );
        assert!(f.fix.unwrap().contains("--bootstrap-kubeconfig"));
        o.bootstrap_kubeconfig = Some(dir.join("bootstrap.conf"));
        assert_eq!(client_certificate(&o, late).unwrap().level, Level::Warn);
        o.kubeconfig = Some(dir.join("missing.conf"));
        let _ = std::fs::remove_dir_all(dir.join("pki"));
        let f = client_certificate(&o, now).unwrap();
        assert_eq!(f.level, Level::Ok);
        assert!(
            f.detail
                .starts_with("none yet: joins with the bootstrap token"),
            "{f}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
