//! `kinformer-trace`: the command-line reader of kinformer trace files.
fn main() {}
