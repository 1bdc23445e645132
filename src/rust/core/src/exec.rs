//! Where and how a computation runs: the backend, the CPU thread count, and a
//! monitor through which a caller sees progress and can cancel.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::error::{Error, Result};

/// The compute backend a routine runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Every CPU core, through rayon. The reference implementation.
    Cpu,
    /// A CUDA device.
    Cuda,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Cuda => "cuda",
        }
    }
}

/// What the caller asked for (R's `use.gpu`: FALSE, TRUE, NA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendRequest {
    Cpu,
    Cuda,
    /// A usable GPU when the job is large enough to gain from it.
    Auto,
}

impl BackendRequest {
    /// "cpu", "cuda" or "auto".
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "cpu" => Some(BackendRequest::Cpu),
            "cuda" => Some(BackendRequest::Cuda),
            "auto" => Some(BackendRequest::Auto),
            _ => None,
        }
    }
}

/// A job as the backend choice sees it; each area describes its own
/// (`em::job`, `hmm::job`, `gibbs::job`, `reduce::job`).
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// The job's work, in the area's unit.
    pub work: f64,
    /// Work from which a GPU answers sooner than the CPU (measured per area,
    /// BENCHMARKS.md); a GPU also pays its kernel compilation once per process.
    pub gpu_min_work: f64,
    /// Why the GPU backend cannot run this job, if it cannot.
    pub gpu_unsupported: Option<String>,
}

/// The one place every area's backend is chosen: the CPU when asked, a GPU
/// when asked (or an error saying why not), and for `Auto` a usable GPU
/// only when the job is large enough and the GPU can run it.
pub fn choose_backend(request: BackendRequest, job: &Job) -> Result<Backend> {
    match request {
        BackendRequest::Cpu => Ok(Backend::Cpu),
        BackendRequest::Cuda => {
            let probe = crate::gpu::probe();
            if !probe.usable() {
                return Err(Error::BackendUnavailable(probe.reason));
            }
            match &job.gpu_unsupported {
                Some(why) => Err(Error::BackendUnavailable(why.clone())),
                None => Ok(Backend::Cuda),
            }
        }
        BackendRequest::Auto => {
            let gains = job.work >= job.gpu_min_work && job.gpu_unsupported.is_none();
            Ok(if gains && crate::gpu::probe().usable() { Backend::Cuda } else { Backend::Cpu })
        }
    }
}

/// Progress counter and cancellation flag shared between the workers and
/// the thread that started them.
#[derive(Debug, Default)]
pub struct Monitor {
    cancelled: AtomicBool,
    done: AtomicUsize,
}

impl Monitor {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }
    /// Record `k` more finished work items (datasets, sequences, ...).
    pub fn add_done(&self, k: usize) {
        self.done.fetch_add(k, Ordering::Relaxed);
    }
    pub fn done(&self) -> usize {
        self.done.load(Ordering::Relaxed)
    }
    /// `Err(Interrupted)` once cancelled; workers call this between units.
    pub fn check(&self) -> Result<()> {
        if self.is_cancelled() {
            Err(Error::Interrupted)
        } else {
            Ok(())
        }
    }
}

/// Execution settings for one call.
#[derive(Debug, Clone)]
pub struct Exec {
    pub backend: Backend,
    /// CPU worker threads; 0 means one per available core.
    pub threads: usize,
    pub monitor: Arc<Monitor>,
    /// Shares the HMM routines split their sequences into on the GPU
    /// backend, given to the usable devices in turn; 0: their own choice
    /// (one per device where that was measured faster, else one). More
    /// shares than devices only serve the tests that results do not depend
    /// on how sequences are spread.
    pub gpu_parts: usize,
}

