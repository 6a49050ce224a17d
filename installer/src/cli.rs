//! The command line of `kubexm-install`: flags only; each verb's behaviour is in
//! `commands/<verb>.rs`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Install Kubernetes from a KubeXM bundle on air-gapped hosts.
///
/// Verifies and unpacks the bundle made by `kubexm-build bundle`, deploys and seeds the private
/// registry, then runs the install pipeline over SSH on every host of the cluster.
#[derive(Debug, Parser)]
#[command(
    name = "kubexm-install",
    version,
    propagate_version = true,
    args_override_self = true,
    after_long_help = TOP_EXAMPLES
)]
pub(crate) struct Cli {
    /// The bundle to install (`kubexm-build bundle` output).
    #[arg(long, value_name = "FILE.tar.zst")]
    pub(crate) bundle: Option<PathBuf>,
    /// Work directory: unpacked bundles, state and logs.
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        env = "KUBEXM_WORK_DIR",
        default_value = "/var/lib/kubexm"
    )]
    pub(crate) work_dir: PathBuf,
    /// A minisign public key (`kubexm-build keygen`) trusted to sign bundles (repeatable; also
    /// `KUBEXM_TRUSTED_KEYS`, `:`-separated files). With one configured, every bundle read must
    /// carry a signature by it (`FILE.minisig`), checked before anything is unpacked.
    #[arg(long = "trusted-key", global = true, value_name = "KEY.pub")]
    pub(crate) trusted_keys: Vec<PathBuf>,
    /// Refuse every bundle when no trusted key is configured, instead of warning (also
    /// `KUBEXM_REQUIRE_SIGNATURE=1`, the site's setting).
    #[arg(long, global = true)]
    pub(crate) require_signature: bool,
    /// Steps other than a full install.
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    #[command(flatten)]
    pub(crate) install: InstallArgs,
    #[command(flatten)]
    pub(crate) output: crate::output::OutputArgs,
}

const TOP_EXAMPLES: &str = "Examples:
  kubexm-install install --bundle demo.tar.zst --accept-new-host-keys
  kubexm-install plan --bundle demo.tar.zst
  kubexm-install status -o json
  kubexm-install completions bash > /etc/bash_completion.d/kubexm-install

Exit codes: 0 done, 1 other failure, 2 usage, 3 invalid cluster.yaml or catalog, 4 bundle
refused, 5 cannot connect to a node, 6 pipeline failed, 7 partial (status: a node unreachable
or unhealthy; install, upgrade, apply: applied, but a check of the verification that ends them
failed), 8 not verified (the checks did not finish). The guide: installer/docs/guide.md.";

/// Flags of a full install (`install`, or `--bundle` without a subcommand).
#[derive(Debug, Args)]
pub(crate) struct InstallArgs {
    /// Use this cluster.yaml instead of the one inside the bundle.
    #[arg(short = 'f', long = "file", value_name = "CLUSTER_YAML")]
    pub(crate) file: Option<PathBuf>,
    /// Print the full ordered plan and exit without connecting anywhere.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// With --dry-run: also print the full content of every file written (secrets redacted).
    #[arg(long, requires = "dry_run")]
    pub(crate) files: bool,
    /// Skip tasks an earlier run completed with the same inputs (state file in the work dir).
    #[arg(long)]
    pub(crate) resume: bool,
    /// Turn on kubernetes.securityEnhancement whatever cluster.yaml says: hardened file modes,
    /// the kubelet's anonymous access off, API audit logging (set it in cluster.yaml to keep it
    /// for the day-2 commands).
    #[arg(long)]
    pub(crate) security_enhancement: bool,
    #[command(flatten)]
    pub(crate) verify: VerifyAfterArgs,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

/// The verification that ends a successful `install`, `upgrade` and `apply` (and
/// `restore --fresh`, which has its own copy of the flag: it needs `--fresh`).
#[derive(Debug, Clone, Args)]
pub(crate) struct VerifyAfterArgs {
    /// Do not verify the cluster at the end. By default, once the run succeeded, the checks of
    /// `kubexm-install verify-cluster` run (default time limit) and their report is printed; a
    /// check that fails makes the command exit 7 (8: the checks did not finish), the change
    /// being applied all the same.
    #[arg(long)]
    pub(crate) no_verify: bool,
}

/// `install`: the bundle and the flags of a full install.
#[derive(Debug, Args)]
pub(crate) struct InstallCmd {
    /// The bundle to install (`kubexm-build bundle` output).
    #[arg(long, value_name = "FILE.tar.zst")]
    pub(crate) bundle: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) install: InstallArgs,
}

/// How nodes are drained (delete-node, kernel-upgrade, upgrade).
#[derive(Debug, Clone, Args)]
pub(crate) struct DrainArgs {
    /// Delete the pods without the eviction API: PodDisruptionBudgets are bypassed, pods no
    /// controller manages are deleted too.
    #[arg(long)]
    pub(crate) force_drain: bool,
    /// How long one drain may wait for evictions, in seconds (tried 3 times).
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub(crate) drain_timeout: u64,
}

impl DrainArgs {
    /// The drain these flags ask for (the timeout bounded to 10 s – 1 h).
    pub(crate) fn options(&self) -> kubexm_install::modules::lifecycle::membership::DrainOptions {
        kubexm_install::modules::lifecycle::membership::DrainOptions {
            force: self.force_drain,
            timeout: std::time::Duration::from_secs(self.drain_timeout.clamp(10, 3600)),
        }
    }

    /// With --force-drain: the warning, printed and logged, for the record's notes.
    pub(crate) fn forced_warning(&self, pods: &str) -> Option<String> {
        self.force_drain.then(|| {
            let w = format!(
                "--force-drain: {pods} are deleted without the eviction API (PodDisruptionBudgets bypassed)"
            );
            eprintln!("warning: {w}");
            tracing::warn!("{w}");
            w
        })
    }
}

