use std::io::Write;

use super::*;
use crate::sha256::digest;
use crate::testdir::TestDir;

/// A ustar archive of regular files and symbolic links (`->` in the name gives the target).
fn tar(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, data) in entries {
        let mut h = [0u8; 512];
        let (name, link) = match name.split_once(" -> ") {
            Some((n, t)) => (n, Some(t)),
            None => (*name, None),
        };
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..107].copy_from_slice(b"0000644");
        h[108..115].copy_from_slice(b"0000000");
        h[116..123].copy_from_slice(b"0000000");
        let size = if link.is_some() { 0 } else { data.len() };
        h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
        h[136..147].copy_from_slice(b"00000000000");
        h[156] = if link.is_some() { b'2' } else { b'0' };
        if let Some(t) = link {
            h[157..157 + t.len()].copy_from_slice(t.as_bytes());
        }
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        out.extend_from_slice(&h);
        if link.is_none() {
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(512) * 512, 0);
        }
    }
    out.extend_from_slice(&[0u8; 1024]);
    out
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[cfg(feature = "zstd")]
fn zstd(data: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
}

fn hex(d: &str) -> &str {
    d.strip_prefix("sha256:").unwrap()
}

fn desc(media: &str, data: &[u8]) -> serde_json::Value {
    serde_json::json!({"mediaType": media, "digest": digest(data), "size": data.len()})
}

struct Layout {
    files: Vec<(String, Vec<u8>)>,
    /// Per platform: (config, layer, manifest).
    manifests: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)>,
}

/// An OCI layout holding one multi-platform image (amd64 and arm64) named `name`, its
/// index.json pointing at an inner index as `docker buildx` writes it.
fn oci_layout(name: &str) -> Layout {
    let mut files = vec![(
        "oci-layout".to_owned(),
        br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
    )];
    let mut manifests = Vec::new();
    let mut entries = Vec::new();
    for arch in ["amd64", "arm64"] {
        let config = format!(
            r#"{{"architecture":"{arch}","os":"linux","rootfs":{{"type":"layers","diff_ids":[]}}}}"#
        )
        .into_bytes();
        let layer = tar(&[(&format!("bin/{arch}"), arch.as_bytes())]);
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": MEDIA_OCI_MANIFEST,
            "config": desc(MEDIA_OCI_CONFIG, &config),
            "layers": [desc(MEDIA_OCI_LAYER, &layer)],
        }))
        .unwrap();
        let mut d = desc(MEDIA_OCI_MANIFEST, &manifest);
        d["platform"] = serde_json::json!({"architecture": arch, "os": "linux"});
        entries.push(d);
        for b in [&config, &layer, &manifest] {
            files.push((format!("blobs/sha256/{}", hex(&digest(b))), b.clone()));
        }
        manifests.push((config, layer, manifest));
    }
    let inner = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": MEDIA_OCI_INDEX, "manifests": entries,
    }))
    .unwrap();
    files.push((
        format!("blobs/sha256/{}", hex(&digest(&inner))),
        inner.clone(),
    ));
    let mut top = desc(MEDIA_OCI_INDEX, &inner);
    top["annotations"] = serde_json::json!({
        ANNOTATION_CONTAINERD_NAME: name,
        ANNOTATION_REF_NAME: "1",
    });
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": MEDIA_OCI_INDEX, "manifests": [top],
    }))
    .unwrap();
    files.push(("index.json".to_owned(), index));
    Layout { files, manifests }
}

fn to_tar(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let v: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect();
    tar(&v)
}

/// Writes `data` to `name` in `dir`.
fn write(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    p
}

fn platform(arch: &str, variant: &str) -> Platform {
    Platform {
        os: "linux".into(),
        arch: arch.into(),
        variant: variant.into(),
    }
}

fn blob_bytes(a: &Archive, b: &Blob) -> Vec<u8> {
    match &b.source {
        Source::Bytes(v) => v.clone(),
        Source::Entry { offset } => {
            let mut v = Vec::new();
            a.entry_reader(*offset, b.desc.size)
                .unwrap()
                .read_to_end(&mut v)
                .unwrap();
            v
        }
    }
}

