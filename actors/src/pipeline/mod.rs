//! The pipeline: the actors an informer is made of, the messages between them, and where their
//! notifications go.
//!
//! ```text
//! Reflector (+ Supervisor) --Replace/Events--> DeltaFifo --ProcessDeltas--> Indexer
//!     --Notifications--> ProcessorListener --> destination (handler thread, actor, key sink)
//! ```
//!
//! Owns: [`reflector`] and [`reflector_io`] (the reflector actor around the core's machine),
//! [`supervisor`] (its restarts, S1), [`fifo`] (the DeltaFifo actor), [`indexer`] (the Indexer
//! actor and its processor), [`listener`] (one ProcessorListener per handler), [`destination`]
//! (where a listener delivers: a handler thread, a user's actor or a key sink), [`handoff`]
//! (the queue between a listener and its handler thread), [`messages`]
//! (every message between them) and [`waiters`] (answers an actor holds back).
//!
//! Imports: `listwatch` (the kube seam the reflector calls), `telemetry` (the counters, health
//! and trace hops the actors record) and the base files (`config`, `error`, `handler`,
//! `object`, `runtime`). Never `informer` or `controller`, which sit above: the pipeline does
//! not know what starts it, and a workqueue reaches it only as a key sink (`EnqueueKeys`).

pub(crate) mod destination;
pub(crate) mod fifo;
pub(crate) mod handoff;
pub(crate) mod indexer;
pub(crate) mod listener;
pub mod messages;
pub(crate) mod reflector;
pub(crate) mod reflector_io;
pub(crate) mod supervisor;
pub(crate) mod waiters;
