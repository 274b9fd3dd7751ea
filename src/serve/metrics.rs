//! `GET /metrics`: counters and histograms in Prometheus' text format (version 0.0.4),
//! written by hand: a handful of series does not need a metrics framework.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Seconds: from a cached search (milliseconds) to a long answer on a slow CPU (a minute).
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

#[derive(Default, Clone)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS.len()];
        }
        for (c, b) in self.counts.iter_mut().zip(BUCKETS) {
            if v <= *b {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, b) in BUCKETS.iter().enumerate() {
            let c = self.counts.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {c}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = |l: &str| {
            if l.is_empty() {
                String::new()
            } else {
                format!("{{{l}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {}", braces(labels), self.sum);
        let _ = writeln!(out, "{name}_count{} {}", braces(labels), self.count);
    }
}

#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    latency: Mutex<BTreeMap<&'static str, Histogram>>,
    ttft: Mutex<Histogram>,
    queue_wait: Mutex<Histogram>,
    pub prompt_tokens: AtomicU64,
    pub cached_tokens: AtomicU64,
    pub generated_tokens: AtomicU64,
    pub reloads: AtomicU64,
    pub rejected: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Metrics {
    /// A finished request: its endpoint (one of a fixed set, so labels stay few), status
    /// and seconds.
    pub fn request(&self, endpoint: &'static str, status: u16, seconds: f64) {
        *lock(&self.requests).entry((endpoint, status)).or_default() += 1;
        lock(&self.latency)
            .entry(endpoint)
            .or_default()
            .observe(seconds);
    }

    /// A generated answer's figures.
    pub fn answer(&self, t: &crate::engine::Timings, queue_s: f64) {
        self.prompt_tokens
            .fetch_add(t.prompt_tokens as u64, Ordering::Relaxed);
        self.cached_tokens
            .fetch_add(t.cached_tokens as u64, Ordering::Relaxed);
        self.generated_tokens
            .fetch_add(t.generated_tokens as u64, Ordering::Relaxed);
        lock(&self.ttft).observe(t.ttft_ms / 1e3);
        lock(&self.queue_wait).observe(queue_s);
    }

    pub fn render(&self, queue_depth: usize, in_flight: usize) -> String {
        let mut o = String::new();
        o.push_str("# HELP rag_requests_total HTTP requests by endpoint and status code.\n# TYPE rag_requests_total counter\n");
        for ((e, s), n) in lock(&self.requests).iter() {
            let _ = writeln!(
                o,
                "rag_requests_total{{endpoint=\"{e}\",status=\"{s}\"}} {n}"
            );
        }
        o.push_str("# HELP rag_request_duration_seconds Time from request to the last byte of the response.\n# TYPE rag_request_duration_seconds histogram\n");
        for (e, h) in lock(&self.latency).iter() {
            h.render(
                &mut o,
                "rag_request_duration_seconds",
                &format!("endpoint=\"{e}\""),
            );
        }
        o.push_str("# HELP rag_time_to_first_token_seconds From the request's retrieval to the first answer token.\n# TYPE rag_time_to_first_token_seconds histogram\n");
        lock(&self.ttft).render(&mut o, "rag_time_to_first_token_seconds", "");
        o.push_str("# HELP rag_queue_wait_seconds Time an answer waited for the generator.\n# TYPE rag_queue_wait_seconds histogram\n");
        lock(&self.queue_wait).render(&mut o, "rag_queue_wait_seconds", "");
        let counters = [
            (
                "rag_prompt_tokens_total",
                "Prompt tokens of generated answers.",
                &self.prompt_tokens,
            ),
            (
                "rag_cached_prompt_tokens_total",
                "Prompt tokens restored from the prompt cache instead of computed.",
                &self.cached_tokens,
            ),
            (
                "rag_generated_tokens_total",
                "Answer tokens generated.",
                &self.generated_tokens,
            ),
            (
                "rag_index_reloads_total",
                "Times a newly ingested index version was picked up.",
                &self.reloads,
            ),
            (
                "rag_rejected_total",
                "Answers refused with 503 because the queue was full.",
                &self.rejected,
            ),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(
                o,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(o, "# HELP rag_queue_depth Answers waiting for the generator.\n# TYPE rag_queue_depth gauge\nrag_queue_depth {queue_depth}");
        let _ = writeln!(o, "# HELP rag_in_flight_requests Requests being handled.\n# TYPE rag_in_flight_requests gauge\nrag_in_flight_requests {in_flight}");
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_cumulative_buckets() {
        let m = Metrics::default();
        m.request("/v1/search", 200, 0.02);
        m.request("/v1/search", 200, 0.3);
        m.request("/v1/ask", 503, 0.001);
        let t = m.render(1, 2);
        assert!(t.contains("rag_requests_total{endpoint=\"/v1/search\",status=\"200\"} 2\n"));
        assert!(t.contains("rag_requests_total{endpoint=\"/v1/ask\",status=\"503\"} 1\n"));
        assert!(t.contains(
            "rag_request_duration_seconds_bucket{endpoint=\"/v1/search\",le=\"0.01\"} 0\n"
        ));
        assert!(t.contains(
            "rag_request_duration_seconds_bucket{endpoint=\"/v1/search\",le=\"0.025\"} 1\n"
        ));
        assert!(t.contains(
            "rag_request_duration_seconds_bucket{endpoint=\"/v1/search\",le=\"0.5\"} 2\n"
        ));
        assert!(t.contains(
            "rag_request_duration_seconds_bucket{endpoint=\"/v1/search\",le=\"+Inf\"} 2\n"
        ));
        assert!(t.contains("rag_request_duration_seconds_count{endpoint=\"/v1/search\"} 2\n"));
        assert!(t.contains("rag_time_to_first_token_seconds_count 0\n"));
        assert!(t.contains("rag_queue_depth 1\n"));
        assert!(t.contains("rag_in_flight_requests 2\n"));
        // Every sample line is `name{labels} value` or `name value`.
        for line in t.lines().filter(|l| !l.starts_with('#')) {
            let (_, v) = line.rsplit_once(' ').unwrap();
            assert!(v.parse::<f64>().is_ok(), "{line}");
        }
    }
}
