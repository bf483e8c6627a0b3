//! deployment-controller: kube-controller-manager's deployment controller on kinformer's shared
//! informers, listers and workqueue. The program is [`deployment_controller::cli`] (flags, the
//! embedded demo, a real cluster, leader election); see its documentation or `--help`.

fn main() -> anyhow::Result<()> {
    deployment_controller::cli::main()
}