/// How the nodes are reached (install and delete).
#[derive(Debug, Clone, Args)]
pub(crate) struct ConnectArgs {
    /// Record host keys of nodes not yet in the known_hosts file (changed keys are always
    /// refused).
    #[arg(long)]
    pub(crate) accept_new_host_keys: bool,
    /// OpenSSH known_hosts file the nodes' host keys are checked against
    /// (default: WORK_DIR/known_hosts).
    #[arg(long, value_name = "FILE")]
    pub(crate) known_hosts: Option<PathBuf>,
    /// Most nodes worked on at the same time.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub(crate) concurrency: usize,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Verify and unpack the bundle, then run the install pipeline over SSH on every host (the
    /// same as `kubexm-install --bundle FILE`); then verify the cluster with the checks of
    /// `verify-cluster` (--no-verify skips them): a failed check exits 7, the cluster installed.
    #[command(after_help = INSTALL_EXAMPLES)]
    Install(InstallCmd),
    /// Check a cluster.yaml against the built-in catalog and report every problem.
    #[command(after_help = CHECK_EXAMPLES)]
    Check {
        /// The cluster description.
        #[arg(short = 'f', long = "file", value_name = "CLUSTER_YAML")]
        file: PathBuf,
        /// A catalog file merged over the built-in catalog.
        #[arg(long, value_name = "FILE")]
        catalog: Option<PathBuf>,
    },
    /// Verify and unpack a bundle into the work directory (skipped when already unpacked): a
    /// split bundle from its parts (FILE.parts.json), a delta bundle completed from what the
    /// site holds (--registry: the site registry, for blobs only it holds).
    #[command(after_help = UNPACK_EXAMPLES)]
    Unpack {
        /// The bundle, or a split bundle's FILE.parts.json.
        #[arg(long, value_name = "FILE.tar.zst")]
        bundle: PathBuf,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Write what this site holds (the files of every unpacked bundle and, with --registry,
    /// the blobs the registry serves) for `kubexm-build bundle --have`.
    #[command(after_help = INVENTORY_EXAMPLES)]
    Inventory(InventoryArgs),
    /// Push every image of a bundle into a registry.
    #[command(after_help = SEED_EXAMPLES)]
    Seed(SeedArgs),
    /// Print the full ordered install plan (modules, tasks, steps, nodes, exact commands and
    /// file destinations) without connecting anywhere.
    #[command(after_help = PLAN_EXAMPLES)]
    Plan(PlanArgs),
    /// Delete the cluster from its nodes: everything the install put there, in reverse order
    /// (OS packages stay). Refuses without --yes, printing what would be deleted.
    #[command(after_help = DELETE_EXAMPLES)]
    Delete(DeleteArgs),
    /// Add the nodes that cluster.yaml has and the installed cluster does not (workers, masters,
    /// an etcd member), reusing the install's steps on them; shows the change, the facts and
    /// the plan first.
    #[command(after_help = ADD_NODE_EXAMPLES)]
    AddNode(AddNodeArgs),
    /// Remove one node from the installed cluster: cordon, drain (PodDisruptionBudgets
    /// respected), its etcd member, the load balancers' backends, `kubeadm reset` on it, its Node
    /// object, then what the install put on it.
    #[command(after_help = DELETE_NODE_EXAMPLES)]
    DeleteNode(DeleteNodeArgs),
    /// Apply an edited cluster.yaml's settings to the installed cluster: feature gates and
    /// component flags (one master at a time), the kubelet's and kube-proxy's settings, node
    /// preparation, the load balancer, the pod network's options, add-ons. Shows the change
    /// first; refuses what cannot change in place (CIDRs, cluster domain, kubernetes.type, the
    /// version, etcd, the runtime, nodes) before connecting anywhere. Ends with the checks of
    /// `verify-cluster` (--no-verify skips them): a failed check exits 7, the change applied.
    #[command(after_help = APPLY_EXAMPLES)]
    Apply(ApplyArgs),
    /// Change KubeXM's etcd (`etcd.type: kubexm`) one member at a time: add or remove a member
    /// on a node of the cluster; the API servers follow, one master at a time.
    #[command(subcommand, after_help = ETCD_EXAMPLES)]
    Etcd(EtcdCommand),
    /// The installed cluster: what KubeXM recorded (cluster.yaml and bundle last applied, when,
    /// with what result) and what the nodes say now over SSH (roles, Kubernetes, etcd and
    /// runtime versions, etcd health, the soonest certificate expiries, services down). A node
    /// that cannot be reached is shown as unreachable; the command then exits 7 (partial).
    #[command(after_help = STATUS_EXAMPLES)]
    Status(StatusArgs),
    /// Prove the installed cluster works: every node Ready at the recorded versions, the
    /// control plane and etcd healthy, certificates valid, probe pods (the bundle's probe image)
    /// reaching each other across nodes, a ClusterIP Service from every node, DNS through
    /// NodeLocal DNS, exec and logs through every kubelet, metrics where metrics-server runs.
    /// Each check passes, fails or is skipped, with its evidence and time; the probes are
    /// deleted at the end (also on Ctrl-C). Exits 0 when all pass, 7 when one fails, 8 when
    /// the time limit or an interrupt stopped it.
    #[command(after_help = VERIFY_EXAMPLES)]
    VerifyCluster(VerifyArgs),
    /// Print a shell completion script.
    #[command(after_help = COMPLETIONS_EXAMPLES)]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: crate::output::Shell,
    },
    /// Write the man pages (kubexm-install.1 and one per subcommand) into a directory, or the
    /// main page to standard output.
    #[command(after_help = MAN_EXAMPLES)]
    Man {
        /// Directory to write the pages into (default: the main page on standard output).
        #[arg(short = 'o', long = "output", value_name = "DIR")]
        output: Option<PathBuf>,
    },
    /// Certificates of the installed cluster: every one KubeXM or kubeadm made, on every node
    /// and on the control host, with its expiry.
    #[command(subcommand, after_help = CERTS_EXAMPLES)]
    Certs(CertsCommand),
    /// Back up the installed cluster into one encrypted file: the etcd snapshot (KubeXM's
    /// etcd), every node's Kubernetes and etcd files (PKI, kubeconfigs, manifests), KubeXM's keys
    /// and record of the cluster, with a manifest of sha256 sums.
    #[command(subcommand, after_help = BACKUP_EXAMPLES)]
    Backup(BackupCommand),
    /// Restore KubeXM's etcd from a backup on the same members: the control plane stops, every
    /// member's data is replaced by the snapshot's (the old data kept beside it), etcd and the
    /// control plane start again and must be healthy, the node agents restart. Objects written
    /// after the backup are gone. With --fresh: onto nodes that hold nothing of the cluster (new
    /// machines, or these after `delete`), installed from --bundle with the backup's CAs, keys
    /// and etcd data, then verified as an install is (--no-verify skips it). Refuses without
    /// --yes.
    #[command(after_help = RESTORE_EXAMPLES)]
    Restore(RestoreArgs),
    /// Rotate a CA with a dual-CA transition, phase by phase: `new` (a new CA on the control
    /// host), `trust-both` (every place that trusts the CA trusts old and new; rolling
    /// restarts), `reissue` (every leaf from the new CA; rolling restarts), `drop-old` (the old
    /// CA trusted no more; rolling restarts; its key deleted). Each phase is verified (etcd:
    /// `endpoint health` on every member after each restart) and recorded on the control host
    /// beside the CA, so a later run continues. Refuses without --yes.
    #[command(name = "rotate-ca", after_help = ROTATE_EXAMPLES)]
    RotateCa(RotateCaArgs),
    /// Upgrade the nodes' kernels one node at a time, masters first: cordon, drain
    /// (PodDisruptionBudgets respected), the kubelet stopped, the kernel package installed (from
    /// the bundle's OS repository when the cluster has one), reboot, SSH from a new boot, `uname
    /// -r` and the runtime verified, the kubelet started, uncordon, Ready, the API server and etcd
    /// healthy. Nodes already on the newest installed kernel are left alone. Refuses without
    /// --yes, printing the plan.
    #[command(name = "kernel-upgrade", after_help = KERNEL_UPGRADE_EXAMPLES)]
    KernelUpgrade(KernelUpgradeArgs),
    /// Upgrade Kubernetes to the version of the given bundle(s), one minor at a time: the path
    /// is planned and refused unless the bundles hold every minor on it; checks first (nodes
    /// Ready, etcd healthy, kubelet skew, deprecated APIs still in use); a backup (KubeXM's
    /// etcd); then the new images seeded, etcd one member at a time (when its version changes),
    /// the control plane one master at a time (kubeadm `upgrade apply` then `upgrade node`;
    /// kubexm: new binaries, each component restarted and answering), the workers in batches
    /// (cordon, drain, kubelet and kube-proxy, uncordon, Ready at the new version), the CNI and
    /// add-ons last. Every finished (node, phase) is recorded: --resume continues. Then the
    /// checks of `verify-cluster` (--no-verify skips them): a failed check exits 7, the cluster
    /// upgraded. Refuses without --yes, printing the plan.
    #[command(after_help = UPGRADE_EXAMPLES)]
    Upgrade(UpgradeArgs),
}

const UPGRADE_EXAMPLES: &str = "Examples:
  kubexm-install upgrade --bundle v1.21.tar.zst                       # path, checks and plan; nothing changes
  kubexm-install upgrade --bundle v1.21.tar.zst --backup-key site.key --yes
  kubexm-install upgrade --bundle v1.21.tar.zst --bundle v1.22.tar.zst --to v1.22.17 --backup-key site.key --yes
  kubexm-install upgrade --bundle v1.21.tar.zst --batch-size 3 --no-backup --yes
  kubexm-install upgrade --bundle v1.21.tar.zst --yes --resume        # after a failure: continue at the node that failed
  kubexm-install upgrade --bundle v1.21.tar.zst --no-backup --yes --no-verify   # no checks at the end";

#[derive(Debug, Args)]
pub(crate) struct UpgradeArgs {
    /// A bundle holding the target version or one on the path to it (repeatable: one per
    /// minor). Each is verified (signature when keys are trusted) and unpacked.
    #[arg(long = "bundle", value_name = "FILE.tar.zst", required = true)]
    pub(crate) bundles: Vec<PathBuf>,
    /// The version to reach (default: the newest the bundles hold).
    #[arg(long, value_name = "VERSION")]
    pub(crate) to: Option<String>,
    /// The cluster.yaml of the target version (default: the target bundle's own). It may
    /// differ from the installed one in `kubernetes.version` only (`apply` changes the rest).
    #[arg(short = 'f', long = "file", value_name = "CLUSTER_YAML")]
    pub(crate) file: Option<PathBuf>,
    /// The cluster, when the work directory records several.
    #[arg(long, value_name = "NAME")]
    pub(crate) cluster: Option<String>,
    /// The bundle the cluster runs now, when it is no longer unpacked in the work directory.
    #[arg(long, value_name = "FILE.tar.zst")]
    pub(crate) installed_bundle: Option<PathBuf>,
    /// How many workers are upgraded at once (masters: always one at a time).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub(crate) batch_size: u16,
    #[command(flatten)]
    pub(crate) drain: DrainArgs,
    /// The key (`kubexm-install backup keygen`) that encrypts the backup taken before anything
    /// changes (etcd.type kubexm: required unless --no-backup).
    #[arg(long, value_name = "FILE")]
    pub(crate) backup_key: Option<PathBuf>,
    /// Upgrade without taking a backup first.
    #[arg(long, conflicts_with = "backup_key")]
    pub(crate) no_backup: bool,
    /// Change the cluster (without it, the path, the checks and the plan are printed).
    #[arg(long)]
    pub(crate) yes: bool,
    /// Show the path, the checks and the full plan of every step, and change nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Continue a failed upgrade: tasks it completed are skipped (the backup is not taken
    /// again).
    #[arg(long)]
    pub(crate) resume: bool,
    #[command(flatten)]
    pub(crate) verify: VerifyAfterArgs,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

const KERNEL_UPGRADE_EXAMPLES: &str = "Examples:
  kubexm-install kernel-upgrade                         # the facts and the plan; nothing changes
  kubexm-install kernel-upgrade --yes                   # every node, one at a time, masters first
  kubexm-install kernel-upgrade --nodes node4,node5 --yes
  kubexm-install kernel-upgrade --package linux-image-6.1.0-18-amd64 --yes
  kubexm-install kernel-upgrade --yes --resume          # after a failure: continue with the node that failed";

#[derive(Debug, Args)]
pub(crate) struct KernelUpgradeArgs {
    /// The nodes to upgrade, comma-separated (default: every node of the cluster).
    #[arg(long, value_name = "A,B", value_delimiter = ',')]
    pub(crate) nodes: Vec<String>,
    /// The kernel package to install or upgrade (default: the node's OS's: Debian
    /// linux-image-<arch>, Ubuntu linux-generic, the RHEL family kernel).
    #[arg(long, value_name = "NAME")]
    pub(crate) package: Option<String>,
    #[command(flatten)]
    pub(crate) drain: DrainArgs,
    /// Change the cluster (without it, the plan is printed and nothing changes).
    #[arg(long)]
    pub(crate) yes: bool,
    #[command(flatten)]
    pub(crate) common: Day2Args,
}

const ROTATE_EXAMPLES: &str = "Examples:
  kubexm-install rotate-ca --ca etcd --dry-run                  # the phases still to run and their steps
  kubexm-install rotate-ca --ca etcd --phase trust-both --yes   # new CA, trusted beside the old one; stop there
  kubexm-install rotate-ca --ca etcd --yes                      # continue: reissue, drop-old
  kubexm-install rotate-ca --ca etcd --yes --resume             # after a failure: skip what finished
  kubexm-install rotate-ca --ca front-proxy --yes               # the aggregation layer's CA, every phase
  kubexm-install rotate-ca --ca kubernetes --phase trust-both --yes  # the cluster CA: trust both, restart pods, stop";

/// The CA `rotate-ca` rotates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum RotateCaWhich {
    /// KubeXM's etcd CA (`etcd.type: kubexm`).
    Etcd,
    /// The Kubernetes cluster CA (kubernetes.type kubexm; every node's services restart, and the
    /// kube-system workloads after trust-both).
    Kubernetes,
    /// The front-proxy CA (aggregation layer: the API servers' requestheader trust and client certificate).
    FrontProxy,
    /// Refused: one CA at a time.
    All,
}

/// A phase of `rotate-ca` (see `kubexm_install::rotation::Phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum RotatePhase {
    /// A new CA on the control host beside the old one.
    New,
    /// Old and new CA trusted everywhere (rolling restarts).
    TrustBoth,
    /// Every leaf re-issued from the new CA (rolling restarts).
    Reissue,
    /// The old CA trusted no more (rolling restarts), its key deleted.
    DropOld,
}

