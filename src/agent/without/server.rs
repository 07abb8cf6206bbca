//! A build without the local API: no server, and so no node API nor tunnel.

use super::{Parts, cluster, file_source};
use crate::cli::options::Options;
use crate::rt;

pub(super) fn start(
    _: &Options,
    _: &Parts,
    _: file_source::Report,
    _: Option<&cluster::Join>,
) -> Result<Vec<rt::Task<()>>, String> {
    Ok(Vec::new())
}
