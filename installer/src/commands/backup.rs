//! `backup keygen|create|verify` and `restore` (see [`kubexm_install::backup`] for the file and
//! [`kubexm_install::pipelines::restore`] for what a restore does).

use std::path::Path;

use anyhow::{bail, Context, Result};
use kubexm_install::backup::schedule::{self, Schedule};
use kubexm_install::backup::{self, BackupKey, Staging, SNAPSHOT};
use kubexm_install::modules::backup::restore::{Restore, Snapshot};
use kubexm_install::modules::etcd::EtcdLayout;
use kubexm_install::record::Outcome;
use kubexm_install::runner::fetch::fetch_file;
use kubexm_install::runner::{shell, Exec};
use kubexm_manifests::display::{Untrusted, UntrustedMax};
use kubexm_manifests::model::EtcdType;

use super::day2::{connect, execute, require_every_node, Operate, Session};
use crate::cli::{BackupCommand, BackupCreateArgs, BackupScheduleArgs, Day2Args, RestoreArgs};
use crate::exit::UsageError;

/// Largest etcd snapshot fetched (etcd's own database limit is 8 GiB by default; KubeXM sets
/// `quota-backend-bytes` to 8 GiB).
const MAX_SNAPSHOT: u64 = 9 << 30;
/// Largest archive of one node's files.
const MAX_NODE_FILES: u64 = 1 << 30;
/// Where a node stages what it sends.
const NODE_STAGING: &str = "/var/lib/kubexm/backup";
/// What each node contributes, when present: the Kubernetes directory (PKI, kubeconfigs, static
/// pod manifests, kubeadm configuration), the kubelet's certificates, KubeXM's etcd certificates
/// and configuration, KubeXM's own files on the node.
const NODE_PATHS: [&str; 5] = [
    "etc/kubernetes",
    "var/lib/kubelet/pki",
    "etc/ssl/etcd/ssl",
    "etc/etcd",
    "etc/kubexm",
];

pub(crate) fn run(cmd: &BackupCommand, work_dir: &Path) -> Result<()> {
    match cmd {
        BackupCommand::Keygen { key_file } => keygen(key_file),
        BackupCommand::Create(args) => create(args, work_dir),
        BackupCommand::Verify { backup, key_file } => verify(backup, key_file, work_dir),
        BackupCommand::Schedule(args) => schedule(args, work_dir),
    }
}

fn keygen(key_file: &Path) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let key = BackupKey::generate()?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(key_file)
        .with_context(|| {
            format!(
                "Failed to create `{}` (an existing key is never overwritten: backups made with it need it)",
                key_file.display()
            )
        })?;
    f.write_all(key.to_text().as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("Failed to write `{}`", key_file.display()))?;
    println!(
        "wrote a new backup key to {} (mode 600): keep a copy away from this host; a backup cannot be read without it",
        key_file.display()
    );
    Ok(())
}

fn verify(file: &Path, key_file: &Path, work_dir: &Path) -> Result<()> {
    let key = BackupKey::load(key_file)?;
    let shown = UntrustedMax(file.to_string_lossy(), 1000);
    let opened = backup::open(file, &key, &work_dir.join("backups"))
        .with_context(|| format!("`{shown}` is not a readable backup"))?;
    print!("{}", verify_report(&shown.to_string(), &opened.manifest));
    Ok(())
}

/// What `backup verify` prints: every string of the manifest escaped (a backup file comes from
/// elsewhere; its key proves who wrote it, not that its names are safe to print).
fn verify_report(file: &str, m: &backup::Manifest) -> String {
    use std::fmt::Write as _;
    let mut out = format!(
        "{file}: cluster {}, taken {} by KubeXM {} (etcd snapshot from {}); every entry matches its sha256:\n",
        Untrusted(&m.cluster),
        Untrusted(&m.created),
        Untrusted(&m.kubexm_version),
        Untrusted(&m.etcd_member)
    );
    for e in &m.entries {
        let _ = writeln!(
            out,
            "  {:<28} {:>12} bytes  {}  {}",
            Untrusted(&e.path).to_string(),
            e.size,
            Untrusted(e.sha256.get(..16).unwrap_or(&e.sha256)),
            Untrusted(&e.what)
        );
    }
    out
}

