//! The cost of measuring ephemeral storage: trees of 1,000 and 100,000 files (BENCH_FILES to
//! choose others, comma-separated) under BENCH_DIR (default /var/tmp/pbench-storage), walked as
//! the eviction rounds walk them (`stats::disk::Shared`, a pass every round within the default
//! budget of entries, on the blocking pool) while a task on the executor ticks every 100 ms,
//! as the sync loop's timers do. Prints per tree: the passes a complete figure takes, the wall
//! time of a pass (median and longest), the whole walk, and how late the executor's tick ran
//! at worst while the passes ran; then one pass with no budget for comparison. The trees are
//! made once and kept for the next run (BENCH_KEEP=0 removes them). Asserts nothing.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use picolet::rt;
use picolet::stats::disk::{DEFAULT_BUDGET, Meter, Shared};

/// A tree as pods' directories look: 100 files a directory, 4 KiB each.
fn make_tree(root: &Path, files: usize) {
    let done = root.join(".complete");
    if done.exists() {
        return;
    }
    let _ = std::fs::remove_dir_all(root);
    let data = vec![b'x'; 4096];
    for i in 0..files {
        let dir = root.join(format!("d{}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(dir.join(format!("f{i}")), &data).unwrap();
    }
    std::fs::write(done, b"").unwrap();
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let base = PathBuf::from(
        std::env::var("BENCH_DIR").unwrap_or_else(|_| "/var/tmp/pbench-storage".into()),
    );
    let sizes: Vec<usize> = std::env::var("BENCH_FILES")
        .unwrap_or_else(|_| "1000,100000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("BENCH_FILES: numbers"))
        .collect();
    println!(
        "budget: {DEFAULT_BUDGET} entries a pass; trees under {}",
        base.display()
    );
    for files in sizes {
        let root = base.join(format!("t{files}"));
        let t = Instant::now();
        make_tree(&root, files);
        println!("\n{files} files (made or found in {})", ms(t.elapsed()));
        rt::block_on(async {
            let shared = Shared::new();
            let late = Rc::new(Cell::new(Duration::ZERO));
            let stop = Rc::new(Cell::new(false));
            let (l2, s2) = (late.clone(), stop.clone());
            let ticker = rt::spawn(async move {
                let period = Duration::from_millis(100);
                let mut next = rt::now() + period;
                while !s2.get() {
                    rt::sleep_until(next).await;
                    let lag = rt::now().saturating_duration_since(next);
                    l2.set(l2.get().max(lag));
                    next += period;
                }
            });
            let trees = vec![root.clone()];
            let mut walls = Vec::new();
            let whole = Instant::now();
            let mut entries = 0;
            loop {
                let t = Instant::now();
                let p = shared.pass(trees.clone(), DEFAULT_BUDGET).await.unwrap();
                walls.push(t.elapsed());
                entries += p.entries;
                if shared.get(&root).is_some() {
                    break;
                }
            }
            let whole = whole.elapsed();
            // Let the ticker see one more tick after the last pass.
            rt::sleep(Duration::from_millis(150)).await;
            stop.set(true);
            ticker.await;
            let got = shared.get(&root).unwrap().usage;
            let mut sorted = walls.clone();
            sorted.sort();
            println!(
                "  bounded: {} pass(es) (a fresh figure every {} s of 10 s rounds), {entries} entries; a pass: median {}, longest {}; whole walk {}",
                walls.len(),
                walls.len() * 10,
                ms(sorted[sorted.len() / 2]),
                ms(*sorted.last().unwrap()),
                ms(whole)
            );
            println!(
                "  figure: {} bytes, {} inodes; executor tick (100 ms) late by at most {}",
                got.bytes,
                got.inodes,
                ms(late.get())
            );
        });
        let mut m = Meter::default();
        let t = Instant::now();
        m.pass(std::slice::from_ref(&root), u64::MAX, Instant::now());
        println!("  unbounded: one pass {}", ms(t.elapsed()));
        if std::env::var("BENCH_KEEP").as_deref() == Ok("0") {
            std::fs::remove_dir_all(&root).unwrap();
        }
    }
}
