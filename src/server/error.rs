//! What a request of either API can fail with, and the one place a failure becomes an HTTP
//! answer: the status and a `text/plain` body of the message and a newline, as the kubelet
//! answers through `http.Error` and `WriteErrorString`.

use hyper::{Response, StatusCode};

use super::Body;

/// A cause kept for the log (a runtime's or an I/O error), not sent to the client.
pub type Source = Box<dyn std::error::Error + 'static>;

/// A request's failure, in the kubelet's words.
#[derive(Debug, thiserror::Error)]
#[cfg_attr(
    not(feature = "node-api"),
    expect(dead_code, reason = "the node API's refusals and its proxy's failures")
)]
pub enum Error {
    /// 400: a path or query the endpoint cannot use (`you must specify at least 1 of stdin,
    /// stdout, stderr`), or a log that is not there yet.
    #[error("{0}")]
    BadRequest(String),
    /// 401: no credentials that name a user.
    #[error("Unauthorized")]
    Unauthorized,
    /// 403: the user may not do this (`Forbidden (user=..., verb=..., ...)`).
    #[error("{0}")]
    Forbidden(String),
    /// 404: no such path, pod or container (`pod does not exist`).
    #[error("{0}")]
    NotFound(String),
    /// 405: the path is served, not with this method; `allow` lists the methods it takes.
    #[error("Method Not Allowed")]
    MethodNotAllowed { allow: &'static [&'static str] },
    /// 422: a query whose values contradict each other (the log options' validation).
    #[error("{0}")]
    Invalid(String),
    /// 500: the agent or the runtime failed; `source` is logged.
    #[error("{message}")]
    Internal {
        message: String,
        #[source]
        source: Option<Source>,
    },
    /// 502: the runtime's streaming server could not be reached or answered nonsense.
    #[error("{0}")]
    BadGateway(String),
    /// 504: the runtime's streaming server did not answer in time.
    #[error("{0}")]
    GatewayTimeout(String),
}

/// The text of a path nothing serves, as Go's `http.NotFound` writes it.
pub const NOT_FOUND: &str = "404 page not found";

impl Error {
    /// A 404 for a path nothing serves.
    pub fn no_route() -> Error {
        Error::NotFound(NOT_FOUND.into())
    }

    /// A 500 of a message alone.
    pub fn internal(message: impl Into<String>) -> Error {
        Error::Internal {
            message: message.into(),
            source: None,
        }
    }

    /// A 500 whose message is `source`'s text, kept as its cause.
    pub fn from_source(source: impl std::error::Error + 'static) -> Error {
        Error::Internal {
            message: source.to_string(),
            source: Some(Box::new(source)),
        }
    }

    /// The status a failure answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Error::BadRequest(_) => StatusCode::BAD_REQUEST,
            Error::Unauthorized => StatusCode::UNAUTHORIZED,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Error::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Error::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            Error::BadGateway(_) => StatusCode::BAD_GATEWAY,
            Error::GatewayTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// The answer: the status, the message and a newline as plain text, and for a 405 the
    /// `Allow` header. A 500's cause goes to the log.
    pub fn response(&self) -> Response<Body> {
        if let Error::Internal {
            message,
            source: Some(s),
        } = self
        {
            log::warn!("server: {message}: {s:?}");
        }
        let mut b = Response::builder()
            .status(self.status())
            .header("content-type", "text/plain; charset=utf-8");
        if let Error::MethodNotAllowed { allow } = self {
            b = b.header("allow", allow.join(", "));
        }
        b.body(http_body_util::Full::new(format!("{self}\n").into()))
            .unwrap_or_default()
    }
}

#[cfg(feature = "node-api")]
impl From<crate::cri::CriError> for Error {
    fn from(e: crate::cri::CriError) -> Error {
        Error::from_source(e)
    }
}

impl From<crate::logs::read::QueryError> for Error {
    /// The log options' refusals: 422 when they contradict each other, else 400.
    fn from(e: crate::logs::read::QueryError) -> Error {
        if e.code == 422 {
            Error::Invalid(e.message)
        } else {
            Error::BadRequest(e.message)
        }
    }
}
