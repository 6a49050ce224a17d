//! `certs check`: the certificate inventory of the installed cluster (see
//! [`kubexm_install::certs`]), as a table or JSON; exits 7 (partial, see `crate::exit`) when a
//! certificate has fewer days left than `--fail-under-days` or a node cannot be read.
//!
//! `certs renew`: the same inventory decides what is due ([`kubexm_install::certs::renew`]),
//! then the `certs-renew` pipeline ([`kubexm_install::pipelines::renew`]) renews it.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use kubexm_install::certs::{self, Places};
use kubexm_install::run;
use kubexm_install::runner::Runner;

use super::day2::{connect, execute, require_every_node, Operate, Session};
use crate::cli::{CertsCheckArgs, CertsCommand, CertsRenewArgs, Day2Args, PlanFormat};
use crate::exit::{PartialError, UsageError};

pub(crate) fn run(cmd: &CertsCommand, work_dir: &std::path::Path) -> Result<()> {
    match cmd {
        CertsCommand::Check(args) => check(args, work_dir),
        CertsCommand::Renew(args) => renew(args, work_dir),
        CertsCommand::Schedule(args) => schedule(args, work_dir),
    }
}

fn schedule(args: &crate::cli::CertsScheduleArgs, work_dir: &std::path::Path) -> Result<()> {
    use super::backup::{day2, no_connect, schedule_of, write_schedule};
    let s = Session::open(&day2(&args.cluster, &no_connect()), work_dir)?;
    let job = kubexm_install::backup::schedule::Job::CertsRenew {
        under_days: args.under_days,
    };
    let sched = schedule_of(&s, work_dir, job, &args.timer)?;
    write_schedule(&sched, &args.timer)?;
    if !args.timer.remove && !args.timer.write_only {
        println!(
            "scheduled: the certificates of cluster {} with fewer than {} days left renewed on `{}` (`systemctl list-timers {}.timer`)",
            s.name,
            args.under_days,
            args.timer.on_calendar,
            sched.unit()
        );
    }
    Ok(())
}

/// The renewal's id: when it started (Unix seconds), kept in `WORK/state/<cluster>-certs-renew.id`
/// so that `--resume` continues the same renewal (what it issued is not issued again).
fn renewal_id(s: &Session, resume: bool, dry_run: bool) -> Result<i64> {
    let file = s
        .work_dir
        .join("state")
        .join(format!("{}-certs-renew.id", s.name));
    if resume {
        if let Ok(text) = std::fs::read_to_string(&file) {
            if let Ok(id) = text.trim().parse::<i64>() {
                return Ok(id);
            }
        }
    }
    let id = time::OffsetDateTime::now_utc().unix_timestamp();
    if !dry_run {
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("Failed to create `{}`", dir.display()))?;
        }
        kubexm_install::private_dir::write_file_atomic(&file, id.to_string().as_bytes(), 0o600)
            .with_context(|| format!("Failed to write `{}`", file.display()))?;
    }
    Ok(id)
}

