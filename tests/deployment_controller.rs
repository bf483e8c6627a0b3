//! Placeholder: deployment-controller integration tests (filled by their owner).
