//! Preloaded images against a real containerd with no registry: an image archive in
//! `--image-preload-dir` (gzip compressed, as built by scripts/build-image.sh) is imported
//! through containerd's own API at start, pinned, and a static pod runs from it; a truncated
//! archive beside it is refused by name and disturbs nothing; a restart reads no archive again
//! (the record of archives already imported), but one whose image went from the runtime is
//! imported again; an archive added while picolet runs is imported and the pod waiting for it
//! starts. A pull list (`*.txt`) beside them: an image the runtime has is pinned, a bad line is
//! refused naming the file and line, a pull from an unreachable registry is logged once and
//! retried; a change of the list is read again. A second test: a zstd archive is imported, an
//! archive for another platform is refused by name, a directory picolet cannot read is reported
//! once and read when it can be, and image GC at its lowest thresholds removes an unused image
//! but keeps the pinned preloaded one.

mod support;

use support::{IMAGE, Pod, agent, containerd};

use containerd::PAUSE_IMAGE;

use std::process::Command;
use std::time::Duration;

use agent::{Agent, test_dir};
use containerd::ScratchContainerd;

const T: Duration = Duration::from_secs(90);
const PRELOADED: &str = "picolet.local/preload:1";
const LATE: &str = "picolet.local/preload-late:1";
const ABSENT: &str = "127.0.0.1:9/picolet/absent:1";

/// `(repo tag, pinned)` of every image the CRI lists.
fn cri_images(c: &ScratchContainerd) -> Vec<(String, bool)> {
    use picolet::cri::v1;
    let cri =
        picolet::cri::Cri::new(&c.endpoint(), None, picolet::cri::Deadlines::default()).unwrap();
    let list = picolet::rt::block_on(cri.list_images(v1::ListImagesRequest { filter: None }))
        .expect("ListImages");
    list.images
        .iter()
        .flat_map(|i| i.repo_tags.iter().map(|t| (t.clone(), i.pinned)))
        .collect()
}

/// Whether containerd of this version reports the pin label as `pinned` (1.6.22, 1.7.3, 2.x).
fn reports_pinned(version: &str) -> bool {
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let v = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    match (v.0, v.1) {
        (1, 6) => v.2 >= 22,
        (1, 7) => v.2 >= 3,
        (major, minor) => (major, minor) > (1, 7),
    }
}

