//! A build without the apiserver client: `--kubeconfig` is refused, and nothing is restored or
//! started.

use super::{Parts, Restored};
use crate::cli::options::Options;
use crate::config::Snapshot;
use crate::rt;

/// Never made in this build.
pub(super) enum Join {}

pub(super) fn connect(o: &Options) -> Result<Option<Join>, String> {
    if o.kubeconfig.is_some() {
        return Err("--kubeconfig: this picolet was built without the apiserver client".into());
    }
    Ok(None)
}

pub(super) fn restore(_: &Options, _: Option<&Join>) -> Restored {
    Restored {
        objects: crate::objects::Store::default(),
        services: None,
    }
}

pub(super) fn start(
    _: &Options,
    _: Option<&Join>,
    _: &Parts,
    _: &crate::node::Facts,
    _: Restored,
    _: async_channel::Sender<Snapshot>,
) -> Result<Vec<rt::Task<()>>, String> {
    Ok(Vec::new())
}
