//! Codec benchmark: size, encode and decode speed of one synthetic tile, against the zstd-only floor.
//!
//! Run with `cargo bench -p dct-codec --bench codec` (release). The tile is 10,000 cells × 30,000 genes from
//! `dct-synth` with its default parameters (seed 42), encoded with the default 8 chunks; set `DCT_BENCH_CELLS` and
//! `DCT_BENCH_CHUNKS` to change the number of cells and chunks. Under `cargo test --benches` (criterion's test
//! mode) a 300-cell tile is used and every benchmark runs once.
//!
//! Besides criterion's figures (nonzeros per second), the run prints to stderr:
//! * the tile size in bytes per nonzero at zstd levels 19 and 3, with a breakdown by stream;
//! * heap allocations made by decodes into reused buffers (a counting global allocator wraps the system one);
//! * an interleaved comparison, in the same run, of the zstd-only floor (decompressing every chunk's `gaps` and
//!   `vals` frames into reused buffers with one reused `DCtx`) and whole-tile decodes with 1 and 2 threads:
//!   rounds of one run of each, medians and minima over rounds, and the ratios the issue sets targets for.
//!   Interleaving keeps the ratios meaningful on a shared, noisy machine.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use dct_codec::dct_format::TileLayout;
use dct_codec::{CanonicalCsr, DecodeOptions, DecodedTile, Decoder, EncodeOptions, encode_canonical};
use dct_synth::{Synth, SynthParams};
use zstd_safe::DCtx;

/// Heap allocations (`alloc`, `alloc_zeroed`, `realloc`) made by the whole process so far.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// The system allocator, counting allocations.
struct CountingAlloc;

// SAFETY: every call is forwarded unchanged to `System`, which upholds the `GlobalAlloc` contract.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller upholds `alloc`'s contract, which we pass on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` (through us) with `layout`; the caller upholds the rest.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` (through us) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::SeqCst)
}

/// Whether criterion runs for real (`cargo bench` passes `--bench`) rather than in test mode.
fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// Threads used to encode (the machine this was written for has 2 cores).
const ENCODE_THREADS: usize = 2;

struct Setup {
    csr: CanonicalCsr,
    nnz: u64,
    /// Level 19 (the default) tile: what the decode benchmarks read.
    tile19: Vec<u8>,
    tile3: Vec<u8>,
    encode_pool: rayon::ThreadPool,
}

/// Chunks per tile: `DCT_BENCH_CHUNKS`, default [`EncodeOptions::default`]'s (8).
fn n_chunks() -> usize {
    std::env::var("DCT_BENCH_CHUNKS").ok().and_then(|v| v.parse().ok()).unwrap_or(EncodeOptions::default().n_chunks)
}

fn encode(setup_pool: &rayon::ThreadPool, csr: &CanonicalCsr, level: i32) -> Vec<u8> {
    let opts = EncodeOptions { level, n_chunks: n_chunks(), ..EncodeOptions::default() };
    setup_pool.install(|| encode_canonical(csr, &opts)).expect("the synthetic tile encodes")
}

impl Setup {
    fn new() -> Self {
        let default_cells = if bench_mode() { 10_000 } else { 300 };
        let n_cells = std::env::var("DCT_BENCH_CELLS").ok().and_then(|v| v.parse().ok()).unwrap_or(default_cells);
        let params = SynthParams::default();
        let synth = Synth::new(&params).expect("default parameters are valid");
        let encode_pool =
            rayon::ThreadPoolBuilder::new().num_threads(ENCODE_THREADS).build().expect("start encode threads");
        let t = Instant::now();
        let m = encode_pool.install(|| synth.generate(0..n_cells));
        eprintln!(
            "[codec bench] generated {} cells x {} genes, {} nonzeros ({:.0} per cell), seed {}, in {:.2} s on {} threads",
            m.n_cells(),
            m.n_genes,
            m.nnz(),
            m.nnz() as f64 / m.n_cells().max(1) as f64,
            params.seed,
            t.elapsed().as_secs_f64(),
            ENCODE_THREADS,
        );
        let nnz = m.nnz() as u64;
        let csr = CanonicalCsr { n_genes: m.n_genes, indptr: m.indptr, indices: m.indices, values: m.values };
        let tile3 = encode(&encode_pool, &csr, 3);
        let tile19 = encode(&encode_pool, &csr, 19);
        Setup { csr, nnz, tile19, tile3, encode_pool }
    }
}

