//! `verify-cluster`: proves, from the control host, that the installed cluster works. Each check
//! is named, passes, fails or is skipped (nothing to check), and carries its evidence and its
//! time:
//!
//! | check | how |
//! |---|---|
//! | `nodes` | every master and worker registered and Ready, kubelet and runtime at the recorded versions (`kubectl get nodes -o json`) |
//! | `control-plane` | on every master, the API server's `/readyz`, the controller manager's and the scheduler's `/healthz` (curl over SSH) |
//! | `etcd` | every member started and healthy, a quorum of them (the facts' `etcdctl`; skipped for external etcd) |
//! | `certificates` | every certificate on every node valid for at least the warning period |
//! | `metrics` | where metrics-server is installed, every Ready node reports CPU and memory |
//! | `pod-network` | a probe pod on every schedulable node reaches the probe of every other node |
//! | `service` | the probes' ClusterIP Service reached from every node (curl over SSH) |
//! | `dns` | the Service's name resolved from every probe through NodeLocal DNS |
//! | `logs-exec` | `kubectl exec` and `kubectl logs` reach every probe's kubelet |
//!
//! The probes ([`NAMESPACE`], the template `templates/verify/probe.yaml.tera`) use the bundle's
//! probe image ([`PROBE_REPOSITORIES`]) from the private registry. They are the only thing the
//! check creates; their namespace is deleted when it ends, also on a timeout or an interrupt
//! (see [`verify`]). Everything read from the cluster goes through [`parse`] (bounded, typed,
//! names checked) and is kept as short printable excerpts.

pub mod parse;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use kubexm_manifests::image_ref::ImageRef;
use kubexm_manifests::model::EtcdType;
use kubexm_manifests::resolve::Role;
use serde::Serialize;

use crate::context::InstallContext;
use crate::facts::node::{gather_node, CertExpiry};
use crate::facts::{ClusterFacts, EtcdFacts};
use crate::pipeline::journal::{At, Event, Journal};
use crate::runner::shell::quote;
use crate::runner::{Exec, Runner};
use parse::{ProbeAnswer, VerifyNode, VerifyPod};

/// The namespace holding the probes; deleted (with them) when the check ends.
pub const NAMESPACE: &str = "kubexm-verify";
/// The probe DaemonSet's and Service's name.
pub const PROBE_NAME: &str = "kubexm-verify-probe";
/// The port each probe serves its node's name on (`/node`).
pub const PROBE_PORT: u16 = 8080;
/// Repositories of images that can serve as the probe (a busybox with `httpd`, `wget`,
/// `nslookup` at `/bin/busybox`), in order of preference; the first one the bundle carries is
/// used.
pub const PROBE_REPOSITORIES: [&str; 1] = ["docker.io/library/busybox"];
/// The whole check's default limit (`--timeout`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// One kubectl query (kubectl's own `--request-timeout` is below it).
const QUERY_LIMIT: Duration = Duration::from_secs(30);
/// kubectl's `--request-timeout` for one request.
const REQUEST_TIMEOUT_S: u64 = 15;
/// How long the probes may take to be Ready on every node.
const PROBES_READY: Duration = Duration::from_secs(120);
/// How often their state is asked while waiting.
const POLL: Duration = Duration::from_secs(2);
/// One probe's round of requests (each request is bounded to a few seconds inside).
const PROBE_LIMIT: Duration = Duration::from_secs(90);
/// Deleting the probes' namespace (kubectl waits up to [`CLEANUP_WAIT_S`]).
const CLEANUP_LIMIT: Duration = Duration::from_secs(90);
const CLEANUP_WAIT_S: u64 = 60;
/// Characters of remote text kept in one line of evidence.
const EXCERPT: usize = 200;

/// The name of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckId {
    /// Nodes registered, Ready, at the recorded versions.
    Nodes,
    /// API server, controller manager and scheduler healthy on every master.
    ControlPlane,
    /// etcd members healthy and in quorum.
    Etcd,
    /// Certificates valid for the warning period.
    Certificates,
    /// metrics-server answers for every node.
    Metrics,
    /// Pod-to-pod across every pair of nodes.
    PodNetwork,
    /// A ClusterIP Service from every node.
    Service,
    /// A Service name resolved from every probe.
    Dns,
    /// `kubectl exec` and `logs` reach every kubelet.
    LogsExec,
}

impl CheckId {
    /// Every check, in the order they run and are shown.
    pub const ALL: [CheckId; 9] = [
        CheckId::Nodes,
        CheckId::ControlPlane,
        CheckId::Etcd,
        CheckId::Certificates,
        CheckId::Metrics,
        CheckId::PodNetwork,
        CheckId::Service,
        CheckId::Dns,
        CheckId::LogsExec,
    ];

    /// The name shown and used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckId::Nodes => "nodes",
            CheckId::ControlPlane => "control-plane",
            CheckId::Etcd => "etcd",
            CheckId::Certificates => "certificates",
            CheckId::Metrics => "metrics",
            CheckId::PodNetwork => "pod-network",
            CheckId::Service => "service",
            CheckId::Dns => "dns",
            CheckId::LogsExec => "logs-exec",
        }
    }
}

/// A check's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Everything it looked at works.
    Pass,
    /// Something it looked at does not work (or it could not look).
    Fail,
    /// Nothing to check here (e.g. no metrics-server, external etcd).
    Skip,
}

/// One check's result, its evidence and its time.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    /// Which check.
    pub name: CheckId,
    /// Its result.
    pub status: Status,
    /// How long it took.
    pub seconds: f64,
    /// One line.
    pub summary: String,
    /// What was seen that works, one line each.
    pub evidence: Vec<String>,
    /// What does not work, one line each (empty unless `fail`).
    pub failures: Vec<String>,
}

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// Every check ran.
    Complete,
    /// The time limit ran out; the checks not finished are failures.
    TimedOut,
    /// Interrupted (Ctrl-C); the checks not finished are failures.
    Interrupted,
}

/// What happened to the probes.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cleanup {
    /// The namespace of the probes.
    pub namespace: &'static str,
    /// Probes were created (so there was something to remove).
    pub created: bool,
    /// The namespace is gone (or was never created).
    pub removed: bool,
    /// Why it could not be removed, and how to remove it by hand.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The whole answer (`verify-cluster -o json`; schema in installer/docs/guide.md).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The cluster.
    pub cluster: String,
    /// `pass` when every check passed or was skipped, else `fail`.
    pub result: Status,
    /// How the run ended.
    pub outcome: Outcome,
    /// The time limit, in seconds.
    pub timeout_seconds: u64,
    /// How long it took, cleanup included.
    pub seconds: f64,
    /// The master whose kubectl was used.
    pub api_node: Option<String>,
    /// The probe image as nodes pull it.
    pub probe_image: Option<String>,
    /// Every check, in [`CheckId::ALL`]'s order.
    pub checks: Vec<Check>,
    /// The probes' removal.
    pub cleanup: Cleanup,
}

impl Report {
    /// The checks that failed.
    pub fn failed(&self) -> Vec<&Check> {
        self.checks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .collect()
    }

