//! The command line: the options of a run (`options`: the kubelet's flags and the
//! `KubeletConfiguration` subset), and the subcommands: `picolet check` (`check`), `picolet exec`
//! (`exec`), `picolet logs` (`logs`) and `picolet validate` (`validate`).

pub mod check;
pub mod exec;
pub mod logs;
pub mod options;

/// Checks manifests as the file source would; returns one line per error.
#[cfg(feature = "file-source")]
pub fn validate(files: &[std::path::PathBuf]) -> Vec<String> {
    let mut errors = Vec::new();
    for f in files {
        if let Err(e) = crate::config::file::load(f, "validate", "") {
            errors.extend(e);
        }
    }
    errors
}
