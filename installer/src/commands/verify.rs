//! `verify-cluster`: the installed cluster checked from the control host
//! ([`kubexm_install::verify`]): its record loaded as `status` does, one SSH connection per
//! node, the facts gathered over them, then every check within `--timeout`, the probes deleted
//! at the end (also on Ctrl-C: a second Ctrl-C abandons the deletion and says how to do it by
//! hand). Exit 0 when every check passed or was skipped, 7 ([`PartialError`]) when one failed,
//! 8 ([`UnverifiedError`]) when the time limit or an interrupt stopped the checks.
//!
//! The same checks end every successful [`Change`] (`install`, `upgrade`, `apply`,
//! `restore --fresh`) unless `--no-verify` is given ([`after`]): the report is printed and
//! recorded in the run's journal, and a check that fails makes the command exit 7 or 8 with an
//! error that says the change is applied but the cluster did not verify.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use kubexm_install::pipeline::journal::Journal;
use kubexm_install::verify::{self, Options, Outcome, Report, Target};

use super::day2::{connect, Session};
use crate::cli::{ConnectArgs, Day2Args, PlanFormat, VerifyArgs};
use crate::exit::{PartialError, UnverifiedError};

pub(crate) fn run(args: &VerifyArgs, work_dir: &Path) -> Result<()> {
    let report = check(
        args.cluster.clone(),
        args.bundle.clone(),
        &args.connect,
        Duration::from_secs(args.timeout),
        work_dir,
    )?;
    match args.output {
        PlanFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        PlanFormat::Text => print!("{}", report.text()),
    }
    verdict(&report)
}

/// The commands whose successful run ends with the checks of `verify-cluster` (each has
/// `--no-verify`; a dry run or a plan never verifies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// `install` (and `kubexm-install --bundle FILE`).
    Install,
    /// `upgrade`, once the last step of the path is done.
    Upgrade,
    /// `apply`, when it applied something.
    Apply,
    /// `restore --fresh` (an install from the backup).
    FreshRestore,
}

impl Change {
    /// The command, as the operator typed it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Change::Install => "install",
            Change::Upgrade => "upgrade",
            Change::Apply => "apply",
            Change::FreshRestore => "restore --fresh",
        }
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What ends a successful `change` of `cluster`: nothing with `no_verify`; else the checks of
/// `verify-cluster` with its defaults (time limit [`verify::DEFAULT_TIMEOUT`]) over new
/// connections, the report printed and, with the run's `journal`, recorded in it
/// ([`Report::record_in`]). The command then exits 0, 7 or 8 as `verify-cluster` would
/// ([`conclude`]); checks that cannot start (the record unreadable, …) exit 8.
pub(crate) fn after(
    change: Change,
    no_verify: bool,
    cluster: &str,
    connect_args: &ConnectArgs,
    work_dir: &Path,
    journal: Option<&Journal>,
) -> Result<()> {
    if no_verify {
        return Ok(());
    }
    println!(
        "verifying cluster {cluster} after the {change} (the checks of `kubexm-install verify-cluster`; --no-verify skips them)"
    );
    let report = match check(
        Some(cluster.to_string()),
        None,
        connect_args,
        verify::DEFAULT_TIMEOUT,
        work_dir,
    ) {
        Ok(r) => r,
        Err(e) => {
            return Err(UnverifiedError(format!(
                "the {change} succeeded and is applied to cluster {cluster}, but the cluster was not verified: its checks could not start: {e:#}; once that is fixed, run `kubexm-install verify-cluster`"
            ))
            .into())
        }
    };
    print!("{}", report.text());
    if let Some(j) = journal {
        if let Err(e) = report.record_in(j) {
            eprintln!(
                "warning: the verification's report was not written beside the run's journal: {e}"
            );
        }
    }
    conclude(change, &report)
}

/// The exit of a `change` whose pipeline succeeded, from the verification's report: 0 when it
/// passed; else [`verdict`]'s class (7 a check failed, 8 the checks did not finish) under an
/// error saying that the change is applied and how to run the checks again.
pub(crate) fn conclude(change: Change, report: &Report) -> Result<()> {
    verdict(report).map_err(|e| {
        e.context(format!(
            "the {change} succeeded and is applied to cluster {}, but the cluster did not verify; after fixing the cause, run the checks again with `kubexm-install verify-cluster`",
            report.cluster
        ))
    })
}

