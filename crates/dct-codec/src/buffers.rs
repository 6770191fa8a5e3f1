//! Large decode buffers backed by transparent huge pages (Linux).
//!
//! Why: a decoded 10,000-cell tile's planes take 128 MB and a batch of its rows as much again. Touching a fresh
//! buffer faults it in 4 KiB at a time; the dataset reader took a quarter of a million page faults per epoch that
//! way, and an epoch ran about 1.2x faster when the same buffers were backed by 2 MiB pages (see
//! docs/BENCHMARKS.md). The kernel backs a range with huge pages only when asked (`MADV_HUGEPAGE`) on systems whose
//! THP mode is `madvise`, the common default; in mode `never` the hint does nothing, in mode `always` it changes
//! nothing. Buffers keep their contents and meaning: only how the kernel maps them changes.

#![allow(unsafe_code)] // one `madvise` call (`advise_huge_pages`) and one `malloc_trim` (`return_free_memory`)

/// Buffers whose allocation reaches this size are advised (smaller ones gain nothing from 2 MiB pages).
pub const HUGE_PAGE_MIN_BYTES: usize = 4 << 20;

/// Size and alignment of a huge page on x86-64 and aarch64 with 4 KiB base pages.
const HUGE_PAGE: usize = 2 << 20;

/// `v.resize(len, value)`; when that grows `v`'s allocation to [`HUGE_PAGE_MIN_BYTES`] or more, first asks the
/// kernel to back the new allocation with huge pages. Growth stays amortised (the allocation at least doubles, as
/// with `resize`). For buffers that are appended to; see [`resize_for_overwrite`] for those rewritten whole.
pub fn resize_large<T: Clone>(v: &mut Vec<T>, len: usize, value: T) {
    if len > v.capacity() {
        v.reserve(len - v.len());
        advise_huge_pages(v);
    }
    v.resize(len, value);
}

/// Makes `v` `len` long for a caller that then writes every element: what it holds before that is unspecified
/// (old contents or `zero`). Within its allocation this is `resize`; beyond it, the old buffer is freed first and
/// a new one, 1/8 larger than asked (so that a slightly larger next tile fits), is taken from the allocator
/// zeroed, advised as in [`resize_large`], and not touched here. Growing a buffer with `resize` would copy its old
/// contents into the new allocation, faulting every page of it in on this thread, in 4 KiB pages, before the
/// caller overwrites it all (the dataset reader spent about 80% of its page faults that way).
///
/// `zero` should be the type's zero (`0`, `0.0`): the allocator then hands out untouched zeroed memory.
pub fn resize_for_overwrite<T: Clone>(v: &mut Vec<T>, len: usize, zero: T) {
    if len > v.capacity() {
        *v = Vec::new();
        let mut fresh = vec![zero; len.saturating_add(len / 8)];
        advise_huge_pages(&fresh);
        fresh.truncate(len);
        *v = fresh;
    } else {
        v.resize(len, zero);
    }
}

