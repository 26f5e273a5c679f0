//! Idle spinning: the last worker thread to run out of work looks for more,
//! briefly, before it goes to sleep.
//!
//! Waking a sleeping thread is dear on a virtual machine: the waker's
//! kernel sends an interrupt to the sleeper's idle vCPU, which the
//! hypervisor must schedule again. Measured on a 2-vCPU VM, a blocking TCP
//! ping-pong between two processes took 108 µs at the median, and 23 µs
//! when one side polled its socket instead of sleeping. A lone client's
//! request is such a ping-pong: without spinning, the server sleeps after
//! every reply and is woken by the next request.
//!
//! So a worker about to park, when every other worker is parked already,
//! first polls for up to a window (`--idle-spin-us`):
//! * its own epoll set, in which every client and peer socket is registered
//!   edge-triggered ([`watch`]): new bytes on any of them end the spin;
//! * the runtime's injection queue: a task woken from another thread (the
//!   commit thread answering a write) ends it;
//! * another worker waking (it may have work this one could steal) ends it.
//!
//! and yields the CPU between polls, so a thread that has work on this CPU
//! (the commit thread, a client on the same machine) runs first. Then it
//! parks as it would have: tokio finds the bytes in its own epoll set at
//! once and nobody was woken. Nothing depends on the spin for correctness:
//! it only delays a park, by at most the window, and tokio's own protocol
//! after the park hook finds every task.
//!
//! Only the last worker spins: while another runs, work can appear on that
//! worker's queue where a spinner does not look, and it would keep the
//! other from waking a parked worker to share it.
//!
//! Nor does a worker spin when all the clients sent since it last parked
//! were heartbeats ([`served`]): a session's next ping is a third of its
//! timeout away, so a spin after one only burns its window. Idle sessions
//! are nothing but pings: with 10 000 of them the spin polled 58–67 ms a
//! second for nothing, and 16–21 ms once it skipped pings.
//!
//! The cost is CPU while idle: at most one window after each burst of
//! activity, in yields. For a steady trickle of requests that is a little
//! more than the wake-ups cost (measured: 47–73 µs of server CPU per lone
//! read spinning, 41–52 µs sleeping), at less than half the latency. A server
//! sharing its machine with CPU-bound work can turn it off
//! (`--idle-spin-us 0`).

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::runtime::RuntimeMetrics;
use tracing::debug;

/// The window arbord spins for by default: longer than a client on the
/// same machine takes from one reply to its next request (measured 40-60
/// µs on the 2-vCPU VM), short against anything a person notices.
pub const IDLE_SPIN_DEFAULT: Duration = Duration::from_micros(100);

/// The longest window arbord takes: past it a spin is not waiting for a
/// reply's next request but burning an idle CPU.
pub const IDLE_SPIN_MAX: Duration = Duration::from_millis(10);

/// Readiness events taken from the spin's epoll set per poll: any one ends
/// the spin, so one would do; a few drain a burst's stale edges at once.
const EVENTS_PER_POLL: usize = 8;

/// Marks in [`IdleSpin::served`]: a client sent a heartbeat…
const SERVED_PING: u8 = 1;
/// …or a request that may well be followed by its next one.
const SERVED_REQUEST: u8 = 2;

/// How a spin ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SpinEnd {
    /// Bytes arrived on a watched socket, or a task was woken from
    /// another thread.
    Work,
    /// Another worker woke up.
    WorkerWoke,
    /// Nothing came within the window.
    Window,
}

/// What the spins have come to, for the metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SpinCounts {
    /// Spins that ended because work arrived: each a wake-up saved.
    pub found_work: u64,
    /// Spins that ended because another worker woke.
    pub worker_woke: u64,
    /// Spins that found nothing within the window.
    pub window_passed: u64,
    /// Time spent spinning, in microseconds.
    pub spun_us: u64,
    /// Times the last worker parked without spinning because clients had
    /// sent only heartbeats since it last parked.
    pub skipped_after_pings: u64,
}

/// The spin of one runtime's worker threads: its hooks go on the runtime's
/// builder ([`IdleSpin::install`]); sockets join with [`watch`].
#[derive(Debug)]
pub struct IdleSpin {
    window: Duration,
    /// Edge-triggered readiness of every watched socket.
    epoll: OwnedFd,
    /// Workers between their park hook and their unpark hook.
    workers_idle: AtomicUsize,
    /// The runtime's, taken on the first park (the hooks run in its context).
    metrics: OnceLock<Option<RuntimeMetrics>>,
    /// What clients sent since the last worker last parked
    /// (`SERVED_PING | SERVED_REQUEST`).
    served: AtomicU8,
    skipped_after_pings: AtomicU64,
    found_work: AtomicU64,
    worker_woke: AtomicU64,
    window_passed: AtomicU64,
    spun_us: AtomicU64,
}

