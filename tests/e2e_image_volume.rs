//! Image volumes against a real containerd with no registry: an image built offline and
//! imported into containerd is mounted read-only into a static pod's container through the CRI
//! mount's image field, at its root and (a `subPath`) one of its directories; the container
//! reads the files the image carries. On a containerd that cannot mount images (before 2.1:
//! Debian's 1.6), the pod is refused at admission with a message naming the volume, and no
//! sandbox is made for it.

mod support;

use support::{IMAGE, agent, containerd};

use std::time::Duration;

use agent::{Agent, test_dir};
use containerd::ScratchContainerd;

const T: Duration = Duration::from_secs(90);
const MODEL: &str = "picolet.local/model:1";

/// containerd 2.1 and later mount images.
fn mounts_images(version: &str) -> bool {
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (2, 1)
}

/// Builds the image `MODEL` carrying `/data/hello.txt` and `/weights/w.txt`, and imports it.
fn import_model(c: &ScratchContainerd, dir: &std::path::Path) {
    let add = dir.join("model-root");
    std::fs::create_dir_all(add.join("data")).unwrap();
    std::fs::create_dir_all(add.join("weights")).unwrap();
    std::fs::write(add.join("data/hello.txt"), "hello from the image volume\n").unwrap();
    std::fs::write(add.join("weights/w.txt"), "weights 0.5 0.25\n").unwrap();
    let tar = dir.join("model.tar");
    containerd::build_image(&tar, MODEL, &["--add", add.to_str().unwrap()], &[]);
    c.ctr(&["images", "import", tar.to_str().unwrap()]);
}

/// A pod reading the image volume at /model, and its `weights` directory at /w, then writing
/// what it read (and whether /model is writable) to its termination message.
fn reader_pod() -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: reader\nspec:\n  restartPolicy: Never\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: {IMAGE}\n    \
         command: [sh, -c, 'cat /model/data/hello.txt /w/w.txt > /dev/termination-log; \
         if touch /model/x 2>/dev/null; then echo writable; else echo read-only; fi >> /dev/termination-log']\n    \
         volumeMounts:\n    - {{name: model, mountPath: /model}}\n    \
         - {{name: model, mountPath: /w, subPath: weights}}\n  volumes:\n  - name: model\n    \
         image: {{reference: {MODEL}, pullPolicy: Never}}\n"
    )
}

#[test]
fn a_container_reads_an_image_volume_or_the_runtime_refuses_it_by_name() {
    let dir = test_dir("imgvol");
    let c = ScratchContainerd::start(&dir.join("c"));
    import_model(&c, &dir);
    let version = c.runtime_version();
    let a = Agent::start(&dir.join("a"), &c.endpoint());
    a.write_manifest("reader.yaml", &reader_pod());

    if !mounts_images(&version) {
        // containerd before 2.1: refused once, by name, and nothing is run for it.
        a.wait_for("the pod refused", T, |a| a.phase("reader") == "Failed");
        let st = a.status("reader");
        assert_eq!(st["reason"], "ImageVolumeUnsupported", "{st}");
        let m = st["message"].as_str().unwrap_or_default();
        assert!(
            m.contains(&format!(
                "image volume \"model\" (image \"{MODEL}\") cannot be mounted: the container \
                 runtime containerd {version}"
            )) && m.contains("(image volumes need containerd 2.1 or later)"),
            "{m}"
        );
        assert_eq!(
            c.sandbox_ids(),
            Vec::<String>::new(),
            "no sandbox for a refused pod"
        );
        let log = a.log_text();
        assert!(
            log.contains("cannot mount images (image volumes need containerd 2.1 or later): pods with image volumes are refused"),
            "{log}"
        );
        return;
    }

    a.wait_for("the reader pod to finish", T, |a| {
        a.phase("reader") == "Succeeded"
    });
    let st = a.status("reader");
    let term = &st["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(term["exitCode"], 0, "{st}");
    assert_eq!(
        term["message"], "hello from the image volume\nweights 0.5 0.25\nread-only\n",
        "{st}"
    );
    // The image stays in containerd, where the runtime keeps it (pulled by nobody: Never).
    assert!(
        c.ctr(&["images", "ls", "-q"]).lines().any(|l| l == MODEL),
        "the image volume's image is still there"
    );
}
