//! Node disk pressure end to end on a disk of its own: the test makes a 256 MiB ext4 filesystem
//! on a loop device and puts the node's whole disk on it (picolet's `--root-dir` and pod logs,
//! the nodefs; containerd's root with its content store and overlayfs snapshots, the imagefs,
//! so one filesystem as on a device with one SD card). With `nodefs.available<45%`, a pod
//! filling its writable layer brings the node to disk pressure; picolet first reclaims at node
//! level (an unused image goes), reads again, and evicts the filler, ranked as upstream ranks
//! (usage above requests before priority: the filler has the higher priority, the quiet pod
//! the lower one but stays within its request), with upstream's message, and waits for its
//! containers to be gone before the next round. The pod within its limits keeps its container;
//! the disk's space comes back. Fails (never skips) without
//! containerd, runc, busybox, losetup and mkfs.ext4.
//!
//! The loop device and every mount on it go on every exit, a failed assertion too: [`LoopDisk`]
//! undoes them in `Drop`, after the agent and the containerd (declared after it) are stopped.

mod support;

use support::pods::{IMAGE, container, manifest};
use support::{agent, containerd, full};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agent::{Agent, test_dir};
use containerd::ScratchContainerd;
use serde_json::json;

const MIB: u64 = 1 << 20;
const DISK: u64 = 256 * MIB;
const T: Duration = Duration::from_secs(150);
const UNUSED: &str = "picolet.local/disk-unused:1";

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd} (util-linux, e2fsprogs): {e}"));
    assert!(
        out.status.success(),
        "{cmd} {} failed: {}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A filesystem on a loop device, mounted; unmounted and detached when dropped.
struct LoopDisk {
    image: PathBuf,
    mount: PathBuf,
    device: String,
}

impl LoopDisk {
    /// Undoes what an earlier run killed before its `Drop` left: the scratch containerd on the
    /// disk, the mounts on it, the loop device behind it.
    fn clear(image: &Path, mount: &Path) {
        if picolet::volume::mounts_under(mount)
            .iter()
            .any(|m| m == mount)
        {
            let _ = Command::new("bash")
                .arg(support::script("scratch-containerd.sh"))
                .arg("stop")
                .arg(mount.join("c"))
                .output();
        }
        for m in picolet::volume::mounts_under(mount) {
            let _ = nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH);
        }
        // `losetup -j FILE` lists the devices backed by it.
        let listed = Command::new("losetup").arg("-j").arg(image).output();
        for line in listed
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
            .lines()
        {
            if let Some(dev) = line.split(':').next() {
                let _ = Command::new("losetup").args(["-d", dev]).output();
            }
        }
        let _ = std::fs::remove_file(image);
    }

    fn create(dir: &Path) -> LoopDisk {
        let image = dir.join("disk.img");
        let mount = dir.join("m");
        Self::clear(&image, &mount);
        std::fs::create_dir_all(&mount).unwrap();
        let f = std::fs::File::create(&image).unwrap();
        f.set_len(DISK).unwrap();
        drop(f);
        let device = run(
            "losetup",
            &["--find", "--show", image.to_str().expect("a UTF-8 path")],
        );
        // From here on Drop undoes what is done.
        let disk = LoopDisk {
            image,
            mount,
            device,
        };
        // No blocks reserved for root: available is what is free, as on most devices' data
        // partitions.
        run("mkfs.ext4", &["-q", "-F", "-m", "0", &disk.device]);
        run(
            "mount",
            &[&disk.device, disk.mount.to_str().expect("a UTF-8 path")],
        );
        disk
    }

    /// (bytes available to unprivileged users, as the nodefs signal reads them; capacity).
    #[allow(
        clippy::useless_conversion,
        reason = "statvfs counts are u32 on 32-bit targets (armv7)"
    )]
    fn space(&self) -> (u64, u64) {
        let s = nix::sys::statvfs::statvfs(&self.mount).expect("statvfs of the loop disk");
        let frsize = u64::from(s.fragment_size());
        (
            u64::from(s.blocks_available()) * frsize,
            u64::from(s.blocks()) * frsize,
        )
    }

    fn available(&self) -> u64 {
        self.space().0
    }

    fn capacity(&self) -> u64 {
        self.space().1
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        // After a failure, picolet's log and containerd's outlive the disk, beside its image.
        if std::thread::panicking() {
            let keep = self.image.with_file_name("failed");
            let _ = std::fs::create_dir_all(&keep);
            for (from, to) in [
                ("a/picolet.log", "picolet.log"),
                ("c/containerd.log", "containerd.log"),
            ] {
                if std::fs::copy(self.mount.join(from), keep.join(to)).is_ok() {
                    eprintln!("kept {}", keep.join(to).display());
                }
            }
        }
        // Whatever the agent or containerd left mounted on the disk (deepest first), then the
        // disk itself: a plain unmount, and a lazy one when something still holds it.
        for m in picolet::volume::mounts_under(&self.mount) {
            if nix::mount::umount(&m).is_err() {
                let _ = nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH);
            }
        }
        let detached = Command::new("losetup")
            .args(["-d", &self.device])
            .output()
            .is_ok_and(|o| o.status.success());
        if !detached {
            eprintln!(
                "losetup -d {} failed; it is detached once the last user goes",
                self.device
            );
        }
        let _ = std::fs::remove_file(&self.image);
    }
}

