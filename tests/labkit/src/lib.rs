//! The `KubeXM` lab as a typed Rust handle, for the lab scenarios (`tests/e2e.rs`,
//! `tests/day2.rs`).
//!
//! * [`Lab`] starts N systemd-nspawn nodes under a unique name and subnet (it drives
//!   `tests/lab/lab`: nspawn, debootstrap and the network plumbing stay shell), runs commands in
//!   the lab's network namespace and on the nodes over real SSH, stops and starts nodes, and
//!   tears the lab down on `Drop` — also when the test panics, and (through a watchdog process
//!   outside the test's process group) when the test process is killed.
//! * [`Tools`] builds `kubexm-build` and `kubexm-install`; [`bundle::build`] makes the lab
//!   bundle from the local mirror; [`Kubexm`] runs `kubexm-install` in the lab namespace and
//!   parses its JSON ([`json::Status`], [`json::Installed`], the journal's [`json::Event`]s).
//! * [`check()`] and [`Output`] fail with what they saw (stdout, stderr, the JSON, the journal
//!   tail); [`Scenario`] prints each step's time and the scenario's duration.
//!
//! Conventions (as `kubexm-testkit`): starting a lab, building the bundle and the checks panic
//! with a message naming what failed and the evidence, because a broken fixture is a broken
//! test; commands a test expects to fail return their [`Output`] to be inspected.
//!
//! ```no_run
//! use kubexm_labkit::{check, Lab, LabSpec, Scenario};
//!
//! let scenario = Scenario::start("example");
//! let lab = Lab::up(&LabSpec::new("ex", 3));
//! let out = lab.ssh("node1", "hostname");
//! check(out.stdout_trimmed() == "node1", "node1's hostname", &out);
//! scenario.step("done");
//! ```
#![deny(missing_docs)]

pub mod bundle;
pub mod cluster;
mod command;
pub mod json;
pub mod kube;
mod kubexm;
mod lab;
pub mod nodes;
pub mod real;
mod scenario;
pub mod standin;

pub use command::{check, Output};
pub use kubexm::{work_dir_problems, Kubexm, Running, Summary, Tools};
pub use lab::{Lab, LabEnv, LabSpec, Rootfs};
pub use scenario::Scenario;

use std::path::PathBuf;

/// The repository root (two levels above this crate).
#[must_use]
pub fn repo_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .nth(2)
        .map_or_else(|| here.clone(), std::path::Path::to_path_buf)
}

/// `tests/lab` in the repository.
#[must_use]
pub fn lab_dir() -> PathBuf {
    repo_root().join("tests/lab")
}

/// The documents of a multi-document YAML text (e.g. a kubeadm configuration or a manifest).
///
/// # Panics
/// When it is not YAML (with the text).
#[must_use]
#[track_caller]
pub fn yaml_docs(text: &str) -> Vec<serde_json::Value> {
    serde_saphyr::from_multiple::<serde_json::Value>(text)
        .unwrap_or_else(|e| panic!("not YAML ({e}):\n{text}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// The document of `kind` among `docs`.
#[must_use]
pub fn doc_of_kind<'a>(docs: &'a [serde_json::Value], kind: &str) -> Option<&'a serde_json::Value> {
    docs.iter()
        .find(|d| d.get("kind").and_then(serde_json::Value::as_str) == Some(kind))
}

/// Every value of a key named `key`, anywhere in `v`.
#[must_use]
pub fn values_of<'a>(v: &'a serde_json::Value, key: &str) -> Vec<&'a serde_json::Value> {
    let mut out = Vec::new();
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    if k == key {
                        out.push(x);
                    }
                    stack.push(x);
                }
            }
            serde_json::Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    out
}
