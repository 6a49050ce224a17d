//! `kubexm-build keygen`: a minisign key pair for signing bundles.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use kubexm_bundles::atomic;
use kubexm_bundles::sign::SecretKey;

use crate::cli::KeygenArgs;

/// Writes PREFIX.key (0600) and PREFIX.pub.
pub fn run(args: &KeygenArgs, out: &mut dyn Write) -> Result<()> {
    let with = |ext: &str| {
        let mut s = args.output.as_os_str().to_owned();
        s.push(ext);
        PathBuf::from(s)
    };
    let (secret_path, public_path) = (with(".key"), with(".pub"));
    if !args.force {
        for p in [&secret_path, &public_path] {
            if p.exists() {
                bail!(
                    "`{}` already exists; pass --force to replace it (bundles signed with the old key will no longer verify against the new one)",
                    p.display()
                );
            }
        }
    }
    let key = SecretKey::generate().context("Failed to make a key")?;
    let public = key.public();
    atomic::write(&secret_path, key.to_file().as_bytes(), 0o600)
        .with_context(|| format!("Failed to write `{}`", secret_path.display()))?;
    atomic::write(&public_path, public.to_file().as_bytes(), 0o644)
        .with_context(|| format!("Failed to write `{}`", public_path.display()))?;
    writeln!(
        out,
        "key {}: secret key {} (mode 0600, keep it off the air-gapped site), public key {} (give it to kubexm-install --trusted-key)",
        public.id(),
        secret_path.display(),
        public_path.display()
    )?;
    Ok(())
}
