//! Image garbage collection, as the kubelet's image_gc_manager: every 5 minutes the images in
//! the runtime are detected (first seen, last used by a container, in memory), unused images
//! older than `imageMaximumGCAge` are removed, and when the image filesystem is used at
//! `imageGCHighThresholdPercent` or more, unused images are removed, least recently used first,
//! until usage is back at `imageGCLowThresholdPercent`.
//!
//! Never removed: an image some container in the runtime uses (running or exited, picolet's or
//! not), an image the runtime pins, the sandbox image (the runtime's configured one, and
//! `--pod-infra-container-image`), an image younger than `imageMinimumGCAge`, and, beyond
//! upstream, an image any desired pod names (static pods, and API pods from the checkpoint):
//! a device cut off from its registry could not pull it again. Collection waits until every
//! pod source has been seen, so a slow source never leaves its pods' images unprotected.
//!
//! The selection is pure ([`detect`], [`select_old`], [`select_for_space`]); the manager
//! ([`ImageGcManager`]) does the calls through the runtime seam and takes its time from `rt`.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::cri::v1;
use crate::rt;

use super::manager::RuntimeManager;

/// How often images are detected and collected (the kubelet's ImageGCPeriod).
pub const IMAGE_GC_PERIOD: Duration = Duration::from_secs(300);

/// How often a collection waiting for the pod sources looks again.
const READY_POLL: Duration = Duration::from_secs(1);

/// Where containerd keeps its data by default: the image filesystem when the runtime does not
/// say (ImageFsInfo unanswered).
const CONTAINERD_ROOT: &str = "/var/lib/containerd";

/// The kubelet's image GC policy (`imageGCHighThresholdPercent`, `imageGCLowThresholdPercent`,
/// `imageMinimumGCAge`, `imageMaximumGCAge`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageGcPolicy {
    /// Usage (percent) at or above which images are collected.
    pub high_threshold_percent: u8,
    /// Usage (percent) collection frees down to.
    pub low_threshold_percent: u8,
    /// An image detected more recently than this is never collected.
    pub min_age: Duration,
    /// An image unused for longer than this is collected whatever the usage; zero: never.
    pub max_age: Duration,
}

impl Default for ImageGcPolicy {
    fn default() -> Self {
        ImageGcPolicy {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            min_age: Duration::from_secs(120),
            max_age: Duration::ZERO,
        }
    }
}

impl ImageGcPolicy {
    /// A high threshold of 100 without a maximum age turns image GC off, as upstream.
    pub fn enabled(&self) -> bool {
        self.high_threshold_percent < 100 || !self.max_age.is_zero()
    }
}

/// What picolet remembers of an image (in memory only, as the kubelet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRecord {
    /// When this image was first seen in the runtime.
    pub first_detected: Instant,
    /// When a container was last seen using it; never, if none was.
    pub last_used: Option<Instant>,
    pub size: u64,
    /// The runtime pins it (containerd 1.7 pins its sandbox image).
    pub pinned: bool,
    /// Its tags and digests, to match references that name it.
    pub names: Vec<String>,
}

/// The records by image id.
pub type Records = BTreeMap<String, ImageRecord>;

/// An image as the runtime lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedImage {
    pub id: String,
    /// Tags and digests.
    pub names: Vec<String>,
    pub size: u64,
    pub pinned: bool,
}

impl ListedImage {
    fn from_cri(im: &v1::Image) -> ListedImage {
        ListedImage {
            id: im.id.clone(),
            names: im
                .repo_tags
                .iter()
                .chain(&im.repo_digests)
                .cloned()
                .collect(),
            size: im.size,
            pinned: im.pinned,
        }
    }
}

/// References (ids, tags, digests) of images that must stay, by why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keep {
    /// Images of containers in the runtime, running or exited.
    pub in_use: HashSet<String>,
    /// The runtime's sandbox image.
    pub sandbox: HashSet<String>,
    /// Images the desired pods name (static pods, checkpointed API pods).
    pub needed: HashSet<String>,
}

fn named(id: &str, names: &[String], refs: &HashSet<String>) -> bool {
    refs.contains(id) || names.iter().any(|n| refs.contains(n))
}

impl Keep {
    /// Why an image must stay, if it must.
    pub fn reason(&self, id: &str, r: &ImageRecord) -> Option<&'static str> {
        if r.pinned {
            Some("pinned by the runtime")
        } else if named(id, &r.names, &self.in_use) {
            Some("used by a container")
        } else if named(id, &r.names, &self.sandbox) {
            Some("the sandbox image")
        } else if named(id, &r.names, &self.needed) {
            Some("named by a pod of this node")
        } else {
            None
        }
    }
}

