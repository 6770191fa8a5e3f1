//! `return_free_memory` hands the blocks glibc keeps free back to the system. A test binary of its own, so that
//! its process's resident memory moves with this test alone.

/// The process's resident bytes (`Rss` of `/proc/self/smaps_rollup`, in kB whatever the page size).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn resident_bytes() -> i64 {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").expect("Linux has /proc/self/smaps_rollup");
    let line = rollup.lines().find(|l| l.starts_with("Rss:")).expect("an Rss line");
    let kb: i64 = line.split_whitespace().nth(1).and_then(|k| k.parse().ok()).expect("Rss in kB");
    kb * 1024
}

/// Blocks below glibc's mmap threshold come from its heap and stay resident when freed; every other one is kept to
/// the end, so that the freed ones are not merged into the heap's top (which `free` trims by itself).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn freed_blocks_the_allocator_kept_go_back_to_the_system() {
    let fill = |i: usize| (i % 251) as u8 + 1;
    let blocks: Vec<Vec<u8>> = (0..4096).map(|i| vec![fill(i); 64 << 10]).collect();
    let (freed, kept): (Vec<_>, Vec<_>) = blocks.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
    drop(freed);
    let before = resident_bytes();
    assert!(dct_codec::return_free_memory(), "nothing returned; resident {before} bytes");
    let after = resident_bytes();
    // 2,048 freed blocks of 64 KiB are 128 MiB; all but the pages they share with kept neighbours go.
    assert!(before - after > 96 << 20, "resident {before} -> {after} bytes");
    assert!(kept.iter().all(|(i, b)| b.iter().all(|&x| x == fill(*i))), "a kept block changed");
}

/// Elsewhere the call does nothing and says so.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
#[test]
fn elsewhere_nothing_is_returned() {
    assert!(!dct_codec::return_free_memory());
}
