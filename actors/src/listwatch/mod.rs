//! The list/watch seam: how the reflector's LIST and WATCH requests reach kube and how their
//! answers are decoded.
//!
//! Owns: [`lister_watcher`] (client-go's `ListerWatcher`, over kube's `Api`), [`list_decode`]
//! (a LIST response decoded as it streams in) and [`decode`] (the process-wide decode pool that
//! decodes watch events and LIST items on several cores, in the server's order), and
//! [`server_health`] (one API server's health shared by the informers of a client, R11: its
//! probe, its timers and its announcements).
//!
//! Imports: only the base files (`object`: `InformerObject`, `ScopeApi`; `runtime`: the decode
//! threads and the I/O runtime) and the core. Never `telemetry`, the actors (`pipeline`), `controller` or
//! `informer`.

pub(crate) mod decode;
pub(crate) mod list_decode;
pub mod lister_watcher;
pub mod server_health;
