//! The instance pools are sized by `--pool-memory` (src/lambda.rs `Pool`), the executor's memory
//! budget (the cluster file's `fastpath.memory`): a stack of lambdas that each keep 15 MiB
//! resident is served by evicting idle instances, and the executor does not grow past the
//! budget (red team round 5, N2: 120 such lambdas grew it by 1.9 GiB, 16 MiB each).

mod common;

use common::*;
use serde_json::json;
use std::process::{Command, Stdio};

/// 192 MiB: 12 slots of 16 MiB, 4 per engine; one worker caches at most 2 idle instances.
const BUDGET: &str = "201326592";

#[test]
fn the_flag_sizes_the_pools() {
    let fp = Fp::start(&["--workers", "1", "--pool-memory", BUDGET]);
    assert_eq!(fp.ready["pool_memory"], 201326592u64);
    assert_eq!(fp.ready["pool_slots"], 4);
    assert_eq!(fp.ready["cache_per_worker"], 2);
    // A counter's state survives while few lambdas are called, and goes when more lambdas than
    // the worker's share were called since: its instance was evicted, not kept beside them.
    for id in 1..=6 {
        fp.deploy_wasm(id, "counter", json!({}));
    }
    let c = fp.client();
    assert_eq!(c.call(1, b"").1, b"1");
    assert_eq!(c.call(1, b"").1, b"2");
    for id in 2..=6 {
        assert_eq!(c.call(id, b""), (OK, b"1".to_vec()), "lambda {id}");
    }
    assert_eq!(c.call(1, b""), (OK, b"1".to_vec()), "lambda 1 was evicted");
    // The cached instances leave slots free: a deploy's ABI check still finds one.
    fp.deploy_wasm(7, "counter", json!({}));
    assert_eq!(c.call(7, b""), (OK, b"1".to_vec()));
}

#[test]
fn a_stack_of_fat_lambdas_stays_within_the_budget() {
    let fp = Fp::start(&["--workers", "1", "--pool-memory", BUDGET]);
    let n = 12u64; // 12 x 15 MiB = 180 MiB if each kept its instance
    for id in 1..=n {
        // Touching 15 MiB takes a few ms, more on a loaded machine: not the 50 ms default.
        fp.deploy_wasm(id, "fat", json!({"timeout_ms": 2000}));
    }
    let base = rss_kib(fp.child.id());
    let c = fp.client();
    for round in 0..2 {
        for id in 1..=n {
            assert_eq!(
                c.call(id, b"x"),
                (OK, b"fat".to_vec()),
                "lambda {id}, round {round}"
            );
        }
    }
    let grown_mib = (rss_kib(fp.child.id()).saturating_sub(base)) / 1024;
    // The worker keeps 2 instances (30 MiB); allow the one being made and some slack.
    assert!(
        grown_mib < 64,
        "the executor grew by {grown_mib} MiB for {n} lambdas of 15 MiB (budget 192 MiB)"
    );
}

#[test]
fn too_small_a_budget_does_not_start() {
    let dir = tmpdir("pool");
    let key = key_file(&dir, KEY_HEX);
    let out = Command::new(env!("CARGO_BIN_EXE_nearfaas-fastpath"))
        .args([
            "--control-key-file",
            key.to_str().unwrap(),
            "--pool-memory",
            "1000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--pool-memory: 1000 bytes is too little; use at least 150994944"),
        "{err}"
    );
}