/// Bytes of each part of a tile.
fn size_report(name: &str, blob: &[u8], nnz: u64) {
    let layout = TileLayout::parse(blob).expect("valid tile");
    let (mut gaps, mut vals, mut exc) = (0u64, 0u64, 0u64);
    for e in layout.chunks() {
        gaps += e.gaps.len;
        vals += e.vals.len;
        exc += e.vexc.len + e.gexc.len;
    }
    let indptr = 8 * (layout.header().n_cells + 1);
    let per = |b: u64| b as f64 / nnz as f64;
    eprintln!(
        "[codec bench] {name}: {} bytes = {:.4} bytes/nnz (gaps {:.4}, vals {:.4}, indptr {:.4}, exceptions {} B, \
         {} chunks)",
        blob.len(),
        per(blob.len() as u64),
        per(gaps),
        per(vals),
        per(indptr),
        exc,
        layout.chunks().len(),
    );
}

/// The zstd-only floor: decompress every chunk's `gaps` and `vals` frames into reused buffers with one `DCtx`.
struct Floor {
    dctx: DCtx<'static>,
    frames: Vec<(Range<usize>, Range<usize>, usize)>,
    gaps: Vec<u8>,
    vals: Vec<u8>,
}

impl Floor {
    fn new(blob: &[u8]) -> Self {
        Self::for_chunks(blob, 0..usize::MAX)
    }

    /// The floor of only the chunks in `chunks` (clamped to the tile's).
    fn for_chunks(blob: &[u8], chunks: Range<usize>) -> Self {
        let layout = TileLayout::parse(blob).expect("valid tile");
        let n = layout.chunks().len();
        let chunks = chunks.start.min(n)..chunks.end.min(n);
        let frames: Vec<_> =
            layout.chunks()[chunks].iter().map(|e| (e.gaps.range(), e.vals.range(), 2 * e.nnz() as usize)).collect();
        let max = frames.iter().map(|f| f.2).max().unwrap_or(0);
        Floor { dctx: DCtx::create(), frames, gaps: Vec::with_capacity(max), vals: Vec::with_capacity(max) }
    }

    /// Decompressed bytes.
    fn run(&mut self, blob: &[u8]) -> usize {
        let mut total = 0;
        for (g, v, n) in &self.frames {
            self.gaps.clear();
            self.vals.clear();
            let a = self.dctx.decompress(&mut self.gaps, &blob[g.clone()]).expect("valid gaps frame");
            let b = self.dctx.decompress(&mut self.vals, &blob[v.clone()]).expect("valid vals frame");
            assert_eq!((a, b), (*n, *n));
            total += a + b;
        }
        black_box(&self.gaps);
        black_box(&self.vals);
        total
    }
}

/// The floor on two threads: each decompresses half the chunks (chunks hold equal numbers of nonzeros) with its
/// own `DCtx`. Shows how far this machine lets two threads scale at all.
struct Floor2 {
    halves: [Floor; 2],
}

impl Floor2 {
    fn new(blob: &[u8]) -> Self {
        let n = TileLayout::parse(blob).expect("valid tile").chunks().len();
        Floor2 { halves: [Floor::for_chunks(blob, 0..n / 2), Floor::for_chunks(blob, n / 2..n)] }
    }

    fn run(&mut self, blob: &[u8]) -> usize {
        let [a, b] = &mut self.halves;
        std::thread::scope(|s| {
            let other = s.spawn(|| a.run(blob));
            b.run(blob) + other.join().expect("floor thread")
        })
    }
}

