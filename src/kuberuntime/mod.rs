//! The runtime manager and what it needs, split as the kubelet splits its kuberuntime package:
//! `manager` (inspect, sync, forget), `sandbox`, `container`, `image`, `gc`, `image_gc_manager`
//! (unused images removed by disk usage and age), `pullmanager` (which credentials pulled which
//! image, and whether a pod must show them: KEP-2535), and `convert`, the
//! edge where CRI messages become `kubecontainer` types. The pure parts beside them: `actions`
//! (desired vs observed → actions), `config` (CRI sandbox and container configs), `env`,
//! `backoff`, `labels`, `error` (typed sync failures with the kubelet's reasons); and
//! `instrumented`, the runtime services wrapped to count calls for `/metrics`.

pub mod actions;
pub mod backoff;
pub mod config;
mod container;
mod convert;
pub mod env;
mod error;
mod exec;
mod gc;
mod hooks;
pub mod image;
pub mod image_gc_manager;
pub mod instrumented;
pub mod labels;
mod manager;
pub mod pullmanager;
mod resize;
mod sandbox;
pub mod streaming;
mod termination;

pub use crate::kubecontainer::container_hash;
pub use config::NodeContext;
pub use convert::{ListedPod, Listing, container_init_pid};
pub use error::SyncError;
pub use exec::{ExecError, ExecOutput};
pub use gc::{GcPlan, gc_plan};
pub use manager::{RuntimeManager, RuntimeVersion, SyncOutcome, Waiting};

/// Runs futures concurrently on this task and collects their outputs in order.
pub async fn join_all<F: std::future::Future>(futs: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let tasks: Vec<_> = futs.into_iter().map(Box::pin).collect();
    let mut outs: Vec<Option<F::Output>> = tasks.iter().map(|_| None).collect();
    let mut tasks: Vec<Option<_>> = tasks.into_iter().map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, out) in tasks.iter_mut().zip(outs.iter_mut()) {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *out = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outs.into_iter()
        .map(|o| o.expect("every future completed"))
        .collect()
}

/// Runs futures on this task, at most `limit` at a time (the next starts as one ends), and
/// hands each output with its index to `done` as soon as it is ready, in the order they end:
/// the first answer is acted on without waiting for the slowest.
pub async fn each_as_ready<F: std::future::Future>(
    futs: Vec<F>,
    limit: usize,
    mut done: impl FnMut(usize, F::Output),
) {
    let mut queue = futs.into_iter().enumerate();
    let mut running: Vec<(usize, std::pin::Pin<Box<F>>)> = Vec::new();
    loop {
        while running.len() < limit.max(1) {
            match queue.next() {
                Some((i, f)) => running.push((i, Box::pin(f))),
                None => break,
            }
        }
        if running.is_empty() {
            return;
        }
        let (pos, out) = std::future::poll_fn(|cx| {
            for (pos, (_, f)) in running.iter_mut().enumerate() {
                if let std::task::Poll::Ready(v) = f.as_mut().poll(cx) {
                    return std::task::Poll::Ready((pos, v));
                }
            }
            std::task::Poll::Pending
        })
        .await;
        let (i, _) = running.swap_remove(pos);
        done(i, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rt;
    use std::time::Duration;

    #[test]
    fn each_as_ready_hands_over_in_the_order_they_end_and_keeps_to_its_limit() {
        use std::cell::Cell;
        let in_flight = Cell::new(0usize);
        let most = Cell::new(0usize);
        let mut seen = Vec::new();
        // The first takes longest: the others are handed over before it.
        let delays = [60u64, 10, 20, 30, 5];
        let futs: Vec<_> = delays
            .iter()
            .map(|d| {
                let (in_flight, most) = (&in_flight, &most);
                async move {
                    in_flight.set(in_flight.get() + 1);
                    most.set(most.get().max(in_flight.get()));
                    rt::sleep(Duration::from_millis(*d)).await;
                    in_flight.set(in_flight.get() - 1);
                    *d
                }
            })
            .collect();
        // Time moves a millisecond at a time, only when every task has had its turn: the
        // order is the delays', whatever else the machine is doing.
        let clock = rt::FakeClock::install();
        let driver = async {
            for _ in 0..100 {
                for _ in 0..8 {
                    futures_lite::future::yield_now().await;
                }
                clock.advance(Duration::from_millis(1));
            }
        };
        rt::block_on(futures_lite::future::zip(
            each_as_ready(futs, 3, |i, d| seen.push((i, d))),
            driver,
        ));
        assert_eq!(most.get(), 3, "at most the limit at once");
        // 1 ends at 10 ms, 2 at 20; 4 (started at 20) at 25; 3 (started at 10) at 40; 0 at 60.
        assert_eq!(seen, vec![(1, 10), (2, 20), (4, 5), (3, 30), (0, 60)]);
    }

    #[test]
    fn join_all_keeps_order() {
        let v = rt::block_on(join_all((0..5u64).map(|i| async move {
            rt::sleep(Duration::from_millis(10 * (5 - i))).await;
            i
        })));
        assert_eq!(v, vec![0, 1, 2, 3, 4]);
    }
}