impl Exec {
    /// The CPU backend on every core.
    pub fn cpu() -> Self {
        Exec { backend: Backend::Cpu, threads: 0, monitor: Arc::new(Monitor::new()), gpu_parts: 0 }
    }
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }
    pub fn with_monitor(mut self, monitor: Arc<Monitor>) -> Self {
        self.monitor = monitor;
        self
    }
    /// Run `work` inside this call's thread pool.
    pub fn install<T: Send>(&self, work: impl FnOnce() -> T + Send) -> Result<T> {
        // Already on a pool's thread (the call's, see `within`, or a
        // device's part): run here, in that pool. Installing into another
        // pool would block this thread on it, and a pool whose only thread
        // waits for this one (a call of one thread waiting for its device
        // threads) would never run the work.
        if rayon::current_thread_index().is_some() {
            return Ok(work());
        }
        Ok(cpu_pool(self.threads)?.install(work))
    }

    /// Run a whole call in this call's pool, so that every parallel loop
    /// inside it (including those not wrapped in [`Exec::install`]) runs
    /// on the call's threads and no more, and nested installs run inline
    /// instead of waking the pool. Where the pool cannot be made, `work`
    /// runs here (its own installs then report why).
    pub fn within<T: Send>(&self, work: impl FnOnce() -> T + Send) -> T {
        match cpu_pool(self.threads) {
            Ok(pool) => pool.install(work),
            Err(_) => work(),
        }
    }

    /// Run `work` in this call's pool (as [`Exec::within`]) while the
    /// calling thread calls `poll(items_done)` every `interval`; when
    /// `poll` returns false the monitor is cancelled and the workers stop
    /// at their next check. This is how a caller with a single-threaded
    /// runtime (R) stays responsive: only the calling thread talks to the
    /// runtime, the workers never do. The work goes to the pool directly:
    /// a thread started per call to hand it there (as [`run_polled`]
    /// does) cost a thread's start and two wake-ups per call. For its
    /// first millisecond the calling thread watches for the result without
    /// sleeping, so that a short call's result is taken at once.
    pub fn run_polled<T: Send>(&self, interval: Duration, work: impl FnOnce() -> T + Send, mut poll: impl FnMut(usize) -> bool) -> T {
        use std::sync::mpsc::TryRecvError;
        let monitor = &self.monitor;
        let pool = match cpu_pool(self.threads) {
            Ok(pool) if rayon::current_thread_index().is_none() => pool,
            // No pool (the work's own installs report why), or called on a
            // pool's thread (whose own queue could hold the job this
            // thread waits for): a thread of its own.
            _ => return run_polled(monitor, interval, || self.within(work), poll),
        };
        let (done, finished) = std::sync::mpsc::channel();
        let out = pool.in_place_scope(|scope| {
            scope.spawn(move |_| {
                // The receiver outlives the scope; a send cannot fail.
                let _ = done.send(work());
            });
            let watched = std::time::Instant::now();
            while watched.elapsed() < Duration::from_millis(1) {
                match finished.try_recv() {
                    Ok(out) => return Some(out),
                    Err(TryRecvError::Disconnected) => return None,
                    Err(TryRecvError::Empty) => std::hint::spin_loop(),
                }
            }
            // None: the work panicked, and the scope raises its panic here.
            wait_polling(&finished, interval, monitor, &mut poll)
        });
        match out {
            Some(out) => out,
            None => unreachable!("a polled call's work ended without its result and without a panic"),
        }
    }

    /// Run `work` in pool `part` of `parts` (kept for later calls), with a
    /// `parts`-th of this call's threads (at least one): for each of several
    /// threads that drive a device each. Their jobs block on the device for
    /// seconds, and in one shared pool a worker waiting for its own tasks
    /// may take up another device's whole job and hold it until that ends
    /// (the devices then run one after the other).
    pub fn install_part<T: Send>(&self, part: usize, parts: usize, work: impl FnOnce() -> T + Send) -> Result<T> {
        let all = if self.threads == 0 { available_threads() } else { self.threads };
        Ok(part_pool(part, (all / parts.max(1)).max(1))?.install(work))
    }
}

/// Pool `part` of the device threads, with `n` threads: kept, as
/// [`cpu_pool`], and rebuilt only when `n` changes (starting threads cost
/// more than a pass over a few million symbols).
fn part_pool(part: usize, n: usize) -> Result<Arc<rayon::ThreadPool>> {
    static POOLS: Mutex<Vec<Option<(usize, Arc<rayon::ThreadPool>)>>> = Mutex::new(Vec::new());
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if pools.len() <= part {
        pools.resize(part + 1, None);
    }
    if let Some((count, pool)) = &pools[part] {
        if *count == n {
            return Ok(pool.clone());
        }
    }
    let pool = new_pool(n, move |i| format!("bulkem-{part}-{i}"))?;
    pools[part] = Some((n, pool.clone()));
    Ok(pool)
}

fn new_pool(n: usize, name: impl FnMut(usize) -> String + 'static) -> Result<Arc<rayon::ThreadPool>> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(name)
        .start_handler(|_| block_async_signals())
        .build()
        .map_err(|e| Error::BackendUnavailable(format!("cannot start {n} CPU threads: {e}")))?;
    Ok(Arc::new(pool))
}

