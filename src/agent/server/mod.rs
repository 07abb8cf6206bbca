//! The local API on `--healthz-port` (none when it is 0), the node API on `--port`, and the
//! Konnectivity agent that carries the node API through a tunnel.

use std::rc::Rc;

#[cfg(feature = "node-api")]
mod node_api;
#[cfg(not(feature = "node-api"))]
#[path = "without/node_api.rs"]
mod node_api;
#[cfg(feature = "konnectivity")]
mod tunnel;
#[cfg(not(feature = "konnectivity"))]
#[path = "without/tunnel.rs"]
mod tunnel;

use super::{Parts, cluster, file_source};
use crate::cli::options::Options;
use crate::{rt, server, stats};

pub(super) fn start(
    o: &Options,
    parts: &Parts,
    #[cfg_attr(
        not(feature = "file-source"),
        expect(unused_variables, reason = "no manifests to report")
    )]
    report: file_source::Report,
    join: Option<&cluster::Join>,
) -> Result<Vec<rt::Task<()>>, String> {
    let root = std::path::Path::new("/");
    let ctx = Rc::new(server::Context {
        host: parts.kubelet.clone(),
        stats: Rc::new(server::StatsContext {
            provider: stats::Provider::new(root, &o.root_dir, parts.counted.clone())
                .with_storage(parts.storage.clone()),
            ops: parts.ops.clone(),
            machine: stats::expose::Machine::read(root),
        }),
        #[cfg(feature = "file-source")]
        report,
    });
    let mut tasks = Vec::new();
    if o.healthz_port != 0 {
        let addr = std::net::SocketAddr::new(o.healthz_bind_address, o.healthz_port);
        let l = server::bind(addr).map_err(|e| e.to_string())?;
        log::info!("local API on http://{addr}");
        tasks.push(rt::spawn(server::serve(l, ctx.clone())));
    }
    let port = o.node_api_port();
    if let Some(port) = port {
        tasks.extend(node_api::start(o, port, parts, ctx, join)?);
    }
    if !o.tunnel.host.is_empty() {
        tasks.extend(tunnel::start(o, port, parts)?);
    }
    Ok(tasks)
}
