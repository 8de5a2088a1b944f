//! Deficit round-robin between lambdas: with both queues saturated, completions follow weights.

mod common;
use common::*;
use serde_json::json;
use std::time::{Duration, Instant};

fn done(fp: &Fp, id: u64) -> (i64, i64) {
    let l = fp.lambda_stats(id);
    (
        l["timeouts"].as_i64().unwrap() + l["ok"].as_i64().unwrap(),
        l["queue_len"].as_i64().unwrap(),
    )
}

/// Saturate lambdas 1 (weight w1) and 2 (weight w2) and return their completions in a window.
/// Both are `spin` with a 1 ms budget, so each request costs about 1 ms of the one worker and a
/// modest client keeps both queues full.
fn shares(sched: &str, w1: u32, w2: u32) -> (f64, f64) {
    let fp = Fp::start(&["--workers", "1", "--queue-depth", "400", "--sched", sched]);
    fp.deploy_wasm(1, "spin", json!({"weight": w1, "timeout_ms": 1}));
    fp.deploy_wasm(2, "spin", json!({"weight": w2, "timeout_ms": 1}));
    let c = fp.client();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let feeder = {
        let (to, stop) = (fp.udp_addr(), stop.clone());
        std::thread::spawn(move || {
            let c = Client::new(&to);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for _ in 0..50 {
                    c.send(1, b"");
                    c.send(2, b"");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    drop(c);
    let t = Instant::now();
    while done(&fp, 1).1 < 100 || done(&fp, 2).1 < 100 {
        assert!(t.elapsed() < Duration::from_secs(5), "queues do not fill");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (a0, qa0) = done(&fp, 1);
    let (b0, qb0) = done(&fp, 2);
    std::thread::sleep(Duration::from_millis(1500));
    let (a1, qa1) = done(&fp, 1);
    let (b1, qb1) = done(&fp, 2);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    feeder.join().unwrap();
    assert!(
        qa0 > 0 && qb0 > 0 && qa1 > 0 && qb1 > 0,
        "queues drained: {qa0} {qb0} {qa1} {qb1}"
    );
    let over = fp.lambda_stats(1)["overloaded"].as_i64().unwrap()
        + fp.lambda_stats(2)["overloaded"].as_i64().unwrap();
    assert!(
        over > 0,
        "the feeder overfills the queues: OVERLOADED expected"
    );
    let (da, db) = ((a1 - a0) as f64, (b1 - b0) as f64);
    assert!(da + db > 200.0, "too few completions: {da} {db}");
    (da / (da + db), db / (da + db))
}

#[test]
fn drr_shares_follow_weights_1_to_3() {
    let (a, b) = shares("drr", 1, 3);
    eprintln!("drr 1:3 shares: {a:.3} {b:.3}");
    assert!(
        (a - 0.25).abs() <= 0.025,
        "share of weight 1: {a:.3} (want 0.25 +-10%)"
    );
    assert!(
        (b - 0.75).abs() <= 0.075,
        "share of weight 3: {b:.3} (want 0.75 +-10%)"
    );
}

#[test]
fn fifo_ignores_weights() {
    let (a, b) = shares("fifo", 1, 3);
    eprintln!("fifo 1:3 shares: {a:.3} {b:.3}");
    assert!((a - 0.5).abs() <= 0.1, "fifo share {a:.3}");
}
