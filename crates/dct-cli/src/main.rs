//! The deltacells CLI (placeholder).
fn main() {}
