//! The one place that names the executor.
//!
//! Everything picolet does runs on a single-threaded `smol` local executor kept in a thread-local,
//! so any code on the main thread can spawn without threading a handle through every call.
//! Besides that thread there is smol's reactor thread (async-io) and the blocking pool that
//! `unblock` uses for file reads that may stall and apiserver calls (its threads are kept while
//! work keeps coming).
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
///
/// The future is boxed before it reaches the executor: the task machinery (async-task's raw
/// task, the executor's spawn) is then instantiated once per output type instead of once per
/// future type: 50 KB less binary, one more allocation per spawn (docs/figures.md, "Footprint").
pub fn spawn<T: 'static>(fut: impl Future<Output = T> + 'static) -> Task<T> {
    spawn_boxed(Box::pin(fut))
}

fn spawn_boxed<T: 'static>(fut: Pin<Box<dyn Future<Output = T>>>) -> Task<T> {
    EXECUTOR.with(|ex| ex.spawn(fut))
}

thread_local! {
    /// Closures this thread handed to the blocking pool that have not come back: [`settle`]
    /// waits for them, so tests under a fake clock do not depend on how fast the pool is.
    static UNBLOCKED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts one closure in flight on the blocking pool until dropped (also when the awaiting
/// future is cancelled).
struct InFlight;

impl InFlight {
    fn new() -> InFlight {
        UNBLOCKED.with(|n| n.set(n.get() + 1));
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        UNBLOCKED.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// Runs a blocking closure on the blocking thread pool.
pub async fn unblock<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let _in_flight = InFlight::new();
    let (tx, rx) = async_channel::bounded(1);
    pool::POOL.submit(Box::new(move || {
        let _ = tx.send_blocking(f());
    }));
    rx.recv()
        .await
        .unwrap_or_else(|_| panic!("a closure on the blocking pool panicked"))
}

/// The blocking pool: threads started on demand, each kept [`pool::KEEP_ALIVE`] after its last
/// closure. picolet's blocking work is periodic (housekeeping's directory scan every 2 s, the
/// Lease every 10 s, file reads), so the same threads serve it for as long as it runs: no thread
/// is started and torn down every few seconds, which cost a thread's start-up each time and, over
/// hours, heap fragmentation (docs/figures.md).
mod pool {
    use std::collections::VecDeque;
    use std::sync::{Mutex, MutexGuard, PoisonError};
    use std::time::Duration;

    pub type Job = Box<dyn FnOnce() + Send>;

    /// How long an idle thread waits for work before it ends.
    pub const KEEP_ALIVE: Duration = Duration::from_secs(120);
    /// The most threads at once (blocking calls that hang, such as reads of a stuck mount or
    /// calls to a silent apiserver, each hold one until their deadline).
    pub const MAX_THREADS: usize = 64;

    struct State {
        queue: VecDeque<Job>,
        threads: usize,
        /// Idle threads, the most recently idle last: work goes to it, so under light periodic
        /// work one thread stays busy and the others reach their keep-alive and end.
        idle: Vec<std::thread::Thread>,
    }

    pub struct Pool {
        state: Mutex<State>,
        keep_alive: Duration,
        max_threads: usize,
    }

    pub static POOL: Pool = Pool::new(KEEP_ALIVE, MAX_THREADS);

    impl Pool {
        pub const fn new(keep_alive: Duration, max_threads: usize) -> Pool {
            Pool {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    threads: 0,
                    idle: Vec::new(),
                }),
                keep_alive,
                max_threads,
            }
        }

        fn lock(&self) -> MutexGuard<'_, State> {
            // Closures run outside the lock: a panic in one never leaves the state half-changed.
            self.state.lock().unwrap_or_else(PoisonError::into_inner)
        }

        /// Queues `job`: the most recently idle thread takes it, else a new thread if the pool
        /// has room, else the first thread to finish its closure.
        pub fn submit(&'static self, job: Job) {
            let mut st = self.lock();
            st.queue.push_back(job);
            if let Some(t) = st.idle.pop() {
                t.unpark();
            } else if st.threads < self.max_threads {
                st.threads += 1;
                let spawned = std::thread::Builder::new()
                    .name("blocking".into())
                    .spawn(move || self.worker());
                if let Err(e) = spawned {
                    st.threads -= 1;
                    log::warn!("starting a blocking-pool thread: {e}; the work waits for one");
                }
            }
        }

        fn worker(&'static self) {
            /// Counts the thread out when it ends, also through a panicking closure.
            struct Leaving(&'static Pool);
            impl Drop for Leaving {
                fn drop(&mut self) {
                    self.0.lock().threads -= 1;
                }
            }
            let _leaving = Leaving(self);
            let me = std::thread::current();
            let mut st = self.lock();
            loop {
                if let Some(job) = st.queue.pop_front() {
                    drop(st);
                    job();
                    st = self.lock();
                    continue;
                }
                st.idle.push(me.clone());
                let since = std::time::Instant::now();
                loop {
                    drop(st);
                    let left = self.keep_alive.saturating_sub(since.elapsed());
                    if !left.is_zero() {
                        std::thread::park_timeout(left);
                    }
                    st = self.lock();
                    // Still listed as idle: nobody handed this thread work.
                    if let Some(i) = st.idle.iter().position(|t| t.id() == me.id()) {
                        if since.elapsed() < self.keep_alive {
                            continue; // woken early without work
                        }
                        st.idle.remove(i);
                        if st.queue.is_empty() {
                            return;
                        }
                    }
                    break;
                }
            }
        }

        #[cfg(test)]
        pub fn threads(&self) -> usize {
            self.lock().threads
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use std::sync::{Arc, mpsc};
        use std::time::Instant;

        fn pool(keep_alive: Duration, max: usize) -> &'static Pool {
            Box::leak(Box::new(Pool::new(keep_alive, max)))
        }

        fn run_on(p: &'static Pool, f: impl FnOnce() + Send + 'static) -> mpsc::Receiver<()> {
            let (tx, rx) = mpsc::channel();
            p.submit(Box::new(move || {
                f();
                let _ = tx.send(());
            }));
            rx
        }

        /// `n` closures at once, each held until all are submitted: one new thread for each;
        /// waits for all.
        fn burst(p: &'static Pool, n: usize) {
            let (release_tx, release_rx) = mpsc::channel::<()>();
            let release = Arc::new(Mutex::new(release_rx));
            let done: Vec<_> = (0..n)
                .map(|_| {
                    let release = Arc::clone(&release);
                    // Each waits for the end of the burst (the sender dropped).
                    run_on(p, move || while release.lock().unwrap().recv().is_ok() {})
                })
                .collect();
            assert_eq!(p.threads(), n);
            drop(release_tx);
            for r in done {
                r.recv().unwrap();
            }
        }

        fn wait_until(what: &str, ok: impl Fn() -> bool) {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !ok() {
                assert!(Instant::now() < deadline, "{what}");
                std::thread::sleep(Duration::from_millis(5));
            }
        }

        #[test]
        fn periodic_work_reuses_one_thread() {
            let p = pool(Duration::from_secs(60), 8);
            let mut ids = Vec::new();
            for _ in 0..20 {
                let (tx, rx) = mpsc::channel();
                p.submit(Box::new(move || {
                    let _ = tx.send(std::thread::current().id());
                }));
                ids.push(rx.recv().unwrap());
                // The thread goes back to waiting before the next closure comes.
                wait_until("the thread waits again", || p.lock().idle.len() == 1);
            }
            assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
            assert_eq!(p.threads(), 1);
        }

        #[test]
        fn hanging_closures_take_threads_up_to_the_limit_then_queue() {
            let p = pool(Duration::from_secs(60), 2);
            let (release_tx, release_rx) = mpsc::channel::<()>();
            let release_rx = std::sync::Arc::new(Mutex::new(release_rx));
            let hang = |r: std::sync::Arc<Mutex<mpsc::Receiver<()>>>| {
                move || {
                    let _ = r.lock().unwrap().recv();
                }
            };
            let a = run_on(p, hang(release_rx.clone()));
            let b = run_on(p, hang(release_rx.clone()));
            let c = run_on(p, || {});
            wait_until("two threads started", || p.threads() == 2);
            // Both threads hang: the third closure waits in the queue, no third thread.
            assert!(c.recv_timeout(Duration::from_millis(100)).is_err());
            assert_eq!(p.threads(), 2);
            release_tx.send(()).unwrap();
            c.recv_timeout(Duration::from_secs(10)).unwrap();
            release_tx.send(()).unwrap();
            for r in [a, b] {
                r.recv_timeout(Duration::from_secs(10)).unwrap();
            }
            assert_eq!(p.threads(), 2);
        }

        #[test]
        fn after_a_burst_periodic_work_keeps_one_thread() {
            let p = pool(Duration::from_millis(200), 8);
            burst(p, 4);
            // Work every 20 ms: the most recently idle thread takes it each time, the other three
            // reach their keep-alive.
            let deadline = Instant::now() + Duration::from_secs(10);
            while p.threads() > 1 {
                assert!(Instant::now() < deadline, "{} threads stay", p.threads());
                run_on(p, || {}).recv().unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
            assert_eq!(p.threads(), 1);
        }

        #[test]
        fn idle_threads_end_after_the_keep_alive() {
            let p = pool(Duration::from_millis(50), 8);
            burst(p, 3);
            wait_until("idle threads ended", || p.threads() == 0);
            // And the pool starts a thread again when work comes.
            run_on(p, || {})
                .recv_timeout(Duration::from_secs(10))
                .unwrap();
        }
    }
}

// -------------------------------------------------------------------------------------------
// The clock
// -------------------------------------------------------------------------------------------
//
// Every timing decision (sync due times, backoffs, PLEG health, the file re-list, GC, probes and
// leases later) reads time and sleeps through the functions below, never through `Instant`,
// `SystemTime` or async-io timers directly. A test installs a [`FakeClock`] on its thread and
// moves time by hand: the same code then runs in milliseconds, with no sleeping.

thread_local! {
    static FAKE: std::cell::RefCell<Option<std::rc::Rc<FakeState>>> =
        const { std::cell::RefCell::new(None) };
}

fn fake() -> Option<std::rc::Rc<FakeState>> {
    FAKE.with(|f| f.borrow().clone())
}

/// Monotonic time: what deadlines and periods are measured in.
pub fn now() -> Instant {
    match fake() {
        Some(f) => f.base_mono + f.offset.get(),
        None => Instant::now(),
    }
}

/// Wall-clock time in unix nanoseconds, the unit the CRI uses for timestamps.
pub fn now_nanos() -> i64 {
    match fake() {
        Some(f) => {
            let off = i64::try_from(f.offset.get().as_nanos()).unwrap_or(i64::MAX);
            f.base_wall.saturating_add(off)
        }
        None => crate::api::time::unix_nanos_now(),
    }
}

/// Monotonic nanoseconds since a fixed point: orders observations even when the wall clock
/// steps back (an edge board whose clock NTP corrects after boot).
pub fn mono_nanos() -> i64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    i64::try_from(now().saturating_duration_since(base).as_nanos()).unwrap_or(i64::MAX)
}

pub async fn sleep(d: Duration) {
    sleep_until(now().checked_add(d).unwrap_or_else(far_future)).await;
}

fn far_future() -> Instant {
    now() + Duration::from_secs(86_400 * 365)
}

pub async fn sleep_until(deadline: Instant) {
    match fake() {
        Some(f) => FakeSleep { clock: f, deadline }.await,
        None => {
            async_io::Timer::at(deadline).await;
        }
    }
}

/// Ticks every `period`, the first one a period from now. A tick that comes late (the loop was
/// busy) does not make the next ones bunch up: they stay a period apart.
#[derive(Debug)]
pub struct Interval {
    period: Duration,
    next: Instant,
}

pub fn interval(period: Duration) -> Interval {
    Interval {
        period,
        next: now() + period,
    }
}

impl Interval {
    pub async fn tick(&mut self) {
        sleep_until(self.next).await;
        let now = now();
        self.next += self.period;
        if self.next <= now {
            self.next = now + self.period;
        }
    }

    /// [`Interval::tick`], and how late it ran: from when it was due to when its task ran
    /// again (zero on time; more while the executor was busy with something else).
    pub async fn tick_late(&mut self) -> Duration {
        let due = self.next;
        self.tick().await;
        now().saturating_duration_since(due)
    }
}

struct FakeState {
    base_mono: Instant,
    base_wall: i64,
    offset: std::cell::Cell<Duration>,
    sleepers: std::cell::RefCell<Vec<(Instant, std::task::Waker)>>,
}

struct FakeSleep {
    clock: std::rc::Rc<FakeState>,
    deadline: Instant,
}

impl Future for FakeSleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let c = &self.clock;
        if c.base_mono + c.offset.get() >= self.deadline {
            return Poll::Ready(());
        }
        c.sleepers
            .borrow_mut()
            .push((self.deadline, cx.waker().clone()));
        Poll::Pending
    }
}

