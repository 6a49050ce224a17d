//! The registry host can run Harbor (issue 19, prechecks; `registry.type: harbor`).
//!
//! KubeXM brings docker and docker compose itself (the bundle's static docker engine and
//! compose binary, [`crate::modules::registry::harbor`]), so the check is about what it cannot
//! bring, decided on the control host from the facts the registry host reports
//! ([`crate::facts::harbor`]):
//!
//! * the machine is amd64: Harbor's offline installer holds amd64 images only (refused);
//! * the filesystem that will hold Harbor's data directory (`registry.dataDir`, default
//!   `/var/lib/kubexm-harbor`) has `spec.system.preflight.harborMinFreeDiskGiB` free (default
//!   40, Harbor's documented minimum; refused below, a warning once KubeXM's Harbor runs there);
//! * ports 80 and 443 (or `harborConfig.httpsPort`), where Harbor's nginx listens, are free
//!   (refused naming the process), unless KubeXM's Harbor is installed and docker's proxy holds
//!   them (a re-run);
//! * 2 CPUs and 4 GB of memory, Harbor's documented minimum (warnings: Harbor starts with less).

use std::sync::Arc;

use kubexm_manifests::model::RegistryType;
use kubexm_manifests::resolve::Role;

use crate::context::InstallContext;
use crate::facts::harbor::{self as facts, HarborHostFacts, MachineArch};
use crate::modules::registry::harbor::{DATA_DIR, HTTP_PORT, STAMP};
use crate::pipeline::ops::{LearnFacts, Op, Require, Verdict};
use crate::pipeline::{Facts, Node, Policy, Step, StepError};

/// The disk threshold's field in cluster.yaml.
pub const DISK_FIELD: &str = "spec.system.preflight.harborMinFreeDiskGiB";
/// Harbor's documented minimum CPUs.
pub const MIN_CPUS: u32 = 2;
/// Harbor's documented minimum memory (4 GB), as `MemTotal` shows it (the kernel keeps some).
pub const MIN_MEM_MIB: u64 = 3500;

/// The rules for one cluster's Harbor host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarborRules {
    /// The registry host.
    pub host: String,
    /// Harbor's data directory.
    pub data_dir: String,
    /// The ports Harbor's nginx listens on (80 and the https port).
    pub ports: Vec<u16>,
    /// Free GiB required (0: not checked).
    pub min_free_gib: u64,
}

impl HarborRules {
    /// The rules `ctx`'s cluster sets; `None` unless Harbor runs on a registry host.
    pub fn of(ctx: &InstallContext) -> Option<Self> {
        let spec = &ctx.cluster.file.spec;
        if spec.registry.kind != RegistryType::Harbor {
            return None;
        }
        let host = ctx.with_role(Role::Registry).into_iter().next()?;
        let https = ctx
            .registry_endpoint()
            .and_then(|e| e.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()))
            .unwrap_or(443);
        let mut ports = vec![HTTP_PORT, https];
        ports.dedup();
        Some(Self {
            host,
            data_dir: spec
                .registry
                .data_dir
                .clone()
                .unwrap_or_else(|| DATA_DIR.to_string()),
            ports,
            min_free_gib: spec.system.preflight.harbor_min_free_disk(),
        })
    }

    /// The probe for the registry host.
    pub fn probe(&self) -> String {
        facts::probe(&self.data_dir, STAMP, &self.ports)
    }

    /// The rules in one line (the plan).
    pub fn describe(&self) -> String {
        let ports: Vec<String> = self.ports.iter().map(u16::to_string).collect();
        let disk = if self.min_free_gib == 0 {
            format!("free disk not checked ({DISK_FIELD}: 0)")
        } else {
            format!(
                "{} GiB free for the data directory {} ({DISK_FIELD})",
                self.min_free_gib, self.data_dir
            )
        };
        format!(
            "Harbor on {}: docker and docker compose from the bundle; an amd64 machine (Harbor's offline installer); {disk}; ports {} free for Harbor's nginx; {MIN_CPUS} CPUs and 4 GB of memory recommended",
            self.host,
            ports.join(" and ")
        )
    }

    /// The verdict for `node` with its `facts`: every problem at once.
    pub fn judge(&self, node: &str, f: &HarborHostFacts) -> Verdict {
        let mut errors = Vec::new();
        let mut warnings = Vec::new();
        if f.arch != MachineArch::Amd64 {
            errors.push(format!(
                "registry host {node} is {} (`uname -m`): Harbor's offline installer holds amd64 images only; run Harbor on an amd64 host (spec.roleGroups.registry), or use registry.type registry (the bundled registry runs on arm64 too)",
                f.arch
            ));
        }
        let need_kib = self.min_free_gib.saturating_mul(1 << 20);
        if self.min_free_gib > 0 && f.avail_kib < need_kib {
            let msg = format!(
                "registry host {node}: {} GiB free on the filesystem of Harbor's data directory {}, {} GiB required ({DISK_FIELD}, default 40: Harbor's documented minimum)",
                f.avail_kib >> 20,
                self.data_dir,
                self.min_free_gib
            );
            if f.installed {
                warnings.push(format!(
                    "{msg}; KubeXM's Harbor already runs there: free space before the registry fills up"
                ));
            } else {
                errors.push(format!(
                    "{msg}; free space there, put the data elsewhere (spec.registry.dataDir), or lower {DISK_FIELD} (0 turns the check off)"
                ));
            }
        }
        for l in &f.listeners {
            if !self.ports.contains(&l.port) {
                continue;
            }
            let ours = f.installed && l.process.as_deref() == Some("docker-proxy");
            if ours {
                continue;
            }
            let which = if l.port == HTTP_PORT {
                "http, redirects to https; fixed".to_string()
            } else {
                "https: spec.registry.harborConfig.httpsPort, or the port of privateRegistry"
                    .to_string()
            };
            errors.push(format!(
                "registry host {node}: port {} is in use by {}; Harbor's nginx listens on it ({which}); stop that service, or run Harbor on another host{}",
                l.port,
                l.process.as_deref().unwrap_or("another process"),
                if l.port == HTTP_PORT {
                    ""
                } else {
                    " or choose another https port"
                }
            ));
        }
        if f.cpus < MIN_CPUS {
            warnings.push(format!(
                "registry host {node} has {} CPU(s); Harbor documents {MIN_CPUS} at least",
                f.cpus
            ));
        }
        if f.mem_kib / 1024 < MIN_MEM_MIB {
            warnings.push(format!(
                "registry host {node} has {} MiB of memory; Harbor documents 4 GB at least",
                f.mem_kib / 1024
            ));
        }
        if errors.is_empty() {
            Ok(warnings)
        } else {
            Err(format!("{} ({})", errors.join("\n"), f.summary()))
        }
    }
}

