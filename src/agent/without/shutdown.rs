//! A build without graceful node shutdown: a grace period asked for is said to be ignored,
//! once, and nothing runs.

use super::Parts;
use crate::cli::options::Options;
use crate::rt;

pub(super) fn start(o: &Options, _: &Parts) -> Option<rt::Task<()>> {
    if o.shutdown.enabled() {
        log::warn!(
            "shutdownGracePeriod: this picolet was built without the graceful-shutdown feature; \
             pods are not stopped before the machine shuts down"
        );
    }
    None
}