#[test]
fn preloaded_archive_is_imported_pinned_and_runs_a_static_pod() {
    let dir = test_dir("preload");
    let c = ScratchContainerd::start(&dir.join("c"));
    let images = dir.join("a").join("preload");
    std::fs::create_dir_all(&images).unwrap();

    // The archive, built offline, gzip-compressed; and a truncated copy of it.
    let tar = dir.join("preload.tar");
    build_image(&tar, PRELOADED, "3600");
    let out = Command::new("gzip")
        .args(["-c", "-1"])
        .arg(&tar)
        .output()
        .expect("run gzip");
    assert!(out.status.success());
    std::fs::write(images.join("app.tar.gz"), &out.stdout).unwrap();
    let whole = std::fs::read(&tar).unwrap();
    std::fs::write(images.join("broken.tar"), &whole[..whole.len() / 2]).unwrap();

    assert!(
        !cri_images(&c).iter().any(|(t, _)| t == PRELOADED),
        "the image must not be there before picolet imports it"
    );
    assert!(
        cri_images(&c).contains(&(IMAGE.to_owned(), false)),
        "an image imported otherwise is not pinned"
    );
    // A pull list: an image the runtime has (pinned, not pulled), one from a registry that is
    // not there (port 9 refuses), and a line that names no image.
    let list = images.join("images.txt");
    std::fs::write(
        &list,
        format!("# the device's images\n{IMAGE}   # already here\n\n{ABSENT}\nnot an image\n"),
    )
    .unwrap();

    let mut a = Agent::start_with(
        &dir.join("a"),
        &c.endpoint(),
        &[format!("--image-preload-dir={}", images.display())],
    );
    a.write_manifest(
        "preloaded.yaml",
        &Pod::new("preloaded").image(PRELOADED).yaml(),
    );
    a.wait_for("the pod from the preloaded image running", T, |a| {
        a.phase("preloaded") == "Running"
    });

    // The record carries the pin label; the CRI reports it as `pinned` from containerd 1.6.22
    // and 1.7.3 on (older ones always say false, so image GC cannot see the pin there).
    let records = c.ctr(&["images", "ls"]);
    assert!(
        records
            .lines()
            .any(|l| l.starts_with(PRELOADED) && l.contains("io.cri-containerd.pinned=pinned")),
        "the image record is labelled pinned:\n{records}"
    );
    let listed = cri_images(&c);
    if !reports_pinned(&c.runtime_version()) {
        assert!(
            listed.contains(&(PRELOADED.to_owned(), false)),
            "{listed:?}"
        );
    } else {
        assert!(
            listed.contains(&(PRELOADED.to_owned(), true)),
            "the CRI lists the preloaded image pinned: {listed:?}"
        );
    }
    // The listed image the runtime had is pinned by the list (as reported above).
    a.wait_for("the listed image pinned", T, |a| {
        a.log_text().contains(&format!(
            "image pull list {} line 2: Image \"{IMAGE}\" already present on machine; pinned",
            list.display()
        ))
    });
    let records = c.ctr(&["images", "ls"]);
    assert!(
        records
            .lines()
            .any(|l| l.starts_with(IMAGE) && l.contains("io.cri-containerd.pinned=pinned")),
        "the listed image is labelled pinned:\n{records}"
    );
    a.wait_for("the failed pull logged", T, |a| {
        a.log_text().contains(&format!(
            "image pull list {} line 4: pulling \"{ABSENT}\": ",
            list.display()
        ))
    });
    let log = a.log_text();
    assert!(
        log.contains(&format!(
            "image pull list {} line 5: \"not an image\" is not an image reference",
            list.display()
        )),
        "{log}"
    );
    let failed = format!(
        "image pull list {} line 4: pulling \"{ABSENT}\": ",
        list.display()
    );
    assert_eq!(
        log.matches(&failed).count(),
        1,
        "logged once, then counted: {log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains(&failed)
                && l.contains("(retried with backoff; repeats are counted)")),
        "{log}"
    );
    let broken = images.join("broken.tar");
    assert!(
        log.contains(&format!("image archive {}: truncated", broken.display())),
        "the truncated archive is refused by name:\n{log}"
    );
    let imported = format!(
        "preloaded {}: {PRELOADED} (pinned; ",
        images.join("app.tar.gz").display()
    );
    assert_eq!(log.matches(&imported).count(), 1, "{log}");
    // The layer may be there already: picolet.local/busybox:1 is built from the same busybox.
    assert!(
        log.contains(&format!("{imported}3 blobs written, 0 present; "))
            || log.contains(&format!("{imported}2 blobs written, 1 present; ")),
        "{log}"
    );

    // The record of what became of each archive, under the root dir.
    let record_path = dir.join("a/kubelet/checkpoints/preloaded-images.json");
    let record = std::fs::read_to_string(&record_path).expect("the preload record");
    assert!(record.contains("\"refused\": \"image archive"), "{record}");
    assert!(
        record.contains(&format!("\"name\": \"{PRELOADED}\"")),
        "{record}"
    );

    // `picolet check` lists the directory, each archive and its state, and the pull list.
    let out = agent::picolet_command()
        .arg("check")
        .arg(format!("--root-dir={}", dir.join("a/kubelet").display()))
        .arg(format!("--image-preload-dir={}", images.display()))
        .arg(format!("--container-runtime-endpoint={}", c.endpoint()))
        .output()
        .expect("run picolet check");
    let check = String::from_utf8_lossy(&out.stdout);
    for want in [
        format!(
            "ok   image preload: {}: 2 archives, 1 pull lists; record ",
            images.display()
        ),
        format!(
            "ok   image archive: {}: imported and pinned: {PRELOADED} (sha256:",
            images.join("app.tar.gz").display()
        ),
        format!(
            "WARN image archive: {}: refused: image archive {}: truncated",
            broken.display(),
            broken.display()
        ),
        format!(
            "WARN image pull list: 2 images; image pull list {} line 5",
            list.display()
        ),
    ] {
        assert!(check.contains(&want), "{want:?} in:\n{check}");
    }

    // The next start reads neither archive again: the record matches the files, and the image
    // is still in the runtime, pinned. The pod is untouched.
    let containers = c.running_containers(&support::full("preloaded"));
    assert_eq!(containers.len(), 1, "one running container");
    a.restart();
    a.wait_for("the second preload pass", T, |a| {
        let log = a.log_text();
        log.contains(&format!("{imported}imported before, not read again; "))
            && log.contains("(refused before; not read again until the file is replaced)")
    });
    let log = a.log_text();
    assert!(
        log.contains(&format!("image archive {}: truncated", broken.display()))
            && log.contains("(refused before; not read again until the file is replaced)"),
        "{log}"
    );
    a.wait_for("the pod still running", T, |a| {
        a.phase("preloaded") == "Running"
    });
    assert_eq!(
        c.running_containers(&support::full("preloaded")),
        containers
    );
    assert!(cri_images(&c).iter().any(|(t, _)| t == PRELOADED));

    // An archive added while picolet runs (written beside, then renamed in, as an update tool
    // does) is imported, and a pod waiting for its image starts.
    a.write_manifest("late.yaml", &Pod::new("late").image(LATE).yaml());
    a.wait_for("the pull of the missing image failing", T, |a| {
        a.log_text().contains(&format!("\"{LATE}\"")) && a.phase("late") == "Pending"
    });
    let late = dir.join("late.tar");
    build_image(&late, LATE, "3601");
    let hidden = images.join(".late.tar.part");
    std::fs::copy(&late, &hidden).unwrap();
    std::fs::rename(&hidden, images.join("late.tar")).unwrap();
    // Well under the 60 s re-list: only the inotify watch can deliver it in time.
    a.wait_for(
        "the pod from the archive added while running",
        Duration::from_secs(30),
        |a| a.phase("late") == "Running",
    );
    let log = a.log_text();
    assert!(
        log.contains(&format!(
            "preloaded {}: {LATE} (pinned; 2 blobs written, 1 present; ",
            images.join("late.tar").display()
        )),
        "{log}"
    );
    // The archives already handled are not read again.
    assert_eq!(log.matches(&imported).count(), 2, "{log}");

    // A list changed while running (written beside, renamed in) is read again: its new image,
    // present, is pinned.
    let hidden = images.join(".images.txt.part");
    std::fs::write(&hidden, format!("{IMAGE}\n{PAUSE_IMAGE}\n")).unwrap();
    std::fs::rename(&hidden, &list).unwrap();
    a.wait_for(
        "the changed list read again",
        Duration::from_secs(30),
        |a| {
            a.log_text().contains(&format!(
            "image pull list {} line 2: Image \"{PAUSE_IMAGE}\" already present on machine; pinned",
            list.display()
        ))
        },
    );

    // An image removed from the runtime behind picolet's back: at the next start its archive
    // is read and imported again, the other one is not.
    c.ctr(&["images", "rm", LATE]);
    let late_imported = format!(
        "preloaded {}: {LATE} (pinned; ",
        images.join("late.tar").display()
    );
    a.restart();
    a.wait_for("the archive of the removed image imported again", T, |a| {
        a.log_text().matches(&late_imported).count() == 2
    });
    let log = a.log_text();
    let again = log.rsplit(&late_imported).next().unwrap_or("");
    assert!(
        again.contains("blobs written,"),
        "read again, not skipped: {log}"
    );
    assert_eq!(
        log.matches(&format!("{imported}imported before, not read again; "))
            .count(),
        2,
        "{log}"
    );
    assert!(cri_images(&c).iter().any(|(t, _)| t == LATE));
    a.wait_for("the late pod still running", T, |a| {
        a.phase("late") == "Running"
    });
}

