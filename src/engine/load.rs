//! How much of the machine other processes used while rag measured itself: the share of all
//! cores' time, from /proc/stat (busy and stolen time of the whole machine, niced work
//! aside, since it yields to rag) less this process's own time (/proc/self/stat). A generator's speed taken while a build ran beside
//! it is the build's doing, not the machine's, and routing must not step down for it.
//!
//! Where /proc is not there (not Linux) nothing is known, and a figure counts as quiet, as
//! every figure did before this was measured.

use std::time::{Duration, Instant};

/// A figure is the machine's own when other processes took at most this share of the
/// machine's CPU time while it was taken. One process spinning on one of two cores is 0.5;
/// the system's own daemons stay under 0.05 here.
pub const QUIET_SHARE: f64 = 0.2;

/// Windows shorter than this say little at /proc/stat's 100 ticks a second.
const MIN_WINDOW: Duration = Duration::from_millis(500);
/// Enough to tell one busy core from none (20 ticks a core at 100 a second), short beside
/// a prefill.
const FIT_WINDOW: Duration = Duration::from_millis(200);

/// A started measurement.
#[derive(Clone)]
pub struct Meter {
    start: Option<Ticks>,
    at: Instant,
}

#[derive(Clone, Copy)]
struct Ticks {
    /// CPUs /proc/stat counts (the machine's logical CPUs).
    cpus: u64,
    /// Busy (non-idle) ticks of every core, stolen time included.
    busy: u64,
    /// Every tick of every core.
    total: u64,
    /// This process's user and system ticks, every thread.
    own: u64,
}

impl Meter {
    pub fn start() -> Meter {
        Meter {
            start: ticks(),
            at: Instant::now(),
        }
    }

    /// The share of the machine's CPU time (0..=1) that other processes used since
    /// [`Meter::start`]; `None` where it cannot be known or the window was too short.
    pub fn others(&self) -> Option<f64> {
        if self.at.elapsed() < MIN_WINDOW {
            return None;
        }
        let (a, b) = (self.start?, ticks()?);
        others_share(a, b)
    }
}

/// Whether this system reports the load at all (Linux's /proc).
pub fn known() -> bool {
    std::path::Path::new("/proc/stat").is_file()
}

/// Whether the machine is quiet now: other processes' share over a short look.
pub fn quiet_now() -> bool {
    let m = Meter::start();
    std::thread::sleep(MIN_WINDOW);
    m.others().is_none_or(|o| o <= QUIET_SHARE)
}

/// The cores other processes kept busy over `meter`'s window (0 where it cannot be known, or
/// on one core, where there is nothing to step down from). llama.cpp's threads meet at a
/// barrier after every step, so one preempted thread stalls the rest: on 2 cores with one
/// busy, 2 threads decode the 1.5B at 7.4 tok/s and 1 thread at 17.4 (docs/benchmarks.md,
/// threads).
///
/// The window runs from the question's arrival; where it is shorter than [`FIT_WINDOW`]
/// (a warm server answering a short question) the rest is waited, so a busy core is seen:
/// at most 0.2 s.
pub fn busy_now(meter: &Meter) -> usize {
    if crate::config::threads(0) < 2 || meter.start.is_none() {
        return 0;
    }
    let wait = FIT_WINDOW.saturating_sub(meter.at.elapsed());
    if !wait.is_zero() {
        std::thread::sleep(wait);
    }
    meter
        .start
        .and_then(|a| busy_cores(a, ticks()?))
        .unwrap_or(0)
}

/// Threads for llama.cpp: a count the user set as it is; for 0, `cores` (the physical cores
/// this process may use) less the `busy` ones, at least one.
pub fn fit(setting: usize, cores: usize, busy: usize) -> usize {
    if setting > 0 {
        setting
    } else {
        cores.saturating_sub(busy).max(1)
    }
}

