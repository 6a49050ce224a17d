//! The etcd data disk's fdatasync latency (issue 19, prechecks; the seeds' etcd disk check):
//! on every etcd member (etcd.type kubexm: the `etcd` role; kubeadm: the masters, where the
//! stacked etcd runs), after node preparation (which installs fio from the bundle's OS packages
//! when the bundle carries them) and before etcd is installed, fio measures fdatasync in a
//! temporary directory on the data directory's filesystem ([`crate::facts::fio`]), and the
//! 99th percentile is held against `spec.system.preflight.etcdFsyncP99Ms` (default 10 ms,
//! etcd's WAL guideline). Over it, the install stops naming the node, the directory, the
//! measure and the threshold. Without fio (no OS packages in the bundle, and none on the node)
//! the check is skipped with a warning naming the node. `etcdFsyncCheck: false` turns it off.

use std::sync::Arc;
use std::time::Duration;

use kubexm_manifests::model::{EtcdType, Millis};
use kubexm_manifests::ospackages::etcd_disk_check_role;

use crate::context::InstallContext;
use crate::facts::fio::{self, FsyncFacts, Nanos};
use crate::pipeline::ops::{LearnFacts, Op, Require, Verdict};
use crate::pipeline::{Facts, Module, Node, Policy, Step, StepError, Task};

/// The threshold's field in cluster.yaml.
pub const THRESHOLD_FIELD: &str = "spec.system.preflight.etcdFsyncP99Ms";
/// The switch's field in cluster.yaml.
pub const SWITCH_FIELD: &str = "spec.system.preflight.etcdFsyncCheck";

/// The rules for one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdDiskRules {
    /// The etcd data directory (`spec.etcd.dataDir`, default `/var/lib/etcd`).
    pub data_dir: String,
    /// The largest p99 accepted.
    pub threshold: Millis,
    /// Whether fio comes from the bundle's OS packages (`spec.system.osReleases`).
    pub bundled_fio: bool,
}

impl EtcdDiskRules {
    /// The rules `ctx`'s cluster sets.
    pub fn of(ctx: &InstallContext) -> Self {
        let spec = &ctx.cluster.file.spec;
        let data_dir = spec.etcd.data_dir.clone().unwrap_or_else(|| {
            match spec.etcd.kind {
                EtcdType::Kubeadm => crate::modules::k8s::STACKED_ETCD_DATA,
                _ => crate::modules::etcd::DEFAULT_DATA_DIR,
            }
            .to_string()
        });
        Self {
            data_dir,
            threshold: spec.system.preflight.etcd_fsync_p99(),
            bundled_fio: matches!(
                crate::modules::osrepo::package_source(ctx),
                crate::pipeline::ops::PackageSource::Only { .. }
            ),
        }
    }

    /// The rules in one line (the plan).
    pub fn describe(&self) -> String {
        format!(
            "fdatasync p99 of the etcd data directory {}'s disk at most {} ({THRESHOLD_FIELD}; etcd's WAL guideline is 10 ms), measured with fio ({}; skipped with a warning where fio is missing)",
            self.data_dir,
            self.threshold,
            if self.bundled_fio {
                "from the bundle's OS packages"
            } else {
                "the node's own, if installed"
            }
        )
    }