/// Updates the records from a listing (the kubelet's detectImages): an image seen for the
/// first time is detected now, one a container uses was last used now, one no longer listed
/// is forgotten.
pub fn detect(
    records: &mut Records,
    images: &[ListedImage],
    in_use: &HashSet<String>,
    now: Instant,
) {
    let listed: HashSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
    records.retain(|id, _| listed.contains(id.as_str()));
    for im in images {
        let r = records.entry(im.id.clone()).or_insert_with(|| ImageRecord {
            first_detected: now,
            last_used: None,
            size: 0,
            pinned: false,
            names: Vec::new(),
        });
        if named(&im.id, &im.names, in_use) {
            r.last_used = Some(now);
        }
        r.size = im.size;
        r.pinned = im.pinned;
        r.names.clone_from(&im.names);
    }
}

/// An image to remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: String,
    pub size: u64,
}

/// The images that may go, in the order they go: least recently used first (never used before
/// any use), ties broken by first detection, then by id.
pub fn eviction_order(records: &Records, keep: &Keep) -> Vec<Candidate> {
    let mut v: Vec<(&String, &ImageRecord)> = records
        .iter()
        .filter(|(id, r)| keep.reason(id, r).is_none())
        .collect();
    v.sort_by(|(a_id, a), (b_id, b)| {
        (a.last_used, a.first_detected, a_id).cmp(&(b.last_used, b.first_detected, b_id))
    });
    v.into_iter()
        .map(|(id, r)| Candidate {
            id: id.clone(),
            size: r.size,
        })
        .collect()
}

/// Images unused for longer than the maximum age (the kubelet's freeOldImages). An image never
/// used counts from its first detection. Nothing goes before picolet has run for the maximum age
/// itself: what it knows of use is in memory only.
pub fn select_old(
    records: &Records,
    keep: &Keep,
    policy: &ImageGcPolicy,
    now: Instant,
    began: Instant,
) -> Vec<Candidate> {
    if policy.max_age.is_zero() || now.saturating_duration_since(began) <= policy.max_age {
        return Vec::new();
    }
    eviction_order(records, keep)
        .into_iter()
        .filter(|c| {
            let r = &records[&c.id];
            let since = r.last_used.unwrap_or(r.first_detected);
            now.saturating_duration_since(since) > policy.max_age
        })
        .collect()
}

/// The image filesystem's size and free space, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsUsage {
    pub capacity: u64,
    pub available: u64,
}

/// What collection for space decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpacePlan {
    /// Usage of the image filesystem, percent.
    pub usage_percent: u64,
    /// Bytes to free to get back to the low threshold.
    pub bytes_to_free: u64,
    /// What to remove, oldest use first, until enough is freed.
    pub remove: Vec<Candidate>,
    /// Further eligible images, in order, to take from when a removal fails.
    pub spare: Vec<Candidate>,
}

/// The percentage of `part` in `whole`, rounded down; `whole` is not zero.
fn percent(part: u64, whole: u64) -> u64 {
    u64::try_from(u128::from(part) * 100 / u128::from(whole)).unwrap_or(100)
}

/// Decides collection for space: nothing below the high threshold; above it, the unused
/// images old enough, least recently used first, until the filesystem would be back at the
/// low threshold. `gone` are images already removed this round (by age).
pub fn select_for_space(
    records: &Records,
    keep: &Keep,
    policy: &ImageGcPolicy,
    fs: FsUsage,
    now: Instant,
    gone: &HashSet<String>,
) -> Result<Option<SpacePlan>, String> {
    if fs.capacity == 0 {
        return Err("invalid capacity 0 on image filesystem".into());
    }
    let available = fs.available.min(fs.capacity);
    let usage_percent = 100 - percent(available, fs.capacity);
    if usage_percent < u64::from(policy.high_threshold_percent) {
        return Ok(None);
    }
    let low_free = u128::from(fs.capacity) * u128::from(100 - policy.low_threshold_percent) / 100;
    let bytes_to_free =
        u64::try_from(low_free.saturating_sub(u128::from(available))).unwrap_or(u64::MAX);
    let mut plan = SpacePlan {
        usage_percent,
        bytes_to_free,
        ..SpacePlan::default()
    };
    let mut freed = 0u64;
    for c in eviction_order(records, keep) {
        if gone.contains(&c.id) {
            continue;
        }
        // Just pulled, maybe for a container about to start.
        if now.saturating_duration_since(records[&c.id].first_detected) < policy.min_age {
            continue;
        }
        if freed < bytes_to_free {
            freed = freed.saturating_add(c.size);
            plan.remove.push(c);
        } else {
            plan.spare.push(c);
        }
    }
    Ok(Some(plan))
}

