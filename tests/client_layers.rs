//! Client-side tower layers for tests over HTTP: a recording of every request URI a kube
//! `Client` sends, and a network cut that makes its requests fail while set. Both sit in the
//! client's service stack (`ClientBuilder::with_layer`): the requests are real HTTP to the sim.

use std::{
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
};

use kube::Client;

/// Every request URI a client sent (path and query).
#[derive(Clone, Default)]
pub struct Uris(pub Arc<Mutex<Vec<String>>>);

impl Uris {
    /// The pods requests, watches or not.
    pub fn pods(&self, watch: bool) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|u| u.contains("/pods") && u.contains("watch=true") == watch)
            .cloned()
            .collect()
    }
}

impl<S> tower::Layer<S> for Uris {
    type Service = Recording<S>;
    fn layer(&self, inner: S) -> Recording<S> {
        Recording(inner, self.clone())
    }
}

/// A service that records each request's URI and passes it on.
#[derive(Clone)]
pub struct Recording<S>(S, Uris);

impl<S: tower::Service<http::Request<B>>, B> tower::Service<http::Request<B>> for Recording<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }
    fn call(&mut self, req: http::Request<B>) -> S::Future {
        (self.1).0.lock().unwrap().push(req.uri().to_string());
        self.0.call(req)
    }
}

/// A client of `sim` that records every URI it sends.
pub fn recording_client(sim: &kinformer_sim::Sim) -> (Client, Uris) {
    let uris = Uris::default();
    let client = kube::client::ClientBuilder::try_from(sim.kube_config())
        .expect("client builder")
        .with_layer(&uris)
        .build();
    (client, uris)
}

/// A client-side network cut: while set, every request fails at once (a replica whose path to
/// the server is broken while others still reach it).
#[derive(Clone, Default)]
pub struct Cut(Arc<AtomicBool>);

impl Cut {
    /// Cuts (true) or restores (false) the client's path to the server.
    pub fn set(&self, cut: bool) {
        self.0.store(cut, Ordering::SeqCst);
    }
}

impl<S> tower::Layer<S> for Cut {
    type Service = CutService<S>;
    fn layer(&self, inner: S) -> CutService<S> {
        CutService(inner, self.clone())
    }
}

#[derive(Clone)]
pub struct CutService<S>(S, Cut);

type BoxedResponse<R> = Pin<Box<dyn Future<Output = Result<R, tower::BoxError>> + Send>>;

impl<S, B> tower::Service<http::Request<B>> for CutService<S>
where
    S: tower::Service<http::Request<B>>,
    S::Error: Into<tower::BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = tower::BoxError;
    type Future = BoxedResponse<S::Response>;
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), tower::BoxError>> {
        self.0.poll_ready(cx).map_err(Into::into)
    }
    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if (self.1).0.load(Ordering::SeqCst) {
            return Box::pin(async { Err("connection refused (test cut)".into()) });
        }
        let answer = self.0.call(req);
        Box::pin(async move { answer.await.map_err(Into::into) })
    }
}