/// Builds the busybox image `name` running `sleep SECONDS` (its own config per value).
fn build_image(tar: &std::path::Path, name: &str, seconds: &str) {
    containerd::build_image(tar, name, &[], &["sleep", seconds]);
}

/// Rewrites the OCI archive `src` into `dst` with its manifest's index entry saying it is for
/// `linux/<arch>`.
fn for_platform(src: &std::path::Path, dst: &std::path::Path, arch: &str) {
    let out = Command::new("python3")
        .arg("-c")
        .arg(
            r#"
import io, json, sys, tarfile
src, dst, arch = sys.argv[1:4]
with tarfile.open(src) as t, tarfile.open(dst, "w") as o:
    for m in t.getmembers():
        data = t.extractfile(m).read() if m.isfile() else None
        if m.name.lstrip("./") == "index.json":
            idx = json.loads(data)
            for d in idx["manifests"]:
                d["platform"] = {"architecture": arch, "os": "linux"}
            data = json.dumps(idx).encode()
            m.size = len(data)
        o.addfile(m, io.BytesIO(data) if data is not None else None)
"#,
        )
        .arg(src)
        .arg(dst)
        .arg(arch)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A zstd archive is imported; an archive for another platform is refused by name with the
/// platform; a directory picolet cannot read (picolet without CAP_DAC_OVERRIDE, the directory
/// mode 000) is reported and read once it can be, while a pod from an image already there runs
/// throughout; image GC with every threshold at its lowest removes an unused image but never
/// the pinned preloaded ones.
#[test]
fn zstd_other_platforms_unreadable_directory_and_gc_keeps_pinned_images() {
    let dir = test_dir("preload2");
    let c = ScratchContainerd::start(&dir.join("c"));
    let version = c.runtime_version();
    let images = dir.join("a").join("preload");
    let _ = std::fs::remove_dir_all(&images);
    std::fs::create_dir_all(&images).unwrap();
    const ZST: &str = "picolet.local/preload-zst:1";
    const FOREIGN: &str = "picolet.local/preload-foreign:1";
    const UNUSED: &str = "picolet.local/preload2-unused:1";

    let tar = dir.join("zst.tar");
    build_image(&tar, ZST, "3602");
    let out = Command::new("zstd")
        .args(["-q", "-3", "-c"])
        .arg(&tar)
        .output()
        .expect("run zstd (scripts/install-deps.sh installs it)");
    assert!(out.status.success());
    std::fs::write(images.join("app.tar.zst"), &out.stdout).unwrap();
    let foreign = dir.join("foreign.tar");
    build_image(&foreign, FOREIGN, "3603");
    let other = if cfg!(target_arch = "s390x") {
        "riscv64"
    } else {
        "s390x"
    };
    for_platform(&foreign, &images.join("foreign.tar"), other);
    // An image imported otherwise and used by nothing: image GC's to remove.
    let unused = dir.join("unused.tar");
    build_image(&unused, UNUSED, "3604");
    c.ctr(&["images", "import", &unused.display().to_string()]);

    // The directory is unreadable at start.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&images, std::fs::Permissions::from_mode(0o000)).unwrap();
    let a = Agent::start_wrapped(
        &dir.join("a"),
        &c.endpoint(),
        &[
            format!("--image-preload-dir={}", images.display()),
            "--image-gc-high-threshold=1".into(),
            "--image-gc-low-threshold=0".into(),
            "--minimum-image-ttl-duration=0s".into(),
        ],
        &[
            "setpriv",
            "--bounding-set",
            "-dac_override,-dac_read_search",
        ],
    );
    a.write_manifest("here.yaml", &Pod::new("here").image(IMAGE).yaml());
    a.write_manifest("zst.yaml", &Pod::new("zst").image(ZST).yaml());
    let unreadable = format!(
        "reading the image preload directory: image preload directory {}: Permission denied",
        images.display()
    );
    a.wait_for("the unreadable directory reported", T, |a| {
        a.log_text().contains(&unreadable)
    });
    a.wait_for("the pod from an image already there running", T, |a| {
        a.phase("here") == "Running"
    });
    assert_eq!(a.phase("zst"), "Pending", "its image is not imported yet");
    // Image GC ran (the first collection follows the first pod sync) and removed the unused
    // image, not the one of the running pod.
    a.wait_for("image GC removing the unused image", T, |a| {
        a.log_text().contains("removing image ") && !cri_images(&c).iter().any(|(t, _)| t == UNUSED)
    });

    // Readable again: read at the next rescan (within a minute), the zstd archive imported and
    // its pod started; the foreign one refused by name.
    std::fs::set_permissions(&images, std::fs::Permissions::from_mode(0o755)).unwrap();
    a.wait_for(
        "the pod from the zstd archive running",
        Duration::from_secs(120),
        |a| a.phase("zst") == "Running",
    );
    let log = a.log_text();
    assert_eq!(
        log.matches(&unreadable).count(),
        1,
        "logged once, then counted: {log}"
    );
    assert!(
        log.contains("reading the image preload directory: succeeded after "),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "preloaded {}: {ZST} (pinned; ",
            images.join("app.tar.zst").display()
        )),
        "{log}"
    );
    let foreign_in = images.join("foreign.tar");
    let node_platform = match std::env::consts::ARCH {
        "x86_64" => "linux/amd64",
        "aarch64" => "linux/arm64",
        "arm" => "linux/arm/v7",
        a => panic!("no platform known for {a}"),
    };
    assert!(
        log.contains(&format!(
            "image archive {}: no image for platform {node_platform}",
            foreign_in.display()
        )),
        "the foreign archive refused by name:\n{log}"
    );
    assert!(!cri_images(&c).iter().any(|(t, _)| t == FOREIGN));

    // Image GC under pressure again (picolet restarted: the first collection runs at once):
    // the preloaded image, now unused (its pod removed), is pinned and kept; the pod's image
    // of "here" is in use.
    a.remove_manifest("zst.yaml");
    a.wait_for("the zst pod gone", T, |a| a.pod("zst").is_none());
    let mut a = a;
    const COLLECTING: &str = "disk usage on the image filesystem is ";
    let before = a.log_text().matches(COLLECTING).count();
    assert!(before >= 1, "the first run collected: {}", a.log_text());
    a.restart();
    a.wait_for("the collection after the restart", T, |a| {
        a.log_text().matches(COLLECTING).count() > before
    });
    // The removals of that collection are logged before the next line of the loop.
    std::thread::sleep(Duration::from_secs(2));
    let listed = cri_images(&c);
    // Kept on every containerd: where the CRI does not report the pin (before 1.6.22), image
    // GC keeps the images the preload record names.
    assert!(
        listed
            .iter()
            .any(|(t, p)| t == ZST && *p == reports_pinned(&version)),
        "the preloaded image kept by image GC (pinned as containerd {version} reports it): \
         {listed:?}\n{}",
        a.log_text()
    );
    assert!(listed.iter().any(|(t, _)| t == IMAGE));
}
