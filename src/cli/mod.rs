//! The command line: the options of a run (`options`: [`Options`] and its defaults; `flags`: the
//! one table of settings, a row per flag and `KubeletConfiguration` field; `parse`: the flags, the
//! file, the help and `/configz` read and written through that table), and the subcommands:
//! `picolet check` (`check`), `picolet exec` (`exec`), `picolet logs` (`logs`) and `picolet
//! validate` (`validate`). This file tells them apart.

pub mod check;
pub mod exec;
pub mod flags;
pub mod logs;
pub mod options;
pub mod parse;

use std::path::PathBuf;

use options::{Options, OptionsError};
use parse::Parsed;

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Run(Box<Options>),
    Validate(Vec<PathBuf>),
    /// Preflight checks with the options of a run.
    Check(Box<Options>),
    /// `picolet logs`: a container's log through the local API.
    Logs(Box<logs::LogsArgs>),
    /// `picolet logs --help`.
    LogsHelp,
    /// `picolet exec`: a command in a running container, through the runtime.
    Exec(Box<exec::ExecArgs>),
    /// `picolet exec --help`.
    ExecHelp,
    Version,
    Help,
}

const USAGE_HEAD: &str = "\
usage: picolet [flags]
       picolet validate FILE...
       picolet check [flags]   (preflight: cgroups, runtime, overlayfs, directories, clock,
                                preloaded images)
       picolet logs POD [CONTAINER] [flags]   (a container's log; picolet logs --help)
       picolet exec POD [-c C] [-it] -- CMD   (a command in a container; picolet exec --help)

Runs static pods from a manifest directory, and the pods an apiserver binds to the node,
on a CRI runtime (containerd).

flags:
";

const USAGE_TAIL: &str = concat!(
    "  --version                          print the version and exit\n",
    "  -h, --help                         print this help and exit\n",
);

/// `picolet --help`: the commands, then one entry per flag of [`flags::SETTINGS`].
pub fn usage() -> String {
    format!("{USAGE_HEAD}{}{USAGE_TAIL}", parse::flags_usage())
}

/// Parses the arguments (without the program name).
pub fn parse(args: &[String]) -> Result<Command, OptionsError> {
    let rest = args.get(1..).unwrap_or_default();
    match args.first().map(String::as_str) {
        Some("validate") => validate_args(rest),
        Some("logs") => {
            if rest.iter().any(|a| a == "-h" || a == "--help") {
                return Ok(Command::LogsHelp);
            }
            Ok(Command::Logs(Box::new(logs::parse(rest)?)))
        }
        Some("exec") => {
            let before_command = rest.iter().take_while(|a| *a != "--");
            if before_command
                .into_iter()
                .any(|a| a == "-h" || a == "--help")
            {
                return Ok(Command::ExecHelp);
            }
            Ok(Command::Exec(Box::new(exec::parse(rest)?)))
        }
        Some("check") => Ok(match parse(rest)? {
            Command::Run(o) => Command::Check(o),
            other => other,
        }),
        _ => Ok(match parse::parse(args)? {
            Parsed::Run(o) => Command::Run(o),
            Parsed::Help => Command::Help,
            Parsed::Version => Command::Version,
        }),
    }
}

fn validate_args(rest: &[String]) -> Result<Command, OptionsError> {
    if rest.iter().any(|a| a == "-h" || a == "--help") {
        return Ok(Command::Help);
    }
    if let Some(flag) = rest.iter().find(|a| a.len() > 1 && a.starts_with('-')) {
        return Err(OptionsError::Invalid(format!(
            "validate takes manifest files, not flags: {flag:?} (a file whose name starts with '-' is ./{flag})"
        )));
    }
    if rest.is_empty() {
        return Err(OptionsError::Invalid(
            "validate needs at least one manifest file: picolet validate FILE...".into(),
        ));
    }
    Ok(Command::Validate(rest.iter().map(PathBuf::from).collect()))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn subcommands() {
        assert_eq!(parse(&args(&["--version"])).unwrap(), Command::Version);
        assert_eq!(parse(&args(&["-h"])).unwrap(), Command::Help);
        assert_eq!(
            parse(&args(&["validate", "a.yaml"])).unwrap(),
            Command::Validate(vec!["a.yaml".into()])
        );
        assert_eq!(
            parse(&args(&["validate"])).unwrap_err().to_string(),
            "validate needs at least one manifest file: picolet validate FILE..."
        );
        assert_eq!(
            parse(&args(&["validate", "--help"])).unwrap(),
            Command::Help
        );
        assert_eq!(
            parse(&args(&["validate", "a.yaml", "-h"])).unwrap(),
            Command::Help
        );
        assert_eq!(
            parse(&args(&["validate", "--strict", "a.yaml"]))
                .unwrap_err()
                .to_string(),
            "validate takes manifest files, not flags: \"--strict\" (a file whose name starts with '-' is ./--strict)"
        );
        match parse(&args(&["check", "--root-dir", "/r"])).unwrap() {
            Command::Check(o) => assert_eq!(o.root_dir, PathBuf::from("/r")),
            c => panic!("{c:?}"),
        }
        assert!(matches!(
            parse(&args(&["stray"])),
            Err(OptionsError::Unexpected(_))
        ));
    }

    #[test]
    fn the_logs_subcommand() {
        match parse(&args(&["logs", "web", "-f"])).unwrap() {
            Command::Logs(a) => assert!(a.follow && a.pod == "web"),
            c => panic!("{c:?}"),
        }
        assert_eq!(
            parse(&args(&["logs", "--help"])).unwrap(),
            Command::LogsHelp
        );
    }
}
