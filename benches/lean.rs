//! Lean-mode lister benchmarks (docs/semantics.md I7); filled in below.
use criterion::{Criterion, criterion_group, criterion_main};

fn benches(_c: &mut Criterion) {}

criterion_group!(lean, benches);
criterion_main!(lean);