#[derive(Debug, Args)]
pub(crate) struct RotateCaArgs {
    /// The CA to rotate.
    #[arg(long, value_enum, value_name = "CA")]
    pub(crate) ca: RotateCaWhich,
    /// Run the phases up to and including this one, then stop (default: every phase).
    #[arg(long, value_enum, value_name = "PHASE")]
    pub(crate) phase: Option<RotatePhase>,
    /// Change the cluster (required unless --dry-run).
    #[arg(long)]
    pub(crate) yes: bool,
    #[command(flatten)]
    pub(crate) common: Day2Args,
}

const BACKUP_EXAMPLES: &str = "Examples:
  kubexm-install backup keygen --key-file /root/kubexm-backup.key    # once; keep a copy off the site
  kubexm-install backup create --key-file /root/kubexm-backup.key   # WORK/backups/<cluster>-<time>.kxbak
  kubexm-install backup create --key-file k.key -o /mnt/backups/prod.kxbak
  kubexm-install backup verify --backup prod.kxbak --key-file k.key
  kubexm-install backup schedule --key-file /root/kubexm-backup.key --on-calendar daily --keep 7
  kubexm-install backup schedule --remove";

const RESTORE_EXAMPLES: &str = "Examples:
  kubexm-install restore --backup prod.kxbak --key-file k.key --dry-run   # the plan
  kubexm-install restore --backup prod.kxbak --key-file k.key --yes
  kubexm-install restore --backup prod.kxbak --key-file k.key --yes --resume   # after a failure
  kubexm-install restore --fresh --bundle prod.tar.zst -f cluster.yaml --backup prod.kxbak --key-file k.key --yes";