/// A clock that moves only when told, for tests; installed on the current thread, it replaces
/// the real one for everything on that thread (the executor's tasks included).
#[derive(Clone)]
pub struct FakeClock(std::rc::Rc<FakeState>);

impl std::fmt::Debug for FakeClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeClock")
            .field("elapsed", &self.0.offset.get())
            .finish()
    }
}

impl FakeClock {
    /// Installs a fake clock on this thread, starting at the real time, and returns its handle.
    pub fn install() -> FakeClock {
        let st = std::rc::Rc::new(FakeState {
            base_mono: Instant::now(),
            base_wall: crate::api::time::unix_nanos_now(),
            offset: std::cell::Cell::new(Duration::ZERO),
            sleepers: std::cell::RefCell::default(),
        });
        FAKE.with(|f| *f.borrow_mut() = Some(st.clone()));
        FakeClock(st)
    }

    /// Moves time forward and wakes every sleeper whose deadline has come.
    pub fn advance(&self, d: Duration) {
        let st = &self.0;
        st.offset.set(st.offset.get() + d);
        let now = st.base_mono + st.offset.get();
        let due: Vec<std::task::Waker> = {
            let mut sl = st.sleepers.borrow_mut();
            let (due, keep): (Vec<_>, Vec<_>) = sl.drain(..).partition(|(t, _)| *t <= now);
            *sl = keep;
            due.into_iter().map(|(_, w)| w).collect()
        };
        for w in due {
            w.wake();
        }
    }