    /// The verdict for `node` with its `facts`.
    pub fn judge(&self, node: &str, facts: &FsyncFacts) -> Verdict {
        match facts {
            FsyncFacts::Measured(m) => {
                if m.p99 <= Nanos(self.threshold.as_nanos()) {
                    return Ok(Vec::new());
                }
                let place = if m.dir == self.data_dir {
                    format!("in {}", self.data_dir)
                } else {
                    format!(
                        "in {} (the etcd data directory {} does not exist yet: it will be on this filesystem)",
                        m.dir, self.data_dir
                    )
                };
                let mount = m
                    .mount
                    .as_deref()
                    .map(|x| format!(", filesystem mounted at {x}"))
                    .unwrap_or_default();
                Err(format!(
                    "node {node}: the etcd data disk is too slow: fdatasync p99 {} measured by fio {place}{mount} ({} syncs of 2300 bytes), over the threshold of {} ({THRESHOLD_FIELD}); etcd writes its WAL with fdatasync and a slow disk costs leader elections and heartbeats. Put the etcd data directory (spec.etcd.dataDir) on a faster disk (SSD/NVMe, not shared with busy workloads), or raise {THRESHOLD_FIELD}, or turn the check off with {SWITCH_FIELD}: false",
                    m.p99, m.syncs, self.threshold
                ))
            }
            FsyncFacts::Absent => Ok(vec![format!(
                "node {node}: fio is not installed, so the etcd data disk's fdatasync latency was not measured ({}); install fio on the node, or list the node's release in spec.system.osReleases so the bundle carries fio",
                if self.bundled_fio {
                    "the bundle's OS packages should have installed it"
                } else {
                    "the bundle carries no OS packages"
                }
            )]),
            FsyncFacts::Unsupported { fio } => Ok(vec![format!(
                "node {node}: {} reports no fdatasync latency percentiles (fio 3.5 or newer does), so the etcd data disk was not measured",
                fio.as_deref().unwrap_or("the node's fio")
            )]),
            FsyncFacts::HasData => Ok(vec![format!(
                "node {node}: {} already holds etcd's data: its disk is not measured under a running member",
                self.data_dir
            )]),
        }
    }
}

/// The etcd disk module: measure, then decide, on every etcd member.
pub struct EtcdDiskModule(pub Arc<InstallContext>);

impl EtcdDiskModule {
    /// The nodes measured.
    fn members(&self) -> Vec<String> {
        etcd_disk_check_role(&self.0.cluster)
            .map(|r| self.0.with_role(r))
            .unwrap_or_default()
    }
}

impl Module for EtcdDiskModule {
    fn name(&self) -> &str {
        "etcd-disk"
    }

    fn skip(&self) -> Option<String> {
        let spec = &self.0.cluster.file.spec;
        if !spec.system.preflight.etcd_fsync_check() {
            return Some(format!(
                "{SWITCH_FIELD} is false: the etcd data disk's fdatasync latency is not measured"
            ));
        }
        if spec.etcd.kind == EtcdType::External {
            return Some("etcd.type is external: its disks are not KubeXM's to measure".into());
        }
        None
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let rules = Arc::new(EtcdDiskRules::of(&self.0));
        if !rules.data_dir.starts_with('/') {
            return Err(StepError::Invalid(format!(
                "spec.etcd.dataDir `{}` is not an absolute path",
                kubexm_manifests::display::UntrustedMax(&rules.data_dir, 80)
            )));
        }
        let members = self.members();
        Ok(vec![
            Task::new("measure-etcd-disk", members.clone()).step(MeasureEtcdDisk(rules.clone())),
            Task::new("check-etcd-disk", members).step(CheckEtcdDisk(rules)),
        ])
    }
}

/// Measures the data disk's fdatasync latency with fio ([`crate::facts::fio::probe_script`]).
pub struct MeasureEtcdDisk(pub Arc<EtcdDiskRules>);

impl Step for MeasureEtcdDisk {
    fn name(&self) -> &str {
        "measure-etcd-disk"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Learn(LearnFacts {
            what: "the etcd data disk's fdatasync latency (fio)".into(),
            script: fio::probe_script(&self.0.data_dir),
            parse: fio::learn,
            facts: facts.clone(),
            prefix: fio::fact_prefix(&node.name),
            timeout: Duration::from_secs(fio::PROBE_TIMEOUT_SECS + 30),
        })])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: Duration::from_secs(fio::PROBE_TIMEOUT_SECS + 60),
            attempts: 1,
            retry_delay: Duration::ZERO,
        }
    }
}

/// Refuses a data disk over the threshold.
pub struct CheckEtcdDisk(pub Arc<EtcdDiskRules>);