/// Every unused image old enough to go, least recently used first (what
/// [`ImageGcManager::delete_unused_images`] removes).
pub fn select_unused(
    records: &Records,
    keep: &Keep,
    policy: &ImageGcPolicy,
    now: Instant,
) -> Vec<Candidate> {
    eviction_order(records, keep)
        .into_iter()
        .filter(|c| now.saturating_duration_since(records[&c.id].first_detected) >= policy.min_age)
        .collect()
}

/// What one collection did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Image ids removed, in order.
    pub removed: Vec<String>,
    /// Bytes the removed images took.
    pub freed: u64,
    /// Bytes collection for space wanted to free (zero below the high threshold).
    pub wanted: u64,
    /// Bytes collection for space freed (`freed` also counts removals by age).
    pub freed_for_space: u64,
}

impl GcReport {
    /// The kubelet's complaint when not enough could be freed.
    pub fn shortfall(&self) -> Option<String> {
        (self.freed_for_space < self.wanted).then(|| {
            format!(
                "failed to garbage collect required amount of images: wanted to free {} bytes, \
                 but only {} bytes were eligible and removed",
                self.wanted, self.freed_for_space
            )
        })
    }
}

/// Measures the filesystem holding a path.
pub type FsStat = Rc<dyn Fn(PathBuf) -> Pin<Box<dyn Future<Output = std::io::Result<FsUsage>>>>>;

fn to_u64<T: TryInto<u64>>(x: T) -> u64 {
    x.try_into().unwrap_or(u64::MAX)
}

/// statvfs of the filesystem holding `path`, on the blocking pool: size, and the space an
/// unprivileged writer may still use (as cAdvisor reports it).
pub fn statvfs(path: PathBuf) -> Pin<Box<dyn Future<Output = std::io::Result<FsUsage>>>> {
    Box::pin(rt::unblock(move || {
        let s = nix::sys::statvfs::statvfs(&path).map_err(std::io::Error::from)?;
        let frag = to_u64(s.fragment_size());
        Ok(FsUsage {
            capacity: to_u64(s.blocks()).saturating_mul(frag),
            available: to_u64(s.blocks_available()).saturating_mul(frag),
        })
    }))
}

/// The sandbox image named in the runtime's verbose status (containerd: `sandboxImage` in the
/// CRI plugin's configuration, or the `sandbox` pinned image of containerd 2).
pub fn sandbox_image_from_info(info: &std::collections::HashMap<String, String>) -> Option<String> {
    let config: serde_json::Value = serde_json::from_str(info.get("config")?).ok()?;
    let s = config
        .get("sandboxImage")
        .or_else(|| config.get("pinnedImages").and_then(|p| p.get("sandbox")))?
        .as_str()?;
    (!s.is_empty()).then(|| s.to_owned())
}

/// The image GC manager: records of the images, and the collection every [`IMAGE_GC_PERIOD`].
pub struct ImageGcManager {
    rm: Rc<RuntimeManager>,
    policy: ImageGcPolicy,
    /// `--pod-infra-container-image`, kept whatever the runtime says.
    pod_infra_image: Option<String>,
    records: RefCell<Records>,
    /// When the manager started: maximum-age collection waits that long.
    began: Instant,
    fs_stat: FsStat,
    /// Names of images that are never collected whatever the runtime reports: the preloaded
    /// ones (a containerd before 1.6.22 does not report their pin through the CRI).
    preloaded: Option<Rc<dyn Fn() -> Vec<String>>>,
}

impl ImageGcManager {
    pub fn new(
        rm: Rc<RuntimeManager>,
        policy: ImageGcPolicy,
        pod_infra_image: Option<String>,
    ) -> Self {
        ImageGcManager {
            rm,
            policy,
            pod_infra_image: pod_infra_image.filter(|s| !s.is_empty()),
            records: RefCell::new(Records::new()),
            began: rt::now(),
            fs_stat: Rc::new(statvfs),
            preloaded: None,
        }
    }

    /// Keeps the images `names` gives (asked at each collection) as if they were pinned.
    pub fn with_preloaded(mut self, names: Rc<dyn Fn() -> Vec<String>>) -> Self {
        self.preloaded = Some(names);
        self
    }

