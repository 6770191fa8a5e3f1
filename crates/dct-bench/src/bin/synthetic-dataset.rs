//! Builds (once) the synthetic benchmark dataset of the reader benchmarks and prints its path, for benchmarks
//! outside Rust (the Python package's): `cargo run --release -p dct-bench --bin synthetic-dataset [TILES
//! TILE_SIZE]` (default 20 tiles of 10,000 cells; kept under `dct_bench::data_dir()`).

#![forbid(unsafe_code)]

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>());
    let tiles = args.next().transpose()?.unwrap_or(20);
    let tile_size = args.next().transpose()?.unwrap_or(10_000);
    let dir = dct_bench::synthetic_dataset(tiles, tile_size)?;
    println!("{}", dir.display());
    Ok(())
}
