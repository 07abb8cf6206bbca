//! The runtime's cgroup driver against picolet's. Both must name cgroups the same way: with
//! `--cgroup-driver=systemd` the runtime must be configured for systemd too (containerd:
//! `SystemdCgroup = true` in the runc options), or pods land outside the tree picolet limits.
//! containerd 2.0 and CRI-O 1.28 say which driver they use (`RuntimeConfig`); as upstream, that
//! answer wins over the flag. Older containerd only shows its configuration in the verbose
//! `Status`, which is read for `SystemdCgroup`; a mismatch there is refused.

use super::name::Driver;
use crate::cri::{RuntimeService, v1};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeDriver {
    /// From `RuntimeConfig`.
    Reported(Driver),
    /// From the runtime's configuration in its verbose status.
    Configured(Driver),
    Unknown,
}

impl RuntimeDriver {
    pub fn describe(self) -> String {
        match self {
            RuntimeDriver::Reported(d) => format!("{d} (RuntimeConfig)"),
            RuntimeDriver::Configured(d) => format!("{d} (from its configuration)"),
            RuntimeDriver::Unknown => "unknown".into(),
        }
    }
}

/// Asks the runtime.
pub async fn runtime_driver(cri: &dyn RuntimeService) -> RuntimeDriver {
    if let Ok(r) = cri.runtime_config().await
        && let Some(l) = r.linux
    {
        return RuntimeDriver::Reported(if l.cgroup_driver == v1::CgroupDriver::Cgroupfs as i32 {
            Driver::Cgroupfs
        } else {
            Driver::Systemd
        });
    }
    match cri.status(true).await {
        Ok(s) => s
            .info
            .get("config")
            .and_then(|c| driver_in_config(c))
            .map_or(RuntimeDriver::Unknown, RuntimeDriver::Configured),
        Err(_) => RuntimeDriver::Unknown,
    }
}

/// The driver of containerd's default runtime from the CRI plugin's configuration as its
/// verbose status shows it (JSON: `containerd.defaultRuntimeName`, and that runtime's
/// `options.SystemdCgroup`; runc's default is cgroupfs).
pub fn driver_in_config(json: &str) -> Option<Driver> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let ctd = v.get("containerd")?;
    let name = ctd.get("defaultRuntimeName")?.as_str()?;
    let rt = ctd.get("runtimes")?.get(name)?;
    let systemd = rt
        .get("options")
        .and_then(|o| o.get("SystemdCgroup"))
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    Some(if systemd {
        Driver::Systemd
    } else {
        Driver::Cgroupfs
    })
}

/// The driver to use, with a warning to log; or why picolet must not start.
pub fn decide(configured: Driver, rt: RuntimeDriver) -> Result<(Driver, Option<String>), String> {
    match rt {
        RuntimeDriver::Reported(d) if d != configured => Ok((
            d,
            Some(format!(
                "the runtime uses the {d} cgroup driver: using it, not --cgroup-driver={configured} \
                 (set --cgroup-driver={d} to silence this)"
            )),
        )),
        RuntimeDriver::Configured(d) if d != configured => Err(format!(
            "--cgroup-driver={configured}, but the runtime is configured for {d}: pods would land \
             outside the kubepods tree; fix: --cgroup-driver={d} (cgroupDriver: {d}), or set \
             SystemdCgroup = {} in the runc options of /etc/containerd/config.toml \
             ([plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]) and \
             restart containerd",
            configured == Driver::Systemd
        )),
        RuntimeDriver::Unknown if configured == Driver::Systemd => Ok((
            configured,
            Some(
                "the runtime does not say which cgroup driver it uses: make sure it is \
                 configured for systemd (containerd: SystemdCgroup = true)"
                    .into(),
            ),
        )),
        _ => Ok((configured, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The shape containerd 1.6's CRI plugin gives under `info.config` of a verbose Status.
    const CONTAINERD_16: &str = r#"{"containerd":{"snapshotter":"overlayfs","defaultRuntimeName":"runc",
        "runtimes":{"runc":{"runtimeType":"io.containerd.runc.v2","options":{"SystemdCgroup":true}}}},
        "cni":{"binDir":"/usr/lib/cni"}}"#;

    #[test]
    fn containerd_configuration_is_read() {
        assert_eq!(driver_in_config(CONTAINERD_16), Some(Driver::Systemd));
        let plain = CONTAINERD_16.replace(r#""options":{"SystemdCgroup":true}"#, r#""options":{}"#);
        assert_eq!(driver_in_config(&plain), Some(Driver::Cgroupfs));
        let none = CONTAINERD_16.replace(r#","options":{"SystemdCgroup":true}"#, "");
        assert_eq!(driver_in_config(&none), Some(Driver::Cgroupfs));
        assert_eq!(driver_in_config("not json"), None);
        assert_eq!(driver_in_config("{}"), None);
    }

    #[test]
    fn the_runtime_decides_when_it_says_and_a_mismatch_is_refused() {
        use Driver::{Cgroupfs, Systemd};
        assert_eq!(
            decide(Cgroupfs, RuntimeDriver::Reported(Cgroupfs)),
            Ok((Cgroupfs, None))
        );
        let (d, w) = decide(Cgroupfs, RuntimeDriver::Reported(Systemd)).unwrap();
        assert_eq!(d, Systemd);
        assert!(w.unwrap().contains("--cgroup-driver=systemd"));
        let e = decide(Systemd, RuntimeDriver::Configured(Cgroupfs)).unwrap_err();
        assert!(
            e.contains("--cgroup-driver=cgroupfs") && e.contains("SystemdCgroup = true"),
            "{e}"
        );
        let e = decide(Cgroupfs, RuntimeDriver::Configured(Systemd)).unwrap_err();
        assert!(e.contains("SystemdCgroup = false"), "{e}");
        assert_eq!(
            decide(Cgroupfs, RuntimeDriver::Unknown),
            Ok((Cgroupfs, None))
        );
        assert!(decide(Systemd, RuntimeDriver::Unknown).unwrap().1.is_some());
    }
}