/// The memory-write floor with ordinary stores: store every element of a decoded tile's output (gene indices and
/// counts, 8 bytes per nonzero) once, computing nothing. The output (256 MB for the benchmark tile) is far larger
/// than the caches, so each store first reads its line from memory.
fn write_output(out: &mut DecodedTile<f32>) {
    for (k, x) in out.indices.iter_mut().enumerate() {
        *x = k as i32;
    }
    out.values.fill(1.0);
    black_box(&out.indices);
    black_box(&out.values);
}

/// The memory-write floor with non-temporal stores (which the decoder uses on x86-64): the least any decoder
/// writing this output pays on top of its zstd work.
fn write_output_streaming(out: &mut DecodedTile<f32>) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_add_epi32, _mm_set1_epi32, _mm_setr_epi32, _mm_sfence, _mm_stream_si128};
        fn stream(buf: &mut [u32], first: [u32; 4], step: u32) {
            let head = buf.as_ptr().align_offset(16).min(buf.len());
            let body = (buf.len() - head) / 4 * 4;
            // SAFETY: 16-byte-aligned stores of 4 u32 inside `buf[head..head + body]`, fenced before returning.
            unsafe {
                let ptr = buf.as_mut_ptr().add(head);
                let mut v = _mm_setr_epi32(first[0] as i32, first[1] as i32, first[2] as i32, first[3] as i32);
                let inc = _mm_set1_epi32(step as i32);
                for i in (0..body).step_by(4) {
                    _mm_stream_si128(ptr.add(i).cast::<__m128i>(), v);
                    v = _mm_add_epi32(v, inc);
                }
                _mm_sfence();
            }
        }
        let indices: &mut [u32] = bytemuck_u32(&mut out.indices);
        stream(indices, [0, 1, 2, 3], 4);
        let one = 1f32.to_bits();
        let values: &mut [u32] = bytemuck_u32(&mut out.values);
        stream(values, [one; 4], 0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    write_output(out);
    black_box(&out.indices);
    black_box(&out.values);
}

/// A slice of 4-byte plain values viewed as u32.
fn bytemuck_u32<T: Copy>(v: &mut [T]) -> &mut [u32] {
    assert!(size_of::<T>() == 4 && align_of::<T>() == 4);
    // SAFETY: same size and alignment, and the callers pass only i32 and f32, for which every bit pattern is valid.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u32>(), v.len()) }
}

fn decoder(threads: usize, verify_crc: bool) -> Decoder {
    Decoder::new(DecodeOptions { verify_crc, threads })
}

/// Heap allocations made by `n` decodes into a reused tile after one warm-up decode.
fn allocations_per_decode(blob: &[u8], threads: usize, verify_crc: bool, n: u32) -> u64 {
    let mut dec = decoder(threads, verify_crc);
    let mut out = DecodedTile::<f32>::default();
    dec.decode_into(blob, &mut out).expect("valid tile");
    let before = allocations();
    for _ in 0..n {
        dec.decode_into(black_box(blob), &mut out).expect("valid tile");
    }
    allocations() - before
}

fn bench_encode(c: &mut Criterion, s: &Setup) {
    let mut group = c.benchmark_group("encode");
    group.throughput(Throughput::Elements(s.nnz));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(10));
    for level in [3, 19] {
        let opts = EncodeOptions { level, n_chunks: n_chunks(), ..EncodeOptions::default() };
        group.bench_function(format!("level{level}_{ENCODE_THREADS}t"), |b| {
            b.iter(|| s.encode_pool.install(|| encode_canonical(black_box(&s.csr), &opts)).expect("encodes"))
        });
    }
    group.finish();
}

