//! The reflector's resource-version bookkeeping (DESIGN.md R1–R4), as a pure state machine.
//!
//! client-go's reflector decides from which resourceVersion to LIST and WATCH after every
//! outcome: the first list is served from the watch cache (`"0"`), later relists resume from the
//! last synced RV (served not older than it), and after the server said that RV is gone (410)
//! the relist asks for the latest consistent state (`""`). Keeping this in the core lets the
//! actor be a thin loop and the rules be tested without a network.

/// How the reflector's first LIST reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum InitialList {
    /// `resourceVersion=0`: served from the API server's watch cache; cheap, possibly stale
    /// (client-go's default).
    #[default]
    FromCache,
    /// `resourceVersion=""`: a consistent (quorum) read, paged with limit/continue.
    Consistent,
}

/// The reflector's view of resource versions across lists, watches, failures and restarts.
///
/// ```
/// use kinformer::reflector::{ReflectorState, InitialList};
/// let mut s = ReflectorState::new(InitialList::FromCache);
/// assert_eq!(s.relist_resource_version(), "0");
/// s.listed("100");
/// s.observed("105");
/// assert_eq!(s.watch_resource_version(), "105");
/// s.expired(); // watch said 410
/// assert!(s.needs_list());
/// assert_eq!(s.relist_resource_version(), "");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReflectorState {
    initial: InitialList,
    last_sync_resource_version: String,
    last_sync_unavailable: bool,
    needs_list: bool,
}

impl ReflectorState {
    /// A reflector that has not listed yet.
    pub fn new(initial: InitialList) -> Self {
        ReflectorState {
            initial,
            last_sync_resource_version: String::new(),
            last_sync_unavailable: false,
            needs_list: true,
        }
    }

    /// True when the next step must be a LIST (first start, or after 410).
    pub fn needs_list(&self) -> bool {
        self.needs_list
    }

    /// The resourceVersion for the next LIST (client-go's `relistResourceVersion`).
    pub fn relist_resource_version(&self) -> &str {
        if self.last_sync_unavailable {
            // The RV we had is gone from the server: ask for the latest consistent state.
            ""
        } else if self.last_sync_resource_version.is_empty() {
            match self.initial {
                InitialList::FromCache => "0",
                InitialList::Consistent => "",
            }
        } else {
            &self.last_sync_resource_version
        }
    }

    /// The resourceVersion to WATCH from: the last synced one.
    pub fn watch_resource_version(&self) -> &str {
        &self.last_sync_resource_version
    }

    /// The last resourceVersion the cache is synced to (client-go's `LastSyncResourceVersion`).
    pub fn last_sync_resource_version(&self) -> &str {
        &self.last_sync_resource_version
    }

    /// A LIST completed at `resource_version` and was handed to the FIFO (R2).
    pub fn listed(&mut self, resource_version: &str) {
        self.last_sync_resource_version.clear();
        self.last_sync_resource_version.push_str(resource_version);
        self.last_sync_unavailable = false;
        self.needs_list = false;
    }

    /// A watch event or bookmark at `resource_version` was handed to the FIFO (R3).
    /// Empty versions (malformed events) do not move the RV.
    pub fn observed(&mut self, resource_version: &str) {
        if !resource_version.is_empty() {
            self.last_sync_resource_version.clear();
            self.last_sync_resource_version.push_str(resource_version);
        }
    }

    /// The server answered 410 Gone/Expired to a WATCH or a LIST at our RV: relist (R3, S1).
    pub fn expired(&mut self) {
        self.last_sync_unavailable = true;
        self.needs_list = true;
    }

    /// A paged LIST's continue token expired (410): restart the list from scratch, keeping
    /// the RV rules (R1).
    pub fn list_restarted(&mut self) {
        self.needs_list = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r1_first_list_is_from_the_watch_cache_by_default() {
        assert_eq!(
            ReflectorState::new(InitialList::FromCache).relist_resource_version(),
            "0"
        );
        assert_eq!(
            ReflectorState::new(InitialList::Consistent).relist_resource_version(),
            ""
        );
    }

    #[test]
    fn r2_watch_starts_at_the_list_rv() {
        let mut s = ReflectorState::new(InitialList::FromCache);
        s.listed("42");
        assert!(!s.needs_list());
        assert_eq!(s.watch_resource_version(), "42");
    }

    #[test]
    fn r3_events_and_bookmarks_move_the_rv_and_empty_rv_does_not() {
        let mut s = ReflectorState::new(InitialList::FromCache);
        s.listed("42");
        s.observed("50");
        s.observed("");
        assert_eq!(s.last_sync_resource_version(), "50");
    }

    #[test]
    fn r3_expired_forces_a_consistent_relist_then_resumes_from_list_rv() {
        let mut s = ReflectorState::new(InitialList::FromCache);
        s.listed("42");
        s.expired();
        assert!(s.needs_list());
        assert_eq!(s.relist_resource_version(), "");
        s.listed("90");
        assert_eq!(s.relist_resource_version(), "90");
        assert_eq!(s.watch_resource_version(), "90");
    }

    #[test]
    fn r4_relist_after_restart_resumes_from_last_rv() {
        let mut s = ReflectorState::new(InitialList::FromCache);
        s.listed("42");
        s.observed("60");
        s.list_restarted();
        assert_eq!(s.relist_resource_version(), "60");
    }
}