    /// The images a collection must keep beside the running ones: the desired pods' and the
    /// preloaded ones.
    fn needed_with_preloaded(&self, needed: &[String]) -> Vec<String> {
        let mut all = needed.to_vec();
        if let Some(f) = &self.preloaded {
            all.extend(f());
        }
        all
    }

    /// Measures the image filesystem with `f` instead of statvfs.
    pub fn with_fs_stat(mut self, f: FsStat) -> Self {
        self.fs_stat = f;
        self
    }

    /// A copy of the records, by image id.
    pub fn records(&self) -> Records {
        self.records.borrow().clone()
    }

    /// Lists the images and the containers, and updates the records.
    pub async fn detect_images(&self) -> Result<HashSet<String>, String> {
        let images = self
            .rm
            .images
            .list_images()
            .await
            .map_err(|e| format!("listing images: {e}"))?;
        let containers = self
            .rm
            .runtime
            .list_containers(None)
            .await
            .map_err(|e| format!("listing containers: {e}"))?;
        let mut in_use = HashSet::new();
        for c in containers {
            if !c.image_ref.is_empty() {
                in_use.insert(c.image_ref);
            }
            if let Some(i) = c.image.filter(|i| !i.image.is_empty()) {
                in_use.insert(i.image);
            }
        }
        // The runtime's containers do not name the images their image volumes mount.
        in_use.extend(self.rm.volume_images());
        let listed: Vec<ListedImage> = images.iter().map(ListedImage::from_cri).collect();
        detect(&mut self.records.borrow_mut(), &listed, &in_use, rt::now());
        Ok(in_use)
    }

    /// Each reference with the id the runtime resolves it to (references are normalised by
    /// the runtime: `busybox` is `docker.io/library/busybox:latest`).
    async fn resolve(&self, refs: impl IntoIterator<Item = String>) -> HashSet<String> {
        let mut out = HashSet::new();
        for r in refs {
            match self.rm.images.image_status(&r).await {
                Ok(Some(im)) => {
                    out.insert(im.id);
                }
                Ok(None) => {}
                Err(e) => log::debug!("image GC: resolving {r}: {e}"),
            }
            out.insert(r);
        }
        out
    }

    /// The sandbox images: the runtime's configured one and `--pod-infra-container-image`.
    async fn sandbox_images(&self) -> HashSet<String> {
        let mut refs: Vec<String> = self.pod_infra_image.iter().cloned().collect();
        match self.rm.runtime.status(true).await {
            Ok(s) => refs.extend(sandbox_image_from_info(&s.info)),
            Err(e) => log::debug!("image GC: runtime status: {e}"),
        }
        self.resolve(refs).await
    }

    /// The filesystem holding the runtime's images.
    async fn image_fs(&self) -> Result<FsUsage, String> {
        let mount = match self.rm.images.image_fs_info().await {
            Ok(r) => r
                .image_filesystems
                .into_iter()
                .filter_map(|f| f.fs_id.map(|i| i.mountpoint))
                .find(|m| !m.is_empty()),
            Err(e) => {
                log::debug!("image GC: ImageFsInfo: {e}");
                None
            }
        };
        let path = mount.map_or_else(|| PathBuf::from(CONTAINERD_ROOT), PathBuf::from);
        (self.fs_stat)(path.clone())
            .await
            .map_err(|e| format!("measuring the image filesystem {}: {e}", path.display()))
    }

    async fn remove(&self, c: &Candidate, why: &str) -> bool {
        log::info!("removing image {} ({why}) to free {} bytes", c.id, c.size);
        match self.rm.images.remove_image(&c.id).await {
            Ok(()) => {
                self.records.borrow_mut().remove(&c.id);
                true
            }
            Err(e) => {
                log::warn!("removing image {}: {e}", c.id);
                false
            }
        }
    }

    /// One collection (the kubelet's GarbageCollect). `needed` are the images the desired pods
    /// name. Freeing less than wanted is no error here: [`GcReport::shortfall`] says so.
    pub async fn garbage_collect(&self, needed: &[String]) -> Result<GcReport, String> {
        let began = rt::now_nanos();
        let report = self.collect(needed).await?;
        self.prune_pull_records(began);
        Ok(report)
    }

    /// After a collection: the pull records of images no longer listed go, as upstream's
    /// post-GC hook prunes them. `began` is the wall time taken before the images were listed.
    fn prune_pull_records(&self, began: i64) {
        let left: HashSet<String> = self.records.borrow().keys().cloned().collect();
        let n = self.rm.pull_records.prune_unknown_records(&left, began);
        if n > 0 {
            log::info!(
                "image garbage collection removed the pull records of {n} images no longer on the node"
            );
        }
    }