/// The checks of `verify-cluster` on the recorded cluster (`cluster`, else the only one
/// recorded), from the recorded bundle or `bundle`, within `timeout`.
fn check(
    cluster: Option<String>,
    bundle: Option<std::path::PathBuf>,
    connect_args: &ConnectArgs,
    timeout: Duration,
    work_dir: &Path,
) -> Result<Report> {
    let common = Day2Args {
        file: None,
        cluster,
        bundle,
        dry_run: true,
        resume: false,
        allow_even_etcd: false,
        connect: connect_args.clone(),
    };
    let s = Session::open(&common, work_dir)?;
    let opts = s.run_options(connect_args, false);
    let conn = connect(&s, &s.installed, &opts)?;
    let runners = conn.node_runners();
    let target = Target {
        ctx: &s.installed,
        facts: &conn.facts,
        runners: &runners,
    };
    let options = Options {
        timeout,
        ..Options::default()
    };
    Ok(conn
        .runtime
        .block_on(verify::verify(&target, &options, || async {
            // An error installing the handler leaves only the time limit.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        })))
}

/// The exit class of a report.
fn verdict(report: &Report) -> Result<()> {
    let failed: Vec<&str> = report.failed().iter().map(|c| c.name.as_str()).collect();
    match report.outcome {
        Outcome::Complete if failed.is_empty() => Ok(()),
        Outcome::Complete => Err(PartialError(format!(
            "cluster {} is not verified: {} check(s) failed: {}",
            report.cluster,
            failed.len(),
            failed.join(", ")
        ))
        .into()),
        Outcome::TimedOut | Outcome::Interrupted => Err(UnverifiedError(format!(
            "cluster {} is not verified: {} before every check ran (failed: {})",
            report.cluster,
            if report.outcome == Outcome::TimedOut {
                format!("the time limit of {} s ran out", report.timeout_seconds)
            } else {
                "interrupted".to_string()
            },
            failed.join(", ")
        ))
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::ExitStatus;
    use kubexm_install::verify::{Check, CheckId, Cleanup, Status};

    fn report(outcome: Outcome, failing: &[CheckId]) -> Report {
        let checks: Vec<Check> = CheckId::ALL
            .iter()
            .map(|&name| {
                let fail = failing.contains(&name);
                Check {
                    name,
                    status: if fail { Status::Fail } else { Status::Pass },
                    seconds: 0.1,
                    summary: String::new(),
                    evidence: Vec::new(),
                    failures: if fail {
                        vec!["broken".into()]
                    } else {
                        Vec::new()
                    },
                }
            })
            .collect();
        Report {
            cluster: "lab".into(),
            result: if failing.is_empty() {
                Status::Pass
            } else {
                Status::Fail
            },
            outcome,
            timeout_seconds: 300,
            seconds: 1.0,
            api_node: Some("node1".into()),
            probe_image: None,
            checks,
            cleanup: Cleanup {
                namespace: verify::NAMESPACE,
                created: false,
                removed: true,
                note: None,
            },
        }
    }

    #[test]
    fn a_change_that_verified_exits_0_and_one_that_did_not_exits_7_or_8_saying_it_is_applied() {
        for change in [
            Change::Install,
            Change::Upgrade,
            Change::Apply,
            Change::FreshRestore,
        ] {
            assert!(conclude(change, &report(Outcome::Complete, &[])).is_ok());

            let err = conclude(
                change,
                &report(Outcome::Complete, &[CheckId::Dns, CheckId::PodNetwork]),
            )
            .expect_err("a failed check fails the command");
            assert_eq!(ExitStatus::of(&err), ExitStatus::Partial, "{change}");
            let top = err.to_string();
            assert!(
                top.starts_with(&format!("the {change} succeeded and is applied to cluster lab, but the cluster did not verify")),
                "{top}"
            );
            assert!(top.contains("`kubexm-install verify-cluster`"), "{top}");
            // The failed checks, by name, in the cause main prints under it.
            let cause = err.chain().nth(1).expect("a cause").to_string();
            assert_eq!(
                cause,
                "cluster lab is not verified: 2 check(s) failed: pod-network, dns"
            );

            for outcome in [Outcome::TimedOut, Outcome::Interrupted] {
                let err = conclude(change, &report(outcome, &[CheckId::LogsExec]))
                    .expect_err("unfinished checks fail the command");
                assert_eq!(ExitStatus::of(&err), ExitStatus::Unverified, "{change}");
                assert!(err.to_string().contains("is applied"), "{err}");
            }
        }
    }

    #[test]
    fn no_verify_does_nothing_and_the_default_verifies() {
        let work = tempfile::tempdir().expect("tempdir");
        let connect = ConnectArgs {
            accept_new_host_keys: false,
            known_hosts: None,
            concurrency: 1,
        };
        // --no-verify: nothing is opened, asked or printed (the work directory records no
        // cluster, which the checks would need).
        assert!(after(Change::Install, true, "lab", &connect, work.path(), None).is_ok());
        // The default: the checks are run, here on a cluster the work directory does not
        // record, so they cannot start: not verified (8), the change applied.
        let err = after(Change::Upgrade, false, "lab", &connect, work.path(), None)
            .expect_err("the checks run by default");
        assert_eq!(ExitStatus::of(&err), ExitStatus::Unverified);
        let msg = err.to_string();
        assert!(
            msg.starts_with("the upgrade succeeded and is applied to cluster lab, but the cluster was not verified: its checks could not start: no record of cluster lab"),
            "{msg}"
        );
        assert!(
            msg.ends_with("run `kubexm-install verify-cluster`"),
            "{msg}"
        );
    }
}
