//! Large objects read in concurrent ranged parts: the parts cover the object once, each is retried on its own,
//! they overlap in time, sizes are checked, and an object replaced while its parts are read is refused.

use std::time::Duration;

use bytes::Bytes;
use dct_store::testing::{Fault, TRANSPORT_FAULTS, Throttle, counted, faulty, throttled};
use dct_store::{RetryPolicy, Store, StoreError, StoreOptions};

fn quick() -> RetryPolicy {
    RetryPolicy { max_retries: 3, initial_backoff: Duration::from_millis(1), max_backoff: Duration::from_millis(5) }
}

fn big(seed: u32) -> Bytes {
    Bytes::from((0..3_000_000u32).map(|b| ((b + seed) % 251) as u8).collect::<Vec<u8>>())
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(f)
}

#[test]
fn parts_cover_the_object_once_and_each_outlasts_every_transport_fault() {
    let memory = Store::memory("parts").with_retry(quick()).with_part_bytes(1 << 20);
    let object = big(0);
    run(memory.put("tiles/big.bin", object.clone())).unwrap();
    let (store, faults) = faulty(&memory, 3);
    let (store, counter) = counted(&store);
    assert!(run(store.get_exact("tiles/big.bin", 3_000_000)).unwrap() == object);
    let mut ranges: Vec<_> = counter.requests().into_iter().map(|r| r.range.expect("a ranged GET")).collect();
    ranges.sort_by_key(|r| r.start);
    assert_eq!(ranges, vec![0..1_000_000, 1_000_000..2_000_000, 2_000_000..3_000_000]);
    for kind in TRANSPORT_FAULTS {
        // Two failed attempts of whichever parts ask first; each part is retried alone.
        faults.set_first_gets(2, &[kind], "tiles/big.bin");
        let before = counter.counts().gets;
        let got = run(store.get_exact("tiles/big.bin", 3_000_000)).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert!(got == object, "{kind:?}: the bytes differ");
        // A slow start is waited for; any other fault fails the attempt, and each part outlasts two on its own.
        let attempts = if kind == Fault::SlowStart { 3 } else { 3 * 3 };
        assert_eq!(counter.counts().gets - before, attempts, "{kind:?}");
    }
    faults.clear_gets();
    // Not larger than a part: one whole GET.
    let small = memory.clone().with_part_bytes(3_000_000);
    let (small, small_counter) = counted(&small);
    assert!(run(small.get_exact("tiles/big.bin", 3_000_000)).unwrap() == object);
    assert_eq!(small_counter.requests().iter().map(|r| r.range.clone()).collect::<Vec<_>>(), vec![None]);
}

#[test]
fn sizes_are_checked_in_parts_as_whole() {
    let memory = Store::memory("sizes").with_retry(quick()).with_part_bytes(1 << 20);
    run(memory.put("tiles/big.bin", big(0))).unwrap();
    let (store, counter) = counted(&memory);
    // Sizes a corrupt manifest may claim, up to 2^64 - 1 bytes (2^44 parts): refused by the first responses.
    for expected in [2_999_999, 3_000_001, 9_000_000, 1 << 40, u64::MAX] {
        counter.reset();
        let e = run(store.get_exact("tiles/big.bin", expected)).unwrap_err();
        assert!(matches!(e, StoreError::WrongSize { size: 3_000_000, .. }), "{expected}: {e:?}");
        assert!(counter.counts().gets <= 16, "{expected}: {} GETs", counter.counts().gets);
    }
    let e = run(memory.get_exact("tiles/none.bin", 3_000_000)).unwrap_err();
    assert!(e.is_not_found(), "{e:?}");
}

#[test]
fn local_files_through_a_simulated_distance_come_in_parts() {
    let dir = tempfile::tempdir().unwrap();
    let object = big(7);
    std::fs::write(dir.path().join("big.bin"), &object).unwrap();
    let path = dir.path().to_str().unwrap();
    let far = StoreOptions::default().with_option(dct_store::SIMULATE_LATENCY_MS_KEY, "1");
    let store = Store::from_url(path, &far).unwrap();
    assert_eq!(store.part_bytes(), dct_store::DEFAULT_PART_BYTES, "a simulated distant store is read in parts");
    let store = store.with_part_bytes(700_000);
    let (store, counter) = counted(&store);
    assert!(run(store.get_exact("big.bin", 3_000_000)).unwrap() == object);
    assert_eq!(counter.counts().gets, 5);
    let wrong = run(store.get_exact("big.bin", 3_100_000));
    assert!(matches!(wrong, Err(StoreError::WrongSize { size: 3_000_000, .. })), "{wrong:?}");
    // The option, its default for local files, and its refusals.
    assert_eq!(Store::from_url(path, &StoreOptions::default()).unwrap().part_bytes(), 0);
    let set = StoreOptions::default().with_option(dct_store::PART_BYTES_KEY, "4096");
    assert_eq!(Store::from_url(path, &set).unwrap().part_bytes(), 4096);
    let off = far.clone().with_option(dct_store::PART_BYTES_KEY, "0");
    assert_eq!(Store::from_url(path, &off).unwrap().part_bytes(), 0);
    for bad in ["-1", "8MiB", ""] {
        let e = Store::from_url(path, &StoreOptions::default().with_option(dct_store::PART_BYTES_KEY, bad));
        let e = e.unwrap_err().to_string();
        assert!(e.contains("part_bytes must be a whole number of bytes"), "{bad:?}: {e}");
    }
}

