//! `kubexm-build import kubekey`: a KubeKey configuration → cluster.yaml.
//!
//! The result is validated before anything is written; secrets the KubeKey file held inline
//! go to files of their own (mode 0600, in a 0700 directory beside the output), and every file
//! is written to a temporary name and renamed, so an interrupted import leaves nothing half
//! written.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use fs_err as fs;
use kubexm_bundles::atomic;
use kubexm_manifests::catalog::Catalog;
use kubexm_manifests::import::{import_kubekey, read_input, ImportOptions};

use crate::cli::KubekeyArgs;

/// Imports and writes.
pub fn run(args: &KubekeyArgs, out: &mut dyn Write) -> Result<()> {
    let catalog = Catalog::builtin_with_override(args.catalog.as_deref())
        .context("Failed to load the catalog")?;
    let mut files: Vec<(String, String)> = Vec::new();
    for path in std::iter::once(&args.file).chain(args.inventory.as_ref()) {
        let text = read_input(path)?;
        files.push((path.display().to_string(), text));
    }
    let output_name = args
        .output
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("`{}` has no file name", args.output.display()))?;
    let secrets_dir = format!("{output_name}.secrets");
    let mut opts = ImportOptions::new(secrets_dir.clone());
    opts.name.clone_from(&args.name);
    opts.kubernetes_version.clone_from(&args.kubernetes_version);
    opts.vip_interface.clone_from(&args.vip_interface);
    let inputs: Vec<(&str, &str)> = files
        .iter()
        .map(|(f, t)| (f.as_str(), t.as_str()))
        .collect();
    let imported = import_kubekey(&inputs, &opts, &catalog)
        .with_context(|| format!("Failed to import `{}`", args.file.display()))?;
    let origin = files
        .iter()
        .map(|(f, _)| f.as_str())
        .collect::<Vec<_>>()
        .join(" + ");
    let text = imported.render(&origin)?;

    let base = match args.output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let secret_dir = base.join(&secrets_dir);
    if !args.force {
        let mut existing: Vec<PathBuf> = Vec::new();
        if args.output.exists() {
            existing.push(args.output.clone());
        }
        existing.extend(
            imported
                .secret_files
                .iter()
                .map(|s| base.join(&s.path))
                .filter(|p| p.exists()),
        );
        if !existing.is_empty() {
            let list: Vec<String> = existing
                .iter()
                .map(|p| format!("`{}`", p.display()))
                .collect();
            bail!(
                "{} already exist{}; pass --force to replace, or choose another -o",
                list.join(", "),
                if existing.len() == 1 { "s" } else { "" }
            );
        }
    }
    if !imported.secret_files.is_empty() {
        make_private_dir(&secret_dir)?;
    }
    for secret in &imported.secret_files {
        let path = base.join(&secret.path);
        atomic::write(&path, secret.content.expose().as_bytes(), 0o600)
            .with_context(|| format!("Failed to write `{}`", path.display()))?;
    }
    // cluster.yaml holds registry passwords inline when KubeKey had them: keep it private too.
    let mode = if imported.has_inline_secrets() {
        0o600
    } else {
        0o644
    };
    atomic::write(&args.output, text.as_bytes(), mode)
        .with_context(|| format!("Failed to write `{}`", args.output.display()))?;

    let r = &imported.report;
    writeln!(
        out,
        "wrote {} from {} ({}): {} field{} mapped, {} not mapped, {} decision{}",
        args.output.display(),
        origin,
        r.source,
        r.mapped,
        if r.mapped == 1 { "" } else { "s" },
        r.unmapped.len(),
        r.decisions.len(),
        if r.decisions.len() == 1 { "" } else { "s" },
    )?;
    if !imported.secret_files.is_empty() {
        writeln!(
            out,
            "host passwords and keys: {} file{} in {}/ (mode 0600)",
            imported.secret_files.len(),
            if imported.secret_files.len() == 1 {
                ""
            } else {
                "s"
            },
            secret_dir.display()
        )?;
    }
    if mode == 0o600 {
        writeln!(
            out,
            "{} holds registry passwords inline: written with mode 0600",
            args.output.display()
        )?;
    }
    write!(out, "{}", r.to_text())?;
    writeln!(
        out,
        "next: kubexm-build validate -f {}",
        args.output.display()
    )?;
    Ok(())
}

/// Creates `dir` with mode 0700 (or checks an existing one is a directory and tightens it).
fn make_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => bail!("`{}` exists and is not a directory", dir.display()),
        Err(_) => fs::create_dir(dir)?,
    }
    fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    Ok(())
}
