//! kinformer-sim (filled by the sim issue).