    /// How far the clock has been moved.
    pub fn elapsed(&self) -> Duration {
        self.0.offset.get()
    }
}

/// Lets every task that can run, run: yields to the executor many times, with short real
/// pauses so work handed to the blocking pool comes back, and goes on while this thread still
/// waits for such work (at most 2 s of real time: a closure that hangs on purpose in a test
/// must not hang the test). For tests driven by a fake clock.
pub async fn settle() {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    let mut rounds = 0;
    loop {
        for _ in 0..64 {
            futures_lite::future::yield_now().await;
        }
        rounds += 1;
        let waiting = UNBLOCKED.with(std::cell::Cell::get) > 0;
        if (rounds >= 4 && !waiting) || std::time::Instant::now() >= deadline {
            return;
        }
        async_io::Timer::after(Duration::from_millis(if waiting { 1 } else { 2 })).await;
    }
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

/// Adapts hyper's IO traits (an upgraded connection) to futures-io, the other way round.
#[derive(Debug)]
pub struct FromHyper<T>(pub T);

impl<T: hyper::rt::Read + Unpin> AsyncRead for FromHyper<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let mut rb = hyper::rt::ReadBuf::new(buf);
        match Pin::new(&mut self.0).poll_read(cx, rb.unfilled()) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(rb.filled().len())),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: hyper::rt::Write + Unpin> AsyncWrite for FromHyper<T> {
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
    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
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
    fn fake_clock_wakes_sleepers_when_advanced() {
        let clock = FakeClock::install();
        let t0 = now();
        let w0 = now_nanos();
        block_on(async {
            let done = std::rc::Rc::new(std::cell::Cell::new(false));
            let d = done.clone();
            let task = spawn(async move {
                sleep(Duration::from_secs(30)).await;
                d.set(true);
            });
            settle().await;
            assert!(!done.get(), "asleep before the clock moves");
            clock.advance(Duration::from_secs(29));
            settle().await;
            assert!(!done.get(), "asleep 1 s before its deadline");
            clock.advance(Duration::from_secs(1));
            task.await;
            assert!(done.get());
        });
        assert_eq!(now() - t0, Duration::from_secs(30));
        assert_eq!(now_nanos() - w0, 30_000_000_000);
    }

    #[test]
    fn fake_clock_drives_timeouts_and_intervals() {
        let clock = FakeClock::install();
        block_on(async {
            let t = spawn(timeout(
                Duration::from_secs(10),
                std::future::pending::<()>(),
            ));
            settle().await;
            clock.advance(Duration::from_secs(10));
            assert_eq!(t.await, Err(Elapsed(Duration::from_secs(10))));

            let ticks = std::rc::Rc::new(std::cell::Cell::new(0u32));
            let n = ticks.clone();
            let _t = spawn(async move {
                let mut iv = interval(Duration::from_secs(2));
                loop {
                    iv.tick().await;
                    n.set(n.get() + 1);
                }
            });
            settle().await;
            for _ in 0..5 {
                clock.advance(Duration::from_secs(1));
                settle().await;
            }
            assert_eq!(ticks.get(), 2, "ticks at 2 s and 4 s");
            // A late tick does not bunch up the next ones.
            clock.advance(Duration::from_secs(11));
            settle().await;
            assert_eq!(ticks.get(), 3);

            // How late a tick ran: nothing on time, what the clock jumped past its due time.
            let late = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
            let l = late.clone();
            let _t = spawn(async move {
                let mut iv = interval(Duration::from_secs(1));
                loop {
                    let d = iv.tick_late().await;
                    l.borrow_mut().push(d);
                }
            });
            settle().await;
            clock.advance(Duration::from_secs(1));
            settle().await;
            clock.advance(Duration::from_millis(1300));
            settle().await;
            assert_eq!(*late.borrow(), [Duration::ZERO, Duration::from_millis(300)]);
        });
    }

    #[test]
    fn spawned_tasks_run_on_the_same_thread() {
        let main = std::thread::current().id();
        let seen = block_on(async { spawn(async { std::thread::current().id() }).await });
        assert_eq!(seen, main);
    }
}
