//! Graceful node shutdown: logind's delay lock, and the pods stopped in order when the machine
//! shuts down (`nodeshutdown`). Nothing runs when the grace period is zero.

use super::Parts;
use crate::cli::options::Options;
use crate::rt;

pub(super) fn start(o: &Options, parts: &Parts) -> Option<rt::Task<()>> {
    crate::nodeshutdown::manager::start(o, &parts.kubelet)
}