#[derive(Debug, Subcommand)]
pub(crate) enum BackupCommand {
    /// Write a new random backup key (256 bits, hex) to a file only its owner can read; an
    /// existing file is never overwritten.
    #[command(after_help = BACKUP_EXAMPLES)]
    Keygen {
        /// Where the key goes.
        #[arg(long, value_name = "FILE")]
        key_file: PathBuf,
    },
    /// Take a backup of the installed cluster (nodes reached over SSH).
    #[command(after_help = BACKUP_EXAMPLES)]
    Create(BackupCreateArgs),
    /// Back up on a schedule: a systemd timer on this host runs `backup create --keep N`.
    #[command(after_help = BACKUP_EXAMPLES)]
    Schedule(BackupScheduleArgs),
    /// Decrypt a backup and check every entry against its manifest; print what it holds.
    #[command(after_help = BACKUP_EXAMPLES)]
    Verify {
        /// The backup file.
        #[arg(long, value_name = "FILE")]
        backup: PathBuf,
        /// The key it was made with.
        #[arg(long, value_name = "FILE")]
        key_file: PathBuf,
    },
}

#[derive(Debug, Args)]
pub(crate) struct BackupCreateArgs {
    /// The cluster, when the work directory records several.
    #[arg(long, value_name = "NAME")]
    pub(crate) cluster: Option<String>,
    /// The backup key (`backup keygen`).
    #[arg(long, value_name = "FILE")]
    pub(crate) key_file: PathBuf,
    /// The backup file (default: WORK/backups/<cluster>-<time>.kxbak).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
    /// Take the backup even when some nodes cannot be reached (their files are left out).
    #[arg(long)]
    pub(crate) allow_unreachable: bool,
    /// After writing it, keep only the newest N backups of the cluster in the default
    /// directory (WORK/backups; other files are never touched).
    #[arg(long, value_name = "N")]
    pub(crate) keep: Option<usize>,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

#[derive(Debug, Args)]
pub(crate) struct BackupScheduleArgs {
    /// The cluster, when the work directory records several.
    #[arg(long, value_name = "NAME")]
    pub(crate) cluster: Option<String>,
    /// The backup key (`backup keygen`).
    #[arg(long, value_name = "FILE", required_unless_present = "remove")]
    pub(crate) key_file: Option<PathBuf>,
    /// Backups kept (older ones removed after each new one).
    #[arg(long, default_value_t = 7, value_name = "N")]
    pub(crate) keep: usize,
    #[command(flatten)]
    pub(crate) timer: TimerArgs,
}

/// A systemd timer on this host (`backup schedule`, `certs schedule`).
#[derive(Debug, Args)]
pub(crate) struct TimerArgs {
    /// When (systemd `OnCalendar=`: daily, weekly, hourly, "*-*-* 02:30:00", ...).
    #[arg(long, default_value = "daily", value_name = "CALENDAR")]
    pub(crate) on_calendar: String,
    /// known_hosts file the scheduled run checks the nodes against (default: WORK/known_hosts).
    #[arg(long, value_name = "FILE")]
    pub(crate) known_hosts: Option<PathBuf>,
    /// Where the units go.
    #[arg(long, default_value = "/etc/systemd/system", value_name = "DIR")]
    pub(crate) systemd_dir: PathBuf,
    /// Write the units only (enable the timer yourself: `systemctl enable --now
    /// <unit>.timer`).
    #[arg(long)]
    pub(crate) write_only: bool,
    /// Stop and remove the schedule instead.
    #[arg(long)]
    pub(crate) remove: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RestoreArgs {
    /// The backup file.
    #[arg(long, value_name = "FILE")]
    pub(crate) backup: PathBuf,
    /// The key it was made with.
    #[arg(long, value_name = "FILE")]
    pub(crate) key_file: PathBuf,
    /// Replace the cluster's etcd data (required unless --dry-run).
    #[arg(long)]
    pub(crate) yes: bool,
    /// Restore onto nodes that hold nothing of the cluster (new machines, or these after
    /// `delete`; the control host may be new too): an install from --bundle (required) and the
    /// cluster.yaml (-f, else the bundle's) that keeps the backup's CAs and service-account key
    /// and starts etcd from its snapshot.
    #[arg(long)]
    pub(crate) fresh: bool,
    /// With --fresh: do not verify the cluster at the end (see `install --no-verify`). A
    /// restore onto the same members (without --fresh) does not verify.
    #[arg(long, requires = "fresh")]
    pub(crate) no_verify: bool,
    #[command(flatten)]
    pub(crate) common: Day2Args,
}

const CERTS_EXAMPLES: &str = "Examples:
  kubexm-install certs check                          # a table, soonest expiry first
  kubexm-install certs check -o json                  # the same as JSON (for monitoring)
  kubexm-install certs check --fail-under-days 60     # exit non-zero under 60 days left
  kubexm-install certs renew --dry-run                # what is due (under 30 days) and the plan
  kubexm-install certs renew --yes                    # renew it, one node at a time
  kubexm-install certs renew --under-days 90 --yes    # everything with fewer than 90 days left
  kubexm-install certs renew --all --yes              # every leaf, whatever its expiry
  kubexm-install certs renew --yes --resume           # after a failure: skip what finished
  kubexm-install certs schedule --on-calendar weekly --under-days 30   # a timer on this host
  kubexm-install certs schedule --remove";

#[derive(Debug, Subcommand)]
pub(crate) enum CertsCommand {
    /// List every certificate (node, path, subject, issuer, expiry, days left; private keys are
    /// never read), warn under --warn-days, exit non-zero under --fail-under-days or when a
    /// node cannot be read.
    #[command(after_help = CERTS_EXAMPLES)]
    Check(CertsCheckArgs),
    /// Renew the leaf certificates with fewer than --under-days days left (never a CA): KubeXM's
    /// etcd members one at a time (endpoint health after each), then the Kubernetes
    /// certificates: kubeadm path `kubeadm certs renew` (each certificate) plus the kubelet's client
    /// certificate on each master due, kubexm path re-issued from the kept CAs; components
    /// restarted one node at a time, each healthy before the next; admin.conf fetched again.
    /// kubeadm path, also when nothing is due: the pending kubelet serving CSRs (a kubelet's
    /// renewed serving certificate) approved after the install's checks. Works with expired
    /// certificates (nothing asks the API server before the health checks). Refuses without
    /// --yes.
    #[command(after_help = CERTS_EXAMPLES)]
    Renew(CertsRenewArgs),
    /// Renew on a schedule: a systemd timer on this host (the control host) runs `certs renew
    /// --under-days N --yes`, so the renewal goes one node at a time with health checks as when
    /// run by hand.
    #[command(after_help = CERTS_EXAMPLES)]
    Schedule(CertsScheduleArgs),
}

#[derive(Debug, Args)]
pub(crate) struct CertsScheduleArgs {
    /// The cluster, when the work directory records several.
    #[arg(long, value_name = "NAME")]
    pub(crate) cluster: Option<String>,
    /// Renew the certificates with fewer days left.
    #[arg(long, default_value_t = kubexm_install::certs::renew::UNDER_DAYS, value_name = "DAYS")]
    pub(crate) under_days: i64,
    #[command(flatten)]
    pub(crate) timer: TimerArgs,
}

#[derive(Debug, Args)]
pub(crate) struct CertsRenewArgs {
    /// Renew the certificates with fewer days left (expired ones included). The default is
    /// the margin under which an install re-run re-issues KubeXM's own leaves.
    #[arg(long, default_value_t = kubexm_install::certs::renew::UNDER_DAYS, value_name = "DAYS", conflicts_with = "all")]
    pub(crate) under_days: i64,
    /// Renew every leaf certificate, whatever its expiry.
    #[arg(long)]
    pub(crate) all: bool,
    /// Renew and restart (required unless --dry-run).
    #[arg(long)]
    pub(crate) yes: bool,
    #[command(flatten)]
    pub(crate) common: Day2Args,
}

#[derive(Debug, Args)]
pub(crate) struct CertsCheckArgs {
    /// The cluster, when the work directory records several.
    #[arg(long, value_name = "NAME")]
    pub(crate) cluster: Option<String>,
    /// Table or JSON.
    #[arg(short = 'o', long, value_enum, default_value_t = PlanFormat::Text)]
    pub(crate) output: PlanFormat,
    /// Certificates with fewer days left are marked WARNING.
    #[arg(long, default_value_t = kubexm_install::certs::WARN_DAYS, value_name = "DAYS")]
    pub(crate) warn_days: i64,
    /// Exit non-zero when a certificate has fewer days left (expired ones count).
    #[arg(long, default_value_t = 30, value_name = "DAYS")]
    pub(crate) fail_under_days: i64,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

const STATUS_EXAMPLES: &str = "Examples:
  kubexm-install status
  kubexm-install status --cluster prod -o json | jq '.nodes[] | select(.reachable | not)'

The JSON form is documented in installer/docs/guide.md (\"kubexm-install status -o json\").";

const VERIFY_EXAMPLES: &str = "Examples:
  kubexm-install verify-cluster
  kubexm-install verify-cluster --cluster prod -o json --timeout 600 | jq '.checks[] | select(.status == \"fail\")'

The JSON form is documented in installer/docs/guide.md (\"kubexm-install verify-cluster\").";

/// `verify-cluster` options.
#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// The cluster, when the work directory records several.
    #[arg(long, value_name = "NAME")]
    pub(crate) cluster: Option<String>,
    /// The bundle, when the one the cluster was installed with is no longer unpacked in the
    /// work directory.
    #[arg(long, value_name = "FILE.tar.zst")]
    pub(crate) bundle: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = PlanFormat::Text)]
    pub(crate) output: PlanFormat,
    /// The checks' time limit in seconds (deleting the probes afterwards has its own).
    #[arg(long, value_name = "SECONDS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(10..=3600))]
    pub(crate) timeout: u64,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

const COMPLETIONS_EXAMPLES: &str = "Examples:
  kubexm-install completions bash > /etc/bash_completion.d/kubexm-install
  kubexm-install completions zsh > \"${fpath[1]}/_kubexm-install\"
  kubexm-install completions fish > ~/.config/fish/completions/kubexm-install.fish";

const MAN_EXAMPLES: &str = "Examples:
  kubexm-install man -o /usr/local/share/man/man1 && man kubexm-install-status
  kubexm-install man | man -l -";

/// `status` options.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The cluster, when the work directory records several.
    #[arg(long, value_name = "NAME")]
    pub(crate) cluster: Option<String>,
    /// The bundle, when the one the cluster was installed with is no longer unpacked in the
    /// work directory.
    #[arg(long, value_name = "FILE.tar.zst")]
    pub(crate) bundle: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = PlanFormat::Text)]
    pub(crate) output: PlanFormat,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

const ADD_NODE_EXAMPLES: &str = "Examples:
  # after adding node4 to spec.hosts and roleGroups.worker in cluster.yaml:
  kubexm-install add-node -f cluster.yaml --dry-run     # the change, the facts and the plan
  kubexm-install add-node -f cluster.yaml               # every new node
  kubexm-install add-node -f cluster.yaml --node node4  # only node4
  kubexm-install add-node -f cluster.yaml --resume      # after a failure: skip what finished

The installed cluster (the cluster.yaml and bundle last applied, its nodes and history) is kept
in WORK_DIR/clusters/<cluster>/; the bundle is the one it was installed with (kept unpacked in
WORK_DIR/bundles/), or --bundle FILE with the same content.";

const APPLY_EXAMPLES: &str = "Examples:
  # after editing spec.kubernetes.featureGates or proxyMode in cluster.yaml:
  kubexm-install apply -f cluster.yaml --dry-run   # the change, grouped, and the full plan
  kubexm-install apply -f cluster.yaml
  kubexm-install apply -f cluster.yaml --resume    # after a failure: skip what finished
  kubexm-install apply -f cluster.yaml --no-verify # no verify-cluster checks at the end
  # after changing network.plugin from flannel to calico (a bundle built from the edited file):
  kubexm-install apply -f cluster.yaml --allow-network-plugin-change --bundle calico.tar.zst

A pod network plugin change needs --allow-network-plugin-change: every pod loses its network
while the old plugin is removed (first) and the new one starts; the pods are then recreated node
by node. Refused (exit 2, nothing changed), each with what to do instead: the pod and service
CIDRs, the cluster domain and name, kubernetes.type, the version (an upgrade), etcd, the runtime,
the registry type, the control-plane endpoint (load balancer mode, VIP, port,
domain), turning off an add-on, storage, Kata, NFD, the security enhancement or the backup
schedule (apply does not take them out of a running cluster), and added, removed or re-roled
nodes (add-node, delete-node). On success the edited cluster.yaml is recorded as the installed one,
then the cluster is verified (the checks of verify-cluster; exit 7 when one fails, the change
applied all the same).";

const DELETE_NODE_EXAMPLES: &str = "Examples:
  kubexm-install delete-node --node node4 --dry-run
  kubexm-install delete-node --node node4
  kubexm-install delete-node --node node4 --force-drain   # pods deleted without eviction
  kubexm-install delete-node --node node5 --unreachable   # the machine is gone: cluster side only
  kubexm-install delete-node --node node4 --resume        # after a failure

cluster.yaml may keep the node (it is recorded as deleted) or drop it (-f cluster.yaml).";

const ETCD_EXAMPLES: &str = "Examples:
  kubexm-install etcd add-member --node node4 --dry-run
  kubexm-install etcd add-member --node node4 --allow-even-etcd   # 3 -> 4 members
  kubexm-install etcd remove-member --node node4";

/// What every day-2 command takes: which cluster, which file and bundle, how to run.
#[derive(Debug, Args)]
pub(crate) struct Day2Args {
    /// The edited cluster.yaml (default: the one the cluster was last applied with, kept in
    /// the work directory).
    #[arg(short = 'f', long = "file", value_name = "CLUSTER_YAML")]
    pub(crate) file: Option<PathBuf>,
    /// The cluster, when -f is not given and the work directory records several.
    #[arg(long, value_name = "NAME")]
    pub(crate) cluster: Option<String>,
    /// The bundle, when the one the cluster was installed with is no longer unpacked in the
    /// work directory (it must have the same content; `apply --allow-network-plugin-change`
    /// takes a bundle built from the edited cluster.yaml instead).
    #[arg(long, value_name = "FILE.tar.zst")]
    pub(crate) bundle: Option<PathBuf>,
    /// Show the change, the facts and the full plan, and change nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Skip tasks an earlier run of the same command completed with the same inputs.
    #[arg(long)]
    pub(crate) resume: bool,
    /// Accept leaving an even number of etcd members (refused otherwise).
    #[arg(long)]
    pub(crate) allow_even_etcd: bool,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

#[derive(Debug, Args)]
pub(crate) struct AddNodeArgs {
    /// A node to add (repeatable; default: every node cluster.yaml has and the cluster does
    /// not). A node already in the cluster is applied again (nothing should change).
    #[arg(long = "node", value_name = "NAME")]
    pub(crate) nodes: Vec<String>,
    #[command(flatten)]
    pub(crate) common: Day2Args,
}

#[derive(Debug, Args)]
pub(crate) struct ApplyArgs {
    #[command(flatten)]
    pub(crate) common: Day2Args,
    /// Confirm a change of the pod network plugin (`network.plugin`, multus's delegate): every
    /// pod loses its network while the old plugin is removed and the new one starts, then the
    /// pods are recreated node by node. Its files come from the installed bundle, or from a
    /// --bundle built from the edited cluster.yaml.
    #[arg(long)]
    pub(crate) allow_network_plugin_change: bool,
    #[command(flatten)]
    pub(crate) verify: VerifyAfterArgs,
}

#[derive(Debug, Args)]
pub(crate) struct DeleteNodeArgs {
    /// The node to remove.
    #[arg(long, value_name = "NAME")]
    pub(crate) node: String,
    #[command(flatten)]
    pub(crate) drain: DrainArgs,
    /// The node cannot be reached: remove it from the cluster only (drain skipped, etcd
    /// member, load balancers, Node object); nothing is done on the machine.
    #[arg(long)]
    pub(crate) unreachable: bool,
    #[command(flatten)]
    pub(crate) common: Day2Args,
}

#[derive(Debug, Subcommand)]
pub(crate) enum EtcdCommand {
    /// Make a node of the cluster an etcd member (`member add`, then etcd on it with
    /// `initial-cluster-state: existing`).
    #[command(after_help = ETCD_EXAMPLES)]
    AddMember(EtcdMemberArgs),
    /// Remove a node's etcd member (`member remove`), then stop etcd on it.
    #[command(after_help = ETCD_EXAMPLES)]
    RemoveMember(EtcdMemberArgs),
}

#[derive(Debug, Args)]
pub(crate) struct EtcdMemberArgs {
    /// The node.
    #[arg(long, value_name = "NAME")]
    pub(crate) node: String,
    #[command(flatten)]
    pub(crate) common: Day2Args,
}

#[derive(Debug, Args)]
pub(crate) struct DeleteArgs {
    /// The bundle the cluster was installed from (its cluster.yaml unless -f is given).
    #[arg(long, value_name = "FILE.tar.zst")]
    pub(crate) bundle: Option<PathBuf>,
    /// The cluster description (default: the one inside --bundle).
    #[arg(short = 'f', long = "file", value_name = "CLUSTER_YAML")]
    pub(crate) file: Option<PathBuf>,
    /// A catalog file merged over the built-in catalog (default: the bundle's).
    #[arg(long, env = "KUBEXM_CATALOG", value_name = "FILE")]
    pub(crate) catalog: Option<PathBuf>,
    /// Really delete (without it, only say what would be deleted).
    #[arg(long)]
    pub(crate) yes: bool,
    /// Print the full ordered delete plan and exit without connecting anywhere.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Skip tasks an earlier delete completed with the same inputs.
    #[arg(long)]
    pub(crate) resume: bool,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// The cluster description (default: the one inside --bundle).
    #[arg(
        short = 'f',
        long = "file",
        value_name = "CLUSTER_YAML",
        required_unless_present = "bundle"
    )]
    pub(crate) file: Option<PathBuf>,
    /// The bundle whose cluster.yaml (and catalog override) to plan.
    #[arg(long, value_name = "FILE.tar.zst")]
    pub(crate) bundle: Option<PathBuf>,
    /// A catalog file merged over the built-in catalog.
    #[arg(long, env = "KUBEXM_CATALOG", value_name = "FILE")]
    pub(crate) catalog: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = PlanFormat::Text)]
    pub(crate) output: PlanFormat,
    /// Also print the full content of every file written (secrets redacted).
    #[arg(long)]
    pub(crate) files: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum PlanFormat {
    Text,
    Json,
}

