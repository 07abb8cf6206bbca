// Compiles the CRI subset, the konnectivity agent protocol, the containerd subset and the
// apimachinery messages of the Kubernetes protobuf encoding in pure Rust (protox), so neither
// the build machine, cross builds nor Yocto need protoc. Client code only: picolet never serves
// CRI, and is the agent, not the server, of the konnectivity tunnel.
fn main() {
    println!("cargo:rerun-if-changed=proto/runtime.proto");
    println!("cargo:rerun-if-changed=proto/konnectivity.proto");
    println!("cargo:rerun-if-changed=proto/containerd");
    println!("cargo:rerun-if-changed=proto/k8s");
    // A lower bound for the wall clock (preflight flags a board that booted in 1970);
    // SOURCE_DATE_EPOCH keeps reproducible builds reproducible.
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let epoch = std::env::var("SOURCE_DATE_EPOCH").ok().unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            .to_string()
    });
    println!("cargo:rustc-env=PICOLET_BUILD_EPOCH={epoch}");
    let fds =
        protox::compile(["proto/runtime.proto"], ["proto"]).expect("compile proto/runtime.proto");
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .compile_fds(fds)
        .expect("generate CRI client");
    // The apiserver network proxy's agent protocol (feature konnectivity); the file has no
    // package, as upstream's, so it is generated as `_.rs`.
    let fds = protox::compile(["proto/konnectivity.proto"], ["proto"])
        .expect("compile proto/konnectivity.proto");
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .compile_fds(fds)
        .expect("generate the konnectivity agent client");
    // containerd's own content, images and leases services (subsets): importing preloaded
    // image archives, which the CRI has no call for.
    let fds = protox::compile(
        [
            "proto/containerd/content.proto",
            "proto/containerd/images.proto",
            "proto/containerd/leases.proto",
        ],
        ["proto"],
    )
    .expect("compile proto/containerd");
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .compile_fds(fds)
        .expect("generate the containerd client");
    // The apimachinery envelope, metadata and Status of the Kubernetes protobuf encoding, and
    // the Event picolet writes in it (feature apiserver): messages only.
    let fds = protox::compile(["proto/k8s/meta.proto", "proto/k8s/core.proto"], ["proto"])
        .expect("compile proto/k8s");
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(false)
        .build_transport(false)
        .compile_fds(fds)
        .expect("generate the apimachinery messages");
    pod_schema();
}

