//! Deterministic tests of the leader election machine.
