//! The watch cache's rules for reads (`k8s.io/apiserver/pkg/storage/cacher`): a read at a
//! resourceVersion the cache has not reached waits for it.

use std::time::Duration;

use super::store::Store;
use crate::apimachinery::errors::ApiError;

/// Waits until the store has reached resourceVersion `target` or `wait` passed, as
/// the watch cache does before serving a read at a resourceVersion it has not seen
/// (`staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go`, `waitUntilFreshAndBlock`:
/// `blockTimeout` of 3 s, then `storage.NewTooLargeResourceVersionError(rv, current,
/// resourceVersionTooHighRetrySeconds = 1)`).
pub(crate) async fn wait_until_fresh(
    store: &Store,
    target: u64,
    wait: Duration,
) -> Result<(), ApiError> {
    if store.resource_version() >= target {
        return Ok(());
    }
    // Subscribe before re-reading the RV, so that no write between the two is missed.
    let mut rxs: Vec<tokio::sync::watch::Receiver<u64>> = (0..store.registry.all().len())
        .filter_map(|i| store.subscribe(i))
        .collect();
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let current = store.resource_version();
        if current >= target {
            return Ok(());
        }
        let any_change = async {
            if rxs.is_empty() {
                futures::future::pending::<()>().await;
            }
            let (r, _, _) =
                futures::future::select_all(rxs.iter_mut().map(|r| Box::pin(r.changed()))).await;
            if r.is_err() {
                // The store outlives every request; never spin on a closed channel.
                futures::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = any_change => {}
            _ = tokio::time::sleep_until(deadline) => {
                let current = store.resource_version();
                if current >= target {
                    return Ok(());
                }
                return Err(ApiError::too_large_resource_version(target, current, 1));
            }
        }
    }
}
