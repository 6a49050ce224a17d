//! `verify-cluster`: the installed cluster checked from the control host
//! ([`kubexm_install::verify`]): its record loaded as `status` does, one SSH connection per
//! node, the facts gathered over them, then every check within `--timeout`, the probes deleted
//! at the end (also on Ctrl-C: a second Ctrl-C abandons the deletion and says how to do it by
//! hand). Exit 0 when every check passed or was skipped, 7 ([`PartialError`]) when one failed,
//! 8 ([`UnverifiedError`]) when the time limit or an interrupt stopped the checks.

use std::time::Duration;

use anyhow::Result;
use kubexm_install::verify::{self, Options, Outcome, Report, Target};

use super::day2::{connect, Session};
use crate::cli::{ConnectArgs, Day2Args, PlanFormat, VerifyArgs};
use crate::exit::{PartialError, UnverifiedError};

pub(crate) fn run(args: &VerifyArgs, work_dir: &std::path::Path) -> Result<()> {
    verify_cluster(
        args.cluster.clone(),
        args.bundle.clone(),
        &args.connect,
        args.output,
        Duration::from_secs(args.timeout),
        work_dir,
    )
}

/// `install --verify`: the cluster just installed and recorded, checked with the defaults.
pub(crate) fn after_install(
    cluster: &str,
    connect: &ConnectArgs,
    work_dir: &std::path::Path,
) -> Result<()> {
    println!("verifying cluster {cluster} (install --verify)");
    verify_cluster(
        Some(cluster.to_string()),
        None,
        connect,
        PlanFormat::Text,
        verify::DEFAULT_TIMEOUT,
        work_dir,
    )
}

fn verify_cluster(
    cluster: Option<String>,
    bundle: Option<std::path::PathBuf>,
    connect_args: &ConnectArgs,
    output: PlanFormat,
    timeout: Duration,
    work_dir: &std::path::Path,
) -> Result<()> {
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
    let report = conn
        .runtime
        .block_on(verify::verify(&target, &options, || async {
            // An error installing the handler leaves only the time limit.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        }));
    match output {
        PlanFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        PlanFormat::Text => print!("{}", report.text()),
    }
    verdict(&report)
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