/// `inventory` options.
#[derive(Debug, Args)]
pub(crate) struct InventoryArgs {
    /// Where to write the inventory.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        default_value = "site-inventory.json"
    )]
    pub(crate) output: PathBuf,
    #[command(flatten)]
    pub(crate) registry: RegistryArgs,
    /// Only the blobs of the unpacked bundles' images, not every repository of the registry's
    /// catalog (for registries that refuse `/v2/_catalog`).
    #[arg(long)]
    pub(crate) no_catalog: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SeedArgs {
    /// The bundle (unpacked into the work directory first if needed).
    #[arg(long, value_name = "FILE.tar.zst")]
    pub(crate) bundle: PathBuf,
    #[command(flatten)]
    pub(crate) target: RegistryArgs,
    /// Create missing projects through Harbor's API (v2.0) before pushing.
    #[arg(long)]
    pub(crate) harbor: bool,
    /// Make created Harbor projects private.
    #[arg(long, requires = "harbor")]
    pub(crate) private_projects: bool,
    /// Parallel uploads.
    #[arg(long, default_value_t = 8)]
    pub(crate) jobs: usize,
    /// Tries per request before giving up.
    #[arg(long, default_value_t = 4)]
    pub(crate) retries: u32,
    /// First retry delay in milliseconds (doubles each retry).
    #[arg(long, default_value_t = 500, value_name = "MS")]
    pub(crate) retry_delay_ms: u64,
}