/// Learns what the registry host has for Harbor ([`crate::facts::harbor::probe`]).
pub struct GatherHarborFacts(pub Arc<HarborRules>);

impl Step for GatherHarborFacts {
    fn name(&self) -> &str {
        "gather-harbor-host-facts"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Learn(LearnFacts {
            what: "architecture, CPUs, memory, free disk and ports for Harbor".into(),
            script: self.0.probe(),
            parse: facts::learn,
            facts: facts.clone(),
            prefix: facts::fact_prefix(&node.name),
            timeout: std::time::Duration::from_secs(60),
        })])
    }
    fn policy(&self) -> Policy {
        super::policy::check_policy()
    }
}

/// Decides from the gathered facts whether the registry host can run Harbor.
pub struct CheckHarborHost(pub Arc<HarborRules>);

impl Step for CheckHarborHost {
    fn name(&self) -> &str {
        "check-harbor-host"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Require(Require {
            what: "Harbor host".into(),
            rules: self.0.describe(),
            verdict: HarborHostFacts::from_facts(facts, &node.name)
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
    use crate::facts::harbor::parse;

    fn rules() -> HarborRules {
        HarborRules {
            host: "node1".into(),
            data_dir: DATA_DIR.into(),
            ports: vec![80, 443],
            min_free_gib: 40,
        }
    }

    fn host(extra: &str, avail_gib: u64, installed: bool) -> HarborHostFacts {
        parse(&format!(
            "arch=x86_64\ncpus=4\nmemkib=8005184\navailkib={}\ninstalled={}\n{extra}",
            avail_gib << 20,
            if installed { "yes" } else { "no" }
        ))
        .expect("probe")
    }

    #[test]
    fn a_ready_host_passes_and_the_plan_names_every_rule() {
        assert_eq!(rules().judge("node1", &host("", 100, false)), Ok(vec![]));
        let d = rules().describe();
        for part in [
            "docker and docker compose from the bundle",
            "an amd64 machine",
            "40 GiB free for the data directory /var/lib/kubexm-harbor (spec.system.preflight.harborMinFreeDiskGiB)",
            "ports 80 and 443 free",
        ] {
            assert!(d.contains(part), "{part}: {d}");
        }
    }

    #[test]
    fn arm64_low_disk_and_busy_ports_are_refused_together_naming_the_host() {
        let f = parse("arch=aarch64\ncpus=1\nmemkib=2000000\navailkib=1048576\ninstalled=no\nlisten=80 nginx\nlisten=443 \n")
            .expect("probe");
        let e = rules().judge("node1", &f).expect_err("refused");
        assert!(e.contains("registry host node1 is aarch64 (`uname -m`): Harbor's offline installer holds amd64 images only"), "{e}");
        assert!(e.contains("registry host node1: 1 GiB free on the filesystem of Harbor's data directory /var/lib/kubexm-harbor, 40 GiB required"), "{e}");
        assert!(
            e.contains("lower spec.system.preflight.harborMinFreeDiskGiB"),
            "{e}"
        );
        assert!(e.contains("port 80 is in use by nginx"), "{e}");
        assert!(e.contains("port 443 is in use by another process"), "{e}");
        assert!(e.contains("choose another https port"), "{e}");
    }

    #[test]
    fn a_re_run_over_kubexm_harbor_passes_and_the_check_can_be_turned_off() {
        // docker-proxy of KubeXM's installed Harbor holds both ports; its data filled the disk.
        let f = host(
            "listen=80 docker-proxy\nlisten=443 docker-proxy\n",
            10,
            true,
        );
        let w = rules().judge("node1", &f).expect("ours");
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("KubeXM's Harbor already runs there"), "{w:?}");
        // docker-proxy without KubeXM's Harbor: another container.
        assert!(rules()
            .judge("node1", &host("listen=443 docker-proxy\n", 100, false))
            .is_err());
        // Another port is not Harbor's business; 0 turns the disk check off.
        let mut r = rules();
        r.min_free_gib = 0;
        assert_eq!(
            r.judge("node1", &host("listen=8080 java\n", 1, false)),
            Ok(vec![])
        );
        assert!(r.describe().contains("free disk not checked"));
    }

    #[test]
    fn little_cpu_or_memory_is_a_warning() {
        let f = parse("arch=x86_64\ncpus=1\nmemkib=2000000\navailkib=104857600\ninstalled=no\n")
            .expect("probe");
        let w = rules().judge("node1", &f).expect("warnings only");
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].contains("1 CPU(s)") && w[1].contains("1953 MiB"),
            "{w:?}"
        );
    }
}
