//! A build without the Konnectivity agent: `--proxy-server-host` is refused.

use crate::agent::Parts;
use crate::cli::options::Options;
use crate::rt;

pub(super) fn start(
    _: &Options,
    _: Option<u16>,
    _: &Parts,
) -> Result<Option<rt::Task<()>>, String> {
    Err("--proxy-server-host: this picolet was built without the konnectivity feature".into())
}