/// A registry and how to reach it: the one to seed, or the site registry an inventory lists
/// and a delta bundle's blobs come from.
#[derive(Debug, Args)]
pub(crate) struct RegistryArgs {
    /// The registry, HOST[:PORT].
    #[arg(long, value_name = "HOST[:PORT]")]
    pub(crate) registry: Option<String>,
    /// Project (Harbor) or namespace every image goes under.
    #[arg(long, value_name = "P")]
    pub(crate) project: Option<String>,
    /// Keep only the image's last path component (`registry.k8s.io/coredns/coredns` → `P/coredns`).
    #[arg(long)]
    pub(crate) flatten: bool,
    /// User name for the registry.
    #[arg(long, value_name = "U", requires = "password_stdin")]
    pub(crate) username: Option<String>,
    /// Read the registry password from standard input.
    #[arg(long, requires = "username")]
    pub(crate) password_stdin: bool,
    /// CA certificate (PEM) the registry's TLS certificate is signed by.
    #[arg(long, value_name = "FILE", conflicts_with = "plain_http")]
    pub(crate) ca_file: Option<PathBuf>,
    /// Speak plain HTTP to the registry.
    #[arg(long)]
    pub(crate) plain_http: bool,
}

const INSTALL_EXAMPLES: &str = "Examples:
  kubexm-install install --bundle demo.tar.zst --accept-new-host-keys
  kubexm-install install --bundle demo.tar.zst --dry-run     # the plan, nothing connected
  kubexm-install install --bundle demo.tar.zst --resume      # after a failure: skip what finished
  kubexm-install install --bundle demo.tar.zst --no-verify   # no verify-cluster checks at the end
  kubexm-install install --bundle demo.tar.zst -f cluster.yaml --trusted-key site.pub";

