//! `kinformer-bench-serve`: the informer benchmark's workload (twin of
//! `../shared/bench/serve.py`) in JSON and kube's protobuf.
//!
//! ```text
//! kinformer-bench-serve --pods 50000 --events 100000 --port 0 --write-kubeconfig /tmp/twin.kubeconfig
//! ```
//!
//! Once listening it prints, as serve.py, one line on stdout:
//! `serving port=P r0=R0 last_rv=RV n=N m=M added=A deleted=D expected_objects=X`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use kinformer_sim::bench::{ServeOptions, Server, Workload};

/// Serves N pods and M watch events (serve.py's workload) from memory on 127.0.0.1, as JSON
/// or, when the client's Accept asks for it, as application/vnd.kubernetes.protobuf.
#[derive(Debug, Parser)]
#[command(name = "kinformer-bench-serve", version)]
struct Args {
    /// Pods in the list.
    #[arg(long, default_value_t = 50_000)]
    pods: usize,
    /// Watch events after the list (then the sentinel bench/done).
    #[arg(long, default_value_t = 100_000)]
    events: usize,
    /// TCP port on 127.0.0.1 (0 = ephemeral).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Seed of the workload (serve.py's `--seed`: the same seed gives the same objects).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write a kubeconfig for this server to PATH.
    #[arg(long, value_name = "PATH")]
    write_kubeconfig: Option<PathBuf>,
    /// Stop by itself after this many seconds.
    #[arg(long, default_value_t = 3600.0)]
    lifetime: f64,
    /// No per-request log lines.
    #[arg(long)]
    quiet: bool,
}

/// serve.py's kubeconfig, written to a temporary file then renamed.
fn write_kubeconfig(path: &Path, port: u16) -> std::io::Result<()> {
    let cfg = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: bench\n  cluster:\n    server: \
         http://127.0.0.1:{port}\ncontexts:\n- name: bench\n  context:\n    cluster: bench\n    \
         user: bench\n    namespace: default\ncurrent-context: bench\nusers:\n- name: bench\n  \
         user: {{}}\npreferences: {{}}\n"
    );
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, cfg)?;
    std::fs::rename(&tmp, path)
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let t0 = Instant::now();
    let wl = Workload::generate(a.pods, a.events, a.seed)?;
    let (ji, je) = wl.json_bytes();
    let (pi, pe) = wl.protobuf_bytes();
    eprintln!(
        "serve: generated n={} m={} in {:.2}s: list {ji} bytes ({:.0} B/pod), events {je} bytes \
         ({:.0} B/event); protobuf: list {pi} bytes, events {pe} bytes; r0={} last_rv={} \
         added={} deleted={} expected_objects={}",
        wl.n,
        wl.m,
        t0.elapsed().as_secs_f64(),
        ji as f64 / wl.n.max(1) as f64,
        je as f64 / (wl.m + 1) as f64,
        wl.r0,
        wl.last_rv,
        wl.added,
        wl.deleted,
        wl.expected_objects
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", a.port))
            .await
            .context("binding the port")?;
        let port = listener.local_addr()?.port();
        let line = format!(
            "serving port={port} r0={} last_rv={} n={} m={} added={} deleted={} expected_objects={}",
            wl.r0, wl.last_rv, wl.n, wl.m, wl.added, wl.deleted, wl.expected_objects
        );
        if let Some(p) = &a.write_kubeconfig {
            write_kubeconfig(p, port).context("writing the kubeconfig")?;
        }
        // Everything is rendered before the line goes out (clients wait for it).
        let server = Server::new(wl, ServeOptions { log: !a.quiet }, port)?;
        println!("{line}");
        tokio::select! {
            () = server.run(listener) => {}
            _ = tokio::time::sleep(Duration::from_secs_f64(a.lifetime.max(0.0))) => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        anyhow::Ok(())
    })?;
    // Held-open watches are not waited for (serve.py's os._exit).
    std::process::exit(0)
}