#[test]
fn oci_layout_resolves_the_nodes_platform_plain_and_gzip() {
    let s = TestDir::new("archive-oci");
    let layout = oci_layout("picolet.local/app:1");
    let plain = to_tar(&layout.files);
    #[allow(unused_mut)]
    let mut files = vec![("app.tar", plain.clone()), ("app.tar.gz", gzip(&plain))];
    #[cfg(feature = "zstd")]
    {
        files.push(("app.tar.zst", zstd(&plain)));
        // several frames with a skippable one between them, as pzstd writes
        let (a, b) = plain.split_at(plain.len() / 3);
        let mut multi = zstd(a);
        multi.extend_from_slice(&0x184D_2A50u32.to_le_bytes());
        multi.extend_from_slice(&5u32.to_le_bytes());
        multi.extend_from_slice(b"skip!");
        multi.extend_from_slice(&zstd(b));
        files.push(("app-frames.tar.zst", multi));
    }
    for (file, bytes) in files {
        let path = write(&s, file, &bytes);
        for (i, arch) in ["amd64", "arm64"].into_iter().enumerate() {
            let a = read(&path, &s, &platform(arch, "")).unwrap();
            assert_eq!(a.images.len(), 1);
            let img = &a.images[0];
            assert_eq!(img.names, ["picolet.local/app:1"]);
            let (config, layer, manifest) = &layout.manifests[i];
            assert_eq!(img.target.digest, digest(manifest));
            assert_eq!(img.target.media_type, MEDIA_OCI_MANIFEST);
            let digests: Vec<&str> = img.blobs.iter().map(|b| b.desc.digest.as_str()).collect();
            assert_eq!(digests, [digest(config), digest(layer), digest(manifest)]);
            assert_eq!(img.blobs[1].desc.media_type, MEDIA_OCI_LAYER);
            assert_eq!(img.blobs[1].desc.size, layer.len() as u64);
            for b in &img.blobs {
                assert_eq!(digest(&blob_bytes(&a, b)), b.desc.digest, "{file} {arch}");
            }
            let labels = &img.blobs[2].labels;
            assert_eq!(
                labels["containerd.io/gc.ref.content.config"],
                digest(config)
            );
            assert_eq!(labels["containerd.io/gc.ref.content.l.0"], digest(layer));
        }
        // arm64 images say v8 or nothing; no arm image in this archive.
        assert!(read(&path, &s, &platform("arm64", "")).is_ok());
        let e = read(&path, &s, &platform("arm", "v7")).unwrap_err();
        assert_eq!(e.file, path);
        assert!(
            e.reason.contains("no image for platform linux/arm/v7"),
            "{e}"
        );
    }
}