    /// The text form. Remote text in it is already excerpted; it is escaped again here.
    pub fn text(&self) -> String {
        use kubexm_manifests::display::Untrusted;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "verify-cluster {}{}:",
            self.cluster,
            self.api_node
                .as_deref()
                .map(|n| format!(" (kubectl on {n})"))
                .unwrap_or_default()
        );
        for c in &self.checks {
            let mark = match c.status {
                Status::Pass => "PASS",
                Status::Fail => "FAIL",
                Status::Skip => "SKIP",
            };
            let _ = writeln!(
                o,
                "  {mark}  {:<14} {:>6.1}s  {}",
                c.name.as_str(),
                c.seconds,
                Untrusted(&c.summary)
            );
            for f in &c.failures {
                let _ = writeln!(o, "          - {}", Untrusted(f));
            }
            for e in &c.evidence {
                let _ = writeln!(o, "          {}", Untrusted(e));
            }
        }
        let c = &self.cleanup;
        if c.created {
            let _ = writeln!(
                o,
                "probes: namespace {} {}",
                c.namespace,
                if c.removed { "deleted" } else { "NOT deleted" }
            );
        }
        if let Some(n) = &c.note {
            let _ = writeln!(o, "note: {}", Untrusted(n));
        }
        let failed = self.failed().len();
        let _ = writeln!(
            o,
            "{}: {} check(s) passed, {failed} failed, {} skipped in {:.1}s{}",
            if failed == 0 {
                "verified"
            } else {
                "NOT verified"
            },
            self.count(Status::Pass),
            self.count(Status::Skip),
            self.seconds,
            match self.outcome {
                Outcome::Complete => String::new(),
                Outcome::TimedOut =>
                    format!(" (stopped by the time limit of {} s)", self.timeout_seconds),
                Outcome::Interrupted => " (interrupted)".to_string(),
            }
        );
        o
    }

    fn count(&self, s: Status) -> usize {
        self.checks.iter().filter(|c| c.status == s).count()
    }

    /// Records this report in the journal of the run it followed (an install, upgrade, apply or
    /// `restore --fresh` that verified the cluster at its end): the report itself as
    /// [`JOURNAL_FILE`] in the run's directory (the same JSON as `verify-cluster -o json`), and
    /// one event, [`Event::ClusterVerified`] or [`Event::ClusterNotVerified`], naming the checks
    /// that failed. Returns the report's path.
    ///
    /// # Errors
    ///
    /// The report cannot be written (the event is recorded all the same).
    pub fn record_in(&self, journal: &Journal) -> std::io::Result<std::path::PathBuf> {
        let dir = journal.paths().log.parent().map_or_else(
            || std::path::PathBuf::from("."),
            std::path::Path::to_path_buf,
        );
        let path = dir.join(JOURNAL_FILE);
        let written = serde_json::to_vec_pretty(self)
            .map_err(std::io::Error::other)
            .and_then(|json| crate::private_dir::write_private_file(&path, &json, 0o600));
        let failed: Vec<&str> = self.failed().iter().map(|c| c.name.as_str()).collect();
        let (event, message) = if self.result == Status::Pass {
            (
                Event::ClusterVerified,
                format!(
                    "verify-cluster: {} check(s) passed, {} skipped; report in {JOURNAL_FILE}",
                    self.count(Status::Pass),
                    self.count(Status::Skip)
                ),
            )
        } else {
            (
                Event::ClusterNotVerified,
                format!(
                    "verify-cluster ({}): {} check(s) failed: {}; report in {JOURNAL_FILE}",
                    match self.outcome {
                        Outcome::Complete => "complete",
                        Outcome::TimedOut => "timed out",
                        Outcome::Interrupted => "interrupted",
                    },
                    failed.len(),
                    failed.join(", ")
                ),
            )
        };
        let at = At {
            module: Some("verify-cluster"),
            ..At::default()
        };
        journal.record(
            event,
            &at,
            &message,
            Some(Duration::from_secs_f64(self.seconds.max(0.0))),
        );
        written.map(|()| path)
    }
}

/// The file beside a run's journal (`WORK/runs/<run id>/`) holding the verification that ended
/// the run ([`Report::record_in`]).
pub const JOURNAL_FILE: &str = "verify.json";

/// How the check runs.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The whole check's limit (cleanup comes on top, bounded by itself).
    pub timeout: Duration,
    /// Certificates with fewer days left fail.
    pub warn_days: i64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            warn_days: crate::certs::WARN_DAYS,
        }
    }
}

/// The cluster to check: its context (the record's nodes), the facts gathered over the
/// connections, and the runners of the reachable nodes by name.
pub struct Target<'a> {
    /// The installed cluster.
    pub ctx: &'a Arc<InstallContext>,
    /// Its facts (API nodes, etcd, unreachable nodes).
    pub facts: &'a ClusterFacts,
    /// One runner per reachable node.
    pub runners: &'a BTreeMap<String, Arc<dyn Runner>>,
}

/// A short, printable excerpt of remote text.
fn excerpt(s: &str) -> String {
    let s: String = s
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(EXCERPT)
        .collect();
    if s.is_empty() {
        "no output".into()
    } else {
        s
    }
}

/// The address as a URL host (`[…]` for IPv6).
fn url_host(ip: &IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// The script each probe runs (`sh -s ADDRESS…`): fetch `/node` from every peer's probe and
/// resolve `name` through `server`, printing what [`parse::probe_answer`] reads. Every request
/// is bounded to a few seconds; every tool is called by its full path.
pub fn probe_script(name: &str, server: &str) -> String {
    format!(
        "b=/bin/busybox\n\
for ip in \"$@\"; do\n\
  case $ip in *:*) u=\"[$ip]\";; *) u=$ip;; esac\n\
  if n=$($b timeout 5 $b wget -q -O - \"http://$u:{PROBE_PORT}/node\" 2>/dev/null); then echo \"peer $ip ok $n\"; else echo \"peer $ip fail\"; fi\n\
done\n\
if out=$($b timeout 8 $b nslookup {} {} 2>&1); then\n\
  echo \"dns ok $(echo \"$out\" | $b awk '/^Name:/ {{f=1}} f && /^Address/ {{a=$NF}} END {{print a}}')\"\n\
else echo \"dns fail\"; fi\n",
        quote(name),
        quote(server)
    )
}

/// The probe Service's name for one run: [`PROBE_NAME`] and a suffix of the run's own. A name
/// that is new each run is never in a DNS cache: NodeLocal DNS keeps an answer up to 30 s, and a
/// run started that soon after another was told the previous run's ClusterIP under a shared name
/// (seen on the real v1.37 lab: "→ 10.233.40.19, not the Service's 10.233.59.113").
pub fn probe_service_name(run: u32) -> String {
    format!("{PROBE_NAME}-{run:08x}")
}

/// A run's suffix for [`probe_service_name`]: the clock's nanoseconds and the process id.
fn run_suffix() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() ^ (d.as_secs() as u32));
    nanos ^ std::process::id().rotate_left(16)
}

/// The probe DaemonSet, Service (named `service`) and namespace for `image` (as nodes pull it).
pub fn probe_manifest(
    ctx: &InstallContext,
    image: &str,
    service: &str,
) -> Result<String, crate::pipeline::StepError> {
    let mut c = tera::Context::new();
    c.insert("cluster", &ctx.cluster.file.metadata.name);
    c.insert("namespace", NAMESPACE);
    c.insert("name", PROBE_NAME);
    c.insert("service", service);
    c.insert("port", &PROBE_PORT);
    c.insert("image", image);
    crate::templates::render("verify/probe.yaml.tera", &c)
}

/// The probe image among the cluster's images (canonical reference), if the bundle has one.
pub fn probe_image(references: &[String]) -> Option<String> {
    PROBE_REPOSITORIES
        .iter()
        .find_map(|want| {
            references.iter().find(|r| {
                r.parse::<ImageRef>()
                    .is_ok_and(|i| format!("{}/{}", i.registry, i.repository) == *want)
            })
        })
        .cloned()
}

/// What a check found: what works and what does not.
#[derive(Debug, Default)]
struct Found {
    evidence: Vec<String>,
    failures: Vec<String>,
}

impl Found {
    fn ok(&mut self, line: String) {
        self.evidence.push(line);
    }
    fn bad(&mut self, line: String) {
        self.failures.push(line);
    }
    fn check(self, name: CheckId, started: Instant, pass: &str) -> Check {
        let status = if self.failures.is_empty() {
            Status::Pass
        } else {
            Status::Fail
        };
        Check {
            name,
            status,
            seconds: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            summary: match status {
                Status::Fail if pass.is_empty() => format!("{} problem(s)", self.failures.len()),
                Status::Fail => format!("{} problem(s); checked: {pass}", self.failures.len()),
                _ => pass.to_string(),
            },
            evidence: self.evidence,
            failures: self.failures,
        }
    }
}

fn skip(name: CheckId, started: Instant, why: String) -> Check {
    Check {
        name,
        status: Status::Skip,
        seconds: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        summary: why,
        evidence: Vec::new(),
        failures: Vec::new(),
    }
}

fn failed(name: CheckId, started: Instant, why: String) -> Check {
    let mut f = Found::default();
    f.bad(why);
    f.check(name, started, "")
}

/// What the record says the nodes run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// The masters and workers (every one must be registered and Ready).
    pub nodes: Vec<String>,
    /// The kubelet version (`v1.20.2`).
    pub kubelet: String,
    /// The runtime as `containerRuntimeVersion` names it (`containerd`, `docker`, `cri-o`,
    /// `isulad`) and its version when the bundle records one.
    pub runtime: (String, Option<String>),
}

