//! Placeholder: the workqueue async front (filled by its owner).
