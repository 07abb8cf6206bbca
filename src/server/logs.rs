//! `/containerLogs/{namespace}/{pod}/{container}?...`: a container's log, streamed (see
//! [`crate::logs`]).
//!
//! Each chunk of a log is flushed on its own, as the kubelet's flushing writer does, so the
//! body's end never leaves in the same write (and TLS record) as its last chunk. That matters to
//! the apiserver's WebSocket relay of `pods/log`: it drops the bytes of a read that also returns
//! the end of the body, and Go's chunked reader returns both at once when the final chunk is
//! already buffered, so a short log sent in one piece with its end reached the client empty.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_lite::Stream;
use http_body_util::{BodyExt, StreamBody};
use hyper::{Response, StatusCode};

use super::{Error, Host, Streamed};
use crate::rt;

/// Answers `/containerLogs/{namespace}/{pod}/{container}?...` (`path` is what follows the
/// prefix).
pub async fn container_logs(
    k: &dyn Host,
    path: &str,
    query: &str,
) -> Result<Response<Streamed>, Error> {
    let parts: Vec<&str> = path.split('/').collect();
    let [namespace, pod, container] = parts.as_slice() else {
        return Err(Error::BadRequest(
            "expected /containerLogs/{namespace}/{pod}/{container}".into(),
        ));
    };
    if namespace.is_empty() || pod.is_empty() || container.is_empty() {
        return Err(Error::BadRequest(
            "missing namespace, pod or container name".into(),
        ));
    }
    let opts = crate::logs::read::parse_query(query, rt::now_nanos())?;
    let at = k.locate_log(namespace, pod, container, opts.previous)?;
    let (p, o) = (at.path.clone(), opts.clone());
    let reader = rt::unblock(move || crate::logs::read::Reader::new(&p, &o))
        .await
        .map_err(|e| Error::BadRequest(e.to_string()))?;
    let (tx, rx) = async_channel::bounded::<Bytes>(4);
    rt::spawn(k.stream_log(at, reader, tx)).detach();
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/plain")
        .body(log_body(rx))
        .unwrap_or_default())
}

/// The response body of a log whose chunks arrive on `rx`, each flushed before the next chunk
/// or the end (see the module's note).
fn log_body(rx: async_channel::Receiver<Bytes>) -> Streamed {
    let frames = futures_lite::StreamExt::map(FlushEach::new(rx), |b| {
        Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(b))
    });
    StreamBody::new(frames).boxed_unsync()
}

/// A stream that, after each item, is pending for one turn (waking itself at once): hyper's
/// connection flushes what it has written whenever the body is pending, so every item goes out
/// in a write of its own, apart from the next one and from the end of the body.
struct FlushEach<S> {
    inner: Pin<Box<S>>,
    just_yielded: bool,
}

impl<S> FlushEach<S> {
    fn new(inner: S) -> FlushEach<S> {
        FlushEach {
            inner: Box::pin(inner),
            just_yielded: false,
        }
    }
}

impl<S: Stream> Stream for FlushEach<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        if std::mem::take(&mut self.just_yielded) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let next = self.inner.as_mut().poll_next(cx);
        self.just_yielded = matches!(next, Poll::Ready(Some(_)));
        next
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::future::Future;
    use std::rc::Rc;

    use super::*;

    /// A connection for hyper: the request to read, then nothing more (pending); every write
    /// recorded apart.
    struct Recorder {
        request: Option<&'static [u8]>,
        writes: Rc<RefCell<Vec<Vec<u8>>>>,
    }

    impl hyper::rt::Read for Recorder {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            mut buf: hyper::rt::ReadBufCursor<'_>,
        ) -> Poll<std::io::Result<()>> {
            match self.request.take() {
                Some(r) => {
                    buf.put_slice(r);
                    Poll::Ready(Ok(()))
                }
                None => Poll::Pending,
            }
        }
    }

    impl hyper::rt::Write for Recorder {
        fn poll_write(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.writes.borrow_mut().push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// The writes hyper makes answering one request with a log whose chunks are all there and
    /// whose end has come before the response is written (a short log read in one go).
    fn writes_of(chunks: &[&'static str]) -> Vec<String> {
        let (tx, rx) = async_channel::bounded::<Bytes>(8);
        for c in chunks {
            tx.try_send(Bytes::from_static(c.as_bytes())).unwrap();
        }
        drop(tx);
        let body = RefCell::new(Some(log_body(rx)));
        let writes = Rc::new(RefCell::new(Vec::new()));
        let io = Recorder {
            request: Some(b"GET /containerLogs/ns/pod/main HTTP/1.1\r\nHost: node\r\n\r\n"),
            writes: writes.clone(),
        };
        let svc = hyper::service::service_fn(move |_req| {
            let b = body.borrow_mut().take().expect("one request");
            async move { Ok::<_, std::convert::Infallible>(Response::new(b)) }
        });
        let mut conn =
            std::pin::pin!(hyper::server::conn::http1::Builder::new().serve_connection(io, svc));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        // Polled until the last chunk's end (`0\r\n\r\n`) is written; the connection then
        // waits for the next request.
        for _ in 0..100 {
            let ended = writes.borrow().iter().any(|w| w.ends_with(b"0\r\n\r\n"));
            if ended {
                break;
            }
            assert!(
                conn.as_mut().poll(&mut cx).is_pending(),
                "the connection ended"
            );
        }
        let w = writes.borrow();
        w.iter()
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect()
    }

    #[test]
    fn a_logs_end_is_written_apart_from_its_last_chunk() {
        let w = writes_of(&["container is alive\n"]);
        let data = w
            .iter()
            .position(|w| w.contains("container is alive\n"))
            .unwrap_or_else(|| panic!("no data written: {w:?}"));
        let end = w
            .iter()
            .position(|w| w.ends_with("0\r\n\r\n"))
            .unwrap_or_else(|| panic!("no end written: {w:?}"));
        assert!(data < end, "{w:?}");
        assert_eq!(w[end], "0\r\n\r\n", "the end shares a write: {w:?}");
        // Each chunk on its own, in order (the first with the head).
        let w = writes_of(&["one\n", "two\n", "three\n"]);
        assert!(
            w[0].starts_with("HTTP/1.1 200 OK\r\n") && w[0].ends_with("\r\n\r\n4\r\none\n\r\n"),
            "{w:?}"
        );
        assert_eq!(
            w[1..],
            ["4\r\ntwo\n\r\n", "6\r\nthree\n\r\n", "0\r\n\r\n"],
            "{w:?}"
        );
    }
}
