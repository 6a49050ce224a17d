//! What the day-2 verbs (`add-node`, `delete-node`, `etcd add-member|remove-member`) share: the
//! installed cluster loaded from its record, the desired cluster (the edited cluster.yaml), one
//! SSH connection per node, the facts gathered over them, the change/facts/plan shown first,
//! the run, and the record of the result.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use kubexm_install::context::{load_context, BundleRef, InstallContext};
use kubexm_install::facts::checks::Verdict;
use kubexm_install::facts::ClusterFacts;
use kubexm_install::pipeline::journal::Journal;
use kubexm_install::pipeline::plan::Plan;
use kubexm_install::pipeline::{Node, Pipeline};
use kubexm_install::record::{self, Applied, Operation, Outcome, Records};
use kubexm_install::run::{self, RunOptions};
use kubexm_install::runner::local::LocalRunner;
use kubexm_install::runner::Runner;
use kubexm_manifests::validate::{Problem, ValidCluster};

use crate::cli::{ConnectArgs, Day2Args};

/// The installed cluster and the desired one.
pub(crate) struct Session {
    pub(crate) work_dir: PathBuf,
    /// The cluster name.
    pub(crate) name: String,
    /// Its record.
    pub(crate) record: record::Loaded,
    /// The installed cluster (the record's nodes and roles).
    pub(crate) installed: Arc<InstallContext>,
    /// The desired cluster.yaml text (-f, else the recorded one).
    pub(crate) desired_text: String,
    /// Where it came from (messages).
    pub(crate) desired_origin: String,
    /// Where its relative paths resolve.
    pub(crate) desired_base: PathBuf,
    /// It, validated, with every host it names.
    pub(crate) desired_full: ValidCluster,
    bundle: Option<BundleRef>,
    /// The bundle `--bundle` gave in place of the installed one (apply's network plugin
    /// change), with the installed one's `bundle.json` when it is still unpacked.
    pub(crate) replaced_bundle: Option<ReplacedBundle>,
    resolution: Option<kubexm_manifests::resolve::Resolution>,
    /// The cluster's key directory, shared by every context of the run: planning (`--dry-run`)
    /// makes what is missing in memory only; a run keeps it.
    keys: kubexm_install::pki::KeyDir,
}

/// A bundle taken in place of the installed one.
pub(crate) struct ReplacedBundle {
    /// The new bundle's file.
    pub(crate) path: PathBuf,
    /// Its content digest.
    pub(crate) digest: String,
    /// The installed bundle's `bundle.json`, when it is still unpacked.
    pub(crate) previous: Option<kubexm_bundles::manifest::BundleManifest>,
}

fn cluster_name(file: &kubexm_manifests::model::ClusterFile) -> String {
    file.spec
        .kubernetes
        .cluster_name
        .clone()
        .unwrap_or_else(|| file.metadata.name.clone())
}

/// The cluster `common` names: `-f`'s (checked against `--cluster`), `--cluster`, or the only
/// one the work directory records; a name that can be a directory of the work directory.
pub(crate) fn recorded_name(
    common: &Day2Args,
    file_text: Option<&str>,
    work_dir: &Path,
) -> Result<String> {
    let records = Records::new(work_dir);
    let name = match (&common.file, file_text, &common.cluster) {
        (Some(f), Some(text), _) => {
            let parsed = kubexm_manifests::load::parse_cluster(text, &f.display().to_string())?;
            let n = cluster_name(&parsed);
            if let Some(c) = &common.cluster {
                if *c != n {
                    bail!("--cluster {c} but `{}` describes cluster {n}", f.display());
                }
            }
            n
        }
        (_, _, Some(c)) => c.clone(),
        _ => {
            let all = records.clusters()?;
            match all.as_slice() {
                [one] => one.clone(),
                [] => bail!(
                    "no cluster is recorded in {}: KubeXM records a cluster when `kubexm-install install` finishes (re-running it on an installed cluster changes nothing and records it)",
                    work_dir.join(record::CLUSTERS_DIR).display()
                ),
                many => bail!(
                    "the work directory records several clusters ({}): pass -f CLUSTER_YAML or --cluster NAME",
                    many.join(", ")
                ),
            }
        }
    };
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
        || name.starts_with('.')
    {
        bail!("cluster name {name:?} cannot name a directory of the work directory");
    }
    Ok(name)
}

impl Session {
    /// Loads the record of the cluster `common` names, its bundle and both clusters. Keys and
    /// certificates missing from the PKI directory are written only without `--dry-run`.
    pub(crate) fn open(common: &Day2Args, work_dir: &Path) -> Result<Self> {
        Self::open_accepting(common, work_dir, None)
    }

