//! The manifest directory's source (`--pod-manifest-path`).

use super::{Parts, sources::Sources};
use crate::cli::options::Options;
use crate::config::{self, Snapshot};
use crate::rt;

/// What the local API's `/manifests` reports: each manifest file and its errors.
pub(super) type Report = config::file::Report;

pub(super) struct FileSource {
    #[allow(dead_code, reason = "held: dropping it stops the source")]
    pub task: Option<rt::Task<()>>,
    pub report: Report,
}

pub(super) fn start(
    o: &Options,
    src: &Sources,
    parts: &Parts,
    tx: async_channel::Sender<Snapshot>,
) -> FileSource {
    let report = Report::default();
    let task = src.manifests.clone().map(|dir| {
        rt::spawn(config::file::run(
            config::file::FileSourceConfig {
                dir,
                node_name: parts.rm.node().node_name.clone(),
                check_frequency: o.file_check_frequency,
                store: Some(o.root().static_pods()),
            },
            tx,
            report.clone(),
        ))
    });
    FileSource { task, report }
}
