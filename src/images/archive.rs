//! Image archives read from a file: OCI image layouts (`oci-layout`, `index.json`,
//! `blobs/<alg>/<hex>`) and `docker save` archives (`manifest.json`), as plain tars, gzip or
//! zstd compressed (zstd with the `zstd` feature, on by default). Pure of the runtime: [`read`] checks every blob the node's platform needs against
//! its digest and size, and yields the images to import, each a manifest with the names it is
//! known by. A truncated or corrupt archive is refused whole, naming the file and the reason.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::sha256::Sha256;

pub const MEDIA_OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MEDIA_OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const MEDIA_OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const MEDIA_OCI_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
pub const MEDIA_OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const MEDIA_DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const MEDIA_DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// The annotation containerd gives an image's full name in an index.
pub const ANNOTATION_CONTAINERD_NAME: &str = "io.containerd.image.name";
/// The OCI annotation for a reference name (a full name, or only a tag).
pub const ANNOTATION_REF_NAME: &str = "org.opencontainers.image.ref.name";

/// Metadata documents (index, manifests, configs, `manifest.json`) are read into memory; one
/// larger than this is refused rather than trusted.
const MAX_DOCUMENT: u64 = 4 << 20;
/// Indexes nested deeper than this are refused.
const MAX_DEPTH: usize = 4;

/// A damaged, truncated or unusable archive: the file and the reason.
#[derive(Debug, thiserror::Error)]
#[error("image archive {}: {reason}", file.display())]
pub struct ArchiveError {
    pub file: PathBuf,
    pub reason: String,
}

/// The platform images are chosen for: GOOS, GOARCH and the variant (`v7` for 32-bit ARM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    pub os: String,
    pub arch: String,
    pub variant: String,
}

impl Platform {
    /// This build's platform, as the node reports `kubernetes.io/arch`.
    pub fn node() -> Platform {
        let arch = crate::node::goarch();
        Platform {
            os: "linux".into(),
            arch: arch.into(),
            variant: if arch == "arm" {
                "v7".into()
            } else {
                String::new()
            },
        }
    }

    fn matches(&self, p: &PlatformJson) -> bool {
        if p.os != self.os || p.architecture != self.arch {
            return false;
        }
        let want = self.variant.as_str();
        let have = p.variant.as_deref().unwrap_or("");
        // arm64 images say v8 or nothing; for arm, an unspecified variant runs anywhere.
        match self.arch.as_str() {
            "arm64" => have.is_empty() || have == "v8",
            "arm" => have.is_empty() || have <= want,
            _ => have.is_empty() || have == want,
        }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.arch)?;
        if !self.variant.is_empty() {
            write!(f, "/{}", self.variant)?;
        }
        Ok(())
    }
}

/// A content descriptor: what containerd stores a blob under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
}

/// Where a blob's bytes are: an entry of the (decompressed) tar, or made here (the manifest of
/// a `docker save` image, which has none of its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Entry { offset: u64 },
    Bytes(Vec<u8>),
}

/// A blob to import, checked against its digest.
#[derive(Debug, Clone)]
pub struct Blob {
    pub desc: Descriptor,
    pub source: Source,
    /// Labels for containerd's garbage collector: a manifest names its config and layers
    /// (`containerd.io/gc.ref.content.*`), so they live as long as it does.
    pub labels: BTreeMap<String, String>,
}

/// One image of an archive: the names it goes under and its manifest for the node's platform.
#[derive(Debug, Clone)]
pub struct Image {
    pub names: Vec<String>,
    /// The manifest, the image's target.
    pub target: Descriptor,
    /// Config and layers, then the manifest: children before what names them.
    pub blobs: Vec<Blob>,
}

/// What [`read`] found.
#[derive(Debug)]
pub struct Archive {
    pub path: PathBuf,
    /// The tar, decompressed when the file was not a plain tar.
    pub tar: File,
    pub images: Vec<Image>,
}