const CHECK_EXAMPLES: &str = "Examples:
  kubexm-install check -f cluster.yaml
  kubexm-install check -f cluster.yaml --catalog my-catalog.yaml";

const UNPACK_EXAMPLES: &str = "Examples:
  kubexm-install unpack --bundle demo.tar.zst
  kubexm-install unpack --bundle demo.tar.zst.parts.json        # a split bundle
  kubexm-install unpack --bundle delta.tar.zst --registry 10.0.0.5:5000 --plain-http";

const INVENTORY_EXAMPLES: &str = "Examples:
  kubexm-install inventory -o site-inventory.json
  kubexm-install inventory -o site-inventory.json --registry 10.0.0.5:5000 --plain-http
  # on the connected machine: kubexm-build bundle -f cluster.yaml --have site-inventory.json";

const SEED_EXAMPLES: &str = "Examples:
  kubexm-install seed --bundle demo.tar.zst --registry 10.0.0.5:5000 --plain-http
  echo \"$PASS\" | kubexm-install seed --bundle demo.tar.zst --registry harbor.local \\
      --ca-file ca.pem --username admin --password-stdin --harbor --project kubexm";

const PLAN_EXAMPLES: &str = "Examples:
  kubexm-install plan -f cluster.yaml
  kubexm-install plan --bundle demo.tar.zst --output json";

