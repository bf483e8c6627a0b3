//! Controller tools: what a controller runs beside its informers.
//!
//! Owns: [`workqueue`] (the async front of client-go's rate-limiting workqueue),
//! [`leader_election`] (client-go's leader election over a Lease), [`ownership`] (what a
//! replica of a sharded controller owns) and [`membership`] (the Lease-based ring that decides
//! it).
//!
//! Imports: `telemetry` (a workqueue's probe and its registration) and the base files
//! (`error`, `handler`, `runtime`). Never the actors (`pipeline`), `listwatch` or `informer`:
//! a workqueue is fed by an informer only through `handler::EnqueueKeys`.

pub(crate) mod leader_election;
pub(crate) mod membership;
pub mod ownership;
pub mod workqueue;
