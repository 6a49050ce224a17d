//! `rotate-ca`: the phases of the dual-CA transition ([`kubexm_install::rotation`]) still to
//! run, each as its own pipeline ([`kubexm_install::pipelines::rotate`]), the rotation's state
//! recorded on the control host after each one.

use std::sync::Arc;

use anyhow::{Context, Result};
use kubexm_install::context::InstallContext;
use kubexm_install::pki::Rotating;
use kubexm_install::rotation::{Files, Phase, State};
use kubexm_manifests::model::EtcdType;

use super::day2::{connect, execute_on, require_every_node, Operate, Session};
use crate::cli::{RotateCaArgs, RotateCaWhich, RotatePhase};
use crate::exit::UsageError;

/// The etcd CA's name in its key directory (`etcd-ca.crt`).
const ETCD_CA: &str = "etcd";
const ETCD_CA_CN: &str = "etcd-ca";

fn phase(p: RotatePhase) -> Phase {
    match p {
        RotatePhase::New => Phase::New,
        RotatePhase::TrustBoth => Phase::TrustBoth,
        RotatePhase::Reissue => Phase::Reissue,
        RotatePhase::DropOld => Phase::DropOld,
    }
}

pub(crate) fn run(args: &RotateCaArgs, work_dir: &std::path::Path) -> Result<()> {
    let c = &args.common;
    let unsupported = match args.ca {
        RotateCaWhich::Etcd => None,
        RotateCaWhich::Kubernetes => Some("kubernetes"),
        RotateCaWhich::FrontProxy => Some("front-proxy"),
        RotateCaWhich::All => Some("all"),
    };
    if let Some(ca) = unsupported {
        return Err(UsageError(format!(
            "rotate-ca --ca {ca} is not supported yet: this version rotates KubeXM's etcd CA only (--ca etcd); the Kubernetes and front-proxy CAs keep their certificates (renew their leaves with `certs renew`)"
        ))
        .into());
    }
    if !c.dry_run && !args.yes {
        return Err(UsageError(
            "rotate-ca replaces the CA every node trusts and restarts etcd and the API servers one node at a time, phase by phase. Review with --dry-run, then pass --yes".into(),
        )
        .into());
    }
    let s = Session::open(c, work_dir)?;
    println!("{}", s.header());
    let kind = s.installed.cluster.file.spec.etcd.kind;
    if kind != EtcdType::Kubexm {
        return Err(UsageError(format!(
            "etcd.type is {kind:?}: rotate-ca --ca etcd rotates the CA of KubeXM's own etcd (etcd.type: kubexm) only"
        ))
        .into());
    }
    let keys = s.installed.key_dir().join("etcd");
    let files = Files::new(keys.path(), ETCD_CA);
    let state = files
        .load()
        .context("Failed to read the etcd CA rotation state")?;
    files
        .check(ETCD_CA, state.as_ref())
        .context("Failed to continue the etcd CA rotation")?;
    let finished = state.map(|s| s.finished);
    if finished == Some(Phase::DropOld) && !c.dry_run {
        // An earlier run finished drop-old but not the control host's part.
        files
            .finalize()
            .context("Failed to replace the old etcd CA with the new one")?;
    }
    let upto = args.phase.map_or(Phase::DropOld, phase);
    let todo = Phase::todo(finished, upto);
    println!(
        "etcd CA rotation: last phase finished: {}; to run: {}",
        finished.map_or("none (no rotation in progress)", Phase::as_str),
        if todo.is_empty() {
            "nothing".to_string()
        } else {
            todo.iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    if todo.is_empty() {
        println!(
            "nothing to do: phase {upto} already finished{}",
            if finished == Some(Phase::DropOld) || finished.is_none() {
                " (or no rotation was started: run without --phase, or with --phase new, to start one)"
            } else {
                ""
            }
        );
        return Ok(());
    }
    let id = state.map_or_else(
        || time::OffsetDateTime::now_utc().unix_timestamp(),
        |s| s.id,
    );
    let opts = s.run_options(&c.connect, c.resume);
    let conn = connect(&s, &s.installed, &opts)?;
    require_every_node(&conn, "a CA rotation", "every node")?;
    let i = &s.installed;
    for p in todo {
        println!("== phase {p}");
        let ctx = Arc::new(InstallContext {
            cluster: i.cluster.clone(),
            nodes: i.nodes.clone(),
            bundle: i.bundle.clone(),
            pki_dir: i.pki_dir.clone(),
            keys: i.keys.with_rotation(Rotating {
                name: ETCD_CA.into(),
                phase: p,
                id,
            }),
            resolution: i.resolution.clone(),
            os_releases: i.os_releases.clone(),
        });
        if p == Phase::New {
            // Made here (in memory only under --dry-run); nothing changes on the nodes.
            ctx.key_dir()
                .join("etcd")
                .ca(ETCD_CA, ETCD_CA_CN)
                .context("Failed to make the new etcd CA")?;
            println!(
                "new etcd CA {} beside the old one{}",
                files.next_crt.display(),
                if c.dry_run {
                    " (dry run: not written)"
                } else {
                    ""
                }
            );
        } else {
            let pipeline = kubexm_install::pipelines::rotate::rotate_pipeline(
                &kubexm_install::modules::rotate::Rotate {
                    ctx: ctx.clone(),
                    id,
                    phase: p,
                },
            );
            let op = Operate {
                operation: "rotate-ca",
                done: "etcd CA phase finished on",
                nodes: i.nodes.iter().map(|n| n.name.clone()).collect(),
                desired: i.clone(),
                journal_ctx: i.clone(),
                notes: vec![format!("etcd CA rotation {id}: phase {p}")],
            };
            execute_on(&s, &conn, &pipeline, op, &opts, c.dry_run)?;
        }
        if c.dry_run {
            continue;
        }
        files
            .save(&State { finished: p, id })
            .context("Failed to record the etcd CA rotation's phase")?;
        if p == Phase::DropOld {
            files
                .finalize()
                .context("Failed to replace the old etcd CA with the new one")?;
            println!(
                "the new etcd CA is now {}; the old CA's key is deleted",
                files.crt.display()
            );
        }
    }
    if !c.dry_run && upto != Phase::DropOld {
        println!(
            "stopped after phase {upto}; continue with `kubexm-install rotate-ca --ca etcd --yes`"
        );
    }
    Ok(())
}
