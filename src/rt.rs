//! The one place that names the executor.
//!
//! Everything picolet does runs on a single-threaded `smol` local executor kept in a thread-local,
//! so any code on the main thread can spawn without threading a handle through every call.
//! Besides that thread there is smol's reactor thread (async-io) and the `blocking` pool that
//! `unblock` uses for file reads that may stall.
//!
//! This module also adapts the executor, timers and sockets to hyper's runtime traits, so the CRI
//! client (HTTP/2 over a unix socket) and the local HTTP API run here without a tokio runtime.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_lite::{AsyncRead, AsyncWrite};
use smol::LocalExecutor;

pub use smol::Task;

thread_local! {
    static EXECUTOR: LocalExecutor<'static> = const { LocalExecutor::new() };
}

/// Runs `fut` to completion on this thread's executor, driving every task spawned meanwhile.
/// The future is boxed: the CRI call futures are large and would otherwise sit on the stack.
pub fn block_on<T>(fut: impl Future<Output = T>) -> T {
    EXECUTOR.with(|ex| smol::block_on(ex.run(Box::pin(fut))))
}

/// Spawns a task on this thread's executor. Dropping the returned task cancels it.
pub fn spawn<T: 'static>(fut: impl Future<Output = T> + 'static) -> Task<T> {
    EXECUTOR.with(|ex| ex.spawn(fut))
}

/// Runs a blocking closure on the blocking thread pool.
pub async fn unblock<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    smol::unblock(f).await
}

/// Wall-clock time in unix nanoseconds, the unit the CRI uses for timestamps.
pub fn now_nanos() -> i64 {
    crate::api::time::unix_nanos_now()
}

/// Monotonic nanoseconds since the first call: orders observations even when the wall clock
/// steps back (an edge board whose clock NTP corrects after boot).
pub fn mono_nanos() -> i64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    i64::try_from(base.elapsed().as_nanos()).unwrap_or(i64::MAX)
}

pub async fn sleep(d: Duration) {
    async_io::Timer::after(d).await;
}

/// The error of [`timeout`]: the deadline passed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed(pub Duration);

impl std::fmt::Display for Elapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "deadline of {:?} exceeded", self.0)
    }
}

impl std::error::Error for Elapsed {}

/// Runs `fut` with a deadline; the future is dropped (cancelled) when the deadline passes.
pub async fn timeout<T>(d: Duration, fut: impl Future<Output = T>) -> Result<T, Elapsed> {
    futures_lite::future::or(async { Ok(fut.await) }, async {
        sleep(d).await;
        Err(Elapsed(d))
    })
    .await
}

/// hyper's executor: spawns on this thread's local executor.
#[derive(Clone, Copy, Debug, Default)]
pub struct HyperExecutor;

impl<F> hyper::rt::Executor<F> for HyperExecutor
where
    F: Future + 'static,
{
    fn execute(&self, fut: F) {
        spawn(async move {
            fut.await;
        })
        .detach();
    }
}

/// hyper's timer, backed by async-io timers.
#[derive(Clone, Copy, Debug, Default)]
pub struct HyperTimer;

struct HyperSleep(async_io::Timer);

impl Future for HyperSleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.0).poll(cx).map(|_| ())
    }
}

impl hyper::rt::Sleep for HyperSleep {}

impl hyper::rt::Timer for HyperTimer {
    fn sleep(&self, d: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(HyperSleep(async_io::Timer::after(d)))
    }
    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(HyperSleep(async_io::Timer::at(deadline)))
    }
}

/// Adapts a futures-io stream (such as `smol::Async<UnixStream>`) to hyper's IO traits.
#[derive(Debug)]
pub struct HyperIo<T>(pub T);

impl<T: AsyncRead + Unpin> hyper::rt::Read for HyperIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        // Zero-initialising the unfilled part keeps this free of unsafe code; the buffers hyper
        // hands out are small (8-16 KiB), so the cost is negligible at picolet's call rates.
        let mut tmp = [0u8; 8192];
        let want = tmp.len().min(buf.remaining());
        let n = match Pin::new(&mut self.0).poll_read(cx, &mut tmp[..want]) {
            Poll::Ready(Ok(n)) => n,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        };
        buf.put_slice(&tmp[..n]);
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> hyper::rt::Write for HyperIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_close(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_passes_result_through() {
        let r = block_on(timeout(Duration::from_secs(5), async { 7 }));
        assert_eq!(r, Ok(7));
    }

    #[test]
    fn timeout_cancels_slow_future() {
        let r = block_on(timeout(
            Duration::from_millis(20),
            sleep(Duration::from_secs(30)),
        ));
        assert_eq!(r, Err(Elapsed(Duration::from_millis(20))));
    }

    #[test]
    fn spawned_tasks_run_on_the_same_thread() {
        let main = std::thread::current().id();
        let seen = block_on(async { spawn(async { std::thread::current().id() }).await });
        assert_eq!(seen, main);
    }
}