impl Expected {
    /// From the installed cluster's context.
    pub fn of(ctx: &InstallContext) -> Self {
        use kubexm_manifests::model::RuntimeType;
        let spec = &ctx.cluster.file.spec;
        let (scheme, binary) = match spec.runtime.kind {
            RuntimeType::Containerd => ("containerd", "containerd"),
            RuntimeType::Docker => ("docker", "docker"),
            RuntimeType::CriO => ("cri-o", "cri-o"),
            RuntimeType::Isulad => ("isulad", "isulad"),
        };
        let version = ctx
            .bundle
            .as_ref()
            .and_then(|b| {
                b.manifest
                    .files
                    .iter()
                    .find(|f| f.name == binary)
                    .map(|f| f.version.clone())
            })
            .or_else(|| {
                ctx.resolution.as_ref().and_then(|r| {
                    r.binaries
                        .iter()
                        .find(|f| f.name == binary)
                        .map(|f| f.version.clone())
                })
            });
        Self {
            nodes: ctx
                .nodes
                .iter()
                .filter(|n| n.has_role(Role::Master) || n.has_role(Role::Worker))
                .map(|n| n.name.clone())
                .collect(),
            kubelet: ctx.cluster.version.to_string(),
            runtime: (scheme.to_string(), version),
        }
    }
}

/// `actual` is `want` or a build of it (`1.6.20~ds1` for `1.6.20`; a leading `v` ignored).
fn same_version(actual: &str, want: &str) -> bool {
    let a = actual.trim_start_matches('v');
    let w = want.trim_start_matches('v');
    a.strip_prefix(w)
        .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit()))
}

/// `nodes`: every expected node registered, Ready, at the expected versions.
pub fn judge_nodes(
    want: &Expected,
    unreachable: &BTreeSet<String>,
    nodes: &[VerifyNode],
    started: Instant,
) -> Check {
    let mut f = Found::default();
    for name in &want.nodes {
        let Some(n) = nodes.iter().find(|n| n.name == *name) else {
            f.bad(format!("{name}: not registered with the API server"));
            continue;
        };
        let mut wrong = Vec::new();
        if !n.ready {
            wrong.push(format!("NotReady ({})", n.reason));
        }
        if !same_version(&n.kubelet_version, &want.kubelet) {
            wrong.push(format!(
                "kubelet {} (recorded {})",
                n.kubelet_version, want.kubelet
            ));
        }
        let (scheme, version) = n
            .runtime_version
            .split_once("://")
            .unwrap_or((n.runtime_version.as_str(), ""));
        let (want_scheme, want_version) = &want.runtime;
        if !scheme.eq_ignore_ascii_case(want_scheme)
            || want_version
                .as_deref()
                .is_some_and(|w| !same_version(version, w))
        {
            wrong.push(format!(
                "runtime {} (recorded {want_scheme}{})",
                n.runtime_version,
                want_version
                    .as_deref()
                    .map(|v| format!(" {v}"))
                    .unwrap_or_default()
            ));
        }
        if unreachable.contains(name) {
            wrong.push("unreachable over SSH".into());
        }
        if wrong.is_empty() {
            f.ok(format!(
                "{name}: Ready{}, kubelet {}, {}",
                if n.unschedulable { ", cordoned" } else { "" },
                n.kubelet_version,
                n.runtime_version
            ));
        } else {
            f.bad(format!("{name}: {}", wrong.join(", ")));
        }
    }
    f.check(
        CheckId::Nodes,
        started,
        &format!(
            "{} node(s) Ready at the recorded versions",
            want.nodes.len()
        ),
    )
}

/// The script asking a master's components for their health: `COMPONENT HTTP-CODE` lines
/// (`000`: no answer). The API server is asked on `apiserver_host`: `127.0.0.1`, or the
/// master's own address when it binds only that one (a KubeXM load balancer on the same master
/// holds port 6443 elsewhere: [`apiserver_host`]).
pub fn control_plane_script(apiserver_host: &str) -> String {
    let mut s = String::new();
    for (c, port, path) in CONTROL_PLANE {
        let host = if c == "kube-apiserver" && apiserver_host.contains(':') {
            format!("[{apiserver_host}]")
        } else if c == "kube-apiserver" {
            apiserver_host.to_string()
        } else {
            "127.0.0.1".to_string()
        };
        let _ = writeln!(
            s,
            "printf '{c} %s\\n' \"$(curl -sk --max-time 5 -o /dev/null -w '%{{http_code}}' https://{host}:{port}{path} 2>/dev/null)\""
        );
    }
    s
}

/// Where a master's API server answers on the master itself: its own address when it binds
/// only that ([`crate::modules::loadbalancer::api_server_must_bind_node_address`]: keepalived +
/// haproxy or nginx on the same master, port 6443), else `127.0.0.1`.
pub fn apiserver_host(ctx: &InstallContext, master: &str) -> String {
    ctx.node(master)
        .filter(|n| crate::modules::loadbalancer::api_server_must_bind_node_address(ctx, n))
        .map_or_else(|| "127.0.0.1".to_string(), |n| n.internal_address.clone())
}

/// The control-plane components, their secure port and health path.
const CONTROL_PLANE: [(&str, u16, &str); 3] = [
    (
        "kube-apiserver",
        crate::modules::k8s::APISERVER_PORT,
        "/readyz",
    ),
    ("kube-controller-manager", 10257, "/healthz"),
    ("kube-scheduler", 10259, "/healthz"),
];

/// `control-plane`: every master's answer to [`control_plane_script`] (or why it has none).
pub fn judge_control_plane(
    answers: &BTreeMap<String, Result<String, String>>,
    started: Instant,
) -> Check {
    let mut f = Found::default();
    for (master, answer) in answers {
        let out = match answer {
            Ok(out) => out,
            Err(e) => {
                f.bad(format!("{master}: not asked: {}", excerpt(e)));
                continue;
            }
        };
        let codes: BTreeMap<&str, &str> = out
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(c, code)| (c, code.trim()))
            .collect();
        for (c, _, path) in CONTROL_PLANE {
            match codes.get(c).copied() {
                Some("200") => f.ok(format!("{master}: {c} {path} ok")),
                // The API server answers but refuses anonymous requests (anonymous auth off):
                // it is serving.
                Some(code @ ("401" | "403")) if c == "kube-apiserver" => f.ok(format!(
                    "{master}: {c} answers (HTTP {code}: anonymous requests refused)"
                )),
                Some("000") | None => f.bad(format!("{master}: {c} does not answer on {path}")),
                Some(code) => f.bad(format!(
                    "{master}: {c} {path} answered HTTP {}",
                    excerpt(code)
                )),
            }
        }
    }
    f.check(
        CheckId::ControlPlane,
        started,
        &format!("{} master(s): every component healthy", answers.len()),
    )
}

/// `etcd`: every member started and healthy, and a quorum of healthy members.
pub fn judge_etcd(kind: EtcdType, facts: &ClusterFacts, started: Instant) -> Check {
    if kind == EtcdType::External {
        return skip(
            CheckId::Etcd,
            started,
            "etcd.type is external: its members are not KubeXM's to check".into(),
        );
    }
    let Some(e) = &facts.etcd else {
        let why = facts
            .notes
            .iter()
            .rev()
            .find(|n| n.contains("etcd"))
            .cloned()
            .unwrap_or_else(|| "no etcd member answered".into());
        return failed(CheckId::Etcd, started, excerpt(&why));
    };
    etcd_members(e, started)
}

fn etcd_members(e: &EtcdFacts, started: Instant) -> Check {
    let mut f = Found::default();
    let total = e.members.len();
    let healthy = e.members.iter().filter(|m| e.healthy(m)).count();
    for m in &e.members {
        let name = if m.started() {
            m.name.clone()
        } else {
            format!("{} (added, not started)", m.hex_id())
        };
        if e.healthy(m) {
            f.ok(format!("{name}: healthy"));
        } else {
            let why = e
                .health
                .iter()
                .find(|h| m.client_urls.contains(&h.endpoint))
                .and_then(|h| h.error.as_deref())
                .map(excerpt)
                .unwrap_or_else(|| "no healthy answer".into());
            f.bad(format!("{name}: unhealthy: {why}"));
        }
    }
    if healthy <= total / 2 {
        f.bad(format!(
            "no quorum: {healthy} of {total} member(s) healthy, {} needed",
            total / 2 + 1
        ));
    }
    f.check(
        CheckId::Etcd,
        started,
        &format!(
            "{healthy} of {total} member(s) healthy (asked on {})",
            e.from
        ),
    )
}

