//! The store's guarantees, checked through the test layers: the cap on requests in flight, retries outlasting
//! every transport fault within the budget, permanent failures not retried, and the layers' own bookkeeping.

use std::time::Duration;

use bytes::Bytes;
use dct_store::testing::{Fault, TRANSPORT_FAULTS, Throttle, counted, faulty, throttled};
use dct_store::{RetryPolicy, Store, StoreError};

fn run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(f)
}

fn object(i: usize) -> (String, Bytes) {
    (format!("tiles/t{i:03}.bin"), Bytes::from((0..1000).map(|b| ((b * 7 + i) % 251) as u8).collect::<Vec<u8>>()))
}

/// A memory store holding 40 objects of 1000 bytes.
fn filled(cap: usize) -> Store {
    let store = Store::memory("layers").child("ds").with_max_requests(cap);
    run(async {
        for i in 0..40 {
            let (name, bytes) = object(i);
            store.put(&name, bytes).await.unwrap();
        }
    });
    store
}

fn quick() -> RetryPolicy {
    RetryPolicy { max_retries: 3, initial_backoff: Duration::from_millis(1), max_backoff: Duration::from_millis(5) }
}

/// 40 GETs at once through a store that answers in 20 ms: how many were in flight at most.
fn peak_in_flight(cap: usize) -> u64 {
    let slow = throttled(&filled(cap), Throttle { latency: Duration::from_millis(20), ..Throttle::default() });
    let (store, counter) = counted(&slow);
    run(async {
        let gets = (0..40).map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let (name, bytes) = object(i);
                assert_eq!(store.get_exact(&name, 1000).await.unwrap(), bytes);
            })
        });
        for g in futures::future::join_all(gets).await {
            g.unwrap();
        }
    });
    let counts = counter.counts();
    assert_eq!(counts.gets, 40);
    counts.max_in_flight
}

#[test]
fn requests_in_flight_never_exceed_the_cap() {
    let capped = peak_in_flight(4);
    assert!((2..=4).contains(&capped), "{capped} requests in flight under a cap of 4");
    // The same load with a cap of 64: the cap above is what held it back.
    let uncapped = peak_in_flight(64);
    assert!(uncapped > 4, "{uncapped} requests in flight with a cap of 64");
}

#[test]
fn the_cap_is_shared_by_clones_and_children() {
    let store = filled(3);
    let slow = throttled(&store, Throttle { latency: Duration::from_millis(20), ..Throttle::default() });
    let (counted_store, counter) = counted(&slow);
    run(async {
        let gets = (0..40).map(|i| {
            // Half through a clone, half through a child of the parent location.
            let s = if i % 2 == 0 { counted_store.clone() } else { counted_store.child("tiles") };
            tokio::spawn(async move {
                let (name, bytes) = object(i);
                let rel = if i % 2 == 0 { name } else { name.trim_start_matches("tiles/").to_string() };
                assert_eq!(s.get_exact(&rel, 1000).await.unwrap(), bytes);
            })
        });
        for g in futures::future::join_all(gets).await {
            g.unwrap();
        }
    });
    let peak = counter.counts().max_in_flight;
    assert!((1..=3).contains(&peak), "{peak} in flight under a shared cap of 3");
}

#[test]
fn every_transport_fault_is_outlasted_within_the_budget() {
    let (store, faults) = faulty(&filled(8).with_retry(quick()), 5);
    let (store, counter) = counted(&store);
    let (name, bytes) = object(3);
    for kind in TRANSPORT_FAULTS {
        for retries_needed in 1..=3u64 {
            faults.set_first_gets(retries_needed, &[kind], &name);
            counter.reset();
            let whole = run(store.get_exact(&name, 1000)).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            assert_eq!(whole, bytes, "{kind:?}");
            // A slow start is late but right: nothing to retry.
            let attempts = if kind == Fault::SlowStart { 1 } else { retries_needed + 1 };
            assert_eq!(counter.counts().gets_of(&name), attempts, "{kind:?} whole GET");
            faults.set_first_gets(retries_needed, &[kind], &name);
            let range = run(store.get_range(&name, 100..300)).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            assert_eq!(range, bytes.slice(100..300), "{kind:?}");
            faults.set_first_gets(retries_needed, &[kind], &name);
            let tail = run(store.get_tail(&name, 64, 1000)).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            assert_eq!(tail, bytes.slice(936..), "{kind:?}");
        }
    }
    assert!(!faults.take_log().is_empty());
}

