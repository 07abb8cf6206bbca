//! A client of containerd's own content, images and leases services (subsets generated from
//! `proto/containerd/`), over the runtime's socket, in the CRI's namespace `k8s.io`: what
//! importing an image archive needs and the CRI cannot do.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use crate::cri::channel::UnixChannel;
use crate::rt;

#[allow(clippy::all, clippy::pedantic, missing_docs, reason = "generated code")]
pub mod content {
    tonic::include_proto!("containerd.services.content.v1");
}
#[allow(clippy::all, clippy::pedantic, missing_docs, reason = "generated code")]
pub mod images {
    tonic::include_proto!("containerd.services.images.v1");
}
#[allow(clippy::all, clippy::pedantic, missing_docs, reason = "generated code")]
pub mod leases {
    tonic::include_proto!("containerd.services.leases.v1");
}

use content::content_client::ContentClient;
use images::images_client::ImagesClient;
use leases::leases_client::LeasesClient;

/// The namespace containerd's CRI keeps its images in.
pub const CRI_NAMESPACE: &str = "k8s.io";
/// gRPC metadata naming the namespace of a call (containerd's `namespaces.GRPCHeader`).
const NAMESPACE_HEADER: &str = "containerd-namespace";
/// gRPC metadata naming the lease a call's new objects belong to (`leases.GRPCHeader`).
const LEASE_HEADER: &str = "containerd-lease";
/// The label containerd's CRI reads as `Image.pinned` (`io.cri-containerd.pinned`), and its value.
pub const PINNED_LABEL: &str = "io.cri-containerd.pinned";
pub const PINNED_VALUE: &str = "pinned";
/// The label the CRI puts on images it manages (`io.cri-containerd.image=managed`).
pub const MANAGED_LABEL: &str = "io.cri-containerd.image";
pub const MANAGED_VALUE: &str = "managed";
/// Bytes per Write message.
const CHUNK: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("containerd {method}: {status}")]
    Status {
        method: &'static str,
        #[source]
        status: tonic::Status,
    },
    #[error("containerd {method}: no answer within {deadline:?}")]
    Timeout {
        method: &'static str,
        deadline: Duration,
    },
    #[error("containerd Write {digest}: {reason}")]
    Write { digest: String, reason: String },
}

impl Error {
    /// True when containerd is not reachable or did not answer in time.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Timeout { .. } => true,
            Error::Status { status, .. } => matches!(
                status.code(),
                tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
            ),
            Error::Write { .. } => false,
        }
    }

    fn code(&self) -> Option<tonic::Code> {
        match self {
            Error::Status { status, .. } => Some(status.code()),
            _ => None,
        }
    }
}

/// The content, images and leases services on one socket.
#[derive(Clone, Debug)]
pub struct Client {
    content: ContentClient<UnixChannel>,
    images: ImagesClient<UnixChannel>,
    leases: LeasesClient<UnixChannel>,
    deadline: Duration,
}

fn origin() -> http::Uri {
    http::Uri::from_static("http://localhost")
}

async fn call<T>(
    method: &'static str,
    deadline: Duration,
    fut: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, Error> {
    match rt::timeout(deadline, fut).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(status)) => Err(Error::Status { method, status }),
        Err(_) => Err(Error::Timeout { method, deadline }),
    }
}

/// A blob to store: its descriptor, its bytes, and the labels it is committed with.
pub struct Upload<'a> {
    pub digest: &'a str,
    pub size: u64,
    pub labels: &'a std::collections::BTreeMap<String, String>,
    pub data: Box<dyn Read + Send>,
}

impl Client {
    /// A client of containerd at `socket`; `deadline` bounds each call (a Write: per blob).
    pub fn new(socket: &Path, deadline: Duration) -> Client {
        let chan = UnixChannel::new(socket, Duration::from_secs(5));
        Client {
            content: ContentClient::with_origin(chan.clone(), origin()),
            images: ImagesClient::with_origin(chan.clone(), origin()),
            leases: LeasesClient::with_origin(chan, origin()),
            deadline,
        }
    }

