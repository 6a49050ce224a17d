//! `upgrade`: the cluster's Kubernetes to the version of the given bundle(s), one minor at a
//! time (see [`kubexm_install::pipelines::upgrade`] for one step). In order:
//!
//! 1. the installed cluster from its record; each new bundle verified and unpacked; the path
//!    from the installed version to the target ([`kubexm_manifests::upgrade_path`]), refused
//!    when a minor is missing, for a downgrade or another major;
//! 2. each step's cluster.yaml (the bundle's own, or `-f` for the target) may differ from the
//!    installed one in the version only: anything else is refused before connecting (`apply`
//!    changes it);
//! 3. facts: every node reachable and Ready, etcd healthy, every kubelet at a version of the
//!    path (skew), no deprecated API in use that a version of the path removes (the API
//!    server's `apiserver_requested_deprecated_apis`);
//! 4. without `--yes` the plan is printed and nothing changes; with it a backup first (KubeXM's
//!    etcd; not again with `--resume`), then each step's pipeline, recorded as applied (its
//!    cluster.yaml and bundle) before the next starts;
//! 5. once the last step is done, the cluster is verified (the checks of `verify-cluster`,
//!    unless `--no-verify`; not between the steps).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use kubexm_install::apply_change::classify;
use kubexm_install::backup::BackupKey;
use kubexm_install::context::{load_context, BundleRef, InstallContext};
use kubexm_install::facts::checks::Verdict;
use kubexm_install::facts::deprecated::{self, DeprecatedApi, Release};
use kubexm_install::facts::ClusterFacts;
use kubexm_install::intake::trust::TrustPolicy;
use kubexm_install::modules::k8s::host_url;
use kubexm_install::modules::k8s::ADMIN_CONF;
use kubexm_install::modules::k8s::APISERVER_PORT;
use kubexm_install::modules::k8s::KUBECTL;
use kubexm_install::modules::lifecycle::membership::kubectl_on;
use kubexm_install::pipelines::upgrade::{upgrade_pipeline, Upgrade};
use kubexm_install::record;
use kubexm_install::runner::Exec;
use kubexm_manifests::model::{EtcdType, KubernetesType};
use kubexm_manifests::resolve::Role;
use kubexm_manifests::upgrade_path::upgrade_path;
use kubexm_manifests::validate::Problem;
use kubexm_manifests::version::KubeVersion;

use super::day2::{
    connect, execute_on, judge, require_every_node, rollout_health, run_on, Connected, Operate,
    Session,
};
use super::verify::Change;
use crate::cli::{Day2Args, UpgradeArgs};
use crate::exit::UsageError;

/// One step of the path: a version, its bundle and its cluster.
struct Step {
    version: KubeVersion,
    ctx: Arc<InstallContext>,
    /// The cluster.yaml text recorded once the step is done, and where its paths resolve.
    text: String,
    base: PathBuf,
    origin: String,
    digest: String,
}

/// A version a bundle given with --bundle holds: its own, or one of its `upgradePath`
/// (`kubexm-build bundle --upgrade-from`), each with its cluster.yaml.
struct Held {
    path: PathBuf,
    version: KubeVersion,
    dir: PathBuf,
    /// Its cluster.yaml in the unpacked bundle.
    cluster: PathBuf,
    digest: String,
    manifest: kubexm_bundles::manifest::BundleManifest,
}

/// A version string of a bundle's `bundle.json`, parsed (shown escaped and cut when it is not one).
fn parse_version(bundle: &Path, field: &str, text: &str) -> Result<KubeVersion> {
    text.parse().map_err(|e| {
        anyhow::anyhow!(
            "`{}`: its bundle.json names {field} {:?}, not a version: {e}",
            bundle.display(),
            text.chars()
                .filter(|c| !c.is_control())
                .take(64)
                .collect::<String>()
        )
    })
}

fn take_in_all(args: &UpgradeArgs, work_dir: &Path, trust: &TrustPolicy) -> Result<Vec<Held>> {
    let mut held = Vec::new();
    for b in &args.bundles {
        let p = super::take_in(b, work_dir, trust, None)?;
        let u = p.unpacked;
        let version = parse_version(b, "Kubernetes", &u.manifest.kubernetes_version)?;
        // The further versions of an upgrade path (their paths were checked with the bundle).
        for step in &u.manifest.upgrade_path {
            held.push(Held {
                path: b.clone(),
                version: parse_version(b, "the upgrade path's", &step.kubernetes_version)?,
                dir: u.dir.clone(),
                cluster: u.dir.join(&step.cluster),
                digest: u.digest.clone(),
                manifest: u.manifest.clone(),
            });
        }
        held.push(Held {
            path: b.clone(),
            version,
            cluster: u.dir.join(kubexm_bundles::manifest::CLUSTER_PATH),
            dir: u.dir,
            digest: u.digest,
            manifest: u.manifest,
        });
    }
    Ok(held)
}

