//! Admission to the generator. `slots` answers generate at once (`llm.parallel`: batched in one
//! llama.cpp context for a local generator, by the server for a remote one), the others wait
//! in arrival order, and at most `limit` wait: a request beyond that is
//! turned away at once with an estimate of when to retry, instead of joining a queue that
//! only grows.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub struct Gate {
    state: Mutex<State>,
    turn: Condvar,
    limit: usize,
    slots: usize,
}

struct State {
    /// The next ticket to hand out.
    next: u64,
    /// Tickets below this one were admitted (first come, first served).
    admitted: u64,
    /// Admitted requests still generating.
    active: usize,
    /// Mean seconds a generation held the gate, for Retry-After.
    mean_s: f64,
}

/// The queue was full: retry after this many seconds.
#[derive(Debug)]
pub struct Busy {
    pub retry_after_s: u64,
    pub waiting: usize,
}

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the generator is busy and {} answers are already waiting (serve.queue); retry in {} s",
            self.waiting, self.retry_after_s
        )
    }
}

impl std::error::Error for Busy {}

/// The turn at the generator; the next ticket's comes when this drops.
pub struct Permit<'g> {
    gate: &'g Gate,
    since: Instant,
    /// How long the request waited for its turn.
    pub waited: Duration,
}

impl Gate {
    pub fn new(limit: usize, slots: usize) -> Gate {
        Gate {
            state: Mutex::new(State {
                next: 0,
                admitted: 0,
                active: 0,
                mean_s: 5.0,
            }),
            turn: Condvar::new(),
            limit,
            slots: slots.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Requests waiting for their turn (not counting those generating).
    pub fn waiting(&self) -> usize {
        let s = self.lock();
        (s.next - s.admitted) as usize
    }

    /// Waits for this request's turn, or refuses at once when `limit` already wait.
    pub fn enter(&self) -> Result<Permit<'_>, Busy> {
        let arrived = Instant::now();
        let mut s = self.lock();
        let waiting = (s.next - s.admitted) as usize;
        let full = s.active >= self.slots;
        if full && waiting >= self.limit {
            // Each slot frees after a mean generation; the queue drains `slots` at a time.
            let rounds = (waiting / self.slots + 1) as f64;
            let retry = (s.mean_s * rounds).ceil().clamp(1.0, 3600.0);
            return Err(Busy {
                retry_after_s: retry as u64,
                waiting,
            });
        }
        let ticket = s.next;
        s.next += 1;
        while s.admitted != ticket || s.active >= self.slots {
            s = self.turn.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        s.admitted += 1;
        s.active += 1;
        drop(s);
        // The next ticket may fit in another free slot.
        self.turn.notify_all();
        Ok(Permit {
            gate: self,
            since: Instant::now(),
            waited: arrived.elapsed(),
        })
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let held = self.since.elapsed().as_secs_f64();
        let mut s = self.gate.lock();
        s.mean_s = 0.8 * s.mean_s + 0.2 * held;
        s.active -= 1;
        drop(s);
        self.gate.turn.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn one_at_a_time_in_arrival_order_and_bounded() {
        let gate = Arc::new(Gate::new(2, 1));
        let first = gate.enter().unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let inside = Arc::new(AtomicUsize::new(0));
        let mut threads = Vec::new();
        for i in 0..2 {
            let (g, order, inside) = (gate.clone(), order.clone(), inside.clone());
            threads.push(std::thread::spawn(move || {
                let _p = g.enter().unwrap();
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two inside at once"
                );
                order.lock().unwrap().push(i);
                std::thread::sleep(Duration::from_millis(20));
                inside.fetch_sub(1, Ordering::SeqCst);
            }));
            // Arrival order is the order the tickets were taken.
            while gate.waiting() < i + 1 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        // Two wait: a third is refused with a retry estimate.
        let busy = gate.enter().err().expect("the queue is full");
        assert_eq!(busy.waiting, 2);
        assert!(busy.retry_after_s >= 1);
        drop(first);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1]);
        assert_eq!(gate.waiting(), 0);
        // A zero-length queue still admits one generation at a time.
        let g0 = Gate::new(0, 1);
        let p = g0.enter().unwrap();
        assert!(g0.enter().is_err());
        drop(p);
        assert!(g0.enter().is_ok());
    }

    #[test]
    fn several_slots_admit_that_many_at_once_in_order() {
        let gate = Arc::new(Gate::new(1, 2));
        let a = gate.enter().unwrap();
        let b = gate.enter().unwrap();
        assert_eq!(gate.waiting(), 0);
        let g = gate.clone();
        let third = std::thread::spawn(move || g.enter().map(|_| ()).is_ok());
        while gate.waiting() < 1 {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Both slots busy and one waiting: a fourth is refused.
        assert!(gate.enter().is_err());
        drop(a);
        assert!(third.join().unwrap());
        drop(b);
        assert_eq!(gate.waiting(), 0);
    }
}