pub(crate) fn day2(cluster: &Option<String>, connect: &crate::cli::ConnectArgs) -> Day2Args {
    Day2Args {
        file: None,
        cluster: cluster.clone(),
        bundle: None,
        dry_run: false,
        resume: false,
        allow_even_etcd: false,
        connect: connect.clone(),
    }
}

fn kubexm_etcd_only(s: &Session, verb: &str) -> Result<()> {
    if s.installed.cluster.file.spec.etcd.kind != EtcdType::Kubexm {
        bail!(
            "`{verb}` covers KubeXM's etcd (etcd.type: kubexm); cluster {} has etcd.type {:?}: back it up with that etcd's own tools (for kubeadm's stacked etcd, `etcdctl snapshot save` in an etcd pod)",
            s.name,
            s.installed.cluster.file.spec.etcd.kind
        );
    }
    Ok(())
}

fn create(args: &BackupCreateArgs, work_dir: &Path) -> Result<()> {
    let key = BackupKey::load(&args.key_file)?;
    let s = Session::open(&day2(&args.cluster, &args.connect), work_dir)?;
    kubexm_etcd_only(&s, "backup create")?;
    let default_dir = schedule::default_dir(work_dir);
    let out = match &args.output {
        Some(o) => o.clone(),
        None => {
            kubexm_install::private_dir::ensure_private_dir(&default_dir)
                .with_context(|| format!("Failed to create `{}`", default_dir.display()))?;
            default_dir.join(schedule::default_name(
                &s.name,
                &kubexm_install::record::now(),
            ))
        }
    };
    println!("{}", s.header());
    let opts = s.run_options(&args.connect, false);
    let conn = connect(&s, &s.installed, &opts)?;
    take(&s, &conn, &key, &out, work_dir, args.allow_unreachable)?;
    println!(
        "  read it back with `kubexm-install backup verify --backup {} --key-file {}`",
        out.display(),
        args.key_file.display()
    );
    if let Some(keep) = args.keep {
        let removed = schedule::prune(&default_dir, &s.name, keep).with_context(|| {
            format!("Failed to prune old backups in `{}`", default_dir.display())
        })?;
        for r in removed {
            println!("  removed old backup {} (--keep {keep})", r.display());
        }
    }
    Ok(())
}

/// Where a backup taken before another operation (`upgrade`) goes: the default backup
/// directory, named for the cluster and the time.
pub(crate) fn default_output(s: &Session, work_dir: &Path) -> Result<std::path::PathBuf> {
    let dir = schedule::default_dir(work_dir);
    kubexm_install::private_dir::ensure_private_dir(&dir)
        .with_context(|| format!("Failed to create `{}`", dir.display()))?;
    Ok(dir.join(schedule::default_name(
        &s.name,
        &kubexm_install::record::now(),
    )))
}

