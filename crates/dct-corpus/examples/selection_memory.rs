//! The memory of a selection of a simulated corpus: every cell of `N` (default 10^8) chosen with probability one
//! half (a `where` on a column whose values are in no order), and the same number of cells chosen in runs of 1,000
//! (a column whose values come in runs: a donor, a batch).
//!
//! `cargo run --release -p dct-corpus --example selection_memory [N]`

use dct_corpus::SelectionBuilder;
use rand::{Rng, SeedableRng};

fn main() {
    let n: u64 = std::env::args().nth(1).map_or(100_000_000, |a| a.parse().expect("N: a number of cells"));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let start = std::time::Instant::now();
    let mut random = SelectionBuilder::default();
    for cell in 0..n {
        if rng.random_bool(0.5) {
            random.push(cell);
        }
    }
    let random = random.finish();
    let seconds = start.elapsed().as_secs_f64();
    let mut runs = SelectionBuilder::default();
    for cell in (0..n).filter(|c| (c / 1000) % 2 == 0) {
        runs.push(cell);
    }
    let runs = runs.finish();
    for (what, s) in [("random half", &random), ("half in runs of 1,000", &runs)] {
        println!(
            "{what:<22} {:>11} of {n} cells: {:>11} ranges, {:>8.1} MB ({:.2} bytes per selected cell)",
            s.n_cells(),
            s.ranges().0.len(),
            s.heap_bytes() as f64 / 1e6,
            s.heap_bytes() as f64 / s.n_cells() as f64
        );
    }
    println!("(the random half built in {seconds:.1} s)");
}