#[test]
fn docker_save_archive_with_a_linked_layer() {
    let s = TestDir::new("archive-docker");
    let config = br#"{"architecture":"amd64","os":"linux"}"#.to_vec();
    let layer = tar(&[("etc/hostname", b"x")]);
    let gz_layer = gzip(&tar(&[("etc/motd", b"hi")]));
    let manifest = serde_json::to_vec(&serde_json::json!([{
        "Config": "cfg.json",
        "RepoTags": ["busybox:latest", "picolet.local/tools:2"],
        "Layers": ["aaa/layer.tar", "bbb/layer.tar", "ccc/layer.tar"],
    }]))
    .unwrap();
    let bytes = tar(&[
        ("cfg.json", &config),
        ("aaa/layer.tar", &layer),
        ("bbb/layer.tar -> ../aaa/layer.tar", b""),
        ("ccc/layer.tar", &gz_layer),
        ("manifest.json", &manifest),
        ("repositories", b"{}"),
    ]);
    let path = write(&s, "tools.tar", &bytes);
    let a = read(&path, &s, &platform("amd64", "")).unwrap();
    let img = &a.images[0];
    assert_eq!(
        img.names,
        ["docker.io/library/busybox:latest", "picolet.local/tools:2"]
    );
    let kinds: Vec<(&str, &str)> = img
        .blobs
        .iter()
        .map(|b| (b.desc.media_type.as_str(), b.desc.digest.as_str()))
        .collect();
    let (d_config, d_layer, d_gz) = (digest(&config), digest(&layer), digest(&gz_layer));
    assert_eq!(
        kinds,
        [
            (MEDIA_OCI_CONFIG, d_config.as_str()),
            (MEDIA_OCI_LAYER, d_layer.as_str()),
            (MEDIA_OCI_LAYER, d_layer.as_str()),
            (MEDIA_OCI_LAYER_GZIP, d_gz.as_str()),
            (MEDIA_OCI_MANIFEST, img.target.digest.as_str()),
        ]
    );
    // The manifest made for it names the config and the layers, and is what its digest says.
    let m = blob_bytes(&a, &img.blobs[4]);
    assert_eq!(digest(&m), img.target.digest);
    let v: serde_json::Value = serde_json::from_slice(&m).unwrap();
    assert_eq!(v["config"]["digest"], d_config.as_str());
    assert_eq!(v["layers"][2]["mediaType"], MEDIA_OCI_LAYER_GZIP);
    assert_eq!(
        img.blobs[4].labels["containerd.io/gc.ref.content.l.2"],
        d_gz
    );
    for b in &img.blobs {
        assert_eq!(digest(&blob_bytes(&a, b)), b.desc.digest);
    }
}

fn replace(
    files: &[(String, Vec<u8>)],
    name: &str,
    data: Option<Vec<u8>>,
) -> Vec<(String, Vec<u8>)> {
    files
        .iter()
        .filter_map(|(n, d)| match (n == name, &data) {
            (false, _) => Some((n.clone(), d.clone())),
            (true, Some(new)) => Some((n.clone(), new.clone())),
            (true, None) => None,
        })
        .collect()
}

