//! `rotate-ca`: the phases of the dual-CA transition ([`kubexm_install::rotation`]) still to
//! run, each as its own pipeline ([`kubexm_install::pipelines::rotate`]), the rotation's state
//! recorded on the control host after each one.

use std::sync::Arc;

use anyhow::{Context, Result};
use kubexm_install::context::InstallContext;
use kubexm_install::modules::certs::rotate::RotatedCa;
use kubexm_install::pki::Rotating;
use kubexm_install::rotation::{Files, Phase, State};
use kubexm_manifests::model::EtcdType;

use super::day2::{connect, execute_on, require_every_node, Operate, Session};
use crate::cli::{RotateCaArgs, RotateCaWhich, RotatePhase};
use crate::exit::UsageError;

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
    let rotated = match args.ca {
        RotateCaWhich::Etcd => RotatedCa::Etcd,
        RotateCaWhich::FrontProxy => RotatedCa::FrontProxy,
        RotateCaWhich::Kubernetes => RotatedCa::Kubernetes,
        RotateCaWhich::All => {
            return Err(UsageError(
                "rotate-ca --ca all is not supported: rotate one CA at a time (--ca etcd, --ca front-proxy, --ca kubernetes), each to its end, so that a failure names the CA it happened to".to_string(),
            )
            .into());
        }
    };
    let ca_name = rotated.name();
    if !c.dry_run && !args.yes {
        return Err(UsageError(format!(
            "rotate-ca replaces the CA every node trusts and restarts {} one node at a time, phase by phase. Review with --dry-run, then pass --yes",
            match rotated {
                RotatedCa::Etcd => "etcd and the API servers",
                RotatedCa::FrontProxy => "the control plane of each master",
                RotatedCa::Kubernetes =>
                    "the Kubernetes services of every node and the kube-system workloads",
            }
        ))
        .into());
    }
    let s = Session::open(c, work_dir)?;
    println!("{}", s.header());
    let spec = &s.installed.cluster.file.spec;
    let kind = spec.etcd.kind;
    if rotated == RotatedCa::Etcd && kind != EtcdType::Kubexm {
        return Err(UsageError(format!(
            "etcd.type is {kind:?}: rotate-ca --ca etcd rotates the CA of KubeXM's own etcd (etcd.type: kubexm) only"
        ))
        .into());
    }
    let k8s = spec.kubernetes.kind;
    let subdir = rotated.key_subdir(k8s);
    let keys = s.installed.key_dir().join(subdir);
    let files = Files::new(keys.path(), ca_name);
    let state = files
        .load()
        .with_context(|| format!("Failed to read the {ca_name} CA rotation state"))?;
    files
        .check(ca_name, state.as_ref())
        .with_context(|| format!("Failed to continue the {ca_name} CA rotation"))?;
    let finished = state.map(|s| s.finished);
    if finished == Some(Phase::DropOld) && !c.dry_run {
        // An earlier run finished drop-old but not the control host's part.
        files
            .finalize()
            .with_context(|| format!("Failed to replace the old {ca_name} CA with the new one"))?;
    }
    let upto = args.phase.map_or(Phase::DropOld, phase);
    let todo = Phase::todo(finished, upto);
    println!(
        "{ca_name} CA rotation: last phase finished: {}; to run: {}",
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
                name: ca_name.into(),
                phase: p,
                id,
            }),
            resolution: i.resolution.clone(),
            os_releases: i.os_releases.clone(),
        });
        let pipeline = kubexm_install::pipelines::rotate::rotate_pipeline(
            &kubexm_install::modules::certs::rotate::Rotate {
                ca: rotated,
                ctx: ctx.clone(),
                id,
                phase: p,
            },
        );
        let op = Operate {
            operation: "rotate-ca",
            done: match rotated {
                RotatedCa::Etcd => "etcd CA phase finished on",
                RotatedCa::FrontProxy => "front-proxy CA phase finished on",
                RotatedCa::Kubernetes => "cluster CA phase finished on",
            },
            nodes: i.nodes.iter().map(|n| n.name.clone()).collect(),
            desired: i.clone(),
            journal_ctx: i.clone(),
            notes: vec![format!("{ca_name} CA rotation {id}: phase {p}")],
        };
        // Phase new changes nothing on the nodes; on the kubeadm path it reads the CA kubeadm
        // made (front-proxy or cluster) from the first master first.
        let on_nodes = p != Phase::New
            || (rotated != RotatedCa::Etcd
                && k8s == kubexm_manifests::model::KubernetesType::Kubeadm);
        if on_nodes {
            execute_on(&s, &conn, &pipeline, op, &opts, c.dry_run)?;
        }
        if p == Phase::New {
            // Made here (in memory only under --dry-run).
            ctx.key_dir()
                .join(subdir)
                .ca(ca_name, rotated.common_name())
                .with_context(|| format!("Failed to make the new {ca_name} CA"))?;
            println!(
                "new {ca_name} CA {} beside the old one{}",
                files.next_crt.display(),
                if c.dry_run {
                    " (dry run: not written)"
                } else {
                    ""
                }
            );
        }
        if c.dry_run {
            continue;
        }
        files
            .save(&State { finished: p, id })
            .with_context(|| format!("Failed to record the {ca_name} CA rotation's phase"))?;
        if p == Phase::DropOld {
            files.finalize().with_context(|| {
                format!("Failed to replace the old {ca_name} CA with the new one")
            })?;
            println!(
                "the new {ca_name} CA is now {}; the old CA's key is deleted",
                files.crt.display()
            );
        }
    }
    if !c.dry_run && upto != Phase::DropOld {
        println!(
            "stopped after phase {upto}; continue with `kubexm-install rotate-ca --ca {ca_name} --yes`"
        );
    }
    Ok(())
}
