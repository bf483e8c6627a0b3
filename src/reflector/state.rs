//! Transitional: the RV bookkeeping the actor layer used before it drove [`super::ReflectorMachine`].
//! Removed once the Reflector actor is a driver of the machine.

use super::InitialList;

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
