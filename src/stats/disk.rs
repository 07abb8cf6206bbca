//! Disk usage of directories, as `du -x -s` counts it (allocated blocks, each inode once, never
//! crossing into another filesystem), measured within a budget: a pass looks at no more than
//! a given number of entries (one `lstat` each, plus the directory reads), so a tree of a
//! million files never stalls anything. A directory larger than one pass's budget is walked
//! over several passes (the walk, with its open directory, is kept between them) and its figure
//! is published when the walk completes; until then the previous figure stands.
//!
//! [`Meter`] is the walker and its state, plain and synchronous (it runs on the blocking pool);
//! [`Shared`] is its home on the executor thread: the figures last published, and the meter
//! itself, taken out for the length of a pass, so two passes never overlap. Times come from
//! the caller (the round's `rt::now`), never from a clock read here.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

/// Bytes and inodes one directory tree uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub bytes: u64,
    pub inodes: u64,
}

impl std::ops::Add for Usage {
    type Output = Usage;
    fn add(self, o: Usage) -> Usage {
        Usage {
            bytes: self.bytes.saturating_add(o.bytes),
            inodes: self.inodes.saturating_add(o.inodes),
        }
    }
}

/// A figure with the time of the pass that completed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measured {
    pub usage: Usage,
    pub at: Instant,
}

/// The entries a pass looks at by default: about 20 ms of `lstat`s on an SD card's warm
/// dentry cache, and what a pass of `scripts/bench-storage.sh` measures.
pub const DEFAULT_BUDGET: u64 = 20_000;

/// A walk in progress over one tree.
#[derive(Debug)]
struct Walk {
    dev: u64,
    /// The directory being read, and the directories still to read.
    current: Option<std::fs::ReadDir>,
    pending: Vec<PathBuf>,
    sum: Usage,
    /// Inodes with more than one link already counted.
    linked: HashSet<u64>,
}

fn allocated(m: &std::fs::Metadata) -> u64 {
    m.blocks().saturating_mul(512)
}

impl Walk {
    /// Starts at `root`: its own inode counts; `None` when it does not exist.
    fn start(root: &Path) -> Option<Walk> {
        let m = std::fs::symlink_metadata(root).ok()?;
        let mut w = Walk {
            dev: m.dev(),
            current: None,
            pending: Vec::new(),
            sum: Usage {
                bytes: allocated(&m),
                inodes: 1,
            },
            linked: HashSet::new(),
        };
        if m.is_dir() {
            w.pending.push(root.to_owned());
        }
        Some(w)
    }

    /// Walks on until done (true) or `budget` entries were looked at (false). An entry that
    /// vanishes or cannot be read is skipped, as `du` does.
    fn step(&mut self, budget: &mut u64) -> bool {
        loop {
            if *budget == 0 {
                return false;
            }
            let Some(dir) = self.current.as_mut() else {
                let Some(next) = self.pending.pop() else {
                    return true;
                };
                // One open directory at a time: what a walk holds between passes.
                self.current = std::fs::read_dir(&next).ok();
                *budget -= 1;
                continue;
            };
            let Some(entry) = dir.next() else {
                self.current = None;
                continue;
            };
            *budget -= 1;
            let Ok(entry) = entry else { continue };
            let Ok(m) = entry.metadata() else { continue };
            if m.dev() != self.dev {
                continue;
            }
            if m.nlink() > 1 && !m.is_dir() && !self.linked.insert(m.ino()) {
                continue;
            }
            self.sum = self.sum
                + Usage {
                    bytes: allocated(&m),
                    inodes: 1,
                };
            if m.is_dir() {
                self.pending.push(entry.path());
            }
        }
    }
}

#[derive(Debug, Default)]
struct Entry {
    last: Option<Measured>,
    walk: Option<Walk>,
}

/// What one pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pass {
    /// Entries looked at (the budget used).
    pub entries: u64,
    /// Trees whose walk completed in this pass.
    pub completed: usize,
    /// Trees with a walk still under way, or not reached, when the budget ran out.
    pub pending: usize,
}

/// The walker's state: per tree, the last figure and the walk under way.
#[derive(Debug, Default)]
pub struct Meter {
    trees: HashMap<PathBuf, Entry>,
    /// Where the next pass starts, so a tree larger than the budget does not starve the rest.
    cursor: usize,
}