impl Step for CheckEtcdDisk {
    fn name(&self) -> &str {
        "check-etcd-disk"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Require(Require {
            what: "etcd data disk".into(),
            rules: self.0.describe(),
            verdict: FsyncFacts::from_facts(facts, &node.name)
                .map(|f| self.0.judge(&node.name, &f)),
        })])
    }
    fn policy(&self) -> Policy {
        super::policy::check_policy()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::fio::{parse, Measured};

    fn rules(ms: f64) -> EtcdDiskRules {
        EtcdDiskRules {
            data_dir: "/var/lib/etcd".into(),
            threshold: Millis::try_from(ms).expect("ms"),
            bundled_fio: true,
        }
    }

    fn measured(p99_ns: u64, dir: &str) -> FsyncFacts {
        FsyncFacts::Measured(Measured {
            p99: Nanos(p99_ns),
            syncs: 10_029,
            dir: dir.into(),
            mount: Some("/".into()),
            fio: Some("fio-3.33".into()),
        })
    }

    #[test]
    fn under_or_at_the_threshold_passes() {
        let r = rules(10.0);
        assert_eq!(
            r.judge("node1", &measured(9_999_999, "/var/lib")),
            Ok(vec![])
        );
        assert_eq!(
            r.judge("node1", &measured(10_000_000, "/var/lib")),
            Ok(vec![])
        );
        assert!(r.describe().contains(
            "fdatasync p99 of the etcd data directory /var/lib/etcd's disk at most 10 ms (spec.system.preflight.etcdFsyncP99Ms"
        ));
    }

    #[test]
    fn over_the_threshold_is_refused_naming_node_directory_measure_and_threshold() {
        // The real sample: 27.4 ms on a busy shared disk.
        let sample = parse(&format!(
            "status=measured\ndir=/var/lib\nmount=/\n#fio-json\n{}",
            include_str!("../../facts/testdata/fio-3.33-fdatasync.json")
        ))
        .expect("sample");
        let e = rules(10.0)
            .judge("node2", &sample)
            .expect_err("27 ms > 10 ms");
        for want in [
            "node node2: the etcd data disk is too slow: fdatasync p99 27.394 ms measured by fio in /var/lib (the etcd data directory /var/lib/etcd does not exist yet: it will be on this filesystem), filesystem mounted at / (10029 syncs of 2300 bytes), over the threshold of 10 ms (spec.system.preflight.etcdFsyncP99Ms)",
            "faster disk",
            "raise spec.system.preflight.etcdFsyncP99Ms",
            "spec.system.preflight.etcdFsyncCheck: false",
        ] {
            assert!(e.contains(want), "{want}\n{e}");
        }
        // Raised: passes. An absurdly low threshold refuses any real disk.
        assert_eq!(rules(30.0).judge("node2", &sample), Ok(vec![]));
        let e = rules(0.001)
            .judge("node2", &measured(105_000, "/var/lib/etcd"))
            .expect_err("tiny");
        assert!(
            e.contains("fdatasync p99 0.105 ms measured by fio in /var/lib/etcd, filesystem mounted at / (10029 syncs of 2300 bytes), over the threshold of 0.001 ms"),
            "{e}"
        );
    }

    #[test]
    fn without_a_measure_a_warning_naming_the_node() {
        let r = rules(10.0);
        let w = r.judge("node3", &FsyncFacts::Absent).expect("warning");
        assert!(
            w[0].starts_with("node node3: fio is not installed"),
            "{w:?}"
        );
        let mut own = rules(10.0);
        own.bundled_fio = false;
        let w = own.judge("node3", &FsyncFacts::Absent).expect("warning");
        assert!(w[0].contains("the bundle carries no OS packages"), "{w:?}");
        assert!(own.describe().contains("the node's own, if installed"));
        let w = r
            .judge(
                "node3",
                &FsyncFacts::Unsupported {
                    fio: Some("fio-3.1".into()),
                },
            )
            .expect("warning");
        assert!(
            w[0].contains("node node3: fio-3.1 reports no fdatasync"),
            "{w:?}"
        );
        let w = r.judge("node3", &FsyncFacts::HasData).expect("warning");
        assert!(
            w[0].contains("/var/lib/etcd already holds etcd's data"),
            "{w:?}"
        );
    }
}