const DELETE_EXAMPLES: &str = "Examples:
  kubexm-install delete --bundle demo.tar.zst              # says what would be deleted
  kubexm-install delete --bundle demo.tar.zst --dry-run    # the full delete plan
  kubexm-install delete --bundle demo.tar.zst --yes";

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// The path of every command (`kubexm-install`, `kubexm-install install`, …) that takes
    /// `--long`.
    fn commands_with(long: &str) -> Vec<String> {
        fn walk(c: &clap::Command, path: &str, long: &str, out: &mut Vec<String>) {
            let path = if path.is_empty() {
                c.get_name().to_string()
            } else {
                format!("{path} {}", c.get_name())
            };
            if c.get_arguments().any(|a| a.get_long() == Some(long)) {
                out.push(path.clone());
            }
            for sub in c.get_subcommands() {
                walk(sub, &path, long, out);
            }
        }
        let mut out = Vec::new();
        walk(&Cli::command(), "", long, &mut out);
        out
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kubexm-install").chain(args.iter().copied()))
    }

    #[test]
    fn no_verify_is_a_flag_of_the_commands_that_verify_and_of_no_other() {
        Cli::command().debug_assert();
        assert_eq!(
            commands_with("no-verify"),
            [
                "kubexm-install",
                "kubexm-install install",
                "kubexm-install apply",
                "kubexm-install restore",
                "kubexm-install upgrade",
            ]
        );
        // The earlier opt-in flag is gone: verifying is the default.
        assert_eq!(commands_with("verify"), Vec::<String>::new());
    }

    #[test]
    fn no_verify_parses_where_it_belongs() {
        let flag = |args: &[&str]| -> bool {
            let cli = parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            match cli.command {
                None => cli.install.verify.no_verify,
                Some(Command::Install(i)) => i.install.verify.no_verify,
                Some(Command::Upgrade(u)) => u.verify.no_verify,
                Some(Command::Apply(a)) => a.verify.no_verify,
                Some(Command::Restore(r)) => r.no_verify,
                Some(other) => panic!("{other:?}"),
            }
        };
        // Verifying is the default everywhere.
        assert!(!flag(&["--bundle", "b.tar.zst"]));
        assert!(!flag(&["install", "--bundle", "b.tar.zst"]));
        assert!(!flag(&["upgrade", "--bundle", "b.tar.zst", "--yes"]));
        assert!(!flag(&["apply"]));
        assert!(!flag(&[
            "restore",
            "--fresh",
            "--backup",
            "c.kxbak",
            "--key-file",
            "k"
        ]));
        assert!(flag(&["--bundle", "b.tar.zst", "--no-verify"]));
        assert!(flag(&["install", "--bundle", "b.tar.zst", "--no-verify"]));
        assert!(flag(&[
            "install",
            "--bundle",
            "b.tar.zst",
            "--dry-run",
            "--no-verify"
        ]));
        assert!(flag(&[
            "upgrade",
            "--bundle",
            "b.tar.zst",
            "--yes",
            "--no-verify"
        ]));
        assert!(flag(&["apply", "-f", "cluster.yaml", "--no-verify"]));
        assert!(flag(&[
            "restore",
            "--fresh",
            "--backup",
            "c.kxbak",
            "--key-file",
            "k",
            "--no-verify"
        ]));
        // A restore onto the same members does not verify: the flag needs --fresh.
        let e = parse(&[
            "restore",
            "--backup",
            "c.kxbak",
            "--key-file",
            "k",
            "--no-verify",
        ])
        .expect_err("--no-verify without --fresh");
        assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        for other in [
            &["add-node", "--no-verify"][..],
            &["delete-node", "--node", "node4", "--no-verify"],
            &["etcd", "add-member", "--node", "node4", "--no-verify"],
            &["kernel-upgrade", "--no-verify"],
            &["rotate-ca", "--ca", "etcd", "--no-verify"],
            &["certs", "renew", "--no-verify"],
            &["delete", "--no-verify"],
            &["status", "--no-verify"],
            &["verify-cluster", "--no-verify"],
            &["plan", "-f", "c.yaml", "--no-verify"],
        ] {
            let e = parse(other).expect_err(&format!("{other:?} takes no --no-verify"));
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::UnknownArgument,
                "{other:?}"
            );
        }
    }
}