/// The process's spin, once arbord has installed one.
static INSTALLED: OnceLock<IdleSpin> = OnceLock::new();

/// Adds `socket` to the spin's epoll set, if a spin is installed. A socket
/// leaves the set by itself when it is closed.
pub fn watch(socket: &impl AsFd) {
    if let Some(spin) = INSTALLED.get() {
        spin.watch(socket);
    }
}

/// Notes that a client request was read: a heartbeat (`ping`) or any other.
/// A burst of heartbeats alone ends in a park without a spin.
pub fn served(ping: bool) {
    if let Some(spin) = INSTALLED.get() {
        spin.served(ping);
    }
}

/// The installed spin's counts; `None` when none is installed.
pub fn counts() -> Option<SpinCounts> {
    INSTALLED.get().map(IdleSpin::counts)
}

/// The installed spin's window; zero when none is installed.
pub fn window() -> Duration {
    INSTALLED.get().map_or(Duration::ZERO, IdleSpin::window)
}

impl IdleSpin {
    /// A spin of `window` with an empty set of sockets.
    pub fn new(window: Duration) -> io::Result<IdleSpin> {
        // SAFETY: a plain syscall; the descriptor it returns is owned at once.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and nothing else owns it.
        let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(IdleSpin {
            window,
            epoll,
            workers_idle: AtomicUsize::new(0),
            metrics: OnceLock::new(),
            served: AtomicU8::new(0),
            skipped_after_pings: AtomicU64::new(0),
            found_work: AtomicU64::new(0),
            worker_woke: AtomicU64::new(0),
            window_passed: AtomicU64::new(0),
            spun_us: AtomicU64::new(0),
        })
    }

    /// How long a worker spins at most before it parks.
    fn window(&self) -> Duration {
        self.window
    }

    /// Makes `self` the process's spin and puts its hooks on `builder`, a
    /// multi-thread runtime's. Fails if a spin is installed already.
    pub fn install(self, builder: &mut tokio::runtime::Builder) -> Result<(), IdleSpin> {
        INSTALLED.set(self)?;
        builder
            .on_thread_park(|| {
                if let Some(spin) = INSTALLED.get() {
                    spin.before_park();
                }
            })
            .on_thread_unpark(|| {
                if let Some(spin) = INSTALLED.get() {
                    spin.after_unpark();
                }
            });
        Ok(())
    }