/// Cores other processes kept busy between two readings: their share of all CPUs' time,
/// in whole CPUs.
fn busy_cores(a: Ticks, b: Ticks) -> Option<usize> {
    others_share(a, b).map(|share| (share * b.cpus as f64).round() as usize)
}

fn others_share(a: Ticks, b: Ticks) -> Option<f64> {
    let total = b.total.checked_sub(a.total)?;
    if total == 0 {
        return None;
    }
    let busy = b.busy.saturating_sub(a.busy);
    let own = b.own.saturating_sub(a.own);
    Some((busy.saturating_sub(own) as f64 / total as f64).clamp(0.0, 1.0))
}

fn ticks() -> Option<Ticks> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let own = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse(&stat, &own)
}

/// The machine's ticks from /proc/stat's first line (`cpu  user nice system idle iowait irq
/// softirq steal ...`) and this process's from /proc/self/stat (utime and stime, the 14th
/// and 15th fields, counted after the command name's closing parenthesis).
fn parse(stat: &str, own: &str) -> Option<Ticks> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if f.len() < 8 {
        return None;
    }
    // Niced work (a build at `nice 19`) yields the CPU to rag: it is not counted as busy.
    let idle = f[3] + f[4] + f[1];
    let total: u64 = f.iter().sum();
    let rest = &own[own.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let cpus = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .count() as u64;
    Some(Ticks {
        cpus: cpus.max(1),
        busy: total - idle,
        total,
        own: utime + stime,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: &str = "4242 (rag ask) R 1 2 3 4 5 6 7 8 9 10 300 40 0 0 20 0 4 0";

    #[test]
    fn others_are_the_busy_ticks_that_are_not_ours() {
        let a = parse("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 2 3 4", OWN).unwrap();
        assert_eq!((a.busy, a.total, a.own), (200, 1000, 340));
        // 200 ticks of two cores: 150 busy, of which 100 ours.
        let own = OWN.replace("300 40", "400 40");
        let b = parse("cpu  200 0 150 850 0 0 0 0 0 0", &own).unwrap();
        assert_eq!(others_share(a, b), Some(0.25));
        // Stolen time (a busy host under a VM) counts as others'.
        let b = parse("cpu  200 0 100 800 0 0 0 100 0 0", &own).unwrap();
        assert_eq!(others_share(a, b), Some(0.5));
        assert_eq!(others_share(a, a), None);
        // Niced ticks yield to rag: not busy.
        let b = parse("cpu  100 100 100 800 0 0 0 0 0 0", &own).unwrap();
        assert_eq!(others_share(a, b), Some(0.0));
        assert!(parse("intr 1 2", OWN).is_none());
        assert!(parse("cpu  1 2 3", OWN).is_none());
        assert!(parse("cpu  1 2 3 4 5 6 7 8", "garbage").is_none());
    }

    #[test]
    fn threads_step_down_for_the_cores_others_keep_busy() {
        let a = parse("cpu  0 0 0 1000 0 0 0 0\ncpu0 x\ncpu1 x", OWN).unwrap();
        let b = parse("cpu  100 0 0 1100 0 0 0 0\ncpu0 x\ncpu1 x", OWN).unwrap();
        assert_eq!(a.cpus, 2);
        // One of two cores busy (100 of 200 ticks, none of them ours): one core is busy.
        assert_eq!(busy_cores(a, b), Some(1));
        assert_eq!(fit(0, 2, 1), 1);
        assert_eq!(fit(0, 2, 2), 1, "never below one");
        assert_eq!(fit(0, 16, 3), 13);
        assert_eq!(fit(3, 2, 2), 3, "a count the user set is kept");
        // Where nothing can be known, every core.
        let unknown = Meter {
            start: None,
            at: Instant::now(),
        };
        assert_eq!(fit(0, 2, busy_now(&unknown)), 2);
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses_is_skipped() {
        let own = "7 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 11 12 0";
        let t = parse("cpu  1 1 1 1 1 1 1 1", own).unwrap();
        assert_eq!(t.own, 23);
    }
}
