//! HTTP/2 over a unix socket, as a tower service that tonic's generated clients call.
//!
//! One connection is shared by every call (HTTP/2 multiplexes them). When the runtime restarts,
//! the connection closes and the next call dials again, so picolet reconnects by itself without
//! any background task.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::client::conn::http2::{self, SendRequest};

use crate::rt;

type Body = tonic::body::Body;
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A cloneable handle to one runtime socket.
#[derive(Clone)]
pub struct UnixChannel {
    inner: Rc<Inner>,
}

struct Inner {
    path: PathBuf,
    connect_timeout: Duration,
    sender: RefCell<Option<SendRequest<Body>>>,
    dialing: smol::lock::Mutex<()>,
}

impl std::fmt::Debug for UnixChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnixChannel")
            .field("path", &self.inner.path)
            .finish()
    }
}

impl UnixChannel {
    /// A channel that dials lazily, on its first call.
    pub fn new(path: &Path, connect_timeout: Duration) -> Self {
        UnixChannel {
            inner: Rc::new(Inner {
                path: path.to_owned(),
                connect_timeout,
                sender: RefCell::new(None),
                dialing: smol::lock::Mutex::new(()),
            }),
        }
    }

    fn live_sender(&self) -> Option<SendRequest<Body>> {
        let s = self.inner.sender.borrow();
        s.as_ref().filter(|s| !s.is_closed()).cloned()
    }

    /// Returns the live connection, dialing a new one when there is none.
    async fn sender(&self) -> Result<SendRequest<Body>, BoxError> {
        if let Some(s) = self.live_sender() {
            return Ok(s);
        }
        // Only one call dials; the others wait and then share its connection.
        let _guard = self.inner.dialing.lock().await;
        if let Some(s) = self.live_sender() {
            return Ok(s);
        }
        let s = rt::timeout(self.inner.connect_timeout, self.dial())
            .await
            .map_err(|e| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connecting to {}: {e}", self.inner.path.display()),
                )
            })??;
        *self.inner.sender.borrow_mut() = Some(s.clone());
        Ok(s)
    }

    async fn dial(&self) -> Result<SendRequest<Body>, BoxError> {
        let path = &self.inner.path;
        let stream = smol::Async::<UnixStream>::connect(path)
            .await
            .map_err(|e| {
                io::Error::new(e.kind(), format!("connecting to {}: {e}", path.display()))
            })?;
        let (sender, conn) = http2::Builder::new(rt::HyperExecutor)
            .timer(rt::HyperTimer)
            .handshake(rt::HyperIo(stream))
            .await?;
        let shown = path.display().to_string();
        rt::spawn(async move {
            if let Err(e) = conn.await {
                log::debug!("runtime connection {shown} closed: {e}");
            }
        })
        .detach();
        log::debug!("connected to runtime socket {}", path.display());
        Ok(sender)
    }

    /// Drops the current connection so the next call dials again.
    pub fn reset(&self) {
        self.inner.sender.borrow_mut().take();
    }
}

impl tower_service::Service<http::Request<Body>> for UnixChannel {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>>>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.send(req).await.map_err(|e| this.unavailable(&e)) })
    }
}

impl UnixChannel {
    /// Sends one request. A request the connection never sent (it was closing, as when the
    /// runtime just restarted) is sent once more on a fresh connection.
    async fn send(
        &self,
        req: http::Request<Body>,
    ) -> Result<http::Response<hyper::body::Incoming>, BoxError> {
        let mut sender = self.sender().await?;
        if sender.ready().await.is_err() {
            self.reset();
            sender = self.sender().await?;
            sender.ready().await?;
        }
        match sender.try_send_request(req).await {
            Ok(r) => Ok(r),
            Err(mut e) => {
                self.reset();
                let Some(req) = e.take_message() else {
                    return Err(e.into_error().into());
                };
                let mut sender = self.sender().await?;
                sender.ready().await?;
                Ok(sender
                    .send_request(req)
                    .await
                    .inspect_err(|_| self.reset())?)
            }
        }
    }

    /// Transport failures become UNAVAILABLE, so callers can tell "runtime not reachable" from
    /// an answer the runtime gave.
    fn unavailable(&self, e: &BoxError) -> BoxError {
        Box::new(tonic::Status::unavailable(format!(
            "runtime at {} unreachable: {e}",
            self.inner.path.display()
        )))
    }
}
