//! Reader of kinformer trace files (`docs/trace-format.md`, T2).
