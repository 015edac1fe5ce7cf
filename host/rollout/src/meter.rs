//! Sandbox time drawn from a quota as it is used (`rollbox serve`'s tenants,
//! `sandbox_seconds_per_minute`): a bucket that refills at its quota a minute up to a minute's
//! worth, drawn down by work that has finished and by work running now, as it runs.
//!
//! Checked only when a request was admitted, the quota let a tenant's requests in flight all
//! start their calls and episodes at once: 8 requests of 4 episodes spinning 1.5 s each used
//! 49.7 s of a 2 s quota in 3 s (issue 52). Now each piece of work is counted from the moment
//! it starts ([`SandboxMeter::start`]), running work stops once the bucket is spent
//! ([`SandboxMeter::spent`], checked every [`METER_TICK`]: a tenant overdraws by at most its
//! running work's time over about a tick), and once spent the bucket rests until it holds
//! [`RESUME_SHARE`] of a minute's worth again: new work waits ([`SandboxMeter::time_left`])
//! and new requests are refused ([`SandboxMeter::wait`]) until then.

use std::future::Future as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How often running work looks whether its tenant's time is spent.
pub const METER_TICK: Duration = Duration::from_millis(20);

/// The share of a minute's worth a spent bucket refills to before held work starts again (so
/// it resumes in slices worth running, not in slivers stopped as soon as they start).
pub const RESUME_SHARE: f64 = 0.1;

/// A quota's sandbox time: work finished, work running now, and the bucket.
#[derive(Debug, Default)]
pub struct SandboxMeter {
    /// Microseconds of work that has finished.
    finished_us: AtomicU64,
    running: Mutex<Running>,
    bucket: Mutex<Bucket>,
}

/// Work running now: how many, and the sum of their starts (microseconds since [`base`]).
#[derive(Debug, Default)]
struct Running {
    count: u64,
    starts_us: u128,
}

/// The quota a minute (`None`: unmetered), the time left as of `at` with the finished work
/// already taken off, and whether it is resting (spent, and not yet refilled to
/// [`RESUME_SHARE`]).
#[derive(Debug, Default)]
struct Bucket {
    per_minute_us: Option<f64>,
    state: Option<(f64, Instant, u64)>,
    resting: bool,
}

/// The instant microseconds are counted from.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

