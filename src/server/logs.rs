//! `/containerLogs/{namespace}/{pod}/{container}?...`: a container's log, streamed (see
//! [`crate::logs`]).

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::{Response, StatusCode};

use super::{Host, Streamed, reply};
use crate::rt;

/// Answers `/containerLogs/{namespace}/{pod}/{container}?...` (`path` is what follows the
/// prefix).
pub async fn container_logs(k: &dyn Host, path: &str, query: &str) -> Response<Streamed> {
    let text = |code: u16, msg: String| {
        let code = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
        reply(code, "text/plain", format!("{msg}\n")).map(BodyExt::boxed_unsync)
    };
    let parts: Vec<&str> = path.split('/').collect();
    let [namespace, pod, container] = parts.as_slice() else {
        return text(
            400,
            "expected /containerLogs/{namespace}/{pod}/{container}".into(),
        );
    };
    if namespace.is_empty() || pod.is_empty() || container.is_empty() {
        return text(400, "missing namespace, pod or container name".into());
    }
    let opts = match crate::logs::read::parse_query(query, rt::now_nanos()) {
        Ok(o) => o,
        Err(e) => return text(e.code, e.message),
    };
    let at = match k.locate_log(namespace, pod, container, opts.previous) {
        Ok(a) => a,
        Err((code, msg)) => return text(code, msg),
    };
    let (p, o) = (at.path.clone(), opts.clone());
    let reader = match rt::unblock(move || crate::logs::read::Reader::new(&p, &o)).await {
        Ok(r) => r,
        Err(e) => return text(400, e.to_string()),
    };
    let (tx, rx) = async_channel::bounded::<Bytes>(4);
    rt::spawn(k.stream_log(at, reader, tx)).detach();
    let frames = futures_lite::StreamExt::map(rx, |b| {
        Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(b))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/plain")
        .body(StreamBody::new(frames).boxed_unsync())
        .unwrap_or_default()
}
