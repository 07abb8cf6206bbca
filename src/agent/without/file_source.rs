//! A build without the file source: `--pod-manifest-path` is refused when the sources are
//! opened, so there is nothing to start.

use super::{Parts, sources::Sources};
use crate::cli::options::Options;
use crate::config::Snapshot;

pub(super) type Report = ();

pub(super) struct FileSource {
    pub report: Report,
}

pub(super) fn start(
    _: &Options,
    _: &Sources,
    _: &Parts,
    _: async_channel::Sender<Snapshot>,
) -> FileSource {
    FileSource { report: () }
}
