//! The informer: what a user holds, on top of everything else.
//!
//! Owns: [`shared_informer`] (`SharedIndexInformer`, the cheap handle), [`assembly`] (the state
//! behind the handle: how its actors are started, wired and stopped) and [`factory`]
//! (`SharedInformerFactory`).
//!
//! Imports: `pipeline`, `listwatch`, `telemetry` and the base files (not `controller`, which
//! it does not need). Nothing imports `informer` but `lib.rs`. Inside: `factory` over
//! `shared_informer` over `assembly`.

pub(crate) mod assembly;
pub(crate) mod factory;
pub(crate) mod shared_informer;