/// Takes a backup of the cluster over `conn` (KubeXM's etcd: a snapshot from one member, every
/// reachable node's files, the control host's PKI directory and record), sealed with `key` into
/// `out`.
pub(crate) fn take(
    s: &Session,
    conn: &super::day2::Connected,
    key: &BackupKey,
    out: &Path,
    work_dir: &Path,
    allow_unreachable: bool,
) -> Result<()> {
    kubexm_etcd_only(s, "backup create")?;
    let layout = EtcdLayout::from_context(&s.installed);
    let by_name = conn.node_runners();
    // The member the facts came from answered etcdctl; else the first reachable member.
    let member =
        conn.facts
            .etcd
            .as_ref()
            .map(|e| e.from.clone())
            .filter(|m| by_name.contains_key(m))
            .or_else(|| {
                layout
                    .members
                    .iter()
                    .map(|m| m.name.clone())
                    .find(|m| by_name.contains_key(m))
            })
            .with_context(|| {
                format!(
                "no etcd member of cluster {} can be reached: a backup needs one (check SSH to {})",
                s.name,
                layout.members.iter().map(|m| m.name.clone()).collect::<Vec<_>>().join(", ")
            )
            })?;
    let unreachable: Vec<String> = s
        .installed
        .all()
        .into_iter()
        .filter(|n| !by_name.contains_key(n))
        .collect();
    if !unreachable.is_empty() && !allow_unreachable {
        bail!(
            "cannot reach {}: their files would be missing from the backup; fix SSH, or pass --allow-unreachable to back up without them",
            unreachable.join(", ")
        );
    }
    let mut staging = Staging::new(&work_dir.join("backups"))?;
    let snapshot = staging.path_for(SNAPSHOT)?;
    let m = layout
        .members
        .iter()
        .find(|x| x.name == member)
        .context("the etcd member is not in the layout")?;
    // `snapshot save` takes exactly one endpoint: the member's own.
    let etcdctl = layout
        .etcdctl(&member)
        .replace(&layout.client_endpoints().join(","), &layout.client_url(m));
    let remote_snap = format!("{NODE_STAGING}/snapshot.db");
    let mut stage_script = format!(
        "set -e\nmkdir -p -m 700 {NODE_STAGING}\nrm -f {remote_snap} {remote_snap}.part\n{etcdctl} --command-timeout=300s snapshot save {remote_snap} >/dev/null\n"
    );
    // GNU tar exits 1 when a file changed while it was read (a kubelet rotating its
    // certificate): the archive is still whole.
    let tar_script = |out: &str| {
        format!(
            "cd / && set -- && for p in {paths}; do [ ! -e \"$p\" ] || set -- \"$@\" \"$p\"; done\n\
             umask 077\n\
             if [ $# -eq 0 ]; then tar -cf {out} -T /dev/null; else tar -cf {out} --exclude=etc/kubernetes/kubexm-restore-parked \"$@\" || [ $? -eq 1 ]; fi\n",
            paths = NODE_PATHS.join(" ")
        )
    };
    let files_tar = format!("{NODE_STAGING}/files.tar");
    stage_script.push_str(&tar_script(&files_tar));
    let summary = conn.runtime.block_on(async {
        let r = &by_name[&member];
        let out = r
            .exec(&Exec::root(&stage_script).with_timeout(std::time::Duration::from_secs(600)))
            .await?;
        if !out.success() {
            bail!(
                "{member}: the etcd snapshot failed: {}",
                out.stderr
                    .trim()
                    .chars()
                    .filter(|c| !c.is_control() || *c == '\n')
                    .collect::<String>()
            );
        }
        let got = fetch_file(r.as_ref(), &remote_snap, &snapshot, MAX_SNAPSHOT).await?;
        let mut lines = vec![format!(
            "etcd snapshot from {member}: {} bytes, sha256 {}",
            got.size,
            &got.sha256[..16]
        )];
        for (name, r) in &by_name {
            let entry = format!("nodes/{name}/files.tar");
            let local = staging.path_for(&entry)?;
            if name != &member {
                let out = r
                    .exec(&Exec::root(format!(
                        "set -e\nmkdir -p -m 700 {NODE_STAGING}\n{}",
                        tar_script(&files_tar)
                    )))
                    .await?;
                if !out.success() {
                    bail!("{name}: packing its files failed: {}", out.stderr.trim());
                }
            }
            let got = fetch_file(r.as_ref(), &files_tar, &local, MAX_NODE_FILES).await?;
            lines.push(format!("{name}: {} bytes of files", got.size));
            r.exec(&Exec::root(format!(
                "rm -rf {}",
                shell::quote(NODE_STAGING)
            )))
            .await?;
        }
        Ok::<_, anyhow::Error>(lines)
    })?;
    staging.add(
        SNAPSHOT,
        &format!("etcd snapshot (v3 API) from member {member}"),
    )?;
    for name in by_name.keys() {
        staging.add(
            &format!("nodes/{name}/files.tar"),
            &format!("{name}: {}", NODE_PATHS.map(|p| format!("/{p}")).join(" ")),
        )?;
    }
    staging.add_dir(
        "control/pki.tar",
        &s.installed.pki_dir,
        "the keys and certificates KubeXM keeps for the cluster (control host)",
    )?;
    staging.add_dir(
        "control/record.tar",
        &kubexm_install::record::Records::new(work_dir).dir(&s.name),
        "KubeXM's record of the cluster: every cluster.yaml applied, nodes, history",
    )?;
    let manifest = staging.seal(key, &s.name, &member, out)?;
    for l in summary {
        println!("  {l}");
    }
    if !unreachable.is_empty() {
        println!("  not included (unreachable): {}", unreachable.join(", "));
    }
    let size = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    println!(
        "backup of cluster {} written to {} ({size} bytes, {} entries, encrypted)",
        s.name,
        out.display(),
        manifest.entries.len(),
    );
    Ok(())
}