impl Meter {
    /// One pass over `trees` (others are forgotten), looking at no more than `budget`
    /// entries; a tree whose walk completes gets the figure, stamped `now`. A tree that does
    /// not exist has no figure.
    pub fn pass(&mut self, trees: &[PathBuf], budget: u64, now: Instant) -> Pass {
        let wanted: HashSet<&PathBuf> = trees.iter().collect();
        self.trees.retain(|p, _| wanted.contains(p));
        let mut left = budget;
        let mut out = Pass::default();
        let n = trees.len();
        let start = if n == 0 { 0 } else { self.cursor % n };
        let mut reached = 0;
        for k in 0..n {
            if left == 0 {
                break;
            }
            reached = k + 1;
            let path = &trees[(start + k) % n];
            let e = self.trees.entry(path.clone()).or_default();
            if e.walk.is_none() {
                e.walk = Walk::start(path);
                if e.walk.is_none() {
                    e.last = None;
                    continue;
                }
            }
            let w = e.walk.as_mut().expect("started above");
            if w.step(&mut left) {
                e.last = Some(Measured {
                    usage: w.sum,
                    at: now,
                });
                e.walk = None;
                out.completed += 1;
            } else {
                out.pending += 1;
                // The next pass starts after this tree and comes back to its walk in turn.
                self.cursor = (start + k + 1) % n;
                out.pending += n - reached;
                out.entries = budget - left;
                return out;
            }
        }
        out.pending += n - reached;
        self.cursor = (start + reached) % n.max(1);
        out.entries = budget - left;
        out
    }

    /// The last complete figure of `tree`.
    pub fn get(&self, tree: &Path) -> Option<Measured> {
        self.trees.get(tree).and_then(|e| e.last)
    }

    /// Every complete figure.
    pub fn figures(&self) -> HashMap<PathBuf, Measured> {
        self.trees
            .iter()
            .filter_map(|(p, e)| e.last.map(|m| (p.clone(), m)))
            .collect()
    }
}

/// The meter on the executor thread: passes on the blocking pool, one at a time, and the
/// figures they published.
#[derive(Debug, Default)]
pub struct Shared {
    meter: RefCell<Option<Meter>>,
    published: RefCell<HashMap<PathBuf, Measured>>,
    started: std::cell::Cell<bool>,
}

impl Shared {
    pub fn new() -> Rc<Shared> {
        Rc::new(Shared {
            meter: RefCell::new(Some(Meter::default())),
            ..Shared::default()
        })
    }

    /// Runs a pass over `trees` on the blocking pool; `None` (and nothing done) while another
    /// pass is under way.
    pub async fn pass(&self, trees: Vec<PathBuf>, budget: u64) -> Option<Pass> {
        let mut meter = self.meter.borrow_mut().take()?;
        self.started.set(true);
        let now = crate::rt::now();
        let (meter, pass) = crate::rt::unblock(move || {
            let p = meter.pass(&trees, budget, now);
            (meter, p)
        })
        .await;
        *self.published.borrow_mut() = meter.figures();
        *self.meter.borrow_mut() = Some(meter);
        Some(pass)
    }

