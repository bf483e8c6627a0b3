//! Placeholder: the deployment-controller example (filled by its owner).
fn main() {}