/// The context of one step: its cluster.yaml (`file`, else the bundle's own) with the bundle's
/// catalog, restricted to the installed nodes, with the session's PKI directory and keys.
fn step_context(s: &Session, h: &Held, file: Option<&Path>, work_dir: &Path) -> Result<Step> {
    let (path, origin) = match file {
        Some(f) => (f.to_path_buf(), format!("`{}`", f.display())),
        None => (
            h.cluster.clone(),
            format!("the {} cluster.yaml of `{}`", h.version, h.path.display()),
        ),
    };
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("Failed to read {origin}"))?;
    let catalog = h.dir.join(kubexm_bundles::manifest::CATALOG_PATH);
    let bundle = BundleRef {
        dir: h.dir.clone(),
        manifest: h.manifest.clone(),
    };
    let loaded = load_context(
        &path,
        catalog.exists().then_some(catalog.as_path()),
        Some(bundle),
        work_dir,
    )
    .with_context(|| format!("Failed to load {origin}"))?;
    if loaded.cluster.version != h.version {
        return Err(UsageError(format!(
            "{origin} says Kubernetes {} but `{}` holds {}: pass the cluster.yaml the bundle was built for",
            loaded.cluster.version,
            h.path.display(),
            h.version
        ))
        .into());
    }
    let base = match file {
        Some(f) => std::fs::canonicalize(f)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_default(),
        None => s.record.installed.base_dir.clone(),
    };
    let cluster = record::restrict(loaded.cluster.clone(), &s.record.installed.nodes);
    let ctx = Arc::new(InstallContext {
        nodes: kubexm_install::inventory::nodes(&cluster),
        pki_dir: s.installed.pki_dir.clone(),
        keys: s.installed.keys.clone(),
        cluster,
        bundle: loaded.bundle.clone(),
        resolution: loaded.resolution.clone(),
        os_releases: std::collections::BTreeMap::new(),
    });
    if ctx.nodes.len() != s.record.installed.nodes.len() {
        return Err(UsageError(format!(
            "{origin} lacks hosts that are in the cluster ({}): an upgrade keeps the nodes; build the bundle from the installed cluster.yaml with the new version",
            s.record
                .installed
                .nodes
                .keys()
                .filter(|n| ctx.node(n).is_none())
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .into());
    }
    Ok(Step {
        version: h.version,
        ctx,
        text,
        base,
        origin,
        digest: h.digest.clone(),
    })
}

/// What an upgrade changes: the Kubernetes version, and with it the versions of etcd
/// (`etcd.type: kubexm`, one member at a time) and of the container runtime.
const UPGRADED: [&str; 3] = [
    "spec.kubernetes.version",
    "spec.etcd.version",
    "spec.runtime.version",
];

/// What `step` changes besides the versions, one line each (refused: `apply` changes it).
fn other_changes(prev: &InstallContext, step: &Step) -> Vec<String> {
    let change = classify(&prev.cluster, &step.ctx.cluster, &step.origin);
    let mut out: Vec<String> = change
        .refused
        .iter()
        .filter(|p| !UPGRADED.contains(&p.path.as_str()))
        .map(ToString::to_string)
        .collect();
    out.extend(
        change
            .applied
            .iter()
            .map(|a| format!("{}: {} -> {}", a.path, a.was, a.now)),
    );
    out
}

/// The `major.minor` of a kubelet version string (`v1.20.2` → 1.20).
fn minor_of(v: &str) -> Option<(u32, u32)> {
    let mut it = v.trim_start_matches('v').split('.');
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// The checks on the facts: the API answers, every Node Ready (with `--resume`, a node not
/// back yet is a warning), every etcd member healthy, every kubelet at the installed version
/// or one of the path (skew), nothing deprecated in use that a version of the path removes.
fn check(
    facts: &ClusterFacts,
    installed: KubeVersion,
    path: &[KubeVersion],
    deprecated_apis: Option<&[DeprecatedApi]>,
    resume: bool,
) -> Verdict {
    let all: Vec<String> = facts.nodes.iter().map(|n| n.name.clone()).collect();
    let mut v = rollout_health(facts, &all, resume, "an upgrade", "upgrade");
    let mut warnings = std::mem::take(&mut v.warnings);
    let mut problem = |path: String, message: String, hint: &str| {
        v.problems.push(Problem {
            path,
            message,
            hint: hint.to_string(),
        });
    };
    let allowed: Vec<(u32, u32)> = std::iter::once(installed)
        .chain(path.iter().copied())
        .map(|x| (x.major, x.minor))
        .collect();
    for n in &facts.nodes {
        match minor_of(&n.kubelet_version) {
            Some(m) if allowed.contains(&m) => {}
            _ => problem(
                format!("node {}", n.name),
                format!(
                    "{} runs kubelet {} but the cluster is at {installed}",
                    n.name,
                    n.kubelet_version
                        .chars()
                        .filter(|c| !c.is_control())
                        .take(32)
                        .collect::<String>()
                ),
                "a kubelet may not be newer than its API server nor more than the path allows: bring the node to the cluster's version first",
            ),
        }
    }
    match deprecated_apis {
        None if !facts.assumed => warnings.push(
            "the deprecated APIs in use could not be read from the API server's metrics: check your manifests against the removed APIs of the target version".to_string(),
        ),
        None => {}
        Some(apis) => {
            if let Some(last) = path.last() {
                let target = Release {
                    major: last.major,
                    minor: last.minor,
                };
                for a in deprecated::blocking(apis, target) {
                    problem(
                        "deprecated APIs".into(),
                        format!("a client used {a}, which {target} no longer serves"),
                        "move its manifests and clients to the current API version (then restart the API servers to reset the metric), or upgrade to a version before the removal",
                    );
                }
                for a in apis.iter().filter(|a| a.removed.is_some_and(|r| r > target)) {
                    warnings.push(format!("a client uses the deprecated {a}"));
                }
            }
        }
    }
    v.warnings = warnings;
    v
}

/// The deprecated APIs clients used, from every master's own API server (the metric is kept
/// per API server, and a client may have reached any of them); `None` when one could not be
/// read.
fn deprecated_in_use(s: &Session, conn: &Connected) -> Option<Vec<DeprecatedApi>> {
    let runners = conn.node_runners();
    let mut all = std::collections::BTreeSet::new();
    for name in s.installed.with_role(Role::Master) {
        let node = s.installed.node(&name)?.clone();
        let runner = runners.get(&name)?.clone();
        let kubectl = match s.installed.cluster.file.spec.kubernetes.kind {
            KubernetesType::Kubeadm => format!(
                "{KUBECTL} --kubeconfig {ADMIN_CONF} --server {}",
                host_url(&node.internal_address, APISERVER_PORT)
            ),
            KubernetesType::Kubexm => kubectl_on(&s.installed, &node).ok()?.into_string(),
        };
        let out = conn
            .runtime
            .block_on(async {
                runner
                    .exec(
                        &Exec::root(deprecated::script(&kubectl))
                            .with_timeout(kubexm_install::facts::PROBE_TIMEOUT),
                    )
                    .await
            })
            .ok()?;
        if !out.success() {
            return None;
        }
        all.extend(deprecated::parse(&out.stdout));
    }
    Some(all.into_iter().collect())
}

pub(crate) fn run(args: &UpgradeArgs, work_dir: &Path, trust: &TrustPolicy) -> Result<()> {
    let common = Day2Args {
        file: None,
        cluster: args.cluster.clone(),
        bundle: args.installed_bundle.clone(),
        dry_run: args.dry_run,
        resume: args.resume,
        allow_even_etcd: false,
        connect: args.connect.clone(),
    };
    let mut s = Session::open(&common, work_dir)?;
    println!("{}", s.header());
    let installed = s.installed.cluster.version;
    let held = take_in_all(args, work_dir, trust)?;
    let versions: Vec<KubeVersion> = held.iter().map(|h| h.version).collect();
    let target = match &args.to {
        Some(t) => t
            .parse::<KubeVersion>()
            .map_err(|e| UsageError(format!("--to {t:?}: {e}")))?,
        None => *versions
            .iter()
            .max()
            .context("no bundle was given (--bundle FILE)")?,
    };
    let path = upgrade_path(installed, target, &versions)
        .map_err(|e| UsageError(format!("cluster {}: {e}", s.name)))?;
    if path.is_empty() {
        println!(
            "cluster {} runs {installed} already: nothing to upgrade",
            s.name
        );
        return Ok(());
    }
    println!(
        "upgrade path: {installed} -> {}",
        path.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" -> ")
    );
    let backup_key = match (&args.backup_key, args.no_backup) {
        (Some(k), _) => Some(BackupKey::load(k)?),
        (None, true) => None,
        (None, false)
            if s.installed.cluster.file.spec.etcd.kind == EtcdType::Kubexm
                && !args.resume
                && !args.dry_run =>
        {
            return Err(UsageError(
                "an upgrade takes a backup of KubeXM's etcd first: pass --backup-key FILE (`kubexm-install backup keygen` makes one), or --no-backup to upgrade without one".into(),
            )
            .into());
        }
        (None, false) => None,
    };

    let mut steps = Vec::new();
    let mut prev = s.installed.clone();
    for (i, v) in path.iter().enumerate() {
        let Some(h) = held.iter().find(|h| h.version == *v) else {
            bail!("no bundle holds {v}");
        };
        let last = i + 1 == path.len();
        let step = step_context(&s, h, args.file.as_deref().filter(|_| last), work_dir)?;
        let other = other_changes(&prev, &step);
        if !other.is_empty() {
            return Err(UsageError(format!(
                "{} differs from the installed cluster in more than the version (nothing was changed); an upgrade changes the version only: apply the rest with `kubexm-install apply` before or after:\n  - {}",
                step.origin,
                other.join("\n  - ")
            ))
            .into());
        }
        println!(
            "  {v}: bundle `{}` ({}), {}",
            h.path.display(),
            &h.digest[..h.digest.len().min(12)],
            step.origin
        );
        prev = step.ctx.clone();
        steps.push(step);
    }
    let opts = s.run_options(&args.connect, args.resume);
    let conn = connect(&s, &s.installed, &opts)?;
    require_every_node(
        &conn,
        "upgrade",
        "every node (each node is drained and upgraded in turn, the cluster checked healthy after each)",
    )?;
    let apis = deprecated_in_use(&s, &conn);
    let verdict = check(&conn.facts, installed, &path, apis.as_deref(), args.resume);
    let mut text = String::new();
    for st in &steps {
        text.push_str(&format!(
            "  kubernetes.version: {} -> {} ({} node(s))\n",
            if text.is_empty() {
                installed.to_string()
            } else {
                "…".to_string()
            },
            st.version,
            st.ctx.nodes.len()
        ));
    }
    judge("upgrade", &text, &conn.facts, &verdict)?;
    let drain = args.drain.options();
    let mut pipelines = Vec::new();
    let mut before = s.installed.clone();
    for st in &steps {
        let p = upgrade_pipeline(&Upgrade {
            installed: &before,
            target: &st.ctx,
            facts: &conn.facts,
            drain,
            batch: usize::from(args.batch_size),
        })
        .map_err(|e| anyhow::anyhow!("the upgrade to {} cannot be planned: {e}", st.version))?;
        pipelines.push(p);
        before = st.ctx.clone();
    }
    let mut notes = verdict.warnings.clone();
    notes.extend(args.drain.forced_warning("pods"));
    if args.dry_run || !args.yes {
        for (st, p) in steps.iter().zip(&pipelines) {
            let op = operate(st, &notes);
            execute_on(&s, &conn, p, op, &opts, true)?;
        }
        if args.dry_run {
            return Ok(());
        }
        return Err(UsageError(
            "upgrade drains and upgrades the nodes above one at a time. Review the plan, then pass --yes".into(),
        )
        .into());
    }
    if let Some(key) = &backup_key {
        if args.resume {
            println!("--resume: no new backup (the run being resumed took one before it changed anything)");
        } else {
            let out = super::backup::default_output(&s, work_dir)?;
            println!("backup before the upgrade:");
            super::backup::take(&s, &conn, key, &out, work_dir, false)
                .context("the backup before the upgrade failed: nothing was changed")?;
            notes.push(format!("backup before the upgrade: {}", out.display()));
        }
    } else if s.installed.cluster.file.spec.etcd.kind != EtcdType::Kubexm {
        println!("no KubeXM backup: etcd.type is not kubexm (kubeadm keeps its own copy of a stacked etcd's data during `upgrade apply`)");
    }
    let mut journal = None;
    for (st, p) in steps.iter().zip(&pipelines) {
        println!("== upgrade to {}", st.version);
        let op = operate(st, &notes);
        s.desired_text = st.text.clone();
        s.desired_base = st.base.clone();
        s.record.installed.bundle_digest = Some(st.digest.clone());
        journal = run_on(&s, &conn, p, op, &opts, false).with_context(|| {
            format!(
                "the upgrade to {} stopped; the nodes not reached yet still run the version before. Fix the cause and run the same command with --resume",
                st.version
            )
        })?;
    }
    drop(conn);
    // The last step done, the cluster at the target version is verified (recorded in the last
    // step's journal), unless --no-verify.
    super::verify::after(
        Change::Upgrade,
        args.verify.no_verify,
        &s.name,
        &args.connect,
        work_dir,
        journal.as_deref(),
    )
}

/// The record of one step.
fn operate<'a>(st: &'a Step, notes: &[String]) -> Operate<'a> {
    Operate {
        operation: "upgrade",
        done: "upgraded",
        nodes: st.ctx.nodes.iter().map(|n| n.name.clone()).collect(),
        desired: st.ctx.clone(),
        journal_ctx: st.ctx.clone(),
        notes: notes
            .iter()
            .cloned()
            .chain(std::iter::once(format!("to {}", st.version)))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubexm_install::facts::ApiNode;

    fn v(s: &str) -> KubeVersion {
        s.parse().expect("version")
    }

    fn facts(versions: &[(&str, &str, bool)]) -> ClusterFacts {
        ClusterFacts {
            api_node: Some("node1".into()),
            nodes: versions
                .iter()
                .map(|(n, kv, ready)| ApiNode {
                    name: (*n).to_string(),
                    ready: *ready,
                    unschedulable: false,
                    kubelet_version: (*kv).to_string(),
                    control_plane: true,
                })
                .collect(),
            ..ClusterFacts::default()
        }
    }

    #[test]
    fn skew_readiness_and_deprecated_apis_are_checked() {
        let path = [v("v1.21.0")];
        let ok = facts(&[("node1", "v1.20.2", true), ("node2", "v1.21.0", true)]);
        let none: &[DeprecatedApi] = &[];
        assert!(check(&ok, v("v1.20.2"), &path, Some(none), false)
            .problems
            .is_empty());
        // A kubelet outside the path (older, or newer than the target).
        for bad in ["v1.19.7", "v1.22.0", "garbage"] {
            let f = facts(&[("node1", "v1.20.2", true), ("node2", bad, true)]);
            let verdict = check(&f, v("v1.20.2"), &path, Some(none), false);
            assert_eq!(verdict.problems.len(), 1, "{bad}");
            assert!(verdict.problems[0].message.contains("node2 runs kubelet"));
        }
        // Not Ready: refused, unless resuming.
        let f = facts(&[("node1", "v1.20.2", true), ("node2", "v1.21.0", false)]);
        assert_eq!(
            check(&f, v("v1.20.2"), &path, Some(none), false).problems[0].message,
            "node2 is not Ready"
        );
        let verdict = check(&f, v("v1.20.2"), &path, Some(none), true);
        assert!(verdict.problems.is_empty());
        assert!(verdict.warnings[0].contains("--resume"));
        // Deprecated APIs: removed by the target refuses, later removals warn.
        let apis = deprecated::parse(concat!(
            "apiserver_requested_deprecated_apis{group=\"extensions\",removed_release=\"1.22\",resource=\"ingresses\",subresource=\"\",version=\"v1beta1\"} 1\n",
            "apiserver_requested_deprecated_apis{group=\"policy\",removed_release=\"1.25\",resource=\"podsecuritypolicies\",subresource=\"\",version=\"v1beta1\"} 1\n",
        ));
        let verdict = check(&ok, v("v1.20.2"), &path, Some(&apis), false);
        assert!(verdict.problems.is_empty());
        assert_eq!(verdict.warnings.len(), 2, "{:?}", verdict.warnings);
        let to22 = [v("v1.21.0"), v("v1.22.0")];
        let verdict = check(&ok, v("v1.20.2"), &to22, Some(&apis), false);
        assert_eq!(verdict.problems.len(), 1);
        assert!(verdict.problems[0].message.contains(
            "extensions/v1beta1 ingresses (removed in 1.22), which 1.22 no longer serves"
        ));
        // Unknown: a warning, not a silent pass.
        let verdict = check(&ok, v("v1.20.2"), &path, None, false);
        assert!(verdict.warnings[0].contains("could not be read"));
    }
}
