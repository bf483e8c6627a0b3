//! client-go's `retry.RetryOnConflict` for read-modify-write edits: an edit that reads an
//! object, changes it and writes it back loses the race whenever someone else (here, the
//! controller writing a Deployment's annotations or status) wrote in between; the server
//! answers `409 Conflict` and the edit is simply tried again on a fresh read.

use std::{future::Future, time::Duration};

use rand::Rng;

/// client-go's `retry.DefaultRetry`: 5 attempts, 10 ms apart, jitter 0.1 (factor 1).
pub const DEFAULT_RETRY_STEPS: u32 = 5;
const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(10);
const DEFAULT_RETRY_JITTER: f64 = 0.1;

/// True for the API server's `409 Conflict` (a stale resourceVersion on update).
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// Runs `attempt` until it succeeds, fails with anything but a conflict, or has failed with a
/// conflict [`DEFAULT_RETRY_STEPS`] times (then that last conflict is returned), pausing
/// about 10 ms between attempts. Each attempt must read the object afresh.
///
/// ```no_run
/// # use deployment_controller::retry::retry_on_conflict;
/// # use k8s_openapi::api::apps::v1::Deployment;
/// # async fn demo(api: kube::Api<Deployment>) -> kube::Result<Deployment> {
/// retry_on_conflict(|| async {
///     let mut d = api.get("web").await?;
///     d.spec.replicas = Some(3);
///     api.replace("web", &Default::default(), &d).await
/// })
/// .await
/// # }
/// ```
pub async fn retry_on_conflict<T, F, Fut>(mut attempt: F) -> kube::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = kube::Result<T>>,
{
    let mut step = 1;
    loop {
        match attempt().await {
            Err(e) if is_conflict(&e) && step < DEFAULT_RETRY_STEPS => {
                step += 1;
                let jitter = rand::rng().random_range(0.0..=DEFAULT_RETRY_JITTER);
                tokio::time::sleep(DEFAULT_RETRY_DELAY.mul_f64(1.0 + jitter)).await;
            }
            other => return other,
        }
    }
}
