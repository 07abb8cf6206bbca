//! The gRPC health probe: one `grpc.health.v1.Health/Check` call over HTTP/2 without TLS (h2c
//! with prior knowledge), on the same hyper stack the CRI client uses. Messages are encoded with
//! prost; the health service's two messages are small enough to declare here.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use prost::Message;

use super::Outcome;
use crate::rt;

#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}

/// `HealthCheckResponse.ServingStatus`, as upstream names the values.
fn status_name(s: i32) -> &'static str {
    match s {
        0 => "UNKNOWN",
        1 => "SERVING",
        2 => "NOT_SERVING",
        3 => "SERVICE_UNKNOWN",
        _ => "UNKNOWN",
    }
}

const SERVING: i32 = 1;
const UNIMPLEMENTED: u32 = 12;
const DEADLINE_EXCEEDED: u32 = 4;

/// Frames a message as gRPC does: no compression, a 4-byte big-endian length.
fn frame(msg: &impl Message) -> Bytes {
    let len = msg.encoded_len();
    let mut b = BytesMut::with_capacity(5 + len);
    b.put_u8(0);
    b.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    msg.encode(&mut b).ok();
    b.freeze()
}

/// Probes `host:port` for `service`; the caller bounds the time (`timeout_secs` is only
/// told to the server, as `grpc-timeout`, and named in messages).
pub async fn check(host: &str, port: u16, service: &str, timeout_secs: u64) -> Outcome {
    let addr = crate::probe::http::host_port(host, port);
    let stream = match crate::probe::http::dial(host, port).await {
        Ok(s) => s,
        Err(e) => {
            return Outcome::Failure(format!(
                "timeout: failed to connect service {addr:?} within {timeout_secs}s: {e}"
            ));
        }
    };
    let handshake = hyper::client::conn::http2::Builder::new(rt::HyperExecutor)
        .timer(rt::HyperTimer)
        .handshake::<_, Full<Bytes>>(rt::HyperIo(stream))
        .await;
    let (mut sender, conn) = match handshake {
        Ok(x) => x,
        Err(e) => {
            return Outcome::Failure(format!(
                "timeout: failed to connect service {addr:?} within {timeout_secs}s: {e}"
            ));
        }
    };
    let _conn = rt::spawn(async move {
        let _ = conn.await;
    });
    let body = frame(&HealthCheckRequest {
        service: service.to_owned(),
    });
    let req = http::Request::post(format!("http://{addr}/grpc.health.v1.Health/Check"))
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header("te", "trailers")
        .header(
            http::header::USER_AGENT,
            format!("kube-probe/{}", crate::probe::http::KUBE_VERSION),
        )
        .header("grpc-timeout", format!("{timeout_secs}S"))
        .body(Full::new(body));
    let Ok(req) = req else {
        return Outcome::Error(format!("bad gRPC address {addr:?}"));
    };
    let resp = match sender.send_request(req).await {
        Ok(r) => r,
        Err(e) => return Outcome::Failure(format!("error: health rpc probe failed: {e}")),
    };
    // A trailers-only answer carries grpc-status in the headers.
    let head_status = grpc_status(resp.headers());
    let collected = match resp.into_body().collect().await {
        Ok(c) => c,
        Err(e) => return Outcome::Failure(format!("error: health rpc probe failed: {e}")),
    };
    let trailer_status = collected.trailers().and_then(grpc_status);
    let (code, message) = trailer_status.or(head_status).unwrap_or((0, String::new()));
    match code {
        0 => {}
        UNIMPLEMENTED => {
            return Outcome::Failure(format!(
                "this server does not implement the grpc health protocol (grpc.health.v1.Health): {message}"
            ));
        }
        DEADLINE_EXCEEDED => {
            return Outcome::Failure(format!(
                "timeout: health rpc did not complete within {timeout_secs}s"
            ));
        }
        c => {
            return Outcome::Failure(format!(
                "error: health rpc probe failed: rpc error: code = {c} desc = {message}"
            ));
        }
    }
    let mut data = collected.to_bytes();
    if data.len() < 5 {
        return Outcome::Failure("error: health rpc probe failed: empty response".into());
    }
    data.advance(5);
    match HealthCheckResponse::decode(data) {
        Ok(r) if r.status == SERVING => Outcome::Success(String::new()),
        Ok(r) => Outcome::Failure(format!(
            "service unhealthy (responded with {:?})",
            status_name(r.status)
        )),
        Err(e) => Outcome::Failure(format!("error: health rpc probe failed: {e}")),
    }
}

fn grpc_status(h: &http::HeaderMap) -> Option<(u32, String)> {
    let code = h.get("grpc-status")?.to_str().ok()?.parse().ok()?;
    let msg = h
        .get("grpc-message")
        .and_then(|m| m.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    Some((code, msg))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A health server on loopback answering every Check with `status` (or a gRPC error
    /// code when `status` is negative). Returns its port and the task serving it.
    pub(crate) fn serve(status: i32) -> (u16, rt::Task<()>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let l = smol::Async::new(l).unwrap();
        let task = rt::spawn(async move {
            loop {
                let Ok((s, _)) = l.accept().await else { return };
                rt::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: http::Request<hyper::body::Incoming>| async move {
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|c| c.to_bytes())
                                .unwrap_or_default();
                            let asked =
                                HealthCheckRequest::decode(body.slice(5..)).unwrap_or_default();
                            let mut trailers = http::HeaderMap::new();
                            let data = if status < 0 {
                                trailers
                                    .insert("grpc-status", (-status).to_string().parse().unwrap());
                                Bytes::new()
                            } else {
                                trailers.insert("grpc-status", "0".parse().unwrap());
                                let s = if asked.service == "missing" {
                                    3
                                } else {
                                    status
                                };
                                frame(&HealthCheckResponse { status: s })
                            };
                            let body =
                                http_body_util::StreamBody::new(futures_lite::stream::iter(vec![
                                    Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(
                                        data,
                                    )),
                                    Ok(hyper::body::Frame::trailers(trailers)),
                                ]));
                            Ok::<_, std::convert::Infallible>(
                                http::Response::builder()
                                    .header("content-type", "application/grpc")
                                    .body(body)
                                    .unwrap(),
                            )
                        },
                    );
                    let _ = hyper::server::conn::http2::Builder::new(rt::HyperExecutor)
                        .serve_connection(rt::HyperIo(s), svc)
                        .await;
                })
                .detach();
            }
        });
        (port, task)
    }

    #[test]
    fn serving_not_serving_unimplemented_and_refused() {
        rt::block_on(async {
            let (port, _t) = serve(SERVING);
            assert_eq!(
                check("127.0.0.1", port, "", 1).await,
                Outcome::Success(String::new())
            );
            match check("127.0.0.1", port, "missing", 1).await {
                Outcome::Failure(m) => {
                    assert_eq!(m, "service unhealthy (responded with \"SERVICE_UNKNOWN\")")
                }
                o => panic!("{o:?}"),
            }
            let (port, _t2) = serve(2);
            assert!(
                matches!(check("127.0.0.1", port, "", 1).await, Outcome::Failure(m) if m.contains("NOT_SERVING"))
            );
            let (port, _t3) = serve(-12);
            assert!(
                matches!(check("127.0.0.1", port, "", 1).await, Outcome::Failure(m) if m.contains("does not implement"))
            );
            drop(_t3);
            let (_held, free) = crate::probe::refusing_port();
            assert!(
                matches!(check("127.0.0.1", free, "", 1).await, Outcome::Failure(m) if m.contains("connection refused"))
            );
        });
    }
}
