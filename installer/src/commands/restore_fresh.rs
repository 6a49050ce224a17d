//! `restore --fresh`: a backup brought back onto nodes that hold nothing of the cluster (see
//! [`kubexm_install::modules::backup::restore_fresh`] for what the pipeline does differently from an
//! install, and [`kubexm_install::backup::fresh`] for what is taken from the backup). It is an
//! install, and ends as one: the cluster verified unless `--no-verify`.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use kubexm_install::backup::{self, fresh, BackupKey, SNAPSHOT};
use kubexm_install::intake::trust::TrustPolicy;
use kubexm_install::modules::backup::restore::{Restore, Snapshot};
use kubexm_install::modules::backup::restore_fresh::{
    FreshRestore, IdentityFile, KUBEADM_IDENTITY,
};
use kubexm_manifests::model::{EtcdType, KubernetesType};

use super::verify::Change;
use super::{install_context, run_options};
use crate::cli::RestoreArgs;
use crate::exit::UsageError;

pub(crate) fn run(args: &RestoreArgs, work_dir: &Path, trust: &TrustPolicy) -> Result<()> {
    let c = &args.common;
    let Some(bundle) = c.bundle.as_deref() else {
        return Err(UsageError(
            "restore --fresh needs --bundle FILE: the new nodes get binaries, images and packages from it, as in an install".into(),
        )
        .into());
    };
    if c.cluster.is_some() {
        return Err(UsageError(
            "restore --fresh takes the cluster from -f CLUSTER_YAML (or the bundle's), not --cluster".into(),
        )
        .into());
    }
    let key = BackupKey::load(&args.key_file)?;
    let opened = backup::open(&args.backup, &key, &work_dir.join("backups"))
        .with_context(|| format!("`{}` is not a readable backup", args.backup.display()))?;
    let m = &opened.manifest;
    let ctx = install_context(c.file.as_deref(), None, Some(bundle), work_dir, trust)?;
    let name = ctx.cluster.cluster_name().to_string();
    if m.cluster != name {
        bail!(
            "`{}` is a backup of cluster {}, but the cluster.yaml describes {name}: a fresh restore keeps the cluster's name (its certificates and etcd data carry it); set it to {} in the cluster.yaml",
            args.backup.display(),
            m.cluster,
            m.cluster
        );
    }
    let spec = &ctx.cluster.file.spec;
    if spec.etcd.kind != EtcdType::Kubexm {
        bail!(
            "restore rebuilds KubeXM's etcd (etcd.type: kubexm); the cluster.yaml has etcd.type {:?}",
            spec.etcd.kind
        );
    }
    let (Some(file), Some(entry)) = (opened.file(SNAPSHOT), opened.entry(SNAPSHOT)) else {
        bail!("`{}` holds no etcd snapshot", args.backup.display());
    };
    let identity = if spec.kubernetes.kind == KubernetesType::Kubeadm {
        let names: Vec<&str> = KUBEADM_IDENTITY.iter().map(|(n, _)| *n).collect();
        let (from, files) = fresh::kubeadm_identity(&opened, &names)
            .with_context(|| format!("`{}`: kubeadm's CAs", args.backup.display()))?;
        let dir = opened.dir().join("kubeadm-identity");
        kubexm_install::private_dir::ensure_private_dir(&dir)
            .with_context(|| format!("Failed to create `{}`", dir.display()))?;
        let mut out = Vec::new();
        for ((name, bytes), (_, mode)) in files.into_iter().zip(KUBEADM_IDENTITY) {
            let local = dir.join(&name);
            kubexm_install::private_dir::write_private_file(&local, &bytes, 0o600)
                .with_context(|| format!("Failed to write `{}`", local.display()))?;
            let name = KUBEADM_IDENTITY
                .iter()
                .map(|(n, _)| *n)
                .find(|n| *n == name)
                .context("an identity file outside the list")?;
            out.push(IdentityFile {
                name,
                local,
                sha256: kubexm_bundles::hash::sha256_hex(&bytes),
                mode,
            });
        }
        println!("kubeadm's CAs and service-account keys: from {from}'s files in the backup");
        out
    } else {
        Vec::new()
    };
    println!(
        "restore --fresh: cluster {name} from the backup taken {} (member {}) onto {}: installed from the bundle with the backup's CAs and keys, etcd started from its snapshot; objects written after the backup are not in it",
        m.created,
        m.etcd_member,
        ctx.all().join(", ")
    );
    if !c.dry_run && !args.yes {
        return Err(UsageError(
            "restore --fresh installs the cluster onto these nodes from the backup (an etcd data directory a member already has is kept beside the restored one). Review with --dry-run, then pass --yes".into(),
        )
        .into());
    }
    if c.dry_run {
        println!(
            "(dry run: the key directory {} is filled from the backup only when the restore runs)",
            ctx.pki_dir.display()
        );
    } else {
        let merged = fresh::merge_key_dir(&opened, &ctx.pki_dir).with_context(|| {
            format!(
                "Failed to restore the keys into `{}`",
                ctx.pki_dir.display()
            )
        })?;
        println!(
            "keys: {} file(s) restored into {}, {} already there",
            merged.added.len(),
            ctx.pki_dir.display(),
            merged.kept
        );
    }
    let ctx = Arc::new(if c.dry_run { ctx } else { ctx.for_execution() });
    let f = FreshRestore {
        restore: Restore {
            ctx: ctx.clone(),
            snapshot: Snapshot {
                file,
                sha256: entry.sha256.clone(),
                id: format!("{}-fresh", &entry.sha256[..16]),
            },
        },
        kubeadm_identity: identity,
    };
    let pipeline = kubexm_install::pipelines::restore_fresh_pipeline(&f);
    if c.dry_run {
        super::plan::print_plan(&ctx, &pipeline, c.file.as_deref(), false)?;
        return Ok(());
    }
    let opts = run_options(c.file.as_deref(), &c.connect, c.resume, work_dir)?;
    let result = super::run_and_record(
        &ctx,
        &pipeline,
        &opts,
        c.file.as_deref(),
        "restore --fresh",
        "Restore failed",
        "restored from the backup on",
    );
    drop(opened);
    let journal = result?;
    // An install onto new machines: verified as an install is, unless --no-verify.
    super::verify::after(
        Change::FreshRestore,
        args.no_verify,
        &name,
        &c.connect,
        work_dir,
        Some(&journal),
    )
}
