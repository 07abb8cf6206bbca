//! What probes and lifecycle hooks share (upstream's `pkg/probe`): the port a handler names and
//! the one HTTP GET (`http`), used by the prober's httpGet probes and by the runtime manager's
//! httpGet hooks alike. A leaf: it knows neither of them.

pub mod http;
#[cfg(feature = "https-probes")]
mod tls;

use crate::api::{Container, IntOrString};

/// The port a probe or hook names: a number, or the name of one of the container's ports (or
/// a number written as a string, which the kubelet accepts as a last resort).
pub fn resolve_port(port: &IntOrString, c: &Container) -> Result<u16, String> {
    let n = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => match c.ports.iter().find(|p| p.name.as_deref() == Some(name))
        {
            Some(p) => p.container_port,
            None => name
                .parse()
                .map_err(|_| format!("port {name} not found in container {}", c.name))?,
        },
    };
    u16::try_from(n)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("invalid port number: {n}"))
}

/// The HTTP target of an httpGet probe or hook; the host defaults to the pod's IP.
pub fn http_target(
    h: &crate::api::HttpGetAction,
    c: &Container,
    pod_ip: &str,
) -> Result<http::Target, String> {
    let port = resolve_port(&h.port, c)?;
    let host = h
        .host
        .as_deref()
        .filter(|h| !h.is_empty())
        .unwrap_or(pod_ip)
        .to_owned();
    if host.is_empty() {
        return Err("the pod has no IP address yet".into());
    }
    let path = match h.path.as_deref().unwrap_or("") {
        "" => "/".to_owned(),
        p if p.starts_with('/') => p.to_owned(),
        p => format!("/{p}"),
    };
    Ok(http::Target {
        https: h.scheme.as_deref() == Some("HTTPS"),
        host,
        port,
        path,
        headers: h
            .http_headers
            .iter()
            .map(|x| (x.name.clone(), x.value.clone()))
            .collect(),
    })
}

/// A loopback port that refuses connections (tests): a socket bound to it and not listening,
/// which also keeps any other test from taking the port while it is held (a port freed and
/// then dialed could be another test's by then, and answer or reset).
#[cfg(test)]
pub(crate) fn refusing_port() -> (std::os::fd::OwnedFd, u16) {
    held_port(false)
}

/// A loopback socket for tests, `SO_REUSEPORT` when `shared` (a listener of the same user may
/// then bind the same port beside it); port 0 picks a free one.
#[cfg(test)]
pub(crate) fn loopback_socket(port: u16, shared: bool) -> std::os::fd::OwnedFd {
    use nix::sys::socket::{
        AddressFamily, SockFlag, SockType, SockaddrIn, bind, setsockopt, socket, sockopt,
    };
    use std::os::fd::AsRawFd;
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .expect("socket");
    if shared {
        setsockopt(&fd, sockopt::ReuseAddr, &true).expect("SO_REUSEADDR");
        setsockopt(&fd, sockopt::ReusePort, &true).expect("SO_REUSEPORT");
    }
    bind(fd.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, port)).expect("bind 127.0.0.1");
    fd
}

/// [`refusing_port`], shared (`SO_REUSEPORT`) when a test's own listeners are to come and go
/// on the port while it stays held.
#[cfg(test)]
pub(crate) fn held_port(shared: bool) -> (std::os::fd::OwnedFd, u16) {
    use nix::sys::socket::{SockaddrIn, getsockname};
    use std::os::fd::AsRawFd;
    let held = loopback_socket(0, shared);
    let port = getsockname::<SockaddrIn>(held.as_raw_fd())
        .expect("getsockname")
        .port();
    (held, port)
}