impl Archive {
    /// A reader of `size` bytes from `offset` of the tar (a blob's [`Source::Entry`]).
    pub fn entry_reader(&self, offset: u64, size: u64) -> std::io::Result<impl Read + use<>> {
        let mut f = self.tar.try_clone()?;
        f.seek(SeekFrom::Start(offset))?;
        Ok(f.take(size))
    }
}

/// Reads and checks the archive at `path` for `platform`; a compressed archive is
/// decompressed into an unnamed temporary file in `scratch` (gone when the archive is dropped).
pub fn read(path: &Path, scratch: &Path, platform: &Platform) -> Result<Archive, ArchiveError> {
    let bad = |reason: String| ArchiveError {
        file: path.to_path_buf(),
        reason,
    };
    let mut f = File::open(path).map_err(|e| bad(format!("cannot open: {e}")))?;
    let mut magic = [0u8; 4];
    let n = read_full(&mut f, &mut magic).map_err(|e| bad(format!("cannot read: {e}")))?;
    f.seek(SeekFrom::Start(0))
        .map_err(|e| bad(format!("cannot read: {e}")))?;
    let tar = match &magic[..n] {
        [0x1f, 0x8b, ..] => {
            let mut out = unnamed_file(scratch).map_err(|e| {
                bad(format!(
                    "cannot make a temporary file in {} to decompress into: {e}",
                    scratch.display()
                ))
            })?;
            let mut gz = flate2::read::MultiGzDecoder::new(std::io::BufReader::new(f));
            std::io::copy(&mut gz, &mut out)
                .map_err(|e| bad(format!("gzip stream is damaged or truncated: {e}")))?;
            out.flush().map_err(|e| bad(e.to_string()))?;
            out
        }
        [0x28, 0xb5, 0x2f, 0xfd] => {
            if !cfg!(feature = "zstd") {
                return Err(bad(ZSTD_NOT_BUILT.into()));
            }
            let mut out = unnamed_file(scratch).map_err(|e| {
                bad(format!(
                    "cannot make a temporary file in {} to decompress into: {e}",
                    scratch.display()
                ))
            })?;
            unzstd(f, &mut out)
                .map_err(|e| bad(format!("zstd stream is damaged or truncated: {e}")))?;
            out.flush().map_err(|e| bad(e.to_string()))?;
            out
        }
        _ => f,
    };
    let mut archive = Archive {
        path: path.to_path_buf(),
        tar,
        images: Vec::new(),
    };
    let entries = index_tar(&mut archive.tar).map_err(bad)?;
    let r = Reader {
        archive: &archive,
        entries: &entries,
        bad: &bad,
    };
    let images = if entries.contains_key("index.json") {
        r.oci(platform)?
    } else if entries.contains_key("manifest.json") {
        r.docker()?
    } else {
        return Err(bad(
            "neither an OCI image layout (index.json) nor a docker save archive \
             (manifest.json)"
                .into(),
        ));
    };
    if images.is_empty() {
        return Err(bad(format!("no image for platform {platform}")));
    }
    archive.images = images;
    Ok(archive)
}

/// Why a zstd archive is refused by a build without the `zstd` feature.
pub const ZSTD_NOT_BUILT: &str = "zstd-compressed archives are not supported by this build \
     (built without the zstd feature): decompress it (zstd -d) or use gzip";

/// Decompresses every zstd frame of `f` into `out`, skipping skippable frames (as `zstd -d`
/// does with a file `pzstd` wrote in several frames).
#[cfg(feature = "zstd")]
fn unzstd(f: File, out: &mut File) -> Result<(), String> {
    use ruzstd::decoding::StreamingDecoder;
    use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
    use std::io::BufRead;
    let mut r = std::io::BufReader::new(f);
    let mut frame = 0u64;
    loop {
        if r.fill_buf().map_err(|e| e.to_string())?.is_empty() {
            return Ok(());
        }
        frame += 1;
        match StreamingDecoder::new(&mut r) {
            Ok(mut d) => {
                std::io::copy(&mut d, out).map_err(|e| format!("frame {frame}: {e}"))?;
            }
            Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                length,
                ..
            })) => {
                let n = std::io::copy(&mut (&mut r).take(u64::from(length)), &mut std::io::sink())
                    .map_err(|e| e.to_string())?;
                if n < u64::from(length) {
                    return Err(format!("frame {frame}: a skippable frame cut short"));
                }
            }
            Err(e) => return Err(format!("frame {frame}: {e}")),
        }
    }
}