/// Builds an image with its own config (so its own id) and imports it, as `e2e_gc.rs` does.
fn import(c: &ScratchContainerd, dir: &Path, name: &str) {
    let tar = dir.join("unused.tar");
    run(
        "bash",
        &[
            support::script("build-image.sh").to_str().unwrap(),
            tar.to_str().unwrap(),
            name,
            "sleep",
            "1",
        ],
    );
    c.ctr(&["images", "import", tar.to_str().unwrap()]);
    std::fs::remove_file(&tar).unwrap();
}

fn has_image(c: &ScratchContainerd, name: &str) -> bool {
    c.ctr(&["images", "ls", "-q"]).lines().any(|l| l == name)
}

fn status_of(a: &Agent, pod: &str) -> (String, String, String) {
    let st = a.status(pod);
    let s = |k: &str| st[k].as_str().unwrap_or_default().to_owned();
    (s("phase"), s("reason"), s("message"))
}

#[test]
fn disk_pressure_reclaims_then_evicts_the_pod_filling_the_disk_and_spares_the_one_within_limits() {
    let d = test_dir("diskfill");
    // Declared first, so dropped last: after the agent and the containerd that use it.
    let disk = LoopDisk::create(&d);
    let c = ScratchContainerd::start(&disk.mount.join("c"));
    import(&c, &disk.mount, UNUSED);
    assert!(has_image(&c, UNUSED));

    let a = Agent::start_with(
        &disk.mount.join("a"),
        &c.endpoint(),
        &[
            // Giving --eviction-hard replaces every default: this one signal only.
            "--eviction-hard=nodefs.available<45%".to_owned(),
            // The unused image was imported a moment ago; upstream keeps an image younger than
            // the minimum age even under pressure.
            "--minimum-image-ttl-duration=0s".to_owned(),
        ],
    );
    let with = |mut c: serde_json::Value, k: &str, v: serde_json::Value| {
        c[k] = v;
        c
    };
    // Within its limits and its request (5 MiB of 16Mi), at the lowest priority: ranked by
    // priority alone it would go first.
    a.write_manifest(
        "b-quiet.json",
        &manifest(
            "b-quiet",
            json!({"terminationGracePeriodSeconds": 1, "priority": 0,
                "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "32Mi"}}],
                "containers": [with(with(container("main",
                    "dd if=/dev/zero of=/fill bs=1048576 count=2 && dd if=/dev/zero of=/scratch/fill bs=1048576 count=3 && sync && sleep 3600"),
                    "volumeMounts", json!([{"name": "scratch", "mountPath": "/scratch"}])),
                    "resources", json!({"requests": {"ephemeral-storage": "16Mi"}, "limits": {"ephemeral-storage": "64Mi"}}))]}),
        ),
    );
    a.wait_for("the quiet pod running", T, |_| {
        c.running_containers(&full("b-quiet")).len() == 1
    });
    let quiet = c.running_containers(&full("b-quiet"));
    let before = disk.available();
    eprintln!(
        "the disk: {} MiB, {} MiB available before the filler",
        disk.capacity() / MIB,
        before / MIB
    );

    // No request, no limit, a higher priority: 8 MiB a second into its writable layer, 184 MiB
    // in all, so the disk crosses the threshold (45% of 256 MiB available) and is not full by
    // the next round.
    a.write_manifest(
        "a-filler.json",
        &manifest(
            "a-filler",
            json!({"terminationGracePeriodSeconds": 30, "priority": 1000,
                "containers": [container("main",
                    "i=0; while [ $i -lt 23 ]; do dd if=/dev/zero of=/fill$i bs=1048576 count=8 2>/dev/null; sync; i=$((i+1)); sleep 1; done; sleep 3600")]}),
        ),
    );
    a.wait_for("the filler evicted", T, |a| {
        let (phase, reason, _) = status_of(a, "a-filler");
        phase == "Failed" && reason == "Evicted"
    });
    let (_, _, message) = status_of(&a, "a-filler");
    eprintln!("the filler's message: {message}");
    assert!(
        message.starts_with(
            "The node was low on resource: ephemeral-storage. Threshold quantity: 45%, available: "
        ),
        "{message}"
    );
    assert!(
        message.contains("Container main was using ")
            && message.ends_with(", request is 0, has larger consumption of ephemeral-storage. "),
        "{message}"
    );

    // Node-level reclaim came first, and the unused image went in it; the sandbox image and
    // the pods' image stay.
    let log = a.log_text();
    let reclaim = "eviction: nodefs.available threshold met; reclaiming node-level resources first";
    let evicting = "eviction: nodefs.available threshold met: evicting pod default/";
    assert!(log.contains(reclaim), "no reclaim before the eviction");
    let (r, e) = (log.find(reclaim).unwrap(), log.find(evicting).unwrap());
    assert!(r < e, "the reclaim is logged before the eviction");
    let removed = log
        .find("(disk pressure: every unused image)")
        .expect("the unused image removed under disk pressure");
    assert!(removed < e, "the image went before the eviction");
    assert!(!has_image(&c, UNUSED), "the unused image is gone");
    assert!(has_image(&c, IMAGE) && has_image(&c, containerd::PAUSE_IMAGE));
    assert_eq!(
        log.matches(evicting).count(),
        1,
        "one pod evicted: {}",
        support::tail(&log, 60)
    );
    assert!(
        log.contains(&format!("evicting pod default/{} ", full("a-filler"))),
        "the filler is the one evicted"
    );

    // The filler's container (and its writable layer) goes, so the space comes back.
    a.wait_for(
        "the filler's container gone",
        Duration::from_secs(30),
        |_| c.running_containers(&full("a-filler")).is_empty(),
    );
    let threshold = disk.capacity() * 45 / 100;
    a.wait_for(
        "the disk's space back above the threshold",
        Duration::from_secs(30),
        |_| disk.available() > threshold,
    );
    // The round after the eviction waited for the filler's containers to be gone.
    a.wait_for("the eviction's wait for the cleanup", T, |a| {
        a.log_text().contains(&format!(
            "eviction: pods successfully cleaned up: default/{}",
            full("a-filler")
        ))
    });
    eprintln!(
        "available: {} MiB before the filler, {} MiB after its eviction",
        before / MIB,
        disk.available() / MIB
    );
    // A round (10 s) later the quiet pod still runs in the same container: nothing more was
    // evicted.
    std::thread::sleep(Duration::from_secs(12));
    let (phase, reason, _) = status_of(&a, "b-quiet");
    assert_eq!((phase.as_str(), reason.as_str()), ("Running", ""));
    assert_eq!(c.running_containers(&full("b-quiet")), quiet);
    assert_eq!(a.restarts("b-quiet"), 0);
    assert_eq!(a.log_text().matches(evicting).count(), 1);
    drop(a);
    drop(c);
    drop(disk);
}