fn now_us() -> u128 {
    base().elapsed().as_micros()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A piece of work being counted; its time is added to the finished work when dropped.
#[derive(Debug)]
pub struct RunningWork {
    meter: Arc<SandboxMeter>,
    started_us: u128,
}

impl Drop for RunningWork {
    fn drop(&mut self) {
        let mut r = lock(&self.meter.running);
        r.count -= 1;
        r.starts_us -= self.started_us;
        let us = now_us().saturating_sub(self.started_us);
        // Added under the lock: a reader never sees it both running and finished.
        self.meter
            .finished_us
            .fetch_add(u64::try_from(us).unwrap_or(u64::MAX), Ordering::AcqRel);
    }
}

impl SandboxMeter {
    /// Meter against `per_minute` seconds a minute (`None`: count, never refuse). A changed
    /// quota starts from a full minute's worth; the same quota keeps what is left.
    pub fn set_quota(&self, per_minute: Option<u64>) {
        let per_minute_us = per_minute.map(|s| s as f64 * 1e6);
        let finished = self.finished_us.load(Ordering::Acquire);
        let mut b = lock(&self.bucket);
        if b.per_minute_us != per_minute_us {
            *b = Bucket {
                per_minute_us,
                state: per_minute_us.map(|full| (full, Instant::now(), finished)),
                resting: false,
            };
        }
    }

    /// Start counting a piece of work, until the guard is dropped.
    pub fn start(self: &Arc<Self>) -> RunningWork {
        let started_us = now_us();
        let mut r = lock(&self.running);
        r.count += 1;
        r.starts_us += started_us;
        RunningWork {
            meter: self.clone(),
            started_us,
        }
    }

    /// Add time used outside [`SandboxMeter::start`] (a file read and compiled for the work).
    pub fn add(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.finished_us.fetch_add(us, Ordering::AcqRel);
    }

    /// Finished work and running work so far, microseconds.
    fn used_us(&self) -> (u64, u128) {
        let r = lock(&self.running);
        let finished = self.finished_us.load(Ordering::Acquire);
        let running = (now_us() * u128::from(r.count)).saturating_sub(r.starts_us);
        (finished, running)
    }

    /// All the time used so far, finished and running.
    pub fn used(&self) -> Duration {
        let (finished, running) = self.used_us();
        Duration::from_micros(finished)
            + Duration::from_micros(u64::try_from(running).unwrap_or(u64::MAX))
    }

    /// Microseconds left now, running work counted as used, the quota a minute and whether
    /// the bucket rests; `None` when unmetered.
    fn left_us(&self) -> Option<(f64, f64, bool)> {
        // Unmetered (most tenants): one lock and out, as this runs at every wake-up of every
        // running call and episode ([`SandboxMeter::spent`]).
        lock(&self.bucket).per_minute_us?;
        let (finished, running) = self.used_us();
        let now = Instant::now();
        let mut b = lock(&self.bucket);
        let full = b.per_minute_us?;
        let (left, at, seen) = b.state.get_or_insert((full, now, finished));
        let refilled = *left + full / 60.0 * now.duration_since(*at).as_secs_f64();
        *left = refilled.min(full) - finished.saturating_sub(*seen) as f64;
        *at = now;
        *seen = finished;
        let left = *left - running as f64;
        if left <= 0.0 {
            b.resting = true;
        } else if left >= full * RESUME_SHARE {
            b.resting = false;
        }
        Some((left, full, b.resting))
    }

    /// `None` while new work may start (time left and not resting, or unmetered); else how
    /// long the refill to [`RESUME_SHARE`] of a minute's worth takes, at least a second.
    pub fn wait(&self) -> Option<Duration> {
        let (left, full, resting) = self.left_us()?;
        resting.then(|| {
            Duration::from_secs_f64((full * RESUME_SHARE - left) / (full / 60.0))
                .max(Duration::from_secs(1))
        })
    }

    /// Whether the time is spent (never when unmetered).
    pub fn is_spent(&self) -> bool {
        self.left_us().is_some_and(|(left, _, _)| left <= 0.0)
    }

    /// Return once the time is spent (never when unmetered): race running work against it to
    /// stop the work. Checked whenever the future is polled, so in a `select!` beside the
    /// work, at each of the work's own wake-ups (a spinning guest yields every few ms), and
    /// at least every [`METER_TICK`] otherwise: a timer alone fired late on threads busy with
    /// spinning guests, and 32 episodes overdrew a 2 s quota by 33 s.
    pub async fn spent(&self) {
        let mut tick = Box::pin(tokio::time::sleep(METER_TICK));
        std::future::poll_fn(|cx| {
            if self.is_spent() {
                return std::task::Poll::Ready(());
            }
            while tick.as_mut().poll(cx).is_ready() {
                tick.as_mut()
                    .reset(tokio::time::Instant::now() + METER_TICK);
            }
            std::task::Poll::Pending
        })
        .await
    }

    /// Return at once while new work may start; while the bucket rests, once it holds
    /// [`RESUME_SHARE`] of a minute's worth again.
    pub async fn time_left(&self) {
        while let Some(wait) = self.wait() {
            tokio::time::sleep(wait.clamp(METER_TICK, Duration::from_secs(1))).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_work_counts_as_it_runs_and_once_when_done() {
        let m = Arc::new(SandboxMeter::default());
        m.set_quota(Some(60));
        assert!(!m.is_spent());
        let work = m.start();
        std::thread::sleep(Duration::from_millis(30));
        assert!(
            m.used() >= Duration::from_millis(30),
            "counted while running"
        );
        drop(work);
        let after = m.used();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(m.used(), after, "counted once, when done");
    }

    #[test]
    fn the_bucket_is_spent_by_running_work_and_refills() {
        let m = Arc::new(SandboxMeter::default());
        m.set_quota(Some(60));
        m.add(Duration::from_secs(59));
        assert!(!m.is_spent(), "a second left");
        let _work = m.start();
        // More than that second spends it (while it refills at a second a second, and the
        // running work counts too).
        m.add(Duration::from_millis(1500));
        assert!(m.is_spent());
        // Resting until 6 s (a tenth of the minute's 60) have refilled.
        let wait = m.wait().expect("spent");
        assert!(wait >= Duration::from_secs(5), "{wait:?}");
        // A tenant without a quota is counted, never spent.
        m.set_quota(None);
        m.add(Duration::from_secs(1000));
        assert!(!m.is_spent() && m.wait().is_none());
    }

    #[tokio::test]
    async fn running_work_is_told_when_the_time_is_spent() {
        let m = Arc::new(SandboxMeter::default());
        // 0.06 s a minute: spent after 60 ms of running work.
        m.set_quota(Some(1));
        m.add(Duration::from_micros(1_000_000 - 60_000));
        let work = m.start();
        tokio::time::timeout(Duration::from_secs(30), m.spent())
            .await
            .expect("told it is spent");
        assert!(m.used() >= Duration::from_millis(1000));
        drop(work);
    }
}