#[cfg(not(feature = "zstd"))]
fn unzstd(_: File, _: &mut File) -> Result<(), String> {
    Err(ZSTD_NOT_BUILT.into())
}

fn read_full(f: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// A file with no name in `dir` (O_TMPFILE): nothing is left behind by a crash.
fn unnamed_file(dir: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_TMPFILE.bits())
        .open(dir)
}

/// A regular file of the tar: its data's offset and size.
#[derive(Debug, Clone, Copy)]
struct Entry {
    offset: u64,
    size: u64,
}

/// The regular files of a tar by path (`./` and leading `/` dropped); hard and symbolic links
/// to a regular file (as `docker save` writes for a repeated layer) resolve to it.
fn index_tar(f: &mut File) -> Result<HashMap<String, Entry>, String> {
    let len = f
        .seek(SeekFrom::End(0))
        .map_err(|e| format!("cannot read: {e}"))?;
    f.seek(SeekFrom::Start(0))
        .map_err(|e| format!("cannot read: {e}"))?;
    let mut r = std::io::BufReader::new(f);
    let mut entries = HashMap::new();
    let mut links: Vec<(String, String)> = Vec::new();
    let mut pos = 0u64;
    let mut long_name: Option<String> = None;
    let mut header = [0u8; 512];
    loop {
        let n = read_full(&mut r, &mut header).map_err(|e| format!("cannot read: {e}"))?;
        if n == 0 {
            // Cut at an entry's boundary: the end-of-archive block is what says it is whole.
            return Err(format!(
                "truncated: the tar ends at offset {pos} without its end-of-archive block"
            ));
        }
        if n < 512 {
            return Err(format!(
                "truncated: a tar header at offset {pos} is cut short"
            ));
        }
        if header.iter().all(|&b| b == 0) {
            break;
        }
        if !checksum_ok(&header) {
            return Err(format!(
                "not a tar, or damaged: bad header checksum at offset {pos}"
            ));
        }
        let size = octal(&header[124..136])
            .ok_or_else(|| format!("damaged tar header at offset {pos}: bad size field"))?;
        let data = pos + 512;
        let padded = size.div_ceil(512) * 512;
        if data + size > len {
            return Err(format!(
                "truncated: entry at offset {pos} needs {size} bytes, the file ends at {len}"
            ));
        }
        let typeflag = header[156];
        let name = match long_name.take() {
            Some(n) => n,
            None => header_name(&header),
        };
        match typeflag {
            b'L' | b'x' => {
                let mut buf = vec![0u8; usize::try_from(size.min(MAX_DOCUMENT)).unwrap_or(0)];
                r.read_exact(&mut buf)
                    .map_err(|e| format!("cannot read: {e}"))?;
                skip(&mut r, padded - buf.len() as u64)?;
                long_name = if typeflag == b'L' {
                    Some(cstr(&buf))
                } else {
                    pax_path(&buf)
                };
                pos = data + padded;
                continue;
            }
            b'0' | 0 | b'7' => {
                entries.insert(clean(&name), Entry { offset: data, size });
            }
            b'1' | b'2' => {
                let target = cstr(&header[157..257]);
                let target = if typeflag == b'2' {
                    resolve_link(&clean(&name), &target)
                } else {
                    clean(&target)
                };
                links.push((clean(&name), target));
            }
            _ => {}
        }
        skip(&mut r, padded)?;
        pos = data + padded;
    }
    for (name, target) in links {
        if let Some(e) = entries.get(&target).copied() {
            entries.insert(name, e);
        }
    }
    Ok(entries)
}