fn bench_decode(c: &mut Criterion, s: &Setup) {
    let blob = &s.tile19[..];
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(s.nnz));
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(2));
    group.measurement_time(Duration::from_secs(8));
    let mut floor = Floor::new(blob);
    group.bench_function("zstd_floor_1t", |b| b.iter(|| floor.run(black_box(blob))));
    for (threads, crc) in [(1, false), (2, false), (1, true), (2, true)] {
        let mut dec = decoder(threads, crc);
        let mut out = DecodedTile::<f32>::default();
        let name = format!("{threads}t_crc_{}", if crc { "on" } else { "off" });
        group.bench_function(name, |b| b.iter(|| dec.decode_into(black_box(blob), &mut out).expect("valid tile")));
    }
    group.finish();
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// On-CPU and run-queue waiting nanoseconds of one thread from its Linux `schedstat` file (zeros where it is
/// unavailable). Waiting time shows when other processes took the cores during a measurement.
fn schedstat(path: &std::path::Path) -> (u64, u64) {
    let Ok(s) = std::fs::read_to_string(path) else { return (0, 0) };
    let mut fields = s.split_whitespace().map(|x| x.parse::<u64>().unwrap_or(0));
    (fields.next().unwrap_or(0), fields.next().unwrap_or(0))
}

/// [`schedstat`] of the calling thread (`own`) or summed over all the process's threads. The sum includes idle
/// rayon workers that spin and yield before they sleep, which counts as waiting on a busy machine: it is only an
/// upper bound on the disturbance of a multi-threaded run.
fn sched_ns(own: bool) -> (u64, u64) {
    if own {
        return schedstat(std::path::Path::new("/proc/thread-self/schedstat"));
    }
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return (0, 0) };
    dir.flatten().map(|task| schedstat(&task.path().join("schedstat"))).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

/// Measurements of one contender over the rounds, in seconds.
#[derive(Default)]
struct Samples {
    wall: Vec<f64>,
    cpu: Vec<f64>,
    wait: Vec<f64>,
}

impl Samples {
    /// Wall times of the runs that waited for a core less than 1% of the time.
    fn clean(&self) -> Vec<f64> {
        self.wall.iter().zip(&self.wait).filter(|(w, q)| **q < 0.01 * **w).map(|(w, _)| *w).collect()
    }
}

struct Stats {
    name: &'static str,
    runs: usize,
    wall_median: f64,
    wall_min: f64,
    cpu_median: f64,
    wait_median: f64,
    /// Runs undisturbed by other processes (see [`Samples::clean`]) and their median wall time (NaN if none).
    clean_runs: usize,
    clean_median: f64,
}