    /// [`Session::open`]; with `new_bundle`, a `--bundle` of other content than the installed
    /// one is taken in (its signature checked by the policy) in place of it, recorded in
    /// [`Session::replaced_bundle`].
    pub(crate) fn open_accepting(
        common: &Day2Args,
        work_dir: &Path,
        new_bundle: Option<&kubexm_install::intake::trust::TrustPolicy>,
    ) -> Result<Self> {
        let records = Records::new(work_dir);
        let file_text = match &common.file {
            Some(f) => Some(
                std::fs::read_to_string(f)
                    .with_context(|| format!("Failed to read `{}`", f.display()))?,
            ),
            None => None,
        };
        let name = recorded_name(common, file_text.as_deref(), work_dir)?;
        let Some(rec) = records.load(&name)? else {
            bail!(
                "no record of cluster {name} in {}: KubeXM records a cluster when `kubexm-install install` finishes; run it again with the cluster.yaml the cluster was installed with (it changes nothing and records it)",
                records.dir(&name).display()
            );
        };
        if !rec.installed.present {
            bail!(
                "cluster {name} was deleted ({}): install it first",
                rec.installed.applied_at
            );
        }
        let mut replaced_bundle = None;
        let unpacked = match (&common.bundle, &rec.installed.bundle_digest) {
            (Some(b), want) => {
                let u = match new_bundle {
                    Some(trust) => super::take_in(b, work_dir, trust, None)?.unpacked,
                    None => kubexm_install::unpack::unpack(b, work_dir)
                        .with_context(|| format!("Failed to unpack `{}`", b.display()))?,
                };
                if let Some(want) = want {
                    if u.digest != *want && new_bundle.is_some() {
                        replaced_bundle = Some(ReplacedBundle {
                            path: b.clone(),
                            digest: u.digest.clone(),
                            previous: kubexm_install::unpack::unpacked(work_dir, want)?
                                .map(|p| p.manifest),
                        });
                    } else if u.digest != *want {
                        bail!(
                            "`{}` (content {}) is not the bundle cluster {name} was installed with ({want}): day-2 commands use the installed bundle",
                            b.display(),
                            u.digest
                        );
                    }
                }
                Some(u)
            }
            (None, Some(digest)) => Some(
                kubexm_install::unpack::unpacked(work_dir, digest)?.with_context(|| {
                    format!(
                        "the bundle cluster {name} was installed with ({digest}) is no longer unpacked in {}: pass it with --bundle FILE",
                        work_dir.join("bundles").display()
                    )
                })?,
            ),
            (None, None) => None,
        };
        let catalog = unpacked
            .as_ref()
            .map(|u| u.dir.join(kubexm_bundles::manifest::CATALOG_PATH))
            .filter(|p| p.exists());
        let bundle = unpacked.map(|u| BundleRef {
            dir: u.dir,
            manifest: u.manifest,
        });
        let recorded = load_context(
            &rec.cluster_yaml_path,
            catalog.as_deref(),
            bundle.clone(),
            work_dir,
        )
        .with_context(|| {
            format!(
                "Failed to load the recorded cluster.yaml `{}`",
                rec.cluster_yaml_path.display()
            )
        })?;
        let installed_cluster = record::restrict(recorded.cluster.clone(), &rec.installed.nodes);
        let (desired_text, desired_origin, desired_base, desired_full) =
            match (&common.file, file_text) {
                (Some(f), Some(text)) => {
                    let ctx = load_context(f, catalog.as_deref(), bundle.clone(), work_dir)
                        .with_context(|| format!("Failed to load `{}`", f.display()))?;
                    let base = std::fs::canonicalize(f)
                        .ok()
                        .and_then(|p| p.parent().map(Path::to_path_buf))
                        .unwrap_or_default();
                    (text, format!("`{}`", f.display()), base, ctx.cluster)
                }
                _ => (
                    rec.cluster_yaml.clone(),
                    "the recorded cluster.yaml".to_string(),
                    rec.installed.base_dir.clone(),
                    recorded.cluster.clone(),
                ),
            };
        let resolution = recorded.resolution.clone();
        let keys = if common.dry_run {
            recorded.key_dir()
        } else {
            recorded
                .key_dir()
                .with_keys(kubexm_install::pki::Keys::Keep)
        };
        let mut s = Self {
            work_dir: work_dir.to_path_buf(),
            name,
            record: rec,
            installed: Arc::new(recorded),
            desired_text,
            desired_origin,
            desired_base,
            desired_full,
            bundle,
            replaced_bundle,
            resolution,
            keys,
        };
        s.installed = s.context(installed_cluster);
        Ok(s)
    }