fn skip(r: &mut impl Read, n: u64) -> Result<(), String> {
    let copied = std::io::copy(&mut r.take(n), &mut std::io::sink())
        .map_err(|e| format!("cannot read: {e}"))?;
    if copied < n {
        return Err("truncated: the tar ends inside an entry".into());
    }
    Ok(())
}

fn checksum_ok(h: &[u8; 512]) -> bool {
    let Some(want) = octal(&h[148..156]) else {
        return false;
    };
    let sum: u64 = h
        .iter()
        .enumerate()
        .map(|(i, &b)| u64::from(if (148..156).contains(&i) { b' ' } else { b }))
        .sum();
    sum == want
}

/// A tar number: octal text, or base-256 when the high bit of the first byte is set.
fn octal(field: &[u8]) -> Option<u64> {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        let mut v = u64::from(field[0] & 0x7f);
        for &b in &field[1..] {
            v = v.checked_mul(256)?.checked_add(u64::from(b))?;
        }
        return Some(v);
    }
    let s = std::str::from_utf8(field).ok()?;
    let s = s.trim_matches(|c: char| c == '\0' || c == ' ');
    if s.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(s, 8).ok()
}

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn header_name(h: &[u8; 512]) -> String {
    let name = cstr(&h[0..100]);
    if &h[257..262] == b"ustar" {
        let prefix = cstr(&h[345..500]);
        if !prefix.is_empty() {
            return format!("{prefix}/{name}");
        }
    }
    name
}

/// The `path` record of a PAX extended header.
fn pax_path(buf: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(buf);
    text.lines()
        .filter_map(|l| l.split_once(' ').map(|(_, kv)| kv))
        .find_map(|kv| kv.strip_prefix("path=").map(str::to_owned))
}

fn clean(name: &str) -> String {
    let mut s = name.trim_start_matches("./").trim_start_matches('/');
    s = s.trim_end_matches('/');
    s.to_owned()
}