/// The table `src/apiclient/pod_proto.rs` decodes Pods in the protobuf encoding with, from
/// `proto/k8s/pod.proto` (written by scripts/k8s-pod-proto.py, one field a line): for each
/// message its name, what it is in JSON, and its fields sorted by number with their JSON names,
/// kinds and flags.
fn pod_schema() {
    use std::collections::HashMap;
    use std::fmt::Write;
    const SPECIAL: [&str; 4] = ["Time", "Quantity", "IntOrString", "FieldsV1"];
    let path = "proto/k8s/pod.proto";
    let text = std::fs::read_to_string(path).expect("read proto/k8s/pod.proto");
    // (message, [(number, json name, label, type, notes)])
    type FieldLine = (u32, String, String, String, Vec<String>);
    let mut messages: Vec<(String, Vec<FieldLine>)> = Vec::new();
    let mut open = false;
    for (n, line) in text.lines().enumerate() {
        let bad = || panic!("{path}:{}: not understood: {line}", n + 1);
        let (code, notes) = match line.split_once("//") {
            Some((c, notes)) => (
                c.trim(),
                notes.split_whitespace().map(str::to_owned).collect(),
            ),
            None => (line.trim(), Vec::new()),
        };
        if code.is_empty() || code.starts_with("syntax ") || code.starts_with("package ") {
            continue;
        }
        if let Some(name) = code
            .strip_prefix("message ")
            .and_then(|r| r.strip_suffix(" {"))
        {
            assert!(!open, "{path}:{}: a message inside a message", n + 1);
            messages.push((name.to_owned(), Vec::new()));
            open = true;
            continue;
        }
        if code == "}" {
            open = false;
            continue;
        }
        if !open {
            bad();
        }
        let Some((decl, number)) = code.strip_suffix(';').and_then(|c| c.split_once(" = ")) else {
            bad()
        };
        let number: u32 = number.parse().unwrap_or_else(|_| bad());
        let (label, typ, name) = if let Some(rest) = decl.strip_prefix("map<string, ") {
            let Some((value, name)) = rest.split_once("> ") else {
                bad()
            };
            ("map", value, name)
        } else {
            let mut w = decl.split(' ');
            match (w.next(), w.next(), w.next(), w.next()) {
                (Some(l @ ("optional" | "repeated")), Some(t), Some(name), None) => (l, t, name),
                _ => bad(),
            }
        };
        let json = notes
            .iter()
            .find_map(|n| n.strip_prefix("json="))
            .unwrap_or(name);
        let fields = &mut messages.last_mut().expect("inside a message").1;
        fields.push((
            number,
            json.to_owned(),
            label.to_owned(),
            typ.to_owned(),
            notes,
        ));
    }
    for (_, fields) in &mut messages {
        fields.sort_by_key(|f| f.0);
    }
    let index: HashMap<&str, usize> = messages
        .iter()
        .enumerate()
        .map(|(i, (name, _))| (name.as_str(), i))
        .collect();
    let mut out = String::from("// Generated by build.rs from proto/k8s/pod.proto.\n");
    let _ = writeln!(
        out,
        "pub(super) static MESSAGES: [Message; {}] = [",
        messages.len()
    );
    for (name, fields) in &messages {
        let special = if SPECIAL.contains(&name.as_str()) {
            name.as_str()
        } else {
            "None"
        };
        let _ = writeln!(
            out,
            "    Message {{ name: {name:?}, special: Special::{special}, fields: &["
        );
        for (number, json, label, typ, notes) in fields.iter() {
            let message = |t: &str| {
                *index
                    .get(t)
                    .unwrap_or_else(|| panic!("{path}: {name}.{json}: no message {t}"))
            };
            let kind = match typ.as_str() {
                "string" if label == "map" => "Kind::MapString".to_owned(),
                t if label == "map" => format!("Kind::MapMessage({})", message(t)),
                "string" => "Kind::String".to_owned(),
                "bool" => "Kind::Bool".to_owned(),
                "int32" => "Kind::Int32".to_owned(),
                "int64" => "Kind::Int64".to_owned(),
                // Bytes are FieldsV1's alone, which the decoder reads as a whole.
                "bytes" if name == "FieldsV1" => "Kind::String".to_owned(),
                "bytes" => panic!("{path}: {name}.{json}: bytes outside FieldsV1"),
                t => format!("Kind::Message({})", message(t)),
            };
            let mut flags = Vec::new();
            if label == "repeated" {
                flags.push("REPEATED");
            }
            for note in notes {
                match note.as_str() {
                    "inline" => flags.push("INLINE"),
                    "omitempty" => flags.push("OMIT_EMPTY"),
                    "omitzero" => flags.push("OMIT_ZERO"),
                    n if n.starts_with("json=") => {}
                    n => panic!("{path}: {name}.{json}: unknown note {n}"),
                }
            }
            let flags = if flags.is_empty() {
                "0".to_owned()
            } else {
                flags.join(" | ")
            };
            let _ = writeln!(
                out,
                "        Field {{ number: {number}, name: {json:?}, kind: {kind}, flags: {flags} }},"
            );
        }
        out.push_str("    ] },\n");
    }
    out.push_str("];\n");
    for (constant, name) in [("POD", "Pod"), ("POD_LIST", "PodList")] {
        let i = index
            .get(name)
            .unwrap_or_else(|| panic!("{path}: no message {name}"));
        let _ = writeln!(out, "pub(super) const {constant}: u16 = {i};");
    }
    let dir = std::env::var("OUT_DIR").expect("OUT_DIR");
    std::fs::write(format!("{dir}/pod_schema.rs"), out).expect("write pod_schema.rs");
}
