//! `certs check`: the certificate inventory of the installed cluster (see
//! [`kubexm_install::certs`]), as a table or JSON; exits 7 (partial, see `crate::exit`) when a
//! certificate has fewer days left than `--fail-under-days` or a node cannot be read.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Context, Result};
use kubexm_install::certs::{self, Places};
use kubexm_install::run;
use kubexm_install::runner::Runner;

use super::day2::Session;
use crate::cli::{CertsCheckArgs, CertsCommand, Day2Args, PlanFormat};
use crate::exit::{PartialError, UsageError};

pub(crate) fn run(cmd: &CertsCommand, work_dir: &std::path::Path) -> Result<()> {
    match cmd {
        CertsCommand::Check(args) => check(args, work_dir),
    }
}

fn check(args: &CertsCheckArgs, work_dir: &std::path::Path) -> Result<()> {
    if args.fail_under_days > args.warn_days {
        return Err(UsageError(format!(
            "--fail-under-days {} is more than --warn-days {}: a certificate would fail the check without a warning",
            args.fail_under_days, args.warn_days
        ))
        .into());
    }
    let common = Day2Args {
        file: None,
        cluster: args.cluster.clone(),
        bundle: None,
        dry_run: false,
        resume: false,
        allow_even_etcd: false,
        connect: args.connect.clone(),
    };
    let s = Session::open(&common, work_dir)?;
    let opts = s.run_options(&args.connect, false);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("Failed to start the async runtime")?;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let installed = s.installed.clone();
    let mut inv = runtime.block_on(async {
        let (runners, failed) = run::connect_nodes(&installed, &installed.all(), &opts).await?;
        let by_name: BTreeMap<String, Arc<dyn Runner>> = runners
            .into_iter()
            .map(|(n, r)| (n.name.clone(), r))
            .collect();
        let mut inv = certs::gather(&by_name, &Places::default(), now).await;
        for (n, e) in failed {
            inv.unreachable.insert(n, format!("cannot connect: {e}"));
        }
        Ok::<_, run::InstallError>(inv)
    })?;
    certs::control_host(&mut inv, &installed.pki_dir);
    inv.sort();
    match args.output {
        PlanFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&inv).context("Failed to write the inventory as JSON")?
        ),
        PlanFormat::Text => {
            println!("{}", s.header());
            print!("{}", inv.to_text(args.warn_days));
        }
    }
    let warn = inv.under(args.warn_days).count();
    let failing: Vec<String> = inv
        .under(args.fail_under_days)
        .map(|e| format!("{} {} ({} days left)", e.node, e.cert.path, e.days_left))
        .collect();
    let summary = format!(
        "{} certificate(s) on {} node(s) and the control host; {warn} with fewer than {} days left; {} node(s) unreachable, {} file(s) unreadable",
        inv.certificates.len(),
        s.installed.all().len(),
        args.warn_days,
        inv.unreachable.len(),
        inv.problems.len()
    );
    eprintln!("{summary}");
    if !failing.is_empty() {
        return Err(PartialError(format!(
            "{} certificate(s) have fewer than {} days left (--fail-under-days): {}; renew them before they expire (kubeadm path: `kubeadm certs renew all` on each master, then restart its control-plane pods)",
            failing.len(),
            args.fail_under_days,
            failing.join(", ")
        ))
        .into());
    }
    if !inv.unreachable.is_empty() {
        return Err(PartialError(format!(
            "the certificates of {} could not be read: {}",
            inv.unreachable
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            inv.unreachable
                .iter()
                .map(|(n, w)| format!("{n}: {w}"))
                .collect::<Vec<_>>()
                .join("; ")
        ))
        .into());
    }
    Ok(())
}
