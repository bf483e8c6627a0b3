//! The kubeconfig file pointing at a sim.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// A kubeconfig for an unauthenticated plain-HTTP server (YAML; `server` is quoted JSON-style).
pub(crate) fn render(url: &str) -> String {
    let server = serde_json::Value::String(url.to_string());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kinformer-sim\n  cluster:\n    server: {server}\ncontexts:\n- name: kinformer-sim\n  context:\n    cluster: kinformer-sim\n    user: kinformer-sim\n    namespace: default\ncurrent-context: kinformer-sim\nusers:\n- name: kinformer-sim\n  user: {{}}\npreferences: {{}}\n"
    )
}

/// Where the kubeconfig lives; a temporary one is removed on drop.
#[derive(Debug)]
pub(crate) enum KubeconfigFile {
    Temp(tempfile::TempPath),
    User(PathBuf),
}

impl KubeconfigFile {
    /// Writes the kubeconfig to `path`, or to a new temporary file.
    pub(crate) fn write(url: &str, path: Option<&Path>) -> std::io::Result<Self> {
        let text = render(url);
        match path {
            Some(p) => {
                std::fs::write(p, text)?;
                Ok(Self::User(p.to_path_buf()))
            }
            None => {
                let mut f = tempfile::Builder::new()
                    .prefix("kinformer-sim-")
                    .suffix(".kubeconfig")
                    .tempfile()?;
                f.write_all(text.as_bytes())?;
                f.flush()?;
                Ok(Self::Temp(f.into_temp_path()))
            }
        }
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        match self {
            Self::Temp(p) => p,
            Self::User(p) => p,
        }
    }
}