fn renew(args: &CertsRenewArgs, work_dir: &std::path::Path) -> Result<()> {
    use kubexm_install::certs::renew as due;
    use kubexm_manifests::model::{EtcdType, KubernetesType};
    use kubexm_manifests::resolve::Role;
    let c = &args.common;
    if args.under_days < 0 {
        return Err(UsageError(format!(
            "--under-days {} is negative: give the number of days left under which a certificate is renewed",
            args.under_days
        ))
        .into());
    }
    if !c.dry_run && !args.yes {
        return Err(UsageError(
            "certs renew replaces certificates and restarts etcd and the control plane one node at a time. Review with --dry-run, then pass --yes".into(),
        )
        .into());
    }
    let s = Session::open(c, work_dir)?;
    println!("{}", s.header());
    let since = renewal_id(&s, c.resume, c.dry_run)?;
    let opts = s.run_options(&c.connect, c.resume);
    let conn = connect(&s, &s.installed, &opts)?;
    require_every_node(&conn, "a renewal", "every node")?;
    let by_name = conn.node_runners();
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let mut inv = conn
        .runtime
        .block_on(certs::gather(&by_name, &Places::default(), now));
    certs::control_host(&mut inv, &s.installed.pki_dir);
    inv.sort();
    if !inv.unreachable.is_empty() {
        bail!(
            "the certificates of {} could not be read; fix it and run again",
            inv.unreachable
                .iter()
                .map(|(n, w)| format!("{n} ({w})"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let due = due::due(&inv, args.under_days, args.all);
    let threshold = if args.all {
        "every leaf (--all)".to_string()
    } else {
        format!("fewer than {} days left", args.under_days)
    };
    let spec = &s.installed.cluster.file.spec;
    let kubeadm = spec.kubernetes.kind == KubernetesType::Kubeadm;
    let kubexm_etcd = spec.etcd.kind == EtcdType::Kubexm;
    let masters: Vec<String> = match spec.kubernetes.kind {
        KubernetesType::Kubeadm => s
            .installed
            .with_role(Role::Master)
            .into_iter()
            .filter(|m| due.kubernetes_nodes.contains(m) || (due.etcd && kubexm_etcd))
            .collect(),
        KubernetesType::Kubexm => Vec::new(),
    };
    println!(
        "certs renew: {} certificate(s) due ({threshold}):",
        due.certificates.len()
    );
    for e in &due.certificates {
        println!(
            "  {} {} ({}, {} days left)",
            e.node, e.cert.path, e.cert.common_name, e.days_left
        );
    }
    // kubeadm path: workers' kubelet client certificates (signed on the first master from
    // requests the workers make) and the kubelets' CSR-signed serving certificates.
    let (workers, serving): (Vec<String>, Vec<String>) = match spec.kubernetes.kind {
        KubernetesType::Kubeadm => (
            due.kubernetes_nodes
                .iter()
                .filter(|n| !masters.contains(n))
                .cloned()
                .collect(),
            due.kubelet_serving.iter().cloned().collect(),
        ),
        KubernetesType::Kubexm => (Vec::new(), Vec::new()),
    };
    if due.is_empty() {
        println!("nothing to renew");
        // A kubelet's renewed serving certificate waits for an approval whatever else is due.
        if !kubeadm {
            return Ok(());
        }
        println!("kubeadm path: the pending kubelet serving CSRs are approved after their checks");
    }
    let reissue = kubexm_install::pki::Reissue {
        under_days: args.under_days,
        all: args.all,
        since,
    };
    let i = &s.installed;
    let ctx = Arc::new(kubexm_install::context::InstallContext {
        cluster: i.cluster.clone(),
        nodes: i.nodes.clone(),
        bundle: i.bundle.clone(),
        pki_dir: i.pki_dir.clone(),
        keys: i.keys.with_reissue(reissue),
        resolution: i.resolution.clone(),
        os_releases: i.os_releases.clone(),
    });
    let r = kubexm_install::modules::certs::renew::Renew {
        ctx,
        id: since.to_string(),
        under_days: args.under_days,
        all: args.all,
        masters,
        etcd: due.etcd && kubexm_etcd,
        etcd_expired: kubexm_etcd
            && due.certificates.iter().any(|e| {
                due::kind(&e.node, &e.cert.path) == due::Kind::Etcd && e.cert.not_after <= now
            }),
        kubernetes: due.kubernetes_control_host || !due.kubernetes_nodes.is_empty(),
        workers,
        serving,
        registry: due.registry,
    };
    let pipeline = kubexm_install::pipelines::renew::renew_pipeline(&r);
    let op = Operate {
        operation: "certs renew",
        done: if due.is_empty() {
            "kubelet serving CSRs checked from"
        } else {
            "certificates renewed on"
        },
        nodes: i.nodes.iter().map(|n| n.name.clone()).collect(),
        desired: s.installed.clone(),
        journal_ctx: s.installed.clone(),
        notes: vec![format!("renewal {since}: {threshold}")],
    };
    execute(&s, conn, &pipeline, op, &opts, c.dry_run)
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
            "{} certificate(s) have fewer than {} days left (--fail-under-days): {}; renew them before they expire: `kubexm-install certs renew --dry-run`, then `--yes`",
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