fn schedule(args: &BackupScheduleArgs, work_dir: &Path) -> Result<()> {
    let s = Session::open(&day2(&args.cluster, &no_connect()), work_dir)?;
    let job = schedule::Job::Backup {
        key_file: match &args.key_file {
            Some(k) => std::path::absolute(k).context("Failed to resolve --key-file")?,
            None => std::path::PathBuf::from("/nonexistent"),
        },
        keep: args.keep,
    };
    let t = &args.timer;
    if !t.remove {
        let key = args.key_file.as_deref().context("--key-file is required")?;
        BackupKey::load(key)?;
    }
    let sched = schedule_of(&s, work_dir, job, t)?;
    write_schedule(&sched, t)?;
    if !t.remove && !t.write_only {
        println!(
            "scheduled: a backup of cluster {} on `{}`, the newest {} kept in {} (`systemctl list-timers {}.timer`)",
            s.name,
            t.on_calendar,
            args.keep,
            schedule::default_dir(work_dir).display(),
            sched.unit()
        );
    }
    Ok(())
}

/// The schedule of `job` for the session's cluster, run by this program.
pub(crate) fn schedule_of(
    s: &Session,
    work_dir: &Path,
    job: schedule::Job,
    t: &crate::cli::TimerArgs,
) -> Result<Schedule> {
    Ok(Schedule {
        cluster: s.name.clone(),
        binary: std::env::current_exe().context("Failed to find this program's path")?,
        work_dir: std::path::absolute(work_dir).context("Failed to resolve --work-dir")?,
        job,
        on_calendar: t.on_calendar.clone(),
        known_hosts: match &t.known_hosts {
            Some(k) => Some(std::path::absolute(k).context("Failed to resolve --known-hosts")?),
            None => None,
        },
    })
}

/// Writes (or with `--remove`, removes) the timer and service of `sched` in `--systemd-dir`,
/// and enables (disables) the timer unless `--write-only`.
pub(crate) fn write_schedule(sched: &Schedule, t: &crate::cli::TimerArgs) -> Result<()> {
    let unit = sched.unit();
    let files = [
        t.systemd_dir.join(format!("{unit}.service")),
        t.systemd_dir.join(format!("{unit}.timer")),
    ];
    let systemctl = |a: &[&str]| -> Result<()> {
        let st = std::process::Command::new("systemctl")
            .args(a)
            .status()
            .context("Failed to run systemctl")?;
        if !st.success() {
            bail!("`systemctl {}` failed ({st})", a.join(" "));
        }
        Ok(())
    };
    if t.remove {
        if !t.write_only {
            // Absent units are fine: the schedule is gone either way.
            let _ = std::process::Command::new("systemctl")
                .args(["disable", "--now", &format!("{unit}.timer")])
                .status();
        }
        for f in &files {
            match std::fs::remove_file(f) {
                Ok(()) => println!("removed {}", f.display()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(e).with_context(|| format!("Failed to remove `{}`", f.display()))
                }
            }
        }
        if !t.write_only {
            systemctl(&["daemon-reload"])?;
        }
        println!("no {unit} schedule any more");
        return Ok(());
    }
    let (service, timer) = sched.render()?;
    // A directory to review the units in (`--write-only --systemd-dir units`) may not exist yet.
    std::fs::create_dir_all(&t.systemd_dir)
        .with_context(|| format!("Failed to create `{}`", t.systemd_dir.display()))?;
    for (f, text) in files.iter().zip([service, timer]) {
        kubexm_install::private_dir::write_file_atomic(f, text.as_bytes(), 0o644)
            .with_context(|| format!("Failed to write `{}`", f.display()))?;
        println!("wrote {}", f.display());
    }
    if t.write_only {
        println!("enable it with: systemctl daemon-reload && systemctl enable --now {unit}.timer");
    } else {
        systemctl(&["daemon-reload"])?;
        systemctl(&["enable", "--now", &format!("{unit}.timer")])?;
    }
    Ok(())
}