    fn request<T>(&self, msg: T, lease: Option<&str>) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        r.set_timeout(self.deadline);
        let md = r.metadata_mut();
        md.insert(
            NAMESPACE_HEADER,
            tonic::metadata::MetadataValue::from_static(CRI_NAMESPACE),
        );
        if let Some(l) = lease.and_then(|l| l.parse().ok()) {
            md.insert(LEASE_HEADER, l);
        }
        r
    }

    /// Creates a lease that expires by itself after `expire` (containerd's `gc.expire` label),
    /// so a crash mid-import leaves nothing held for long.
    pub async fn create_lease(&self, id: &str, expire: Duration) -> Result<(), Error> {
        let until = crate::api::time::rfc3339(
            crate::api::time::unix_nanos_now()
                .saturating_add(i64::try_from(expire.as_nanos()).unwrap_or(i64::MAX)),
        );
        let req = leases::CreateRequest {
            id: id.to_owned(),
            labels: HashMap::from([("containerd.io/gc.expire".to_owned(), until)]),
        };
        let mut c = self.leases.clone();
        call(
            "Leases.Create",
            self.deadline,
            c.create(self.request(req, None)),
        )
        .await?;
        Ok(())
    }

    pub async fn delete_lease(&self, id: &str) -> Result<(), Error> {
        let req = leases::DeleteRequest {
            id: id.to_owned(),
            sync: false,
        };
        let mut c = self.leases.clone();
        call(
            "Leases.Delete",
            self.deadline,
            c.delete(self.request(req, None)),
        )
        .await?;
        Ok(())
    }

    /// Writes a blob under `lease`, checked by containerd against its digest and size and
    /// committed with its labels. Returns false when containerd had it already (it then adds
    /// the blob to the lease and refuses the write before any data is stored).
    pub async fn write_blob(&self, up: Upload<'_>, lease: &str) -> Result<bool, Error> {
        let digest = up.digest.to_owned();
        let size = i64::try_from(up.size).unwrap_or(i64::MAX);
        let labels: HashMap<String, String> = up
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let reference = format!("picolet-preload-{}", digest.replace(':', "-"));
        // The messages are read from the archive on the blocking pool, one chunk at a time.
        struct State {
            data: Option<Box<dyn Read + Send>>,
            offset: i64,
            first: bool,
        }
        let state = State {
            data: Some(up.data),
            offset: 0,
            first: true,
        };
        let (d2, r2) = (digest.clone(), reference.clone());
        let messages = futures_lite::stream::unfold(state, move |mut st| {
            let (digest, reference, labels) = (d2.clone(), r2.clone(), labels.clone());
            async move {
                let mut data = st.data.take()?;
                let (data, chunk) = rt::unblock(move || {
                    let mut buf = vec![0u8; CHUNK];
                    let mut n = 0;
                    while n < buf.len() {
                        match data.read(&mut buf[n..]) {
                            Ok(0) => break,
                            Ok(k) => n += k,
                            Err(e) => return (data, Err(e)),
                        }
                    }
                    buf.truncate(n);
                    (data, Ok(buf))
                })
                .await;
                // A read error ends the stream without a commit: containerd then refuses it.
                let chunk = chunk.ok()?;
                let len = i64::try_from(chunk.len()).unwrap_or(i64::MAX);
                let last = st.offset + len >= size;
                let msg = content::WriteContentRequest {
                    action: if last {
                        content::WriteAction::Commit as i32
                    } else {
                        content::WriteAction::Write as i32
                    },
                    r#ref: if st.first { reference } else { String::new() },
                    total: size,
                    expected: digest,
                    offset: st.offset,
                    data: chunk,
                    labels: if last { labels } else { HashMap::new() },
                };
                st.first = false;
                st.offset += len;
                if !last {
                    st.data = Some(data);
                }
                Some((msg, st))
            }
        });
        let mut req = tonic::Request::new(messages);
        req.set_timeout(self.deadline);
        let md = req.metadata_mut();
        md.insert(
            NAMESPACE_HEADER,
            tonic::metadata::MetadataValue::from_static(CRI_NAMESPACE),
        );
        if let Ok(l) = lease.parse() {
            md.insert(LEASE_HEADER, l);
        }
        let mut c = self.content.clone();
        let stream = match call("Content.Write", self.deadline, c.write(req)).await {
            Ok(s) => s,
            Err(e) if e.code() == Some(tonic::Code::AlreadyExists) => return Ok(false),
            Err(e) => return Err(e),
        };
        let mut stream = stream;
        let mut committed = None;
        loop {
            match rt::timeout(self.deadline, stream.message()).await {
                Ok(Ok(Some(m))) => {
                    if m.action == content::WriteAction::Commit as i32 {
                        committed = Some(m.digest);
                    }
                }
                Ok(Ok(None)) => break,
                Ok(Err(status)) if status.code() == tonic::Code::AlreadyExists => {
                    return Ok(false);
                }
                Ok(Err(status)) => {
                    return Err(Error::Status {
                        method: "Content.Write",
                        status,
                    });
                }
                Err(_) => {
                    return Err(Error::Timeout {
                        method: "Content.Write",
                        deadline: self.deadline,
                    });
                }
            }
        }
        match committed {
            Some(d) if d == digest => Ok(true),
            Some(d) => Err(Error::Write {
                digest,
                reason: format!("containerd committed {d}"),
            }),
            None => Err(Error::Write {
                digest,
                reason: "the stream ended without a commit (the archive could not be read)".into(),
            }),
        }
    }

    /// The image record `name`, if containerd has it.
    pub async fn image(&self, name: &str) -> Result<Option<images::Image>, Error> {
        let mut c = self.images.clone();
        let get = images::GetImageRequest {
            name: name.to_owned(),
        };
        match call("Images.Get", self.deadline, c.get(self.request(get, None))).await {
            Ok(r) => Ok(r.image),
            Err(e) if e.code() == Some(tonic::Code::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Adds `labels` to the existing image record `name` (the CRI's pin on an image it
    /// pulled). Returns false when the record had them already; an error NotFound when there
    /// is no such record.
    pub async fn label_image(&self, name: &str, labels: &[(&str, &str)]) -> Result<bool, Error> {
        let Some(mut image) = self.image(name).await? else {
            return Err(Error::Status {
                method: "Images.Get",
                status: tonic::Status::not_found(format!("image {name:?} not found")),
            });
        };
        if labels
            .iter()
            .all(|(k, v)| image.labels.get(*k).is_some_and(|x| x == v))
        {
            return Ok(false);
        }
        for (k, v) in labels {
            image.labels.insert((*k).to_owned(), (*v).to_owned());
        }
        let paths = labels.iter().map(|(k, _)| format!("labels.{k}")).collect();
        let req = images::UpdateImageRequest {
            image: Some(image),
            update_mask: Some(images::FieldMask { paths }),
        };
        let mut c = self.images.clone();
        call(
            "Images.Update",
            self.deadline,
            c.update(self.request(req, None)),
        )
        .await?;
        Ok(true)
    }

    /// Creates or updates the image record `name` to point at `target`, with `labels` added
    /// to those it has. Returns true when the record changed.
    pub async fn put_image(
        &self,
        name: &str,
        target: images::Descriptor,
        labels: &[(&str, &str)],
        lease: &str,
    ) -> Result<bool, Error> {
        let mut c = self.images.clone();
        let get = images::GetImageRequest {
            name: name.to_owned(),
        };
        let existing = match call(
            "Images.Get",
            self.deadline,
            c.get(self.request(get, Some(lease))),
        )
        .await
        {
            Ok(r) => r.image,
            Err(e) if e.code() == Some(tonic::Code::NotFound) => None,
            Err(e) => return Err(e),
        };
        let mut image = existing.clone().unwrap_or_default();
        image.name = name.to_owned();
        for (k, v) in labels {
            image.labels.insert((*k).to_owned(), (*v).to_owned());
        }
        let same_target = image
            .target
            .as_ref()
            .is_some_and(|t| t.digest == target.digest && t.media_type == target.media_type);
        image.target = Some(target);
        if let Some(old) = &existing
            && same_target
            && labels
                .iter()
                .all(|(k, v)| old.labels.get(*k).is_some_and(|x| x == v))
        {
            return Ok(false);
        }
        if existing.is_none() {
            let req = images::CreateImageRequest {
                image: Some(image.clone()),
            };
            match call(
                "Images.Create",
                self.deadline,
                c.create(self.request(req, Some(lease))),
            )
            .await
            {
                Ok(_) => return Ok(true),
                // Created meanwhile by someone else: updated below.
                Err(e) if e.code() == Some(tonic::Code::AlreadyExists) => {}
                Err(e) => return Err(e),
            }
        }
        let mut paths = vec!["target".to_owned()];
        paths.extend(labels.iter().map(|(k, _)| format!("labels.{k}")));
        let req = images::UpdateImageRequest {
            image: Some(image),
            update_mask: Some(images::FieldMask { paths }),
        };
        call(
            "Images.Update",
            self.deadline,
            c.update(self.request(req, Some(lease))),
        )
        .await?;
        Ok(true)
    }
}