/// Rounds of one run of each contender, interleaved (after a warm-up round), recording the wall time, on-CPU time
/// and run-queue waiting time of every run. At least `min_rounds` rounds; then more, until the floor and the 1t
/// decode (CRC off) have `want_clean` undisturbed runs each or `budget` has passed.
fn interleaved(blob: &[u8], min_rounds: usize, want_clean: usize, budget: Duration) -> Vec<Stats> {
    let mut floor = Floor::new(blob);
    let mut floor2 = Floor2::new(blob);
    let mut out = DecodedTile::<f32>::default();
    let mut decoders = [
        ("1t_crc_off", decoder(1, false)),
        ("2t_crc_off", decoder(2, false)),
        ("1t_crc_on", decoder(1, true)),
        ("2t_crc_on", decoder(2, true)),
    ];
    // Size the output once, so the write floors write the same reused buffers the decoders do.
    decoders[0].1.decode_into(blob, &mut out).expect("valid tile");
    let mut samples: Vec<Samples> = (0..decoders.len() + 4).map(|_| Samples::default()).collect();
    let start = Instant::now();
    for round in 0.. {
        // The ratio with a target that needs clean runs: decode 1t over the floor.
        let enough = [0, 4].iter().all(|&i| samples[i].clean().len() >= want_clean);
        if round > min_rounds && (enough || start.elapsed() > budget) {
            break;
        }
        for (i, s) in samples.iter_mut().enumerate() {
            // Single-threaded contenders run on this thread: their own statistics are exact.
            let own = matches!(i, 0 | 2 | 3 | 4 | 6);
            let (cpu0, wait0) = sched_ns(own);
            let t = Instant::now();
            match i {
                0 => _ = floor.run(black_box(blob)),
                1 => _ = floor2.run(black_box(blob)),
                2 => write_output(&mut out),
                3 => write_output_streaming(&mut out),
                _ => decoders[i - 4].1.decode_into(black_box(blob), &mut out).expect("valid tile"),
            }
            let wall = t.elapsed().as_secs_f64();
            let (cpu1, wait1) = sched_ns(own);
            if round > 0 {
                s.wall.push(wall);
                s.cpu.push(cpu1.saturating_sub(cpu0) as f64 * 1e-9);
                s.wait.push(wait1.saturating_sub(wait0) as f64 * 1e-9);
            }
        }
    }
    let names = ["zstd_floor_1t", "zstd_floor_2t", "write_floor_1t", "write_nt_floor_1t"]
        .into_iter()
        .chain(decoders.iter().map(|d| d.0));
    names
        .zip(samples)
        .map(|(name, mut s)| {
            let mut clean = s.clean();
            Stats {
                name,
                runs: s.wall.len(),
                wall_min: s.wall.iter().copied().fold(f64::INFINITY, f64::min),
                wall_median: median(&mut s.wall),
                cpu_median: median(&mut s.cpu),
                wait_median: median(&mut s.wait),
                clean_runs: clean.len(),
                clean_median: if clean.is_empty() { f64::NAN } else { median(&mut clean) },
            }
        })
        .collect()
}

