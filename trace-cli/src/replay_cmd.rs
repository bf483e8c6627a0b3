//! `kinformer-trace replay FILE`: the simulated API server, seeded and played from a trace
//! recorded with bodies (the library half is `kinformer_trace::replay`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, ValueEnum};
use kinformer_sim::{Sim, SimConfig};
use kinformer_trace::replay::{Applied, Pace, Player, Recording, ReplayOptions, ReplayPlan};

/// The arguments of `replay`.
#[derive(Args)]
pub struct ReplayArgs {
    /// The trace file, recorded with bodies (`deployment-controller --trace FILE
    /// --trace-bodies`; in a program, TraceSinkConfig::bodies).
    file: PathBuf,
    /// fast: one event after the other; recorded: each event after the gap recorded between it
    /// and the one before (see --speed). Either way, once the watches are open.
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
    /// Seed, then wait until this many watches are open (the fresh controller has started and
    /// synced) before playing the events. Default: one per kind the recorded informers watched;
    /// 0 plays at once.
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
        // Events played before the fresh controller watches would reach it as its initial
        // list, not as the recorded sequence: by default, wait for a watch per recorded kind.
        let kinds = recording.kinds();
        let watches = args
            .wait_for_watches
            .unwrap_or(u64::try_from(kinds.len()).unwrap_or(u64::MAX));
        if watches > 0 {
            println!("start the fresh controller against it, in another shell:");
            println!("  {}", controller_command(sim.kubeconfig_path()));
            match args.wait_for_watches {
                Some(_) => println!("waiting for {watches} open watches"),
                None => println!(
                    "waiting for {watches} open watches (one per recorded kind: {}; --wait-for-watches N to change)",
                    kinds.join(", ")
                ),
            }
            // The sim counts open watches but has no notification for them: a poll, bounded
            // only by the user's Ctrl-C (the controller may take its time to build and start).
            let mut ticker = tokio::time::interval(Duration::from_millis(50));
            loop {
                tokio::select! {
                    _ = ticker.tick() => {}
                    signal = tokio::signal::ctrl_c() => {
                        signal.context("waiting for Ctrl-C")?;
                        println!("interrupted before playing");
                        sim.shutdown().await;
                        return anyhow::Ok(());
                    }
                }
                if sim.requests().open_watches() >= watches {
                    break;
                }
            }
        }
        let pace = match args.pace {
            PaceArg::Fast => Pace::Fast,
            PaceArg::Recorded => Pace::Recorded { speed: args.speed },
        };
        let span = recorded_span(&plan);
        println!(
            "playing {} events {}",
            plan.events.len(),
            match pace {
                Pace::Fast => "one after the other (--pace fast)".to_string(),
                Pace::Recorded { speed } => format!(
                    "at the recorded gaps (--pace recorded, --speed {speed}): over {:.1?}",
                    span.div_f64(if speed > 0.0 { speed } else { 1.0 })
                ),
            }
        );
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

/// The command that starts a fresh deployment controller (the program the README records)
/// against the replaying sim: its kubeconfig, and no leader election (the replay has no other
/// replica, and a Lease would only delay the start).
fn controller_command(kubeconfig: &Path) -> String {
    format!(
        "KUBECONFIG={} cargo run -p deployment-controller -- --leader-elect=false",
        kubeconfig.display()
    )
}

/// The recorded time from the first event to play to the last.
fn recorded_span(plan: &ReplayPlan) -> Duration {
    match (plan.events.first(), plan.events.last()) {
        (Some(first), Some(last)) => {
            Duration::from_nanos(last.event.t.saturating_sub(first.event.t))
        }
        _ => Duration::ZERO,
    }
}
