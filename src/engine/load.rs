//! How much of the machine other processes used while rag measured itself: the share of all
//! cores' time, from /proc/stat (busy and stolen time of the whole machine) less this
//! process's own time (/proc/self/stat). A generator's speed taken while a build ran beside
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

/// A started measurement.
pub struct Meter {
    start: Option<Ticks>,
    at: Instant,
}

#[derive(Clone, Copy)]
struct Ticks {
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
    let idle = f[3] + f[4];
    let total: u64 = f.iter().sum();
    let rest = &own[own.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Ticks {
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
        assert!(parse("intr 1 2", OWN).is_none());
        assert!(parse("cpu  1 2 3", OWN).is_none());
        assert!(parse("cpu  1 2 3 4 5 6 7 8", "garbage").is_none());
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses_is_skipped() {
        let own = "7 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 11 12 0";
        let t = parse("cpu  1 1 1 1 1 1 1 1", own).unwrap();
        assert_eq!(t.own, 23);
    }
}