/// Asks the kernel to back the whole 2 MiB-aligned part of `v`'s allocation with huge pages, if it is large.
#[cfg(all(target_os = "linux", not(miri)))]
fn advise_huge_pages<T>(v: &Vec<T>) {
    let bytes = v.capacity().saturating_mul(size_of::<T>());
    if bytes < HUGE_PAGE_MIN_BYTES {
        return;
    }
    let start = v.as_ptr() as usize;
    let (lo, hi) = (start.next_multiple_of(HUGE_PAGE), (start + bytes) / HUGE_PAGE * HUGE_PAGE);
    if hi > lo {
        // SAFETY: `lo..hi` lies inside `v`'s allocation (rounded inwards to whole huge pages), which this process
        // owns and has mapped; MADV_HUGEPAGE changes only which page size the kernel uses for it, never its
        // contents, and takes no pointer the kernel writes through. Failure (e.g. a kernel without THP) leaves the
        // mapping as it was, so the result is ignored.
        unsafe {
            libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(all(target_os = "linux", not(miri))))]
fn advise_huge_pages<T>(_v: &Vec<T>) {}

/// Hands the memory that the C allocator holds free back to the system, where it is glibc's (`malloc_trim(0)`);
/// elsewhere does nothing. Returns whether any was returned.
///
/// Why: glibc serves the buffers of decoded tiles (a few MiB each) from its heaps once the first have been freed,
/// and keeps what is freed there resident. A process forked from one holding such free blocks (a `DataLoader`
/// worker started with `fork`) inherits them, and spends several times the system time faulting its own buffers
/// in: a worker's first epoch took 1.6-4.2 system CPU seconds with 1.1-2.8 GB resident in its parent, against
/// 0.56-0.84 when the parent had handed its free blocks back just before forking (see docs/BENCHMARKS.md, "Loader
/// workers"). Handing them back in the child after the fork did not help. It costs a walk over the free blocks
/// (about 50 ms for 2.4 GB).
pub fn return_free_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu", not(miri)))]
    {
        // SAFETY: `malloc_trim` takes no pointer; it only returns to the system (`madvise`) whole pages of blocks
        // the allocator holds free, under the allocator's own locks, and never touches memory in use.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu", not(miri))))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resize_large_is_resize() {
        for len in [0usize, 1, 1000, HUGE_PAGE_MIN_BYTES / 4 + 3, 3 * HUGE_PAGE_MIN_BYTES / 4] {
            let mut a: Vec<u32> = (0..17).collect();
            let mut b = a.clone();
            resize_large(&mut a, len, 7);
            b.resize(len, 7);
            assert_eq!(a, b);
            // Growing past the allocation keeps the contents and at least doubles the capacity.
            let cap = a.capacity();
            resize_large(&mut a, cap + 1, 9);
            b.resize(cap + 1, 9);
            assert_eq!(a, b);
            assert!(a.capacity() >= 2 * cap);
        }
    }

    #[test]
    fn resize_for_overwrite_sizes_and_keeps_what_fits() {
        let mut v: Vec<u32> = (0..100).collect();
        resize_for_overwrite(&mut v, 60, 0);
        assert_eq!(v, (0..60).collect::<Vec<_>>(), "shrinking keeps the prefix");
        resize_for_overwrite(&mut v, 100, 0);
        assert_eq!(v.len(), 100);
        let big = HUGE_PAGE_MIN_BYTES;
        resize_for_overwrite(&mut v, big, 0);
        assert_eq!(v.len(), big);
        assert!(v.capacity() >= big + big / 8, "room for a slightly larger next buffer");
        assert!(v.iter().all(|&x| x == 0));
        let cap = v.capacity();
        resize_for_overwrite(&mut v, big + big / 16, 0);
        assert_eq!((v.len(), v.capacity()), (big + big / 16, cap), "no new allocation within the headroom");
    }

    /// The large buffer is backed by huge pages where the system allows it (mode `madvise` or `always`). Not a
    /// failure elsewhere: the hint is allowed to do nothing.
    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn large_buffers_get_huge_pages_where_the_system_allows() {
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
        let mut v: Vec<u8> = Vec::new();
        resize_large(&mut v, 64 << 20, 1);
        let start = v.as_ptr() as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
        // The mapping holding the buffer: its `AnonHugePages` line.
        let mut inside = false;
        let mut huge_kb = 0u64;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((a, b)) = range.split_once('-')
                && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                inside = a <= start + (32 << 20) && start + (32 << 20) < b;
                continue;
            }
            if inside && let Some(kb) = line.strip_prefix("AnonHugePages:") {
                huge_kb = kb.trim().trim_end_matches(" kB").trim().parse().unwrap_or(0);
            }
        }
        if mode.contains("[madvise]") || mode.contains("[always]") {
            assert!(huge_kb >= 2048, "no huge pages in a 64 MiB buffer (THP mode {mode:?})");
        }
        assert!(v.iter().all(|&x| x == 1));
    }
}
