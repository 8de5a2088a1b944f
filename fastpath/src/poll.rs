//! Adaptive polling (issue 25): how long a thread that ran out of work spins on its
//! non-blocking receive before it blocks.
//!
//! Blocking costs a wake-up, and on a virtual machine a wake-up of a halted vCPU is an
//! inter-processor interrupt plus a VM exit: about 30 µs each here, and a request to the fast
//! path crosses two of them (the executor's worker, then the client). Spinning costs CPU. So,
//! as NAPI busy-polling and adaptive interrupt moderation do, the spin budget follows the gaps
//! between arrivals that this thread has seen (an EWMA):
//!
//! 1. `block`: never spin (the old behaviour; one core idle, a wake-up per request).
//! 2. `spin`: never block (a whole core, the lowest latency).
//! 3. `adaptive`:
//!    - when the usual gap is short (at most `max`): spin `clamp(4 × gap, MIN_SPIN, max)`.
//!      The next request most likely comes while it spins; that spinning is the request's
//!      latency saved, not waste;
//!    - when the usual gap is long: spin only `min(max, share × gap)`. A request is seldom
//!      caught, and the time spun per arrival is at most `share` of the time between arrivals,
//!      so a lightly used thread spends at most `share` of a core polling;
//!    - with no arrivals at all it spins once after the last request, then blocks: an idle
//!      node spends nothing.
//!
//! Worked example (`max` 200 µs, `share` 0.1): a closed-loop client's next request arrives
//! about 10 µs after the reply, so the gap EWMA is about 10 µs and the budget 50 µs (the
//! floor): every request is caught spinning, and none waits for a wake-up. When the client
//! stops, the worker spins 50 µs once and blocks. At 20 requests a second (gaps of 50 ms) it
//! spins `min(200 µs, 5 ms)` = 200 µs per request: 0.4% of a core.
//!
//! Known caveats:
//! - Two threads spinning on a two-core machine leave nothing for a third (a client, the
//!   receiver thread): `spin` and short-gap `adaptive` suit a worker per core, as λ-NIC's cores.
//! - The first gap after a long idle period is measured with the wake-up in it; one slow
//!   request re-teaches the EWMA (weight `ALPHA`).

use std::time::{Duration, Instant};

/// The shortest spin of `adaptive` when gaps are short: the next request is often a few µs
/// later than the average, and a budget cut too fine would block just before it.
pub const MIN_SPIN: Duration = Duration::from_micros(50);
/// The weight of the newest gap in the EWMA.
pub const ALPHA: f64 = 0.2;
pub const DEFAULT_MAX: Duration = Duration::from_micros(200);
pub const DEFAULT_SHARE: f64 = 0.1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Adaptive,
    Spin,
    Block,
}

impl Mode {
    pub fn parse(v: &str) -> Option<Mode> {
        match v {
            "adaptive" => Some(Mode::Adaptive),
            "spin" => Some(Mode::Spin),
            "block" => Some(Mode::Block),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Adaptive => "adaptive",
            Mode::Spin => "spin",
            Mode::Block => "block",
        }
    }
}

/// The configured policy (shared by every worker; each has its own `Poller`).
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    pub mode: Mode,
    pub max: Duration,
    pub share: f64,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            mode: Mode::Adaptive,
            max: DEFAULT_MAX,
            share: DEFAULT_SHARE,
        }
    }
}

/// One thread's view: the gaps it saw, and what it spent spinning.
#[derive(Debug)]
pub struct Poller {
    pub policy: Policy,
    gap_ns: Option<f64>,
    idle_since: Option<Instant>,
    /// Nanoseconds spent spinning, and spins that ended with work (caught) or in a block.
    pub spun_ns: u64,
    pub caught: u64,
    pub blocked: u64,
}

impl Poller {
    pub fn new(policy: Policy) -> Poller {
        Poller {
            policy,
            gap_ns: None,
            idle_since: None,
            spun_ns: 0,
            caught: 0,
            blocked: 0,
        }
    }

    /// How long to spin now that the thread ran out of work.
    pub fn budget(&self) -> Duration {
        let p = &self.policy;
        match p.mode {
            Mode::Block => Duration::ZERO,
            Mode::Spin => Duration::MAX,
            Mode::Adaptive => {
                let Some(gap) = self.gap_ns else {
                    return MIN_SPIN.min(p.max);
                };
                let gap = Duration::from_nanos(gap as u64);
                if gap <= p.max {
                    (gap * 4).clamp(MIN_SPIN.min(p.max), p.max)
                } else {
                    gap.mul_f64(p.share).min(p.max)
                }
            }
        }
    }