/// `certificates`: every node's certificates valid for at least `warn_days` more days.
pub fn judge_certificates(
    per_node: &BTreeMap<String, Result<Vec<CertExpiry>, String>>,
    warn_days: i64,
    started: Instant,
) -> Check {
    let mut f = Found::default();
    let mut total = 0;
    for (node, certs) in per_node {
        match certs {
            Err(e) => f.bad(format!("{node}: certificates not read: {}", excerpt(e))),
            Ok(certs) => {
                total += certs.len();
                for c in certs.iter().filter(|c| c.days_left < warn_days) {
                    f.bad(format!(
                        "{node}: {} ({}) {} {} ({} day(s) left, under {warn_days})",
                        excerpt(&c.path),
                        excerpt(&c.subject),
                        if c.days_left < 0 {
                            "expired"
                        } else {
                            "expires"
                        },
                        c.not_after,
                        c.days_left
                    ));
                }
                if let Some(soonest) = certs.iter().min_by_key(|c| c.not_after_unix) {
                    f.ok(format!(
                        "{node}: {} certificate(s), the soonest {} ({} day(s))",
                        certs.len(),
                        excerpt(&soonest.path),
                        soonest.days_left
                    ));
                }
            }
        }
    }
    f.check(
        CheckId::Certificates,
        started,
        &format!("{total} certificate(s) valid for at least {warn_days} days"),
    )
}

/// `metrics`: with metrics-server installed, every Ready node reports CPU and memory.
pub fn judge_metrics(
    installed: bool,
    metrics: Result<&BTreeMap<String, (String, String)>, String>,
    ready: &[String],
    started: Instant,
) -> Check {
    if !installed {
        return skip(
            CheckId::Metrics,
            started,
            "metrics-server is not installed (no APIService v1beta1.metrics.k8s.io)".into(),
        );
    }
    let metrics = match metrics {
        Ok(m) => m,
        Err(e) => {
            return failed(
                CheckId::Metrics,
                started,
                format!("the metrics API does not answer: {}", excerpt(&e)),
            )
        }
    };
    let mut f = Found::default();
    for n in ready {
        match metrics.get(n) {
            Some((cpu, mem)) => f.ok(format!("{n}: cpu {cpu}, memory {mem}")),
            None => f.bad(format!("{n}: no metrics")),
        }
    }
    f.check(
        CheckId::Metrics,
        started,
        &format!("{} node(s) report usage", ready.len()),
    )
}

/// The nodes a probe must run on: Ready and not cordoned.
pub fn schedulable(nodes: &[VerifyNode], expected: &[String]) -> Vec<String> {
    expected
        .iter()
        .filter(|e| {
            nodes
                .iter()
                .any(|n| n.name == **e && n.ready && !n.unschedulable)
        })
        .cloned()
        .collect()
}

/// The Ready probe on each node of `on`; the nodes without one, with why.
pub fn ready_probes<'a>(
    pods: &'a [VerifyPod],
    on: &[String],
) -> (BTreeMap<String, &'a VerifyPod>, Vec<String>) {
    let mut ready = BTreeMap::new();
    let mut missing = Vec::new();
    for node in on {
        let mine: Vec<&VerifyPod> = pods.iter().filter(|p| p.node == *node).collect();
        match mine.iter().find(|p| p.ready && !p.ip.is_empty()) {
            Some(p) => {
                ready.insert(node.clone(), *p);
            }
            None => missing.push(match mine.first() {
                None => format!("{node}: no probe pod was scheduled"),
                Some(p) => format!(
                    "{node}: probe {} not ready ({}{})",
                    p.name,
                    p.phase,
                    if p.waiting.is_empty() {
                        String::new()
                    } else {
                        format!(", {}", p.waiting)
                    }
                ),
            }),
        }
    }
    (ready, missing)
}

/// `pod-network`: from each node's probe, every other node's probe answered with its node's name.
pub fn judge_pod_network(
    probes: &BTreeMap<String, &VerifyPod>,
    missing: &[String],
    answers: &BTreeMap<String, Result<ProbeAnswer, String>>,
    started: Instant,
) -> Check {
    let mut f = Found::default();
    for m in missing {
        f.bad(m.clone());
    }
    for (from, answer) in answers {
        let a = match answer {
            Ok(a) => a,
            Err(e) => {
                f.bad(format!(
                    "{from}: its probe could not be run: {}",
                    excerpt(e)
                ));
                continue;
            }
        };
        let mut reached = Vec::new();
        for (to, pod) in probes.iter().filter(|(n, _)| *n != from) {
            match a.peers.get(&pod.ip) {
                Some(Some(served)) if served == to => reached.push(to.as_str()),
                Some(Some(served)) => f.bad(format!(
                    "{from} → {to} ({}): answered by {served}'s probe",
                    pod.ip
                )),
                _ => f.bad(format!("{from} → {to} ({}): no answer", pod.ip)),
            }
        }
        if !reached.is_empty() {
            f.ok(format!("{from} → {}", reached.join(", ")));
        }
    }
    f.check(
        CheckId::PodNetwork,
        started,
        &format!("{} node(s) reach each other's pods", probes.len()),
    )
}

/// `dns`: every probe resolved `name` to `want` through `server`.
pub fn judge_dns(
    name: &str,
    server: &str,
    want: &IpAddr,
    answers: &BTreeMap<String, Result<ProbeAnswer, String>>,
    started: Instant,
) -> Check {
    let mut f = Found::default();
    let want = want.to_string();
    for (from, answer) in answers {
        match answer.as_ref().map(|a| a.dns.as_deref()) {
            Ok(Some(got)) if got == want => f.ok(format!("{from}: {name} → {got}")),
            Ok(Some(got)) => f.bad(format!("{from}: {name} → {got}, not the Service's {want}")),
            Ok(None) => f.bad(format!("{from}: {name} not resolved through {server}")),
            Err(e) => f.bad(format!("{from}: not asked: {}", excerpt(e))),
        }
    }
    if answers.is_empty() {
        f.bad("no probe could ask".into());
    }
    f.check(
        CheckId::Dns,
        started,
        &format!(
            "{name} resolved from {} pod(s) through {server}{}",
            answers.len(),
            if server.starts_with("169.254.") || server.starts_with("fd6b:786d:") {
                " (NodeLocal DNS)"
            } else {
                ""
            }
        ),
    )
}

/// `service`: every node fetched `/node` from the Service's ClusterIP (the answer is the node
/// whose probe served it).
pub fn judge_service(
    ip: &IpAddr,
    answers: &BTreeMap<String, Result<String, String>>,
    started: Instant,
) -> Check {
    let mut f = Found::default();
    for (node, a) in answers {
        match a {
            Ok(out) => {
                let served = out.trim();
                if crate::facts::parse::is_node_name(served) {
                    f.ok(format!("{node} → {ip}:80: served by {served}'s probe"));
                } else {
                    f.bad(format!("{node} → {ip}:80: an unexpected answer"));
                }
            }
            Err(e) => f.bad(format!("{node} → {ip}:80: {}", excerpt(e))),
        }
    }
    f.check(
        CheckId::Service,
        started,
        &format!("ClusterIP {ip} reached from {} node(s)", answers.len()),
    )
}

/// `logs-exec`: on every probe's node, `kubectl exec` ran and `kubectl logs` shows its line.
pub fn judge_logs_exec(
    exec: &BTreeMap<String, Result<ProbeAnswer, String>>,
    logs: &BTreeMap<String, Result<String, String>>,
    started: Instant,
) -> Check {
    let mut f = Found::default();
    for (node, e) in exec {
        let exec_ok = e.is_ok();
        let log_ok = match logs.get(node) {
            Some(Ok(text)) => text.contains(&format!("kubexm-verify probe on {node}")),
            _ => false,
        };
        match (exec_ok, log_ok) {
            (true, true) => f.ok(format!("{node}: exec and logs through its kubelet")),
            _ => {
                let mut why = Vec::new();
                if let Err(e) = e {
                    why.push(format!("exec failed: {}", excerpt(e)));
                }
                match logs.get(node) {
                    Some(Err(e)) => why.push(format!("logs failed: {}", excerpt(e))),
                    Some(Ok(_)) if !log_ok => why.push("logs lack the probe's line".into()),
                    None => why.push("logs not asked".into()),
                    _ => {}
                }
                f.bad(format!("{node}: {}", why.join("; ")));
            }
        }
    }
    if exec.is_empty() {
        f.bad("no probe to reach".into());
    }
    f.check(
        CheckId::LogsExec,
        started,
        &format!("{} kubelet(s) serve exec and logs", exec.len()),
    )
}

