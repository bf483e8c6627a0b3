//! Placeholder: the benchmark client (filled by its owner).
fn main() {}
