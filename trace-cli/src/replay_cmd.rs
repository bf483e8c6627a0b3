//! `kinformer-trace replay FILE`: the simulated API server, seeded and played from a trace
//! recorded with bodies (the library half is `kinformer_trace::replay`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, ValueEnum};
use kinformer_sim::{Sim, SimConfig};
use kinformer_trace::replay::{Applied, Pace, Player, Recording, ReplayOptions};

/// The arguments of `replay`.
#[derive(Args)]
pub struct ReplayArgs {
    /// The trace file, recorded with bodies (TraceSinkConfig::bodies).
    file: PathBuf,
    /// fast: one event after the other; recorded: the recorded gaps (see --speed).
    #[arg(long, value_enum, default_value_t = PaceArg::Fast)]
    pace: PaceArg,
    /// With --pace recorded: play this many times faster (0.5: twice as slow).
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Play the recorded controller's own writes too (watch events matching a `write` line).
    #[arg(long)]
    include_own_writes: bool,
    /// Only these kinds, e.g. Deployment,Pod (default: every kind).
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// Where to write the kubeconfig (default: a temporary file, removed at exit).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The port to listen on (default: any free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Seed, then wait until this many watches are open (a controller has started) before
    /// playing the events.
    #[arg(long, value_name = "N")]
    wait_for_watches: Option<u64>,
    /// Print each event as it is played.
    #[arg(long, short)]
    verbose: bool,
    /// Stop the server once the last event is played (default: serve until Ctrl-C).
    #[arg(long)]
    exit_after_play: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum PaceArg {
    Fast,
    Recorded,
}

/// Runs `replay` on a runtime of its own.
pub fn run(args: ReplayArgs) -> anyhow::Result<()> {
    let recording = Recording::open(&args.file).with_context(|| args.file.display().to_string())?;
    if let Some(cut) = recording.truncated {
        eprintln!("kinformer-trace: warning: {}: {cut}", args.file.display());
    }
    let plan = recording.plan(&ReplayOptions {
        include_own_writes: args.include_own_writes,
        kinds: args.kinds.clone(),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async move {
        let sim = Sim::start(SimConfig {
            port: args.port,
            write_kubeconfig: args.kubeconfig.clone(),
            ..SimConfig::default()
        })
        .await
        .context("starting the simulated API server")?;
        println!("serving {}", sim.url());
        println!("kubeconfig {}", sim.kubeconfig_path().display());
        let player = Player::new(&sim).await?;
        let seeded = player.seed(&plan);
        let s = plan.skipped;
        println!(
            "seeded {} objects ({seeded}); {} events to play (left out: {} own writes, {} of other kinds, {} without body)",
            plan.seed.len(),
            plan.events.len(),
            s.own_writes,
            s.kinds,
            s.without_body
        );
        for failure in &seeded.failed {
            eprintln!("kinformer-trace: warning: seed: {failure}");
        }
        if let Some(n) = args.wait_for_watches {
            println!("waiting for {n} open watches");
            while sim.requests().open_watches() < n {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let pace = match args.pace {
            PaceArg::Fast => Pace::Fast,
            PaceArg::Recorded => Pace::Recorded { speed: args.speed },
        };
        let started = Instant::now();
        let verbose = args.verbose;
        let report = player
            .play_with(&plan, pace, |event, outcome| {
                let object = kinformer_trace::fmt::path(&event.ns, &event.name);
                match outcome {
                    Ok(applied) if verbose => println!(
                        "{:<8} {} {object} (recorded rv {}): {}",
                        event.what.as_str(),
                        event.kind,
                        event.rv,
                        match applied {
                            Applied::Created => "created",
                            Applied::Changed => "changed",
                            Applied::Deleted => "deleted",
                            Applied::Unchanged => "unchanged",
                        }
                    ),
                    Ok(_) => {}
                    Err(e) => eprintln!(
                        "kinformer-trace: warning: {} {} {object} (recorded rv {}): {e}",
                        event.what.as_str(),
                        event.kind,
                        event.rv
                    ),
                }
            })
            .await;
        println!(
            "played {} events in {:.1?} ({report})",
            plan.events.len(),
            started.elapsed()
        );
        if !args.exit_after_play {
            println!("serving until Ctrl-C");
            tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
        }
        sim.shutdown().await;
        anyhow::Ok(())
    })
}