    /// The session's bundle's `bundle.json`, if it has a bundle.
    pub(crate) fn bundle_manifest(&self) -> Option<&kubexm_bundles::manifest::BundleManifest> {
        self.bundle.as_ref().map(|b| &b.manifest)
    }

    /// A context for `cluster` with the session's bundle, PKI directory and resolution.
    pub(crate) fn context(&self, cluster: ValidCluster) -> Arc<InstallContext> {
        Arc::new(InstallContext {
            nodes: kubexm_install::inventory::nodes(&cluster),
            pki_dir: self.work_dir.join("pki").join(cluster.cluster_name()),
            keys: self.keys.clone(),
            cluster,
            bundle: self.bundle.clone(),
            resolution: self.resolution.clone(),
            // Day-2 runs with a bundle: its repositories (bundle.json) are what nodes get.
            os_releases: std::collections::BTreeMap::new(),
        })
    }

    /// The desired cluster with exactly `nodes` (and their roles); each must be a host of the
    /// desired cluster.yaml.
    pub(crate) fn desired(
        &self,
        nodes: &BTreeMap<String, Vec<String>>,
    ) -> Result<Arc<InstallContext>> {
        let ctx = self.context(record::restrict(self.desired_full.clone(), nodes));
        if ctx.nodes.len() != nodes.len() {
            let missing: Vec<&str> = nodes
                .keys()
                .filter(|n| ctx.node(n).is_none())
                .map(String::as_str)
                .collect();
            bail!(
                "{} lacks hosts that are in the cluster ({}): pass the cluster.yaml the cluster was applied with (kept in {})",
                self.desired_origin,
                missing.join(", "),
                self.record.cluster_yaml_path.display()
            );
        }
        Ok(ctx)
    }

    /// Stops when the desired cluster.yaml changes what `verb` does not (`refused`, one line
    /// each).
    pub(crate) fn refuse(&self, verb: &str, refused: &[String]) -> Result<()> {
        if refused.is_empty() {
            return Ok(());
        }
        bail!(
            "{} differs from the installed cluster in ways `{verb}` does not change:\n  - {}",
            self.desired_origin,
            refused.join("\n  - ")
        )
    }

    /// How to connect and run.
    pub(crate) fn run_options(&self, connect: &ConnectArgs, resume: bool) -> RunOptions {
        RunOptions {
            work_dir: self.work_dir.clone(),
            base_dir: self.desired_base.clone(),
            known_hosts: connect
                .known_hosts
                .clone()
                .unwrap_or_else(|| self.work_dir.join("known_hosts")),
            accept_new_host_keys: connect.accept_new_host_keys,
            resume,
            concurrency: connect.concurrency,
            connect_timeout: std::time::Duration::from_secs(15),
        }
    }