    /// The thread ran out of work at `now` (it starts to spin, or blocks).
    pub fn idle(&mut self, now: Instant) {
        if self.idle_since.is_none() {
            self.idle_since = Some(now);
        }
    }

    /// Work arrived at `now`; `spun` of the idle time was spent spinning, and `caught` says
    /// whether the spin found it (else the thread had blocked).
    pub fn arrived(&mut self, now: Instant, spun: Duration, caught: bool) {
        self.spun_ns += spun.as_nanos() as u64;
        if caught {
            self.caught += 1;
        } else {
            self.blocked += 1;
        }
        let Some(since) = self.idle_since.take() else {
            return; // work was waiting: no gap
        };
        let gap = now.duration_since(since).as_nanos() as f64;
        self.gap_ns = Some(match self.gap_ns {
            None => gap,
            Some(old) => (1.0 - ALPHA) * old + ALPHA * gap,
        });
    }

    /// A spin that ran its budget out without work: counted, and the thread blocks next.
    pub fn gave_up(&mut self, spun: Duration) {
        self.spun_ns += spun.as_nanos() as u64;
    }
}

/// Spin on `attempt` for at most `budget`; returns what it found and how long it spun.
pub fn spin_for<T>(
    budget: Duration,
    mut attempt: impl FnMut() -> Option<T>,
) -> (Option<T>, Duration) {
    let start = Instant::now();
    if budget.is_zero() {
        return (None, Duration::ZERO);
    }
    loop {
        if let Some(found) = attempt() {
            return (Some(found), start.elapsed());
        }
        let spun = start.elapsed();
        if spun >= budget {
            return (None, spun);
        }
        // On an idle core this returns at once; on a busy one it lets the other thread run
        // instead of burning the rest of this slice (a client or the work it waits for).
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taught(gap: Duration, times: usize) -> Poller {
        let mut p = Poller::new(Policy::default());
        let mut t = Instant::now();
        for _ in 0..times {
            p.idle(t);
            t += gap;
            p.arrived(t, Duration::ZERO, true);
        }
        p
    }

    #[test]
    fn short_gaps_spin_past_the_next_arrival_within_max() {
        assert_eq!(taught(Duration::from_micros(10), 20).budget(), MIN_SPIN);
        assert_eq!(
            taught(Duration::from_micros(30), 20).budget(),
            Duration::from_micros(120)
        );
        assert_eq!(taught(Duration::from_micros(150), 40).budget(), DEFAULT_MAX);
    }

    #[test]
    fn long_gaps_spin_at_most_share_of_the_gap() {
        // 20 requests a second: 50 ms gaps -> min(200 µs, 5 ms)
        assert_eq!(taught(Duration::from_millis(50), 40).budget(), DEFAULT_MAX);
        // 1 ms gaps -> 0.1 ms: at most 10% of the time spinning
        let b = taught(Duration::from_millis(1), 60).budget();
        assert!(
            b <= Duration::from_micros(101) && b >= Duration::from_micros(99),
            "{b:?}"
        );
    }

    #[test]
    fn spent_share_never_exceeds_the_policy_when_gaps_are_long() {
        for gap_us in [300u64, 1_000, 5_000, 50_000, 1_000_000] {
            let gap = Duration::from_micros(gap_us);
            let spin = taught(gap, 80).budget();
            assert!(
                spin.as_secs_f64() / gap.as_secs_f64() <= DEFAULT_SHARE + 1e-6,
                "{gap:?} -> {spin:?}"
            );
        }
    }

    #[test]
    fn block_never_spins_and_spin_never_blocks() {
        let mut p = Poller::new(Policy {
            mode: Mode::Block,
            ..Policy::default()
        });
        assert_eq!(p.budget(), Duration::ZERO);
        p.policy.mode = Mode::Spin;
        assert_eq!(p.budget(), Duration::MAX);
        assert_eq!(Mode::parse("adaptive"), Some(Mode::Adaptive));
        assert_eq!(Mode::parse("busy"), None);
    }

    #[test]
    fn spin_for_returns_what_it_found_or_gives_up_after_the_budget() {
        let mut n = 0;
        let (found, _) = spin_for(Duration::from_millis(50), || {
            n += 1;
            (n == 3).then_some(7)
        });
        assert_eq!(found, Some(7));
        let (none, spun) = spin_for::<()>(Duration::from_micros(200), || None);
        assert!(none.is_none() && spun >= Duration::from_micros(200));
        assert_eq!(
            spin_for::<()>(Duration::ZERO, || panic!("not called")).0,
            None
        );
    }
}