/// kubectl on the API node.
struct Api<'a> {
    runner: &'a Arc<dyn Runner>,
    kubectl: String,
}

impl Api<'_> {
    /// `kubectl ARGS` (each request bounded); stdout, or why it failed.
    async fn run(
        &self,
        args: &str,
        stdin: Option<Vec<u8>>,
        limit: Duration,
    ) -> Result<String, String> {
        let mut exec = Exec::root(format!(
            "{} --request-timeout={REQUEST_TIMEOUT_S}s {args}",
            self.kubectl
        ))
        .with_timeout(limit);
        if let Some(b) = stdin {
            exec = exec.with_stdin(b);
        }
        match self.runner.exec(&exec).await {
            Ok(out) if out.success() => Ok(out.stdout),
            Ok(out) => Err(format!(
                "`kubectl {}` failed: {}",
                args.split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" "),
                excerpt(&out.stderr)
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn get(&self, args: &str) -> Result<String, String> {
        self.run(args, None, QUERY_LIMIT).await
    }
}

/// What the probe phase left for the cleanup.
#[derive(Default)]
struct State {
    created: bool,
    api_node: Option<String>,
    probe_image: Option<String>,
}

/// Runs every check against `target` within `opts.timeout`, then deletes the probes (bounded by
/// itself). `interrupted` resolves on the operator's interrupt (Ctrl-C): it is awaited during
/// the checks (they stop, the cleanup runs) and again during the cleanup (a second interrupt
/// abandons it; the report then says how to delete the namespace by hand).
pub async fn verify<I, F>(target: &Target<'_>, opts: &Options, interrupted: I) -> Report
where
    I: Fn() -> F,
    F: Future<Output = ()>,
{
    let started = Instant::now();
    let mut checks: Vec<Check> = Vec::new();
    let mut state = State::default();
    let outcome = {
        let work = run_checks(target, opts, &mut checks, &mut state);
        tokio::select! {
            r = tokio::time::timeout(opts.timeout, work) => {
                if r.is_ok() { Outcome::Complete } else { Outcome::TimedOut }
            }
            () = interrupted() => Outcome::Interrupted,
        }
    };
    for id in CheckId::ALL {
        if !checks.iter().any(|c| c.name == id) {
            checks.push(failed(
                id,
                Instant::now(),
                match outcome {
                    Outcome::Interrupted => "not run: interrupted".to_string(),
                    _ => format!(
                        "not run: the time limit of {} s ran out",
                        opts.timeout.as_secs()
                    ),
                },
            ));
        }
    }
    checks.sort_by_key(|c| c.name);
    let mut cleanup = Cleanup {
        namespace: NAMESPACE,
        created: state.created,
        removed: !state.created,
        note: None,
    };
    if state.created {
        let api = api(target);
        let delete = async {
            match &api {
                Some(api) => api.run(&delete_namespace(), None, CLEANUP_LIMIT).await,
                None => Err("no API node".into()),
            }
        };
        let result = tokio::select! {
            r = delete => r,
            () = interrupted() => Err("abandoned by a second interrupt".into()),
        };
        if let Err(e) = result {
            cleanup.note = Some(format!(
                "the probes' namespace was not deleted ({}): delete it with `kubectl delete namespace {NAMESPACE}`",
                excerpt(&e)
            ));
        } else {
            cleanup.removed = true;
        }
    }
    let result = if checks.iter().any(|c| c.status == Status::Fail) {
        Status::Fail
    } else {
        Status::Pass
    };
    Report {
        cluster: target.ctx.cluster.cluster_name().to_string(),
        result,
        outcome,
        timeout_seconds: opts.timeout.as_secs(),
        seconds: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        api_node: state.api_node,
        probe_image: state.probe_image,
        checks,
        cleanup,
    }
}

/// The probes' namespace deleted and waited for (bounded).
fn delete_namespace() -> String {
    format!(
        "delete namespace {NAMESPACE} --ignore-not-found --wait=true --timeout={CLEANUP_WAIT_S}s"
    )
}

fn api<'a>(target: &Target<'a>) -> Option<Api<'a>> {
    let node = target.facts.api_node.as_ref()?;
    let runner = target.runners.get(node)?;
    let kubectl =
        crate::modules::lifecycle::membership::kubectl_on(target.ctx, target.ctx.node(node)?)
            .ok()?
            .into_string();
    Some(Api { runner, kubectl })
}

async fn run_checks(
    target: &Target<'_>,
    opts: &Options,
    checks: &mut Vec<Check>,
    state: &mut State,
) {
    let ctx = target.ctx;
    let want = Expected::of(ctx);
    let api = api(target);
    state.api_node = api.as_ref().and(target.facts.api_node.clone());

    // Nodes.
    let t = Instant::now();
    let nodes = match &api {
        None => Err("no master's API server answered `kubectl get nodes`".to_string()),
        Some(api) => api
            .get("get nodes -o json")
            .await
            .and_then(|out| parse::nodes(&out).map_err(|e| e.to_string())),
    };
    match &nodes {
        Ok(n) => checks.push(judge_nodes(&want, &target.facts.unreachable, n, t)),
        Err(e) => checks.push(failed(CheckId::Nodes, t, excerpt(e))),
    }

    // Control plane, on every master at once.
    let t = Instant::now();
    let masters = ctx.with_role(Role::Master);
    let asks = masters.iter().map(|m| async move {
        let answer = match target.runners.get(m) {
            None => Err("unreachable over SSH".to_string()),
            Some(r) => r
                .exec(
                    &Exec::root(control_plane_script(&apiserver_host(ctx, m)))
                        .with_timeout(QUERY_LIMIT),
                )
                .await
                .map(|o| o.stdout)
                .map_err(|e| e.to_string()),
        };
        (m.clone(), answer)
    });
    let answers: BTreeMap<String, Result<String, String>> =
        join_all(asks).await.into_iter().collect();
    checks.push(judge_control_plane(&answers, t));

    // etcd, from the facts.
    checks.push(judge_etcd(
        ctx.cluster.file.spec.etcd.kind,
        target.facts,
        Instant::now(),
    ));

    // Certificates, on every node at once.
    let t = Instant::now();
    let asks = ctx.nodes.iter().map(|n| async move {
        let certs = match target.runners.get(&n.name) {
            None => Err("unreachable over SSH".to_string()),
            Some(r) => gather_node(r.as_ref()).await.map(|f| f.certificates),
        };
        (n.name.clone(), certs)
    });
    let certs: BTreeMap<_, _> = join_all(asks).await.into_iter().collect();
    checks.push(judge_certificates(&certs, opts.warn_days, t));

    let Some(api) = api else {
        // Nothing more can be asked: the remaining checks fail as not run (see verify).
        for id in [
            CheckId::Metrics,
            CheckId::PodNetwork,
            CheckId::Service,
            CheckId::Dns,
            CheckId::LogsExec,
        ] {
            checks.push(failed(
                id,
                Instant::now(),
                "not run: no master's API server answered".into(),
            ));
        }
        return;
    };
    let node_list = nodes.unwrap_or_default();
    let ready: Vec<String> = want
        .nodes
        .iter()
        .filter(|w| node_list.iter().any(|n| n.name == **w && n.ready))
        .cloned()
        .collect();

    // Metrics, where metrics-server is installed.
    let t = Instant::now();
    let installed = api
        .get("get apiservices v1beta1.metrics.k8s.io -o name --ignore-not-found")
        .await;
    match installed {
        Err(e) => checks.push(failed(CheckId::Metrics, t, excerpt(&e))),
        Ok(out) => {
            let installed = !out.trim().is_empty();
            let metrics = if installed {
                api.get("get --raw /apis/metrics.k8s.io/v1beta1/nodes")
                    .await
                    .and_then(|o| parse::node_metrics(&o).map_err(|e| e.to_string()))
            } else {
                Ok(BTreeMap::new())
            };
            checks.push(judge_metrics(
                installed,
                metrics.as_ref().map_err(Clone::clone),
                &ready,
                t,
            ));
        }
    }

    probe_checks(target, &api, &want, &node_list, checks, state).await;
}

/// The checks that need the probes: created, waited for, asked, judged.
async fn probe_checks(
    target: &Target<'_>,
    api: &Api<'_>,
    want: &Expected,
    node_list: &[VerifyNode],
    checks: &mut Vec<Check>,
    state: &mut State,
) {
    const PROBE_CHECKS: [CheckId; 4] = [
        CheckId::PodNetwork,
        CheckId::Service,
        CheckId::Dns,
        CheckId::LogsExec,
    ];
    let ctx = target.ctx;
    let t = Instant::now();
    let fail_all = |checks: &mut Vec<Check>, why: String| {
        for id in PROBE_CHECKS {
            checks.push(failed(id, t, why.clone()));
        }
    };
    let Some(reference) = probe_image(&ctx.image_references()) else {
        fail_all(
            checks,
            format!(
                "the bundle carries no probe image ({}): rebuild it with a catalog that bundles one",
                PROBE_REPOSITORIES.join(" or ")
            ),
        );
        return;
    };
    let image = match crate::modules::images::node_image(ctx, &reference) {
        Ok(i) => i,
        Err(e) => return fail_all(checks, e.to_string()),
    };
    state.probe_image = Some(image.clone());
    let service = probe_service_name(run_suffix());
    let manifest = match probe_manifest(ctx, &image, &service) {
        Ok(m) => m,
        Err(e) => return fail_all(checks, e.to_string()),
    };
    // A namespace left by an interrupted run that could not clean up: removed first.
    state.created = true;
    if let Err(e) = api.run(&delete_namespace(), None, CLEANUP_LIMIT).await {
        return fail_all(
            checks,
            format!("a previous run's probes could not be removed: {e}"),
        );
    }
    if let Err(e) = api
        .run("apply -f -", Some(manifest.into_bytes()), QUERY_LIMIT)
        .await
    {
        return fail_all(checks, format!("the probes could not be created: {e}"));
    }

    // Every schedulable node's probe Ready, or the wait's limit.
    let on = schedulable(node_list, &want.nodes);
    let pods_query = format!("get pods -n {NAMESPACE} -o json");
    let deadline = Instant::now() + PROBES_READY;
    let pods = loop {
        let pods = api
            .get(&pods_query)
            .await
            .and_then(|o| parse::pods(&o).map_err(|e| e.to_string()));
        let done = match &pods {
            Ok(p) => ready_probes(p, &on).1.is_empty(),
            Err(_) => false,
        };
        if done || Instant::now() >= deadline {
            break pods;
        }
        tokio::time::sleep(POLL).await;
    };
    let pods = match pods {
        Ok(p) => p,
        Err(e) => return fail_all(checks, format!("the probes could not be listed: {e}")),
    };
    let (probes, missing) = ready_probes(&pods, &on);
    let cluster_ip = api
        .get(&format!("get service -n {NAMESPACE} {service} -o json"))
        .await
        .and_then(|o| parse::cluster_ip(&o).map_err(|e| e.to_string()));

    // Each probe asks every other one and resolves the Service's name.
    let dns_name = format!(
        "{service}.{NAMESPACE}.svc.{}",
        ctx.cluster.file.spec.kubernetes.dns_domain
    );
    let server = crate::modules::dns::local_ips(ctx)[0].to_string();
    let script = probe_script(&dns_name, &server);
    let t_probe = Instant::now();
    let asks = probes.iter().map(|(node, pod)| {
        let peers: Vec<String> = probes
            .iter()
            .filter(|(n, _)| *n != node)
            .map(|(_, p)| p.ip.clone())
            .collect();
        let exec = format!(
            "exec -n {NAMESPACE} {} -- /bin/busybox sh -c {} probe {}",
            pod.name,
            quote(&script),
            peers.join(" ")
        );
        let logs = format!("logs -n {NAMESPACE} {} --tail=20", pod.name);
        async move {
            let answer = api
                .run(&exec, None, PROBE_LIMIT)
                .await
                .and_then(|o| parse::probe_answer(&o).map_err(|e| e.to_string()));
            let log = api.get(&logs).await;
            (node.clone(), answer, log)
        }
    });
    let mut answers = BTreeMap::new();
    let mut logs = BTreeMap::new();
    for (node, answer, log) in join_all(asks).await {
        answers.insert(node.clone(), answer);
        logs.insert(node, log);
    }
    checks.push(judge_pod_network(&probes, &missing, &answers, t_probe));

    // The Service from every node, over SSH.
    let t = Instant::now();
    match &cluster_ip {
        Err(e) => checks.push(failed(
            CheckId::Service,
            t,
            format!("the probe Service: {}", excerpt(e)),
        )),
        Ok(ip) => {
            let url = format!("http://{}:80/node", url_host(ip));
            let asks = want.nodes.iter().map(|n| {
                let url = url.clone();
                async move {
                    let answer = match target.runners.get(n) {
                        None => Err("unreachable over SSH".to_string()),
                        Some(r) => match r
                            .exec(
                                &Exec::root(format!("curl -fsS --max-time 5 {url}"))
                                    .with_timeout(QUERY_LIMIT),
                            )
                            .await
                        {
                            Ok(o) if o.success() => Ok(o.stdout),
                            Ok(o) => Err(format!("no answer: {}", excerpt(&o.stderr))),
                            Err(e) => Err(e.to_string()),
                        },
                    };
                    (n.clone(), answer)
                }
            });
            let answers: BTreeMap<_, _> = join_all(asks).await.into_iter().collect();
            checks.push(judge_service(ip, &answers, t));
        }
    }

    let t = Instant::now();
    match &cluster_ip {
        Err(e) => checks.push(failed(
            CheckId::Dns,
            t,
            format!("the probe Service: {}", excerpt(e)),
        )),
        Ok(ip) => checks.push(judge_dns(&dns_name, &server, ip, &answers, t_probe)),
    }
    checks.push(judge_logs_exec(&answers, &logs, t_probe));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::parse::{EndpointHealth, EtcdMember};

    const NODES: &str = include_str!("testdata/nodes-v1.20.2.json");
    const PODS: &str = include_str!("testdata/probe-pods.json");

    fn want() -> Expected {
        Expected {
            nodes: vec!["node1".into(), "node2".into(), "node3".into()],
            kubelet: "v1.20.2".into(),
            runtime: ("containerd".into(), Some("1.6.20".into())),
        }
    }

    #[test]
    fn each_run_names_its_probe_service_anew_and_the_manifest_uses_it() {
        let (a, b) = (
            probe_service_name(0x0012_abcd),
            probe_service_name(0xffff_ffff),
        );
        assert_eq!(a, "kubexm-verify-probe-0012abcd");
        assert_ne!(a, b);
        for n in [&a, &b] {
            assert!(
                n.len() <= 63
                    && n.bytes()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
            );
        }
        let mut c = tera::Context::new();
        c.insert("cluster", "c");
        c.insert("namespace", NAMESPACE);
        c.insert("name", PROBE_NAME);
        c.insert("service", &a);
        c.insert("port", &PROBE_PORT);
        c.insert("image", "r/busybox:1");
        let text = crate::templates::render("verify/probe.yaml.tera", &c).expect("renders");
        let docs: Vec<serde_json::Value> = text
            .split("\n---\n")
            .map(|d| kubexm_manifests::yaml::from_str(d, "probe.yaml").expect("YAML"))
            .collect();
        let of = |kind: &str| {
            docs.iter()
                .find(|d| d["kind"] == kind)
                .unwrap_or_else(|| panic!("a {kind}"))
        };
        assert_eq!(of("Service")["metadata"]["name"], a.as_str());
        assert_eq!(
            of("Service")["spec"]["selector"]["app.kubernetes.io/name"],
            PROBE_NAME
        );
        assert_eq!(of("DaemonSet")["metadata"]["name"], PROBE_NAME);
    }

    #[test]
    fn nodes_name_the_one_not_ready_and_wrong_versions() {
        let nodes = parse::nodes(NODES).expect("nodes");
        let c = judge_nodes(&want(), &BTreeSet::new(), &nodes, Instant::now());
        assert_eq!(c.status, Status::Fail);
        assert_eq!(c.failures, ["node3: NotReady (NodeStatusUnknown)"]);
        assert_eq!(
            c.evidence[0],
            "node1: Ready, kubelet v1.20.2, containerd://1.6.20"
        );

        let mut w = want();
        w.nodes.pop();
        assert_eq!(
            judge_nodes(&w, &BTreeSet::new(), &nodes, Instant::now()).status,
            Status::Pass
        );
        // A build of the recorded version passes; another version does not.
        w.runtime.1 = Some("1.7.0".into());
        let c = judge_nodes(&w, &BTreeSet::new(), &nodes, Instant::now());
        assert_eq!(c.failures.len(), 2, "{:?}", c.failures);
        assert!(c.failures[0].contains("runtime containerd://1.6.20 (recorded containerd 1.7.0)"));
        assert!(same_version("1.6.20~ds1", "1.6.20") && same_version("v1.20.2", "1.20.2"));
        assert!(!same_version("1.6.201", "1.6.20"));
        w.kubelet = "v1.21.0".into();
        w.runtime.1 = None;
        w.nodes.push("node9".into());
        let c = judge_nodes(
            &w,
            &BTreeSet::from(["node2".to_string()]),
            &nodes,
            Instant::now(),
        );
        assert!(c
            .failures
            .contains(&"node1: kubelet v1.20.2 (recorded v1.21.0)".to_string()));
        assert!(c.failures.contains(
            &"node2: kubelet v1.20.2 (recorded v1.21.0), unreachable over SSH".to_string()
        ));
        assert!(c
            .failures
            .contains(&"node9: not registered with the API server".to_string()));
    }

    #[test]
    fn control_plane_codes() {
        let mut a = BTreeMap::new();
        a.insert(
            "node1".to_string(),
            Ok("kube-apiserver 200\nkube-controller-manager 200\nkube-scheduler 200\n".to_string()),
        );
        assert_eq!(judge_control_plane(&a, Instant::now()).status, Status::Pass);
        a.insert(
            "node2".to_string(),
            Ok("kube-apiserver 401\nkube-controller-manager 000\nkube-scheduler 500\n".to_string()),
        );
        a.insert(
            "node3".to_string(),
            Err("node3: connection failed: reset".to_string()),
        );
        let c = judge_control_plane(&a, Instant::now());
        assert_eq!(
            c.failures,
            [
                "node2: kube-controller-manager does not answer on /healthz",
                "node2: kube-scheduler /healthz answered HTTP 500",
                "node3: not asked: node3: connection failed: reset",
            ]
        );
        assert!(c.evidence.contains(
            &"node2: kube-apiserver answers (HTTP 401: anonymous requests refused)".to_string()
        ));
        let s = control_plane_script("127.0.0.1");
        assert!(
            s.contains("https://127.0.0.1:6443/readyz")
                && s.contains("https://127.0.0.1:10259/healthz"),
            "{s}"
        );
        // A master whose API server binds its own address only (a load balancer on the same
        // master holds port 6443): the API server there, the others still on 127.0.0.1.
        let s = control_plane_script("10.88.1.11");
        assert!(
            s.contains("https://10.88.1.11:6443/readyz")
                && !s.contains("https://127.0.0.1:6443/")
                && s.contains("https://127.0.0.1:10257/healthz")
                && s.contains("https://127.0.0.1:10259/healthz"),
            "{s}"
        );
        assert!(control_plane_script("fd00::11").contains("https://[fd00::11]:6443/readyz"));
    }

    fn etcd(healthy: [bool; 3]) -> ClusterFacts {
        let members = (1..=3)
            .map(|i| EtcdMember {
                id: i,
                name: format!("node{i}"),
                peer_urls: vec![format!("https://10.88.10.1{i}:2380")],
                client_urls: vec![format!("https://10.88.10.1{i}:2379")],
            })
            .collect();
        let health = (1..=3)
            .map(|i| EndpointHealth {
                endpoint: format!("https://10.88.10.1{i}:2379"),
                health: healthy[i as usize - 1],
                error: (!healthy[i as usize - 1]).then(|| "context deadline exceeded".into()),
            })
            .collect();
        ClusterFacts {
            etcd: Some(EtcdFacts {
                from: "node1".into(),
                members,
                health,
            }),
            ..ClusterFacts::default()
        }
    }

    #[test]
    fn etcd_names_unhealthy_members_and_a_lost_quorum() {
        let c = judge_etcd(EtcdType::Kubexm, &etcd([true; 3]), Instant::now());
        assert_eq!(
            (c.status, c.summary.as_str()),
            (Status::Pass, "3 of 3 member(s) healthy (asked on node1)")
        );
        let c = judge_etcd(EtcdType::Kubexm, &etcd([true, false, true]), Instant::now());
        assert_eq!(c.failures, ["node2: unhealthy: context deadline exceeded"]);
        let c = judge_etcd(
            EtcdType::Kubexm,
            &etcd([true, false, false]),
            Instant::now(),
        );
        assert_eq!(
            c.failures.last().map(String::as_str),
            Some("no quorum: 1 of 3 member(s) healthy, 2 needed")
        );
        assert_eq!(
            judge_etcd(EtcdType::External, &etcd([true; 3]), Instant::now()).status,
            Status::Skip
        );
        let none = ClusterFacts {
            notes: vec!["no etcd member answered `etcdctl member list`".into()],
            ..ClusterFacts::default()
        };
        assert_eq!(
            judge_etcd(EtcdType::Kubexm, &none, Instant::now()).failures,
            ["no etcd member answered `etcdctl member list`"]
        );
    }

    fn cert(path: &str, days: i64) -> CertExpiry {
        CertExpiry {
            path: path.into(),
            subject: "kube-apiserver".into(),
            not_after: "2027-01-01T00:00:00Z".into(),
            not_after_unix: days,
            days_left: days,
        }
    }

    #[test]
    fn certificates_under_the_warning_period_fail() {
        let mut per = BTreeMap::new();
        per.insert(
            "node1".to_string(),
            Ok(vec![
                cert("/etc/kubernetes/pki/apiserver.crt", 364),
                cert("/etc/kubernetes/pki/ca.crt", 3649),
            ]),
        );
        let c = judge_certificates(&per, 90, Instant::now());
        assert_eq!(c.status, Status::Pass);
        assert_eq!(c.evidence, ["node1: 2 certificate(s), the soonest /etc/kubernetes/pki/apiserver.crt (364 day(s))"]);
        per.insert(
            "node2".to_string(),
            Ok(vec![cert("/etc/kubernetes/pki/apiserver.crt", -1)]),
        );
        per.insert("node3".to_string(), Err("node3: timed out".into()));
        let c = judge_certificates(&per, 90, Instant::now());
        assert_eq!(
            c.failures,
            [
                "node2: /etc/kubernetes/pki/apiserver.crt (kube-apiserver) expired 2027-01-01T00:00:00Z (-1 day(s) left, under 90)",
                "node3: certificates not read: node3: timed out",
            ]
        );
    }

    #[test]
    fn metrics_skip_without_metrics_server_and_name_silent_nodes() {
        let ready = vec![
            "node1".to_string(),
            "node2".to_string(),
            "node3".to_string(),
        ];
        let empty = BTreeMap::new();
        assert_eq!(
            judge_metrics(false, Ok(&empty), &ready, Instant::now()).status,
            Status::Skip
        );
        let m = parse::node_metrics(include_str!("testdata/node-metrics.json")).expect("metrics");
        let c = judge_metrics(true, Ok(&m), &ready, Instant::now());
        assert_eq!(c.failures, ["node3: no metrics"]);
        assert_eq!(c.evidence[0], "node1: cpu 212m, memory 1312544Ki");
        let c = judge_metrics(
            true,
            Err("503 ServiceUnavailable".into()),
            &ready,
            Instant::now(),
        );
        assert_eq!(
            c.failures,
            ["the metrics API does not answer: 503 ServiceUnavailable"]
        );
    }

    #[test]
    fn the_pod_network_dns_and_logs_from_probe_answers() {
        let pods = parse::pods(PODS).expect("pods");
        let nodes = parse::nodes(NODES).expect("nodes");
        // node3 is NotReady: no probe is expected there, and none is missing.
        let on = schedulable(&nodes, &want().nodes);
        assert_eq!(on, ["node1", "node2"]);
        let (probes, missing) = ready_probes(&pods, &want().nodes);
        assert_eq!(
            missing,
            ["node3: probe kubexm-verify-probe-zz8mn not ready (Pending, ImagePullBackOff)"]
        );
        let (probes_on, none_missing) = ready_probes(&pods, &on);
        assert!(none_missing.is_empty());
        assert_eq!(probes_on.len(), probes.len());

        let mut answers = BTreeMap::new();
        answers.insert(
            "node1".to_string(),
            parse::probe_answer("peer 10.244.1.3 ok node2\ndns ok 10.96.140.7\n")
                .map_err(|e| e.to_string()),
        );
        answers.insert(
            "node2".to_string(),
            parse::probe_answer("peer 10.244.0.4 fail\ndns fail\n").map_err(|e| e.to_string()),
        );
        let c = judge_pod_network(&probes, &missing, &answers, Instant::now());
        assert_eq!(c.status, Status::Fail);
        assert_eq!(
            c.failures,
            [
                "node3: probe kubexm-verify-probe-zz8mn not ready (Pending, ImagePullBackOff)",
                "node2 → node1 (10.244.0.4): no answer",
            ]
        );
        assert_eq!(c.evidence, ["node1 → node2"]);

        let ip: IpAddr = "10.96.140.7".parse().expect("ip");
        let name = "kubexm-verify-probe.kubexm-verify.svc.cluster.local";
        let c = judge_dns(name, "169.254.25.10", &ip, &answers, Instant::now());
        assert_eq!(
            c.failures,
            [format!("node2: {name} not resolved through 169.254.25.10")]
        );
        assert!(
            c.summary.ends_with("through 169.254.25.10 (NodeLocal DNS)"),
            "{}",
            c.summary
        );

        let mut logs = BTreeMap::new();
        logs.insert(
            "node1".to_string(),
            Ok("kubexm-verify probe on node1\n".to_string()),
        );
        logs.insert(
            "node2".to_string(),
            Err("error: unable to upgrade connection: 502".to_string()),
        );
        answers.insert(
            "node3".to_string(),
            Err("`kubectl exec -n kubexm-verify` failed: error dialing backend".into()),
        );
        let c = judge_logs_exec(&answers, &logs, Instant::now());
        assert_eq!(
            c.failures,
            [
                "node2: logs failed: error: unable to upgrade connection: 502",
                "node3: exec failed: `kubectl exec -n kubexm-verify` failed: error dialing backend; logs not asked",
            ]
        );
    }

    #[test]
    fn the_service_from_every_node() {
        let ip: IpAddr = "10.96.140.7".parse().expect("ip");
        let mut a = BTreeMap::new();
        a.insert("node1".to_string(), Ok("node2\n".to_string()));
        a.insert(
            "node2".to_string(),
            Err("no answer: curl: (28) Connection timed out after 5001 milliseconds".to_string()),
        );
        a.insert("node3".to_string(), Ok("<html>\u{1b}[2J".to_string()));
        let c = judge_service(&ip, &a, Instant::now());
        assert_eq!(
            c.evidence,
            ["node1 → 10.96.140.7:80: served by node2's probe"]
        );
        assert_eq!(
            c.failures,
            [
                "node2 → 10.96.140.7:80: no answer: curl: (28) Connection timed out after 5001 milliseconds",
                "node3 → 10.96.140.7:80: an unexpected answer",
            ]
        );
        assert_eq!(url_host(&"fd00::10".parse().expect("ip")), "[fd00::10]");
    }

    #[test]
    fn the_probe_image_is_the_bundles_busybox() {
        let refs = vec![
            "registry.k8s.io/pause:3.10".to_string(),
            "docker.io/library/busybox:1.36.1".to_string(),
        ];
        assert_eq!(
            probe_image(&refs).as_deref(),
            Some("docker.io/library/busybox:1.36.1")
        );
        assert_eq!(probe_image(&refs[..1]), None);
    }

    #[test]
    fn the_probe_script_quotes_its_inputs_and_bounds_every_request() {
        let s = probe_script("a.b.svc.cluster.local", "169.254.25.10");
        // Bounded by `timeout` alone: some busybox builds crash on wget's own `-T`.
        assert!(s.contains("$b timeout 5 $b wget -q -O - "), "{s}");
        assert!(!s.contains(" -T "), "{s}");
        assert!(
            s.contains("$b timeout 8 $b nslookup a.b.svc.cluster.local 169.254.25.10"),
            "{s}"
        );
        assert!(probe_script("x'y", "z").contains(r"'x'\''y'"));
    }

    #[test]
    fn a_report_in_json_and_text() {
        let t = Instant::now();
        let mut f = Found::default();
        f.ok("node1: Ready".into());
        let report = Report {
            cluster: "lab".into(),
            result: Status::Fail,
            outcome: Outcome::Complete,
            timeout_seconds: 300,
            seconds: 12.0,
            api_node: Some("node1".into()),
            probe_image: Some("10.88.0.1:5000/library/busybox:1.36.1".into()),
            checks: vec![
                f.check(
                    CheckId::Nodes,
                    t,
                    "1 node(s) Ready at the recorded versions",
                ),
                failed(CheckId::Dns, t, "node2: x not resolved\u{1b}[2J".into()),
                skip(
                    CheckId::Metrics,
                    t,
                    "metrics-server is not installed".into(),
                ),
            ],
            cleanup: Cleanup {
                namespace: NAMESPACE,
                created: true,
                removed: true,
                note: None,
            },
        };
        let mut json = serde_json::to_value(&report).expect("json");
        for c in json["checks"].as_array_mut().expect("checks") {
            c["seconds"] = 0.into();
        }
        assert_eq!(
            json,
            serde_json::json!({
                "cluster": "lab", "result": "fail", "outcome": "complete", "timeoutSeconds": 300,
                "seconds": 12.0, "apiNode": "node1", "probeImage": "10.88.0.1:5000/library/busybox:1.36.1",
                "checks": [
                    {"name": "nodes", "status": "pass", "seconds": 0, "summary": "1 node(s) Ready at the recorded versions",
                     "evidence": ["node1: Ready"], "failures": []},
                    {"name": "dns", "status": "fail", "seconds": 0, "summary": "1 problem(s)",
                     "evidence": [], "failures": ["node2: x not resolved\u{1b}[2J"]},
                    {"name": "metrics", "status": "skip", "seconds": 0, "summary": "metrics-server is not installed",
                     "evidence": [], "failures": []}
                ],
                "cleanup": {"namespace": "kubexm-verify", "created": true, "removed": true}
            })
        );
        let text = report.text();
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(text.contains("  FAIL  dns"), "{text}");
        assert!(
            text.contains("NOT verified: 1 check(s) passed, 1 failed, 1 skipped in 12.0s"),
            "{text}"
        );
    }

    /// What a run that ended with a verification leaves in its journal: the report as
    /// `verify.json` (the JSON of `verify-cluster -o json`) and one event naming what failed.
    #[test]
    fn a_report_is_recorded_beside_the_runs_journal() {
        let work = tempfile::tempdir().expect("tempdir");
        let journal = Journal::create(work.path(), "install", Vec::new())
            .expect("journal")
            .with_live_view(false);
        let t = Instant::now();
        let mut report = Report {
            cluster: "lab".into(),
            result: Status::Fail,
            outcome: Outcome::Complete,
            timeout_seconds: 300,
            seconds: 4.2,
            api_node: Some("node1".into()),
            probe_image: None,
            checks: vec![
                failed(CheckId::Nodes, t, "node3: NotReady".into()),
                skip(CheckId::Metrics, t, "not installed".into()),
                failed(CheckId::Dns, t, "node2: not resolved".into()),
            ],
            cleanup: Cleanup {
                namespace: NAMESPACE,
                created: false,
                removed: true,
                note: None,
            },
        };
        let path = report.record_in(&journal).expect("recorded");
        let dir = journal.paths().log.parent().expect("run dir").to_path_buf();
        assert_eq!(path, dir.join(JOURNAL_FILE));
        let written: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("verify.json")).expect("json");
        assert_eq!(written, serde_json::to_value(&report).expect("json"));

        report.checks.retain(|c| c.status != Status::Fail);
        report.result = Status::Pass;
        report.record_in(&journal).expect("recorded again");
        let events: Vec<serde_json::Value> = std::fs::read_to_string(&journal.paths().events)
            .expect("events")
            .lines()
            .map(|l| serde_json::from_str(l).expect("an event"))
            .collect();
        let fields = |e: &serde_json::Value| {
            (
                e["event"].as_str().unwrap_or_default().to_string(),
                e["level"].as_str().unwrap_or_default().to_string(),
                e["module"].as_str().unwrap_or_default().to_string(),
                e["message"].as_str().unwrap_or_default().to_string(),
            )
        };
        assert_eq!(
            events.iter().map(fields).collect::<Vec<_>>(),
            [
                (
                    "ClusterNotVerified".to_string(),
                    "ERROR".to_string(),
                    "verify-cluster".to_string(),
                    "verify-cluster (complete): 2 check(s) failed: nodes, dns; report in verify.json"
                        .to_string()
                ),
                (
                    "ClusterVerified".to_string(),
                    "INFO".to_string(),
                    "verify-cluster".to_string(),
                    "verify-cluster: 0 check(s) passed, 1 skipped; report in verify.json".to_string()
                ),
            ]
        );
        assert_eq!(events[0]["duration_ms"], 4200);
    }
}