fn main() {
    let setup = Setup::new();
    let nnz = setup.nnz;
    let t3 = Instant::now();
    let again = encode(&setup.encode_pool, &setup.csr, 3);
    let encode3 = t3.elapsed().as_secs_f64();
    assert_eq!(again, setup.tile3, "encoding is deterministic");
    size_report("level 19", &setup.tile19, nnz);
    size_report("level 3", &setup.tile3, nnz);

    // Check the decoded tile once against the input.
    let mut check = DecodedTile::<u32>::default();
    decoder(2, true).decode_into(&setup.tile19, &mut check).expect("valid tile");
    assert!(check.indices.iter().map(|&i| i as u32).eq(setup.csr.indices.iter().copied()));
    assert_eq!(check.values, setup.csr.values);
    drop(check);

    let reps = if bench_mode() { 50 } else { 5 };
    let alloc_counts: Vec<_> = [(1, false), (2, false), (1, true), (2, true)]
        .into_iter()
        .map(|(t, crc)| ((t, crc), allocations_per_decode(&setup.tile19, t, crc, reps)))
        .collect();
    // A small tile decodes quickly, so many more decodes can be counted (amortized allocations show up).
    let small_cells = 200u64.min(setup.csr.n_rows() as u64);
    let small_nnz = setup.csr.indptr[small_cells as usize] as usize;
    let small = CanonicalCsr {
        n_genes: setup.csr.n_genes,
        indptr: setup.csr.indptr[..=small_cells as usize].to_vec(),
        indices: setup.csr.indices[..small_nnz].to_vec(),
        values: setup.csr.values[..small_nnz].to_vec(),
    };
    let small_tile = encode(&setup.encode_pool, &small, 19);
    let small_reps = if bench_mode() { 5_000 } else { 200 };
    let small_counts: Vec<_> =
        [1, 2].into_iter().map(|t| (t, allocations_per_decode(&small_tile, t, false, small_reps))).collect();

    let mut c = Criterion::default().configure_from_args();
    bench_encode(&mut c, &setup);
    bench_decode(&mut c, &setup);
    c.final_summary();

    eprintln!("\n[codec bench] ===== summary ({} cells, {nnz} nonzeros) =====", setup.csr.n_rows());
    size_report("level 19", &setup.tile19, nnz);
    size_report("level 3", &setup.tile3, nnz);
    eprintln!("[codec bench] one level-3 encode ({ENCODE_THREADS} threads): {encode3:.2} s");
    for ((threads, crc), n) in &alloc_counts {
        eprintln!(
            "[codec bench] allocations: {n} in {reps} decodes of the tile into reused buffers ({threads} thread(s), \
             CRC {})",
            if *crc { "on" } else { "off" }
        );
    }
    for (threads, n) in &small_counts {
        eprintln!(
            "[codec bench] allocations: {n} in {small_reps} decodes of a {small_cells}-cell tile into reused buffers \
             ({threads} thread(s), CRC off)"
        );
    }
    if bench_mode() {
        let r = interleaved(&setup.tile19, 30, 20, Duration::from_secs(180));
        eprintln!(
            "[codec bench] interleaved decode of the level-19 tile, {} rounds after a warm-up round (cpu = on-CPU \
             time; wait = time runnable but not running, i.e. other processes had the cores: of this thread for the \
             1t contenders, of all threads, an upper bound, for the 2t ones; clean = runs that waited < 1% of their \
             wall time):",
            r[0].runs
        );
        for x in &r {
            eprintln!(
                "[codec bench]   {:<14} wall median {:7.2} ms, min {:7.2} ms; cpu median {:7.2} ms; wait median \
                 {:6.2} ms; clean median {:7.2} ms ({:5.1} M nnz/s) over {} clean runs",
                x.name,
                x.wall_median * 1e3,
                x.wall_min * 1e3,
                x.cpu_median * 1e3,
                x.wait_median * 1e3,
                x.clean_median * 1e3,
                nnz as f64 / x.clean_median / 1e6,
                x.clean_runs,
            );
        }
        let get = |n: &str| r.iter().find(|x| x.name == n).expect("measured");
        let ratios = |label: &str, num: &Stats, den: &Stats, target: &str| {
            eprintln!(
                "[codec bench] {label}: clean median {:.3}, wall median {:.3}, wall min {:.3}   ({target})",
                num.clean_median / den.clean_median,
                num.wall_median / den.wall_median,
                num.wall_min / den.wall_min,
            );
        };
        let (floor, floor2) = (get("zstd_floor_1t"), get("zstd_floor_2t"));
        let (one, two, onec, twoc) = (get("1t_crc_off"), get("2t_crc_off"), get("1t_crc_on"), get("2t_crc_on"));
        ratios("1t / floor, CRC off", one, floor, "target <= 1.15");
        ratios("2t speed-up over 1t, CRC off", one, two, "target >= 1.7");
        ratios("1t / floor, CRC on", onec, floor, "CRC off is the main figure");
        ratios("2t speed-up over 1t, CRC on", onec, twoc, "CRC off is the main figure");
        ratios("zstd floor alone, 2t speed-up over 1t", floor, floor2, "what this machine gives two threads");
        ratios("write floor / zstd floor, ordinary stores", get("write_floor_1t"), floor, "for comparison");
        ratios(
            "write floor / zstd floor, non-temporal stores",
            get("write_nt_floor_1t"),
            floor,
            "any decoder's 1t / floor is at least about 1 + this",
        );
    }
    let per19 = setup.tile19.len() as f64 / nnz as f64;
    eprintln!("[codec bench] bytes/nnz at level 19: {per19:.4}   (target <= 0.90)");
    // Zero allocations per decode into reused buffers is a property of the decoder, on one thread or two, with the
    // CRC or without: every count reported above is checked, so none can regress unnoticed.
    for ((threads, crc), n) in &alloc_counts {
        assert_eq!(*n, 0, "{reps} decodes into reused buffers allocated ({threads} thread(s), CRC {crc})");
    }
    for (threads, n) in &small_counts {
        assert_eq!(*n, 0, "{small_reps} decodes of a {small_cells}-cell tile allocated ({threads} thread(s))");
    }
}