#[tokio::test(start_paused = true)]
async fn parts_overlap_in_time() {
    // 30 ms to first byte and 100 MB/s per response: 3 MB whole take 30 + 30 ms, in three parts 30 + 10 ms.
    let memory = Store::memory("time");
    memory.put("big.bin", big(0)).await.unwrap();
    let throttle = Throttle {
        latency: Duration::from_millis(30),
        bytes_per_second: std::num::NonZeroU32::new(100_000_000),
        ..Throttle::default()
    };
    let far = throttled(&memory, throttle);
    for (part_bytes, ms) in [(0, 60), (1_000_000, 40)] {
        let store = far.clone().with_part_bytes(part_bytes);
        let started = tokio::time::Instant::now();
        assert!(store.get_exact("big.bin", 3_000_000).await.unwrap() == big(0));
        assert_eq!(started.elapsed(), Duration::from_millis(ms), "parts of {part_bytes} bytes");
    }
}

#[tokio::test(start_paused = true)]
async fn an_object_replaced_while_its_parts_are_read_is_refused() {
    // One part's first attempt fails and is retried after the object was replaced by one of the same size: the
    // parts would mix two versions.
    let memory = Store::memory("replaced").with_retry(quick());
    memory.put("big.bin", big(0)).await.unwrap();
    let (store, counter) = counted(&memory);
    let throttle = Throttle { latency: Duration::from_millis(30), ..Throttle::default() };
    let store = throttled(&store, throttle).with_part_bytes(1 << 20);
    counter.fail_next_gets("big.bin", 1);
    let replace = async {
        tokio::time::sleep(Duration::from_millis(45)).await;
        memory.put("big.bin", big(1)).await.unwrap();
    };
    let (got, ()) = tokio::join!(store.get_exact("big.bin", 3_000_000), replace);
    let e = got.unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    assert!(e.to_string().contains("the object changed while its 3 parts were read"), "{e}");
    // Read again, the parts are of one version.
    assert!(store.get_exact("big.bin", 3_000_000).await.unwrap() == big(1));
}

/// A web server that ignores `Range` (as Python's `http.server` does): every GET is answered `200` with the whole
/// object. Serves `object` at every path and counts the GETs.
#[cfg(feature = "http")]
async fn rangeless_server(object: Bytes) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let gets = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = gets.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let (object, gets) = (object.clone(), counted.clone());
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let head = request.starts_with(b"HEAD");
                if !head {
                    gets.fetch_add(1, Ordering::SeqCst);
                }
                let header = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nETag: \"v1\"\r\nConnection: close\r\n\r\n",
                    object.len()
                );
                let _ = socket.write_all(header.as_bytes()).await;
                if !head {
                    let _ = socket.write_all(&object).await;
                }
                let _ = socket.shutdown().await;
            });
        }
    });
    (url, gets)
}

#[cfg(feature = "http")]
#[test]
fn a_server_without_ranges_is_read_whole_from_then_on() {
    use std::sync::atomic::Ordering;
    run(async {
        let object = big(3);
        let (url, gets) = rangeless_server(object.clone()).await;
        let options = StoreOptions { retry: quick(), ..StoreOptions::default() }.with_option("allow_http", "true");
        let store = Store::from_url(&format!("{url}/ds"), &options).unwrap().with_part_bytes(1 << 20);
        // The parts come back whole: the read goes on in one GET, none of the parts retried.
        assert!(store.get_exact("tiles/t0.dct", 3_000_000).await.unwrap() == object);
        let first = gets.load(Ordering::SeqCst);
        assert!((2..=4).contains(&first), "{first} GETs: up to 3 parts, then one whole");
        // From then on, one GET an object.
        assert!(store.clone().get_exact("tiles/t1.dct", 3_000_000).await.unwrap() == object);
        assert_eq!(gets.load(Ordering::SeqCst), first + 1);
    });
}

/// Byte ranges and tails (what obs reads ask for) from a server without ranges: cut from the object read whole,
/// the same bytes, rather than an error that blames the credentials.
#[cfg(feature = "http")]
#[test]
fn ranges_and_tails_from_a_server_without_ranges_are_cut_from_the_whole_object() {
    use std::sync::atomic::Ordering;
    run(async {
        let object = big(4);
        let (url, gets) = rangeless_server(object.clone()).await;
        let options = StoreOptions { retry: quick(), ..StoreOptions::default() }.with_option("allow_http", "true");
        let store = Store::from_url(&format!("{url}/ds"), &options).unwrap();
        let n = object.len() as u64;
        assert!(store.get_range("obs/obs_0000.parquet", 10..5_000).await.unwrap() == object.slice(10..5_000));
        assert!(store.get_tail("obs/obs_0000.parquet", 64, n).await.unwrap() == object.slice(object.len() - 64..));
        let e = store.get_tail("obs/obs_0000.parquet", 64, n + 1).await.unwrap_err();
        assert!(matches!(e, dct_store::StoreError::WrongSize { .. }), "{e}");
        let e = store.get_range("obs/obs_0000.parquet", n - 1..n + 1).await.unwrap_err();
        assert!(e.to_string().contains(&format!("asked of an object of {n} bytes")), "{e}");
        // The first range found the server out: one GET each after it.
        let before = gets.load(Ordering::SeqCst);
        store.get_range("obs/obs_0000.parquet", 0..8).await.unwrap();
        assert_eq!(gets.load(Ordering::SeqCst), before + 1);
    });
}