    /// Adds `socket` to the set whose readiness ends a spin.
    pub fn watch(&self, socket: &impl AsFd) {
        let fd = socket.as_fd().as_raw_fd();
        let mut event = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: 0,
        };
        // SAFETY: both descriptors are open for the call (borrowed), and
        // `event` outlives it.
        let added =
            unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) };
        if added != 0 {
            // (ENOSPC: the user's epoll watches are used up.) The socket is
            // served as before; its bytes just do not end a spin.
            debug!(error = %io::Error::last_os_error(), fd, "socket not watched by the idle spin");
        }
    }

    /// Notes a client request read, heartbeat or not.
    fn served(&self, ping: bool) {
        let mark = if ping { SERVED_PING } else { SERVED_REQUEST };
        // Read first: under load the mark is set already, and a load keeps
        // the cache line shared where a write would bounce it per request.
        if self.served.load(Ordering::Relaxed) & mark == 0 {
            self.served.fetch_or(mark, Ordering::Relaxed);
        }
    }

    /// Whether the last worker, about to park, should spin: not when the
    /// clients sent only heartbeats since it last parked. Takes the marks.
    fn worth_spinning(&self) -> bool {
        let served = self.served.swap(0, Ordering::AcqRel);
        if served == SERVED_PING {
            self.skipped_after_pings.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// The park hook: spins if every other worker is parked, unless clients
    /// sent nothing but heartbeats since the last such park.
    fn before_park(&self) {
        let idle = self.workers_idle.fetch_add(1, Ordering::AcqRel) + 1;
        let metrics = self.metrics.get_or_init(|| {
            tokio::runtime::Handle::try_current()
                .ok()
                .map(|runtime| runtime.metrics())
        });
        let Some(metrics) = metrics else { return };
        let workers = metrics.num_workers();
        if idle < workers || !self.worth_spinning() {
            return;
        }
        let end = self.spin(|| {
            if metrics.global_queue_depth() > 0 {
                Some(SpinEnd::Work)
            } else if self.workers_idle.load(Ordering::Acquire) < workers {
                Some(SpinEnd::WorkerWoke)
            } else {
                None
            }
        });
        let counter = match end {
            SpinEnd::Work => &self.found_work,
            SpinEnd::WorkerWoke => &self.worker_woke,
            SpinEnd::Window => &self.window_passed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The unpark hook.
    fn after_unpark(&self) {
        self.workers_idle.fetch_sub(1, Ordering::AcqRel);
    }

    /// Polls the socket set and `other` (work the runtime knows of) until
    /// either has something or the window has passed, yielding the CPU
    /// between polls.
    fn spin(&self, mut other: impl FnMut() -> Option<SpinEnd>) -> SpinEnd {
        let started = Instant::now();
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; EVENTS_PER_POLL];
        let end = loop {
            if let Some(end) = other() {
                break end;
            }
            // SAFETY: the set is open while `self` lives, and `events` has
            // room for the count passed.
            let ready = unsafe {
                libc::epoll_wait(
                    self.epoll.as_raw_fd(),
                    events.as_mut_ptr(),
                    EVENTS_PER_POLL as libc::c_int,
                    0,
                )
            };
            if ready > 0 {
                break SpinEnd::Work;
            }
            if started.elapsed() >= self.window {
                break SpinEnd::Window;
            }
            // SAFETY: a plain syscall without arguments.
            unsafe { libc::sched_yield() };
        };
        let spun = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.spun_us.fetch_add(spun, Ordering::Relaxed);
        end
    }

    /// What the spins have come to so far.
    fn counts(&self) -> SpinCounts {
        SpinCounts {
            found_work: self.found_work.load(Ordering::Relaxed),
            worker_woke: self.worker_woke.load(Ordering::Relaxed),
            window_passed: self.window_passed.load(Ordering::Relaxed),
            spun_us: self.spun_us.load(Ordering::Relaxed),
            skipped_after_pings: self.skipped_after_pings.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    fn never() -> Option<SpinEnd> {
        None
    }

    // Proves bytes on a watched socket end a spin long before its window,
    // and that a spin with nothing to find lasts its window.
    #[test]
    fn bytes_on_a_watched_socket_end_the_spin() {
        let spin = IdleSpin::new(Duration::from_secs(5)).expect("epoll");
        let (mut client, server) = UnixStream::pair().expect("pair");
        spin.watch(&server);
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            client.write_all(b"request").expect("write");
            client
        });
        let started = Instant::now();
        assert_eq!(spin.spin(never), SpinEnd::Work);
        assert!(started.elapsed() < Duration::from_secs(5));
        let _client = writer.join().expect("writer");

        let short = IdleSpin::new(Duration::from_millis(5)).expect("epoll");
        let (_client, server) = UnixStream::pair().expect("pair");
        short.watch(&server);
        let started = Instant::now();
        assert_eq!(short.spin(never), SpinEnd::Window);
        assert!(started.elapsed() >= Duration::from_millis(5));
        assert!(short.counts().spun_us >= 5_000);
    }

    // Proves a readiness edge is taken once: the next spin waits for new
    // bytes rather than ending at once on bytes already seen.
    #[test]
    fn an_edge_ends_one_spin_only() {
        let spin = IdleSpin::new(Duration::from_millis(5)).expect("epoll");
        let (mut client, server) = UnixStream::pair().expect("pair");
        spin.watch(&server);
        client.write_all(b"one").expect("write");
        assert_eq!(spin.spin(never), SpinEnd::Work);
        assert_eq!(spin.spin(never), SpinEnd::Window);
        client.write_all(b"two").expect("write");
        assert_eq!(spin.spin(never), SpinEnd::Work);
    }

    // Proves what the runtime reports (a woken task, a worker awake) ends
    // a spin with that reason, before the sockets are looked at.
    #[test]
    fn work_the_runtime_reports_ends_the_spin() {
        let spin = IdleSpin::new(Duration::from_secs(5)).expect("epoll");
        let mut polls = 0;
        let end = spin.spin(|| {
            polls += 1;
            (polls == 3).then_some(SpinEnd::WorkerWoke)
        });
        assert_eq!((end, polls), (SpinEnd::WorkerWoke, 3));
        assert_eq!(spin.spin(|| Some(SpinEnd::Work)), SpinEnd::Work);
    }

    // Proves only a burst of heartbeats alone goes without a spin: any other
    // request read with them, or no client at all (a timer, a peer), keeps it.
    #[test]
    fn only_heartbeats_alone_skip_the_spin() {
        let spin = IdleSpin::new(Duration::from_millis(1)).expect("epoll");
        spin.served(true);
        spin.served(true);
        assert!(!spin.worth_spinning());
        assert_eq!(spin.counts().skipped_after_pings, 1);
        // The marks were taken: the next burst decides afresh.
        assert!(spin.worth_spinning());
        spin.served(true);
        spin.served(false);
        assert!(spin.worth_spinning());
        spin.served(false);
        assert!(spin.worth_spinning());
        assert_eq!(spin.counts().skipped_after_pings, 1);
    }
}