/// Number of CPU threads used when `threads = 0`.
pub fn available_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// The most CPU threads a call may ask for: more only costs start-up time
/// and memory (10^5 threads took 37 s to start).
pub fn max_threads() -> usize {
    (8 * available_threads()).max(64)
}

/// The process's one rayon pool, rebuilt only when the thread count
/// changes: building a pool per call would cost milliseconds on small
/// jobs, and keeping one per count leaked threads (the replaced pool's
/// threads end once their last job has).
fn cpu_pool(threads: usize) -> Result<Arc<rayon::ThreadPool>> {
    static POOL: OnceLock<Mutex<Option<(usize, Arc<rayon::ThreadPool>)>>> = OnceLock::new();
    let n = if threads == 0 { available_threads() } else { threads };
    if n > max_threads() {
        return Err(Error::arg(
            "threads",
            format!("is {n}, more than bulkem runs on this machine ({} at most)", max_threads()),
        ));
    }
    let mut slot = POOL.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some((count, pool)) = slot.as_ref() {
        if *count == n {
            return Ok(pool.clone());
        }
    }
    let pool = new_pool(n, |i| format!("bulkem-{i}"))?;
    *slot = Some((n, pool.clone()));
    Ok(pool)
}

/// Block, in the calling thread, every signal the kernel may deliver to
/// any thread of the process (SIGINT, SIGCHLD, SIGPIPE, SIGALRM, ...), so
/// that it goes to the host's own thread instead. A host such as R runs its
/// handlers (and those of its packages) on whichever thread takes the
/// signal, and some of them touch the interpreter's state (R's SIGPIPE
/// handler raises an R error, for one): on one of our threads that is two
/// threads in R at once. Faults a thread causes itself (SIGSEGV, SIGBUS,
/// SIGFPE, SIGILL, SIGTRAP, SIGSYS) stay unblocked: blocking them would
/// turn a crash report into a silent kill. Called at the start of every
/// thread bulkem starts (rayon's and `run_polled`'s; threads started from
/// those inherit the mask).
pub fn block_async_signals() {
    #[cfg(unix)]
    // SAFETY: sigfillset and sigdelset write only the local set;
    // pthread_sigmask changes only this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        for sig in [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL, libc::SIGTRAP, libc::SIGSYS] {
            libc::sigdelset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// What `finished` receives, waking at once when it comes and else every
/// `interval` to call `poll(items_done)`, cancelling `monitor` when that
/// returns false; None when its sender went away without a value.
fn wait_polling<T>(finished: &std::sync::mpsc::Receiver<T>, interval: Duration, monitor: &Monitor, poll: &mut impl FnMut(usize) -> bool) -> Option<T> {
    use std::sync::mpsc::RecvTimeoutError;
    loop {
        match finished.recv_timeout(interval) {
            Ok(out) => return Some(out),
            Err(RecvTimeoutError::Disconnected) => return None,
            Err(RecvTimeoutError::Timeout) => {
                if !monitor.is_cancelled() && !poll(monitor.done()) {
                    monitor.cancel();
                }
            }
        }
    }
}

/// Run `work` on a background thread while the calling thread calls
/// `poll(items_done)` every `interval`. When `poll` returns false the monitor
/// is cancelled and the workers stop at their next check. (Calls from R go
/// through [`Exec::run_polled`], which hands the work to the pool itself.)
///
/// This is how a caller with a single-threaded runtime (R) stays responsive:
/// only the calling thread talks to the runtime, the workers never do.
pub fn run_polled<T: Send>(
    monitor: &Monitor,
    interval: Duration,
    work: impl FnOnce() -> T + Send,
    mut poll: impl FnMut(usize) -> bool,
) -> T {
    std::thread::scope(|scope| {
        let (done, finished) = std::sync::mpsc::channel();
        let handle = scope.spawn(move || {
            // Threads this one starts (devices', CUDA's) inherit its mask.
            block_async_signals();
            let out = work();
            // The receiver outlives this thread; a send cannot fail.
            let _ = done.send(());
            out
        });
        // Its end (or its panic, raised by the join) wakes this thread.
        let _ = wait_polling(&finished, interval, monitor, &mut poll);
        match handle.join() {
            Ok(value) => value,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polling_can_cancel_long_work() {
        let monitor = Monitor::new();
        let started = std::time::Instant::now();
        let out = run_polled(
            &monitor,
            Duration::from_millis(5),
            || {
                while !monitor.is_cancelled() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                monitor.check()
            },
            |_| started.elapsed() < Duration::from_millis(30),
        );
        assert_eq!(out, Err(Error::Interrupted));
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    /// Whether the calling thread blocks `sig`.
    #[cfg(unix)]
    fn blocked(sig: libc::c_int) -> bool {
        // SAFETY: reads this thread's mask into a local set.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set);
            libc::sigismember(&set, sig) == 1
        }
    }

    #[cfg(unix)]
    #[test]
    fn our_threads_leave_the_host_its_signals() {
        let host = [libc::SIGINT, libc::SIGCHLD, libc::SIGPIPE, libc::SIGALRM, libc::SIGUSR1, libc::SIGTERM];
        let faults = [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL];
        let mask = || (host.map(blocked), faults.map(blocked));
        // The test harness's thread is the host's here: nothing blocked.
        assert_eq!(mask(), ([false; 6], [false; 4]));
        let monitor = Monitor::new();
        let (polled, pooled) = run_polled(&monitor, Duration::from_millis(5), || (mask(), Exec::cpu().threads(3).within(mask)), |_| true);
        assert_eq!(polled, ([true; 6], [false; 4]));
        assert_eq!(pooled, ([true; 6], [false; 4]));
        assert_eq!(Exec::cpu().threads(4).run_polled(Duration::from_millis(5), mask, |_| true), ([true; 6], [false; 4]));
        // Every thread of a pool built on the host's thread, too.
        let pool = cpu_pool(5).unwrap();
        let masks: Vec<_> = pool.broadcast(|_| mask());
        assert!(masks.iter().all(|m| *m == ([true; 6], [false; 4])), "{masks:?}");
        assert_eq!(mask(), ([false; 6], [false; 4]));
    }

    #[test]
    fn pooled_polling_cancels_long_work_and_returns_quick_work_at_once() {
        let exec = Exec::cpu().threads(2);
        let started = std::time::Instant::now();
        let out = exec.run_polled(
            Duration::from_millis(5),
            || {
                while !exec.monitor.is_cancelled() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                // On the call's pool, not a thread of its own.
                (rayon::current_num_threads(), exec.monitor.check())
            },
            |_| started.elapsed() < Duration::from_millis(30),
        );
        assert_eq!(out, (2, Err(Error::Interrupted)));
        assert!(started.elapsed() < Duration::from_secs(2));
        let exec = Exec::cpu().threads(2);
        let started = std::time::Instant::now();
        assert_eq!(exec.run_polled(Duration::from_secs(5), || 7, |_| true), 7);
        assert!(started.elapsed() < Duration::from_secs(1));
        // A panic in the work reaches the caller.
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| exec.run_polled(Duration::from_millis(5), || -> i32 { panic!("in the work") }, |_| true)));
        assert!(caught.is_err());
    }

    #[test]
    fn quick_work_returns_without_waiting_for_a_poll() {
        let monitor = Monitor::new();
        let started = std::time::Instant::now();
        let out = run_polled(&monitor, Duration::from_secs(5), || 7, |_| true);
        assert_eq!(out, 7);
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn the_backend_follows_the_request_and_the_job() {
        let small = Job { work: 1.0, gpu_min_work: 10.0, gpu_unsupported: None };
        let big = Job { work: 100.0, ..small.clone() };
        let unsupported = Job { gpu_unsupported: Some("too many states".into()), ..big.clone() };
        assert_eq!(choose_backend(BackendRequest::Cpu, &big), Ok(Backend::Cpu));
        assert_eq!(choose_backend(BackendRequest::Auto, &small), Ok(Backend::Cpu));
        assert_eq!(choose_backend(BackendRequest::Auto, &unsupported), Ok(Backend::Cpu));
        let gpu = crate::gpu::probe().usable();
        assert_eq!(choose_backend(BackendRequest::Auto, &big), Ok(if gpu { Backend::Cuda } else { Backend::Cpu }));
        let asked = choose_backend(BackendRequest::Cuda, &unsupported).unwrap_err();
        assert_eq!(asked.kind(), crate::ErrorKind::Device);
        assert_eq!(choose_backend(BackendRequest::Cuda, &big).is_ok(), gpu);
    }

    #[test]
    fn absurd_thread_counts_are_refused() {
        let err = Exec::cpu().threads(max_threads() + 1).install(|| ()).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Input);
        assert!(Exec::cpu().threads(2).install(|| ()).is_ok());
        assert!(Exec::cpu().threads(3).install(|| ()).is_ok());
    }

    #[test]
    fn exec_types_are_send_and_sync() {
        fn is<T: Send + Sync>() {}
        is::<Exec>();
        is::<Monitor>();
    }
}