pub(crate) fn no_connect() -> crate::cli::ConnectArgs {
    crate::cli::ConnectArgs {
        accept_new_host_keys: false,
        known_hosts: None,
        concurrency: 1,
    }
}

pub(crate) fn restore(args: &RestoreArgs, work_dir: &Path) -> Result<()> {
    let c = &args.common;
    let key = BackupKey::load(&args.key_file)?;
    let s = Session::open(c, work_dir)?;
    kubexm_etcd_only(&s, "restore")?;
    let opened = backup::open(&args.backup, &key, &work_dir.join("backups"))
        .with_context(|| format!("`{}` is not a readable backup", args.backup.display()))?;
    let m = &opened.manifest;
    if m.cluster != s.name {
        bail!(
            "`{}` is a backup of cluster {}, not of {}: pass --cluster {} (or the matching work directory)",
            args.backup.display(),
            m.cluster,
            s.name,
            m.cluster
        );
    }
    let (Some(file), Some(entry)) = (opened.file(SNAPSHOT), opened.entry(SNAPSHOT)) else {
        bail!("`{}` holds no etcd snapshot", args.backup.display());
    };
    let done_before = s
        .record
        .installed
        .history
        .iter()
        .filter(|h| h.operation == "restore" && h.result == Outcome::Succeeded)
        .count();
    let r = Restore {
        ctx: s.installed.clone(),
        snapshot: Snapshot {
            file,
            sha256: entry.sha256.clone(),
            id: format!("{}-{done_before}", &entry.sha256[..16]),
        },
    };
    println!("{}", s.header());
    println!(
        "restore: etcd of cluster {} from the backup taken {} (member {}); every etcd member's data is replaced (the old data is kept beside it as <dataDir>.before-restore-{}); the API servers are down meanwhile",
        s.name, m.created, m.etcd_member, r.snapshot.id
    );
    if !c.dry_run && !args.yes {
        return Err(UsageError(
            "restore replaces the cluster's etcd data with the backup's: objects written since the backup are lost. Review with --dry-run, then pass --yes".into(),
        )
        .into());
    }
    let pipeline = kubexm_install::pipelines::restore_pipeline(&r);
    let opts = s.run_options(&c.connect, c.resume);
    let conn = connect(&s, &s.installed, &opts)?;
    require_every_node(&conn, "a restore", "every member and master")?;
    let op = Operate {
        operation: "restore",
        done: "etcd restored from the backup on",
        nodes: EtcdLayout::from_context(&s.installed)
            .members
            .iter()
            .map(|m| m.name.clone())
            .collect(),
        desired: s.installed.clone(),
        journal_ctx: s.installed.clone(),
        notes: vec![format!("backup taken {} ({})", m.created, r.snapshot.id)],
    };
    execute(&s, conn, &pipeline, op, &opts, c.dry_run)
}

#[cfg(test)]
mod tests {
    #[test]
    fn verify_report_escapes_every_string_of_the_manifest() {
        let hostile = "x\u{1b}[2J\rOK\u{202e}";
        let m = kubexm_install::backup::Manifest {
            format_version: kubexm_install::backup::FORMAT,
            cluster: hostile.into(),
            created: hostile.into(),
            kubexm_version: hostile.into(),
            etcd_member: hostile.into(),
            entries: vec![kubexm_install::backup::Entry {
                path: hostile.into(),
                size: 1,
                sha256: "é".repeat(10),
                what: hostile.into(),
            }],
        };
        let out = super::verify_report("b.kxb", &m);
        assert!(
            !out.chars()
                .any(|c| c != '\n' && kubexm_manifests::display::needs_escape(c)),
            "{out:?}"
        );
        assert_eq!(out.matches(r"x\u{1b}[2J\rOK\u{202e}").count(), 6, "{out}");
    }
}
