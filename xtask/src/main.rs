//! Developer tasks (placeholder).
fn main() {}
