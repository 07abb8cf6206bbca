//! A build without the node API: `--port` serves nothing.

use crate::agent::{Parts, cluster};
use crate::cli::options::Options;
use crate::rt;

/// `ctx` is the local API's context, which this build may not have.
pub(super) fn start<C>(
    _: &Options,
    _: u16,
    _: &Parts,
    _: C,
    _: Option<&cluster::Join>,
) -> Result<Vec<rt::Task<()>>, String> {
    Ok(Vec::new())
}
