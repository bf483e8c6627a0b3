//! `cargo run --example deployment-controller -- [FLAGS]`: the `deployment-controller` binary
//! under the name it had when it was an example of the workspace (commands written then, such
//! as issue trackers' and older docs', keep working). Same program, same flags; the README's
//! command is `cargo run -p deployment-controller`.

fn main() -> anyhow::Result<()> {
    deployment_controller::cli::main()
}