    /// The last figure published for `tree`.
    pub fn get(&self, tree: &Path) -> Option<Measured> {
        self.published.borrow().get(tree).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Removes its directory when dropped.
    struct Dir(PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn tree(files: usize, size: usize) -> (Dir, PathBuf) {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "picolet-disk-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let root = d.join("t");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        for i in 0..files {
            let sub = match i % 3 {
                0 => root.clone(),
                1 => root.join("a"),
                _ => root.join("a/b"),
            };
            std::fs::write(sub.join(format!("f{i}")), vec![7u8; size]).unwrap();
        }
        (Dir(d), root)
    }

    /// What `du -x -s` would say, from an unbounded recursive count.
    fn du(p: &Path) -> Usage {
        let m = std::fs::symlink_metadata(p).unwrap();
        let mut u = Usage {
            bytes: m.blocks() * 512,
            inodes: 1,
        };
        if m.is_dir() {
            for e in std::fs::read_dir(p).unwrap() {
                u = u + du(&e.unwrap().path());
            }
        }
        u
    }

    #[test]
    fn a_pass_within_budget_counts_what_du_counts() {
        let (_d, root) = tree(30, 5000);
        let mut m = Meter::default();
        let t0 = Instant::now();
        let p = m.pass(std::slice::from_ref(&root), 1000, t0);
        assert_eq!((p.completed, p.pending), (1, 0));
        let got = m.get(&root).unwrap();
        assert_eq!(got.at, t0);
        assert_eq!(got.usage, du(&root));
        // 30 files, 2 subdirectories, the root.
        assert_eq!(got.usage.inodes, 33);
        assert!(got.usage.bytes >= 30 * 5000, "{:?}", got.usage);
        // Entries: 33 inodes less the root, plus 3 directory reads.
        assert_eq!(p.entries, 35);
    }

    #[test]
    fn a_tree_larger_than_the_budget_completes_over_passes_and_keeps_its_old_figure_meanwhile() {
        let (_d, root) = tree(100, 10);
        let mut m = Meter::default();
        let t0 = Instant::now();
        let p = m.pass(std::slice::from_ref(&root), 40, t0);
        assert_eq!((p.entries, p.completed, p.pending), (40, 0, 1));
        assert_eq!(m.get(&root), None, "no partial figure is published");
        let mut passes = 1;
        let mut t = t0;
        while m.get(&root).is_none() {
            t += Duration::from_secs(10);
            let p = m.pass(std::slice::from_ref(&root), 40, t);
            assert!(p.entries <= 40);
            passes += 1;
            assert!(passes < 10);
        }
        assert_eq!(passes, 3, "105 entries at 40 a pass");
        assert_eq!(m.get(&root).unwrap().usage, du(&root));
        assert_eq!(m.get(&root).unwrap().at, t);
        // The tree grows: the old figure stands until the new walk completes.
        std::fs::write(root.join("big"), vec![1u8; 1 << 20]).unwrap();
        let before = m.get(&root).unwrap();
        m.pass(std::slice::from_ref(&root), 40, t + Duration::from_secs(10));
        assert_eq!(m.get(&root).unwrap(), before);
        for k in 2..5 {
            m.pass(
                std::slice::from_ref(&root),
                40,
                t + Duration::from_secs(10 * k),
            );
        }
        let after = m.get(&root).unwrap();
        assert!(after.usage.bytes >= before.usage.bytes + (1 << 20));
        assert_eq!(after.usage.inodes, before.usage.inodes + 1);
    }

    #[test]
    fn hard_links_count_once_and_gone_trees_are_forgotten() {
        let (_d, root) = tree(3, 100_000);
        std::fs::hard_link(root.join("f0"), root.join("a/link")).unwrap();
        let mut m = Meter::default();
        let t0 = Instant::now();
        m.pass(std::slice::from_ref(&root), 100, t0);
        let u = m.get(&root).unwrap().usage;
        let one = std::fs::metadata(root.join("f0")).unwrap().blocks() * 512;
        let mut no_link = du(&root);
        no_link.bytes -= one;
        no_link.inodes -= 1;
        assert_eq!(u, no_link, "the second name of an inode adds nothing");
        let missing = root.join("nope");
        m.pass(&[root.clone(), missing.clone()], 100, t0);
        assert_eq!(m.get(&missing), None);
        m.pass(std::slice::from_ref(&missing), 100, t0);
        assert_eq!(
            m.get(&root),
            None,
            "a tree no longer asked for is forgotten"
        );
    }

    #[test]
    fn passes_take_turns_so_a_huge_tree_does_not_starve_the_others() {
        let (_d, big) = tree(200, 1);
        let (_e, small) = tree(3, 1);
        let trees = [big.clone(), small.clone()];
        let mut m = Meter::default();
        let t0 = Instant::now();
        let mut t = t0;
        for _ in 0..3 {
            m.pass(&trees, 50, t);
            t += Duration::from_secs(10);
        }
        assert!(m.get(&small).is_some(), "the small tree was reached");
        for _ in 0..10 {
            m.pass(&trees, 50, t);
            t += Duration::from_secs(10);
        }
        assert_eq!(m.get(&big).unwrap().usage, du(&big));
        assert_eq!(m.get(&small).unwrap().usage, du(&small));
    }

    #[test]
    fn no_pass_while_one_runs_and_figures_are_published_after_it() {
        let (_d, root) = tree(5, 1);
        let clock = crate::rt::FakeClock::install();
        let s = Shared::new();
        crate::rt::block_on(async {
            // The meter is out: a second pass is refused, not queued.
            let m = s.meter.borrow_mut().take().unwrap();
            assert_eq!(s.pass(vec![root.clone()], 100).await, None);
            *s.meter.borrow_mut() = Some(m);
            assert_eq!(s.get(&root), None);
            let p = s.pass(vec![root.clone()], 100).await.unwrap();
            assert_eq!(p.completed, 1);
            let got = s.get(&root).unwrap();
            assert_eq!(got.usage, du(&root));
            assert_eq!(got.at, crate::rt::now(), "stamped by the one clock");
            clock.advance(Duration::from_secs(10));
            s.pass(vec![root.clone()], 100).await.unwrap();
            assert_eq!(s.get(&root).unwrap().at, crate::rt::now());
        });
    }
}
