//! The harness itself, on a real lab (root): a panicking test leaves no lab behind.
//!
//! `cargo test -p kubexm-labkit --test harness -- --ignored --nocapture`

use std::process::Command;

use kubexm_labkit::{check, Lab, LabSpec, Output};

/// Set for the child run of [`panicking_scenario`] only.
const PROBE: &str = "KUBEXM_LABKIT_PANIC_PROBE";

#[test]
#[ignore = "lab: root + nspawn; run by tests/run-all"]
fn a_panicking_test_leaves_no_lab() {
    // This very test binary, running only the panicking scenario below, in a child process:
    // the test harness's own panic handling and unwinding, as in any failing scenario.
    let exe = std::env::current_exe().expect("the test binary");
    let name = format!("panic{}", std::process::id() % 100_000);
    let out = Output::run(
        Command::new(exe)
            .args(["--ignored", "--exact", "panicking_scenario", "--nocapture"])
            .env(PROBE, &name),
    );
    check(!out.success(), "the panicking scenario fails", &out);
    check(
        out.stdout.contains("node1 answered") || out.stderr.contains("node1 answered"),
        "the lab was up and reachable when the scenario panicked",
        &out,
    );
    check(
        out.stderr.contains("deliberate panic with a lab up"),
        "it failed by its panic",
        &out,
    );
    let listed = Lab::listed(&name);
    let status =
        Output::run(Command::new(kubexm_labkit::lab_dir().join("lab")).args(["status", &name]));
    let netns = Output::run(Command::new("ip").args(["netns", "list"]));
    check(
        !listed && !status.success() && !netns.stdout.contains(&format!("kxl-{name}")),
        "no lab, namespace or state left behind",
        &format!("{status}{netns}"),
    );
}

/// A scenario that panics with its lab up (run only by the test above).
#[test]
#[ignore = "run by a_panicking_test_leaves_no_lab"]
fn panicking_scenario() {
    let Ok(name) = std::env::var(PROBE) else {
        return;
    };
    let mut spec = LabSpec::new("x", 1);
    spec.name = name;
    let lab = Lab::up(&spec);
    let out = lab.ssh("node1", "hostname");
    check(out.stdout_trimmed() == "node1", "node1 answers", &out);
    eprintln!("node1 answered");
    panic!("deliberate panic with a lab up");
}