    /// The header every day-2 command prints.
    pub(crate) fn header(&self) -> String {
        let i = &self.record.installed;
        format!(
            "cluster {} (applied {}, bundle {}): {} node(s): {}",
            self.name,
            i.applied_at,
            i.bundle_digest
                .as_deref()
                .map_or("none", |d| &d[..d.len().min(12)]),
            i.nodes.len(),
            i.nodes
                .iter()
                .map(|(n, r)| format!("{n} ({})", r.join(",")))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// Connections to the nodes and the facts gathered over them.
pub(crate) struct Connected {
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) runners: Vec<(Node, Arc<dyn Runner>)>,
    /// The facts.
    pub(crate) facts: ClusterFacts,
}

impl Connected {
    /// The runners of the nodes, by name (not the control host's).
    pub(crate) fn node_runners(&self) -> BTreeMap<String, Arc<dyn Runner>> {
        self.runners
            .iter()
            .filter(|(n, _)| n.name != run::CONTROL_HOST)
            .map(|(n, r)| (n.name.clone(), r.clone()))
            .collect()
    }
}

/// Connects to every node of `reach` (one SSH connection each; those that cannot be reached are
/// noted, not fatal) and gathers the facts of the installed cluster over them.
pub(crate) fn connect(s: &Session, reach: &InstallContext, opts: &RunOptions) -> Result<Connected> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("Failed to start the async runtime")?;
    let installed = s.installed.clone();
    let (runners, facts) = runtime.block_on(async {
        let (mut runners, failed) = run::connect_nodes(reach, &reach.all(), opts).await?;
        let unreachable: BTreeSet<String> = failed.iter().map(|(n, _)| n.clone()).collect();
        for (n, e) in &failed {
            eprintln!("warning: cannot connect to {n}: {e}");
        }
        let by_name: BTreeMap<String, Arc<dyn Runner>> = runners
            .iter()
            .map(|(n, r)| (n.name.clone(), r.clone()))
            .collect();
        let facts = kubexm_install::facts::gather(&installed, &by_name, unreachable).await;
        runners.push((
            run::control_node(),
            Arc::new(LocalRunner::new(run::CONTROL_HOST)),
        ));
        Ok::<_, run::InstallError>((runners, facts))
    })?;
    Ok(Connected {
        runtime,
        runners,
        facts,
    })
}

/// Stops when a node of the cluster could not be reached (`verb` needs every one).
pub(crate) fn require_every_node(conn: &Connected, verb: &str, needs: &str) -> Result<()> {
    if conn.facts.unreachable.is_empty() {
        return Ok(());
    }
    Err(crate::exit::UnreachableError(format!(
        "cannot reach {}: {verb} needs {needs}; fix SSH and run again",
        conn.facts
            .unreachable
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .into())
}

/// The health a rolling day-2 change (`kernel-upgrade`, `upgrade`) needs before a node goes
/// down: the API answers, every Node is Ready, every etcd member healthy. With `resume`, a node
/// of `targets` that is not back yet is a warning: it is the node the last run stopped at.
/// `what` names the change in the hints (`a kernel upgrade`), `verb` the command.
pub(crate) fn rollout_health(
    facts: &ClusterFacts,
    targets: &[String],
    resume: bool,
    what: &str,
    verb: &str,
) -> Verdict {
    let mut v = Verdict::default();
    let mut down = |name: &str, path: String, message: String, hint: String| {
        if resume && targets.iter().any(|t| t == name) {
            v.warnings
                .push(format!("{message} (--resume: the {verb} goes on with it)"));
        } else {
            v.problems.push(Problem {
                path,
                message,
                hint,
            });
        }
    };
    for n in facts.nodes.iter().filter(|n| !n.ready) {
        down(
            &n.name,
            format!("node {}", n.name),
            format!("{} is not Ready", n.name),
            format!("{what} takes one node down at a time and needs the others serving: fix it first (or, if the last {verb} stopped on it, run again with --resume)"),
        );
    }
    for m in facts
        .etcd
        .iter()
        .flat_map(|e| e.members.iter().filter(|m| !e.healthy(m)))
    {
        down(
            &m.name,
            format!("etcd member {}", m.name),
            format!("etcd member {} is not healthy", m.name),
            format!("{what} restarts members one at a time: with another one down etcd could lose its quorum; bring it back first"),
        );
    }
    if facts.api_node.is_none() && !facts.assumed {
        v.problems.push(Problem {
            path: "cluster".to_string(),
            message: "no master answered `kubectl get nodes`".to_string(),
            hint: "the API server must answer before nodes are drained: check the masters first"
                .to_string(),
        });
    }
    v
}

/// Prints the change and the facts; stops with every problem the checks found.
pub(crate) fn judge(
    verb: &str,
    change: &str,
    facts: &ClusterFacts,
    verdict: &Verdict,
) -> Result<()> {
    println!("change:\n{change}{facts}");
    for w in &verdict.warnings {
        println!("warning: {w}");
    }
    if !verdict.problems.is_empty() {
        let list: Vec<String> = verdict
            .problems
            .iter()
            .map(|p| format!("  - {p}"))
            .collect();
        bail!(
            "`{verb}` refused ({} problem{}):\n{}",
            list.len(),
            if list.len() == 1 { "" } else { "s" },
            list.join("\n")
        );
    }
    Ok(())
}

/// The phases of `plan` in one line each (what runs where, or why not).
pub(crate) fn phases(plan: &Plan) -> String {
    use std::fmt::Write as _;
    let mut s = format!("phases of {}:\n", plan.pipeline);
    for (i, m) in plan.modules.iter().enumerate() {
        let _ = match &m.skipped {
            Some(r) => writeln!(s, "  [{}] {} — skipped: {r}", i + 1, m.name),
            None if m.tasks.is_empty() => {
                writeln!(s, "  [{}] {} — nothing to do on these nodes", i + 1, m.name)
            }
            None => writeln!(
                s,
                "  [{}] {}: {}",
                i + 1,
                m.name,
                m.tasks
                    .iter()
                    .map(|t| format!(
                        "{} on {}{}",
                        t.name,
                        t.hosts.join(","),
                        if t.parallel || t.hosts.len() < 2 {
                            ""
                        } else {
                            " (one at a time)"
                        }
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        };
    }
    s
}

/// What one day-2 operation is.
pub(crate) struct Operate<'a> {
    /// `add-node`, `delete-node`, `etcd add-member`, `etcd remove-member`.
    pub(crate) operation: &'a str,
    /// Past tense for the summary.
    pub(crate) done: &'a str,
    /// The nodes concerned.
    pub(crate) nodes: Vec<String>,
    /// The cluster after it.
    pub(crate) desired: Arc<InstallContext>,
    /// The context whose hosts' secrets the journal redacts (the one with the most hosts).
    pub(crate) journal_ctx: Arc<InstallContext>,
    /// Notes for the record (e.g. a forced drain).
    pub(crate) notes: Vec<String>,
}

/// Plans `pipeline`; with `dry_run` prints it and stops; else prints the phases, runs it over
/// the connections and records the result.
pub(crate) fn execute(
    s: &Session,
    conn: Connected,
    pipeline: &Pipeline,
    op: Operate<'_>,
    opts: &RunOptions,
    dry_run: bool,
) -> Result<()> {
    execute_on(s, &conn, pipeline, op, opts, dry_run)
}

/// [`execute`] over connections kept for the next pipeline (`rotate-ca` runs one per phase).
pub(crate) fn execute_on(
    s: &Session,
    conn: &Connected,
    pipeline: &Pipeline,
    op: Operate<'_>,
    opts: &RunOptions,
    dry_run: bool,
) -> Result<()> {
    run_on(s, conn, pipeline, op, opts, dry_run).map(drop)
}

/// [`execute_on`], returning the run's journal (`None` for a dry run: nothing ran), for what
/// follows the run (`apply` and `upgrade` verify the cluster and record it there).
pub(crate) fn run_on(
    s: &Session,
    conn: &Connected,
    pipeline: &Pipeline,
    op: Operate<'_>,
    opts: &RunOptions,
    dry_run: bool,
) -> Result<Option<Arc<Journal>>> {
    let nodes: Vec<Node> = conn.runners.iter().map(|(n, _)| n.clone()).collect();
    let mut all_nodes = op.journal_ctx.plan_nodes();
    for n in nodes {
        if !all_nodes.iter().any(|x| x.name == n.name) {
            all_nodes.push(n);
        }
    }
    let plan = kubexm_install::pipeline::plan::build(pipeline, &all_nodes, &Default::default())
        .context("Failed to build the plan")?;
    if dry_run {
        print!("{}", plan.to_text());
        println!("dry run: nothing was changed");
        return Ok(None);
    }
    print!("{}", phases(&plan));
    let started_at = record::now();
    let started = Instant::now();
    let result = conn.runtime.block_on(run::run_pipeline(
        &op.journal_ctx,
        pipeline,
        conn.runners.clone(),
        opts,
    ));
    let seconds = started.elapsed().as_secs_f64();
    let records = Records::new(&s.work_dir);
    let sha = record::sha256_hex(s.desired_text.as_bytes());
    let entry = |result: Outcome, error: Option<String>| Operation {
        operation: op.operation.to_string(),
        nodes: op.nodes.clone(),
        started_at: started_at.clone(),
        finished_at: record::now(),
        seconds: (seconds * 10.0).round() / 10.0,
        result,
        error,
        notes: op.notes.clone(),
        cluster_yaml_sha256: sha.clone(),
        bundle_digest: s.record.installed.bundle_digest.clone(),
    };
    match result {
        Ok((report, journal)) => {
            records
                .finish(
                    &s.name,
                    entry(Outcome::Succeeded, None),
                    Some(Applied {
                        cluster_yaml: &s.desired_text,
                        base_dir: &s.desired_base,
                        bundle_digest: s.record.installed.bundle_digest.as_deref(),
                        nodes: record::membership(&op.desired.cluster),
                        present: true,
                    }),
                )
                .context("The operation succeeded but its record could not be written")?;
            println!(
                "{} {} in cluster {} in {seconds:.1}s: {} task(s) run, {} resumed, {} step(s) changed, {} checked, {} already done; journal in {}",
                op.done,
                op.nodes.join(","),
                s.name,
                report.tasks_run,
                report.tasks_resumed,
                report.steps_changed,
                report.steps_checked,
                report.steps_unchanged,
                journal
                    .paths()
                    .log
                    .parent()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            );
            Ok(Some(journal))
        }
        Err(e) => {
            let msg = e.to_string();
            if let Err(re) = records.finish(&s.name, entry(Outcome::Failed, Some(msg)), None) {
                eprintln!("warning: the failure could not be recorded: {re}");
            }
            Err(anyhow::Error::new(e)).with_context(|| {
                format!(
                    "`{}` failed after {seconds:.1}s; fix the cause and run the same command with --resume (tasks that finished are skipped)",
                    op.operation
                )
            })
        }
    }
}