#[test]
fn damaged_archives_are_refused_with_the_file_and_reason() {
    let s = TestDir::new("archive-bad");
    let layout = oci_layout("picolet.local/app:1");
    let amd64 = platform("amd64", "");
    let layer_name = format!("blobs/sha256/{}", hex(&digest(&layout.manifests[0].1)));
    let reason = |name: &str, bytes: &[u8]| {
        let path = write(&s, name, bytes);
        let e = read(&path, &s, &amd64).unwrap_err();
        assert_eq!(e.file, path);
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        e.reason
    };

    // A layer of the same size with one byte changed.
    let mut flipped = layout.manifests[0].1.clone();
    flipped[600] ^= 1;
    let r = reason(
        "flipped.tar",
        &to_tar(&replace(&layout.files, &layer_name, Some(flipped))),
    );
    assert!(
        r.starts_with("digest mismatch: blob ") && r.contains(&layer_name),
        "{r}"
    );

    let r = reason(
        "missing.tar",
        &to_tar(&replace(&layout.files, &layer_name, None)),
    );
    assert_eq!(r, format!("missing blob {layer_name}"));

    let plain = to_tar(&layout.files);
    for cut in [plain.len() / 2, plain.len() / 2 + 100, plain.len() - 1024] {
        let r = reason("cut.tar", &plain[..cut]);
        assert!(r.starts_with("truncated"), "{cut}: {r}");
    }
    let gz = gzip(&plain);
    let r = reason("cut.tar.gz", &gz[..gz.len() / 2]);
    assert!(r.starts_with("gzip stream is damaged or truncated"), "{r}");

    let bad_index =
        br#"{"schemaVersion":2,"manifests":[{"mediaType":"x","digest":"sha256:00","size":"big"}]}"#;
    let r = reason(
        "badjson.tar",
        &to_tar(&replace(
            &layout.files,
            "index.json",
            Some(bad_index.to_vec()),
        )),
    );
    assert!(
        r.starts_with("index.json: field manifests[0].size: invalid type: string \"big\""),
        "{r}"
    );

    let r = reason(
        "baddigest.tar",
        &to_tar(&replace(
            &layout.files,
            "index.json",
            Some(br#"{"manifests":[{"mediaType":"x","digest":"md5:abc","size":3}]}"#.to_vec()),
        )),
    );
    assert!(
        r.starts_with(
            r#"index.json: manifests[0].digest: unsupported or invalid digest "md5:abc""#
        ),
        "{r}"
    );

    let r = reason(
        "layout.tar",
        &to_tar(&replace(
            &layout.files,
            "oci-layout",
            Some(br#"{"imageLayoutVersion":"9"}"#.to_vec()),
        )),
    );
    assert!(
        r.starts_with("oci-layout: field imageLayoutVersion: unsupported value Some(\"9\")"),
        "{r}"
    );

    let r = reason("zstd.tar.zst", &[0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0]);
    if cfg!(feature = "zstd") {
        assert!(
            r.starts_with("zstd stream is damaged or truncated: frame 1: "),
            "{r}"
        );
    } else {
        assert!(
            r.starts_with("zstd-compressed archives are not supported by this build"),
            "{r}"
        );
    }
    #[cfg(feature = "zstd")]
    {
        let z = zstd(&to_tar(&layout.files));
        let r = reason("cut.tar.zst", &z[..z.len() * 2 / 3]);
        assert!(
            r.starts_with("zstd stream is damaged or truncated: frame 1: "),
            "{r}"
        );
        let mut flipped = z.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0xff;
        let r = reason("flipped.tar.zst", &flipped);
        // a flipped bit breaks the stream, or yields other bytes that fail their digest
        assert!(
            r.starts_with("zstd stream is damaged")
                || r.contains("digest")
                || r.contains("truncated")
                || r.contains("not a tar"),
            "{r}"
        );
    }

    let r = reason("text.tar", b"hello, this is not a tar at all");
    assert!(
        r.starts_with("truncated") || r.starts_with("not a tar"),
        "{r}"
    );
    let r = reason("empty-tar.tar", &tar(&[("hello", b"x")]));
    assert!(r.starts_with("neither an OCI image layout"), "{r}");
}

#[test]
fn names_normalize_as_the_cri_stores_them() {
    let cases = [
        ("busybox", Some("docker.io/library/busybox:latest")),
        ("busybox:1.36", Some("docker.io/library/busybox:1.36")),
        ("library/busybox", Some("docker.io/library/busybox:latest")),
        ("me/app:2", Some("docker.io/me/app:2")),
        ("localhost/app", Some("localhost/app:latest")),
        (
            "registry.local:5000/a/b:3",
            Some("registry.local:5000/a/b:3"),
        ),
        ("picolet.local/busybox:1", Some("picolet.local/busybox:1")),
        ("1.36", None),
        ("", None),
        ("Upper/case", None),
    ];
    for (input, want) in cases {
        assert_eq!(normalize(input).as_deref(), want, "{input}");
    }
    // A reference name that is only a tag names nothing.
    let tag_only = HashMap::from([(ANNOTATION_REF_NAME.to_owned(), "latest".to_owned())]);
    assert!(names_of(&tag_only).is_empty());
}

#[test]
fn platform_variants() {
    let p = |arch: &str, variant: Option<&str>| PlatformJson {
        architecture: arch.into(),
        os: "linux".into(),
        variant: variant.map(str::to_owned),
    };
    assert!(platform("arm", "v7").matches(&p("arm", Some("v7"))));
    assert!(platform("arm", "v7").matches(&p("arm", Some("v6"))));
    assert!(!platform("arm", "v6").matches(&p("arm", Some("v7"))));
    assert!(platform("arm64", "").matches(&p("arm64", Some("v8"))));
    assert!(!platform("arm64", "").matches(&p("amd64", None)));
    assert_eq!(platform("arm", "v7").to_string(), "linux/arm/v7");
}
