//! The registry, as kube-apiserver's `k8s.io/apiserver/pkg/registry` and `pkg/registry`: the
//! generic store's create, update, patch and delete semantics over the storage (`generic`:
//! metadata ownership, preconditions, subresources, finalizers, graceful deletion), the
//! per-kind strategies (`strategy`: status on create, generation, delete plans), the
//! defaulting of the built-in kinds (`defaults`), the field manager and server-side apply
//! (`fieldmanager`, over `fieldpath` sets and `typed` walks), strategic merge patch (`smp`), and
//! the list types both merge by (`listschema`). Write bodies are decoded against the kinds'
//! schemas under `fieldValidation` (`decode`); objects are validated as the strategies validate
//! them (`validation`), called from `generic`'s create, update and patch paths.
//!
//! The server's handlers and the test harness write through it, never to the storage
//! directly. Imports `crate::storage` and `crate::apimachinery`, nothing above.

pub(crate) mod decode;
pub(crate) mod defaults;
pub(crate) mod fieldmanager;
pub(crate) mod fieldpath;
pub(crate) mod generic;
pub(crate) mod listschema;
pub(crate) mod smp;
pub(crate) mod strategy;
pub(crate) mod typed;
pub(crate) mod validation;