#[test]
fn a_fault_on_every_attempt_fails_after_the_budget_and_a_denial_at_once() {
    let (store, faults) = faulty(&filled(8).with_retry(quick()), 6);
    let (store, counter) = counted(&store);
    let (name, _) = object(7);
    faults.set_first_gets(u64::MAX, &[Fault::Error], &name);
    let e = run(store.get_exact(&name, 1000)).unwrap_err();
    assert_eq!(counter.counts().gets_of(&name), 4);
    assert!(e.is_transient(), "{e}");
    let text = e.to_string();
    assert!(text.contains("memory://layers/ds/tiles/t007.bin") && text.contains("after 4 attempts"), "{text}");

    faults.set_first_gets(u64::MAX, &[Fault::Denied], &name);
    counter.reset();
    let e = run(store.get_exact(&name, 1000)).unwrap_err();
    assert_eq!(counter.counts().gets_of(&name), 1, "a denial is not retried: {e}");
    assert!(!e.is_transient(), "{e}");
    assert!(matches!(e, StoreError::Request { attempts: 1, .. }), "{e:?}");
}

#[test]
fn sizes_are_checked_before_bodies_are_read() {
    let store = filled(8);
    let (name, _) = object(1);
    let e = run(store.get_exact(&name, 999)).unwrap_err();
    assert!(matches!(e, StoreError::WrongSize { size: 1000, expected: 999, .. }), "{e:?}");
    let e = run(store.get_limited(&name, 10)).unwrap_err();
    assert!(matches!(e, StoreError::TooLarge { size: 1000, limit: 10, .. }), "{e:?}");
    let e = run(store.get_tail(&name, 8, 2000)).unwrap_err();
    assert!(matches!(e, StoreError::WrongSize { size: 1000, expected: 2000, .. }), "{e:?}");
    let e = run(store.get_exact("tiles/none.bin", 1)).unwrap_err();
    assert!(e.is_not_found(), "{e:?}");
}

#[test]
fn large_bodies_outlast_every_transport_fault_and_come_whole_from_files_too() {
    // Above the size from which a body is collected into a mapping of its own.
    let big = Bytes::from((0..3_000_000u32).map(|b| (b % 251) as u8).collect::<Vec<u8>>());
    let memory = Store::memory("big").with_retry(quick());
    run(memory.put("tiles/big.bin", big.clone())).unwrap();
    let (store, faults) = faulty(&memory, 9);
    for kind in TRANSPORT_FAULTS {
        faults.set_first_gets(2, &[kind], "tiles/big.bin");
        let got = run(store.get_exact("tiles/big.bin", 3_000_000)).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert_eq!(got, big, "{kind:?}");
    }
    // A local file read through a layer (the simulated distance: not memory-mapped), from the file itself.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big.bin"), &big).unwrap();
    let far = dct_store::StoreOptions::default().with_option(dct_store::SIMULATE_LATENCY_MS_KEY, "1");
    let local = Store::from_url(dir.path().to_str().unwrap(), &far).unwrap();
    assert_eq!(run(local.get_exact("big.bin", 3_000_000)).unwrap(), big);
    let wrong = run(local.get_exact("big.bin", 2_999_999));
    assert!(matches!(wrong, Err(StoreError::WrongSize { size: 3_000_000, .. })), "{wrong:?}");
}
