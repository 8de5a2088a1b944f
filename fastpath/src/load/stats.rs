//! What the load generator counts, and its report (one JSON line with `--json`, else a sentence).

use crate::wire::is_ok;

pub struct Stats {
    pub lat_ns: Vec<u64>,
    pub per_id_lat: Vec<Vec<u64>>,
    pub statuses: [u64; 256],
    pub timeouts: u64,
    pub malformed: u64,
    pub stale: u64,
    pub skipped: u64,
    pub sent: u64,
    pub max_samples: usize,
    pub dropped_samples: u64,
}

impl Stats {
    pub fn new(n_ids: usize, max_samples: usize, expect: usize) -> Stats {
        let cap = expect.min(max_samples);
        Stats {
            lat_ns: Vec::with_capacity(cap),
            per_id_lat: (0..n_ids)
                .map(|_| Vec::with_capacity(cap / n_ids + 16))
                .collect(),
            statuses: [0; 256],
            timeouts: 0,
            malformed: 0,
            stale: 0,
            skipped: 0,
            sent: 0,
            max_samples,
            dropped_samples: 0,
        }
    }

    /// A completed request: its status, and (a success) its latency.
    #[inline]
    pub fn record(&mut self, id_index: usize, status: u8, ns: u64) {
        self.statuses[status as usize] += 1;
        if is_ok(status) {
            if self.lat_ns.len() < self.max_samples {
                self.lat_ns.push(ns);
                self.per_id_lat[id_index].push(ns);
            } else {
                self.dropped_samples += 1;
            }
        }
    }
}

/// The `q`th percentile of `sorted` (ns) in µs; NaN when empty.
pub fn pct(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((q / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[idx.min(sorted.len() - 1)] as f64 / 1000.0
}

/// A JSON number with 3 decimals, or null.
pub fn jnum(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "null".to_string()
    }
}

/// How the run was set up, for the report.
pub struct Setup<'a> {
    pub ids: &'a [crate::wire::LambdaId],
    pub json: bool,
    pub outstanding: usize,
    pub rate: f64,
    pub tag: bool,
    pub payload_bytes: usize,
    /// The measured window, in seconds.
    pub elapsed: f64,
}

/// Print the report of a run to stdout.
pub fn report(mut stats: Stats, run: &Setup) {
    let mut all = std::mem::take(&mut stats.lat_ns);
    all.sort_unstable();
    let n = all.len() as u64;
    let mean = if n > 0 {
        all.iter().map(|&x| x as f64).sum::<f64>() / n as f64 / 1000.0
    } else {
        f64::NAN
    };
    let not_ok: u64 = stats
        .statuses
        .iter()
        .enumerate()
        .filter(|(s, _)| !is_ok(*s as u8))
        .map(|(_, c)| *c)
        .sum();
    let errors = stats.timeouts + stats.malformed + not_ok;
    let rps = n as f64 / run.elapsed;
    let matching = if run.tag { "tag" } else { "fifo" };
    if !run.json {
        println!(
            "{n} requests in {:.2} s: {rps:.0} req/s, p50 {:.1} us, p99 {:.1} us, mean {:.1} us; errors {errors} \
             (timeouts {}), match {matching}",
            run.elapsed,
            pct(&all, 50.0),
            pct(&all, 99.0),
            mean,
            stats.timeouts,
        );
        return;
    }
    let completed: u64 = stats.statuses.iter().sum();
    let mut statuses = Vec::new();
    for (s, &c) in stats.statuses.iter().enumerate() {
        if c > 0 {
            statuses.push(format!("\"{s}\": {c}"));
        }
    }
    let mut per_id = Vec::new();
    for (i, v) in stats.per_id_lat.iter_mut().enumerate() {
        v.sort_unstable();
        per_id.push(format!(
            "\"{}\": {{\"count\": {}, \"p50_us\": {}, \"p99_us\": {}}}",
            run.ids[i],
            v.len(),
            jnum(pct(v, 50.0)),
            jnum(pct(v, 99.0))
        ));
    }
    println!(
        "{{\"requests\": {n}, \"completed\": {completed}, \"errors\": {errors}, \"timeouts\": {}, \"malformed\": {}, \"stale\": {}, \
         \"skipped\": {}, \"sent\": {}, \"statuses\": {{{}}}, \"p50_us\": {}, \"p90_us\": {}, \"p99_us\": {}, \"p999_us\": {}, \
         \"mean_us\": {}, \"min_us\": {}, \"max_us\": {}, \"req_per_s\": {}, \"duration_s\": {}, \"outstanding\": {}, \
         \"rate\": {}, \"match\": \"{matching}\", \"payload_bytes\": {}, \"per_id\": {{{}}}, \"dropped_samples\": {}}}",
        stats.timeouts,
        stats.malformed,
        stats.stale,
        stats.skipped,
        stats.sent,
        statuses.join(", "),
        jnum(pct(&all, 50.0)),
        jnum(pct(&all, 90.0)),
        jnum(pct(&all, 99.0)),
        jnum(pct(&all, 99.9)),
        jnum(mean),
        jnum(pct(&all, 0.0)),
        jnum(pct(&all, 100.0)),
        jnum(rps),
        jnum(run.elapsed),
        run.outstanding,
        jnum(run.rate),
        run.payload_bytes,
        per_id.join(", "),
        stats.dropped_samples,
    );
}
