//! kinformer actors (filled by the actor-pipeline issue).