    async fn collect(&self, needed: &[String]) -> Result<GcReport, String> {
        let in_use = self.detect_images().await?;
        let keep = Keep {
            in_use,
            sandbox: self.sandbox_images().await,
            needed: self.resolve(self.needed_with_preloaded(needed)).await,
        };
        let now = rt::now();
        let mut report = GcReport::default();
        let mut gone = HashSet::new();
        let old = select_old(&self.records.borrow(), &keep, &self.policy, now, self.began);
        for c in old {
            if self
                .remove(&c, "unused for longer than imageMaximumGCAge")
                .await
            {
                report.freed += c.size;
                report.removed.push(c.id.clone());
                gone.insert(c.id);
            }
        }
        if self.policy.high_threshold_percent >= 100 {
            return Ok(report);
        }
        let fs = self.image_fs().await?;
        let plan = select_for_space(&self.records.borrow(), &keep, &self.policy, fs, now, &gone)?;
        let Some(plan) = plan else {
            return Ok(report);
        };
        log::info!(
            "disk usage on the image filesystem is {}%, at or over the high threshold ({}%): \
             trying to free {} bytes down to the low threshold ({}%)",
            plan.usage_percent,
            self.policy.high_threshold_percent,
            plan.bytes_to_free,
            self.policy.low_threshold_percent
        );
        report.wanted = plan.bytes_to_free;
        let mut freed = 0u64;
        let mut spare = plan.spare.into_iter();
        let mut queue: std::collections::VecDeque<Candidate> = plan.remove.into();
        while let Some(c) = queue.pop_front() {
            if freed >= plan.bytes_to_free {
                break;
            }
            if self
                .remove(&c, "image filesystem over the high threshold")
                .await
            {
                freed += c.size;
                report.removed.push(c.id);
            } else if let Some(next) = spare.next() {
                queue.push_back(next);
            }
        }
        report.freed += freed;
        report.freed_for_space = freed;
        Ok(report)
    }

    /// Removes every unused image old enough, whatever the disk usage (the kubelet's
    /// DeleteUnusedImages, which its eviction manager calls under disk pressure before it
    /// evicts a pod). The same images are kept as in [`Self::garbage_collect`]. Returns the bytes
    /// freed.
    pub async fn delete_unused_images(&self, needed: &[String]) -> Result<u64, String> {
        let began = rt::now_nanos();
        let keep = Keep {
            in_use: self.detect_images().await?,
            sandbox: self.sandbox_images().await,
            needed: self.resolve(self.needed_with_preloaded(needed)).await,
        };
        let now = rt::now();
        let plan = select_unused(&self.records.borrow(), &keep, &self.policy, now);
        let mut freed = 0u64;
        for c in plan {
            if self.remove(&c, "disk pressure: every unused image").await {
                freed = freed.saturating_add(c.size);
            }
        }
        self.prune_pull_records(began);
        Ok(freed)
    }

    /// Collects every [`IMAGE_GC_PERIOD`], the first time as soon as `needed` answers (it
    /// answers `None` until every pod source has been seen and the runtime listed).
    pub async fn run(self: Rc<Self>, needed: impl Fn() -> Option<Vec<String>>) {
        if !self.policy.enabled() {
            log::info!("image garbage collection is off (imageGCHighThresholdPercent 100)");
            return;
        }
        loop {
            let Some(images) = needed() else {
                rt::sleep(READY_POLL).await;
                continue;
            };
            match self.garbage_collect(&images).await {
                Ok(r) => {
                    if !r.removed.is_empty() {
                        log::info!(
                            "image garbage collection removed {} images, {} bytes",
                            r.removed.len(),
                            r.freed
                        );
                    }
                    if let Some(e) = r.shortfall() {
                        log::warn!("{e}");
                    }
                }
                Err(e) => log::warn!("image garbage collection failed: {e}"),
            }
            rt::sleep(IMAGE_GC_PERIOD).await;
        }
    }
}

/// The image references a pod's containers and image volumes name.
pub fn pod_images(pod: &crate::api::Pod) -> impl Iterator<Item = &str> {
    pod.spec
        .init_containers
        .iter()
        .chain(&pod.spec.containers)
        .map(|c| c.image.as_str())
        .chain(
            pod.spec
                .volumes
                .iter()
                .filter_map(|v| v.image.as_ref().map(|i| i.reference.as_str())),
        )
        .filter(|i| !i.is_empty())
}

#[cfg(test)]
mod tests;