/// A symbolic link's target, relative to the link's directory, as a path from the root.
fn resolve_link(link: &str, target: &str) -> String {
    let mut parts: Vec<&str> = if target.starts_with('/') {
        Vec::new()
    } else {
        link.split('/').collect()
    };
    if !target.starts_with('/') {
        parts.pop();
    }
    for p in target.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DescriptorJson {
    #[serde(default)]
    media_type: String,
    digest: String,
    size: i64,
    #[serde(default)]
    annotations: HashMap<String, String>,
    #[serde(default)]
    platform: Option<PlatformJson>,
}

#[derive(Deserialize)]
struct PlatformJson {
    architecture: String,
    os: String,
    #[serde(default)]
    variant: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct IndexJson {
    manifests: Vec<DescriptorJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManifestJson {
    config: DescriptorJson,
    layers: Vec<DescriptorJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerManifest {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

struct Reader<'a, F: Fn(String) -> ArchiveError> {
    archive: &'a Archive,
    entries: &'a HashMap<String, Entry>,
    bad: &'a F,
}

impl<F: Fn(String) -> ArchiveError> Reader<'_, F> {
    fn entry(&self, name: &str, what: &str) -> Result<Entry, ArchiveError> {
        self.entries
            .get(name)
            .copied()
            .ok_or_else(|| (self.bad)(format!("missing {what} {name}")))
    }

    fn read_entry(&self, e: Entry, name: &str) -> Result<Vec<u8>, ArchiveError> {
        if e.size > MAX_DOCUMENT {
            return Err((self.bad)(format!(
                "{name}: {} bytes, more than the {MAX_DOCUMENT} a metadata document may have",
                e.size
            )));
        }
        let mut buf = Vec::new();
        self.archive
            .entry_reader(e.offset, e.size)
            .and_then(|mut r| r.read_to_end(&mut buf))
            .map_err(|err| (self.bad)(format!("{name}: cannot read: {err}")))?;
        Ok(buf)
    }

    /// Hashes the entry; its digest (computed) and size.
    fn hash_entry(&self, e: Entry, name: &str) -> Result<String, ArchiveError> {
        let mut r = self
            .archive
            .entry_reader(e.offset, e.size)
            .map_err(|err| (self.bad)(format!("{name}: cannot read: {err}")))?;
        let mut h = Sha256::default();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = r
                .read(&mut buf)
                .map_err(|err| (self.bad)(format!("{name}: cannot read: {err}")))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        Ok(h.digest())
    }

    fn parse<T: serde::de::DeserializeOwned>(
        &self,
        bytes: &[u8],
        name: &str,
    ) -> Result<T, ArchiveError> {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if path == "." || path.is_empty() {
                (self.bad)(format!("{name}: invalid JSON: {inner}"))
            } else {
                (self.bad)(format!("{name}: field {path}: {inner}"))
            }
        })
    }

    /// A blob of the layout, checked: present, of the size and digest its descriptor says.
    fn checked_blob(
        &self,
        d: &DescriptorJson,
        at: &str,
    ) -> Result<(Descriptor, Entry), ArchiveError> {
        let (alg, hex) = d.digest.split_once(':').unwrap_or(("", ""));
        let valid_hex = hex.len() == 64
            && hex
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
        if alg != "sha256" || !valid_hex {
            return Err((self.bad)(format!(
                "{at}.digest: unsupported or invalid digest {:?} (sha256:<64 hex digits> \
                 expected)",
                d.digest
            )));
        }
        let size = u64::try_from(d.size)
            .map_err(|_| (self.bad)(format!("{at}.size: invalid value {}", d.size)))?;
        let name = format!("blobs/sha256/{hex}");
        let e = self.entry(&name, "blob")?;
        if e.size != size {
            return Err((self.bad)(format!(
                "blob {} is {} bytes, {at} says {size}",
                d.digest, e.size
            )));
        }
        let got = self.hash_entry(e, &name)?;
        if got != d.digest {
            return Err((self.bad)(format!(
                "digest mismatch: blob {name} hashes to {got}, not {}",
                d.digest
            )));
        }
        Ok((
            Descriptor {
                media_type: d.media_type.clone(),
                digest: d.digest.clone(),
                size,
            },
            e,
        ))
    }

    fn oci(&self, platform: &Platform) -> Result<Vec<Image>, ArchiveError> {
        if let Some(e) = self.entries.get("oci-layout").copied() {
            let v: serde_json::Value =
                self.parse(&self.read_entry(e, "oci-layout")?, "oci-layout")?;
            let version = v.get("imageLayoutVersion").and_then(|v| v.as_str());
            if version != Some("1.0.0") {
                return Err((self.bad)(format!(
                    "oci-layout: field imageLayoutVersion: unsupported value {version:?} \
                     (\"1.0.0\" expected)"
                )));
            }
        }
        let e = self.entry("index.json", "file")?;
        let index: IndexJson = self.parse(&self.read_entry(e, "index.json")?, "index.json")?;
        let mut images = Vec::new();
        for (i, d) in index.manifests.iter().enumerate() {
            let at = format!("index.json: manifests[{i}]");
            let names = names_of(&d.annotations);
            if let Some(p) = &d.platform
                && !platform.matches(p)
            {
                continue;
            }
            let Some(target) = self.resolve(d, &at, platform, 0)? else {
                continue;
            };
            images.push(Image {
                names,
                target: target.0,
                blobs: target.1,
            });
        }
        Ok(images)
    }

    /// The manifest for `platform` under descriptor `d` (an index is searched), with its
    /// blobs; `None` when an index has nothing for the platform.
    fn resolve(
        &self,
        d: &DescriptorJson,
        at: &str,
        platform: &Platform,
        depth: usize,
    ) -> Result<Option<(Descriptor, Vec<Blob>)>, ArchiveError> {
        if depth > MAX_DEPTH {
            return Err((self.bad)(format!(
                "{at}: indexes nested more than {MAX_DEPTH} deep"
            )));
        }
        let (desc, e) = self.checked_blob(d, at)?;
        let bytes = self.read_entry(e, &d.digest)?;
        let media = if desc.media_type.is_empty() {
            serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| {
                    v.get("mediaType")
                        .and_then(|m| m.as_str())
                        .map(str::to_owned)
                })
                .unwrap_or_default()
        } else {
            desc.media_type.clone()
        };
        match media.as_str() {
            MEDIA_OCI_INDEX | MEDIA_DOCKER_LIST => {
                let index: IndexJson = self.parse(&bytes, &format!("index {}", d.digest))?;
                for (i, m) in index.manifests.iter().enumerate() {
                    if m.platform.as_ref().is_some_and(|p| platform.matches(p)) {
                        let at = format!("index {}: manifests[{i}]", d.digest);
                        if let Some(found) = self.resolve(m, &at, platform, depth + 1)? {
                            return Ok(Some(found));
                        }
                    }
                }
                Ok(None)
            }
            MEDIA_OCI_MANIFEST | MEDIA_DOCKER_MANIFEST => {
                let name = format!("manifest {}", d.digest);
                let m: ManifestJson = self.parse(&bytes, &name)?;
                let mut blobs = Vec::new();
                let mut labels = BTreeMap::new();
                let (config, ce) = self.checked_blob(&m.config, &format!("{name}: config"))?;
                labels.insert(
                    "containerd.io/gc.ref.content.config".to_owned(),
                    config.digest.clone(),
                );
                blobs.push(blob(config, ce));
                for (i, l) in m.layers.iter().enumerate() {
                    let (layer, le) = self.checked_blob(l, &format!("{name}: layers[{i}]"))?;
                    labels.insert(
                        format!("containerd.io/gc.ref.content.l.{i}"),
                        layer.digest.clone(),
                    );
                    blobs.push(blob(layer, le));
                }
                let desc = Descriptor {
                    media_type: media,
                    ..desc
                };
                blobs.push(Blob {
                    desc: desc.clone(),
                    source: Source::Entry { offset: e.offset },
                    labels,
                });
                Ok(Some((desc, blobs)))
            }
            other => Err((self.bad)(format!(
                "{at}.mediaType: unsupported value {other:?} (an image index or manifest \
                 expected)"
            ))),
        }
    }

    /// A `docker save` archive: configs and layers by path, hashed here, under a manifest
    /// made for them (docker's archive has none).
    fn docker(&self) -> Result<Vec<Image>, ArchiveError> {
        let e = self.entry("manifest.json", "file")?;
        let list: Vec<DockerManifest> =
            self.parse(&self.read_entry(e, "manifest.json")?, "manifest.json")?;
        let mut images = Vec::new();
        for (i, m) in list.iter().enumerate() {
            let at = format!("manifest.json: [{i}]");
            let ce = self.entry(&clean(&m.config), &format!("config ({at}.Config)"))?;
            let config_bytes = self.read_entry(ce, &m.config)?;
            let config_digest = crate::sha256::digest(&config_bytes);
            let mut blobs = vec![Blob {
                desc: Descriptor {
                    media_type: MEDIA_OCI_CONFIG.into(),
                    digest: config_digest.clone(),
                    size: ce.size,
                },
                source: Source::Entry { offset: ce.offset },
                labels: BTreeMap::new(),
            }];
            let mut labels = BTreeMap::new();
            labels.insert(
                "containerd.io/gc.ref.content.config".to_owned(),
                config_digest.clone(),
            );
            let mut layers = Vec::new();
            for (j, path) in m.layers.iter().enumerate() {
                let le = self.entry(&clean(path), &format!("layer ({at}.Layers[{j}])"))?;
                let digest = self.hash_entry(le, path)?;
                let media = if self.is_gzip(le)? {
                    MEDIA_OCI_LAYER_GZIP
                } else {
                    MEDIA_OCI_LAYER
                };
                labels.insert(
                    format!("containerd.io/gc.ref.content.l.{j}"),
                    digest.clone(),
                );
                let desc = Descriptor {
                    media_type: media.into(),
                    digest,
                    size: le.size,
                };
                layers.push(serde_json::json!({
                    "mediaType": desc.media_type, "digest": desc.digest, "size": desc.size,
                }));
                blobs.push(Blob {
                    desc,
                    source: Source::Entry { offset: le.offset },
                    labels: BTreeMap::new(),
                });
            }
            let manifest = serde_json::json!({
                "schemaVersion": 2,
                "mediaType": MEDIA_OCI_MANIFEST,
                "config": {"mediaType": MEDIA_OCI_CONFIG, "digest": config_digest, "size": ce.size},
                "layers": layers,
            });
            let bytes = serde_json::to_vec(&manifest).map_err(|e| (self.bad)(e.to_string()))?;
            let target = Descriptor {
                media_type: MEDIA_OCI_MANIFEST.into(),
                digest: crate::sha256::digest(&bytes),
                size: bytes.len() as u64,
            };
            blobs.push(Blob {
                desc: target.clone(),
                source: Source::Bytes(bytes),
                labels,
            });
            let names = m
                .repo_tags
                .iter()
                .flatten()
                .filter_map(|t| normalize(t))
                .collect();
            images.push(Image {
                names,
                target,
                blobs,
            });
        }
        Ok(images)
    }

    fn is_gzip(&self, e: Entry) -> Result<bool, ArchiveError> {
        let mut magic = [0u8; 2];
        let n = self
            .archive
            .entry_reader(e.offset, e.size.min(2))
            .and_then(|mut r| read_full(&mut r, &mut magic))
            .map_err(|err| (self.bad)(format!("cannot read: {err}")))?;
        Ok(n == 2 && magic == [0x1f, 0x8b])
    }
}

fn blob(desc: Descriptor, e: Entry) -> Blob {
    Blob {
        desc,
        source: Source::Entry { offset: e.offset },
        labels: BTreeMap::new(),
    }
}

/// The names an index entry gives its image: containerd's full-name annotation, else the OCI
/// reference name when it is a full reference (one that is only a tag names nothing).
fn names_of(annotations: &HashMap<String, String>) -> Vec<String> {
    let mut names = Vec::new();
    for key in [ANNOTATION_CONTAINERD_NAME, ANNOTATION_REF_NAME] {
        let Some(value) = annotations.get(key) else {
            continue;
        };
        if key == ANNOTATION_REF_NAME && !value.contains(['/', ':']) {
            continue; // only a tag
        }
        if let Some(n) = normalize(value)
            && !names.contains(&n)
        {
            names.push(n);
        }
    }
    names
}

/// A reference as containerd's CRI stores it (`docker.io/library/busybox:latest` for
/// `busybox`); `None` for what is not a reference (a bare tag such as `1.36`).
pub fn normalize(reference: &str) -> Option<String> {
    let r = reference.trim();
    if r.is_empty()
        || r.chars()
            .any(|c| c.is_whitespace() || c.is_ascii_uppercase())
    {
        return None;
    }
    let (first, rest) = match r.split_once('/') {
        Some((f, rest)) => (f, Some(rest)),
        None => (r, None),
    };
    let full = match rest {
        Some(_) if first.contains('.') || first.contains(':') || first == "localhost" => {
            r.to_owned()
        }
        Some(_) => format!("docker.io/{r}"),
        None => {
            // A single component: `name[:tag]`; a bare tag (digits and dots) is no name.
            let name = first.split([':', '@']).next().unwrap_or("");
            if name.is_empty() || name.chars().all(|c| c.is_ascii_digit() || c == '.') {
                return None;
            }
            format!("docker.io/library/{r}")
        }
    };
    let last = full.rsplit('/').next().unwrap_or("");
    if last.contains(':') || last.contains('@') {
        Some(full)
    } else {
        Some(format!("{full}:latest"))
    }
}

#[cfg(test)]
mod tests;
