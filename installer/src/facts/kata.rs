//! What preflight learns about a node that will run Kata Containers: whether `/dev/kvm` is
//! there (Kata's QEMU needs hardware virtualization through KVM), and, as a hint for the
//! message, whether the CPU shows Intel VT-x (`vmx`) or AMD-V (`svm`) in `/proc/cpuinfo`.
//!
//! The output comes from the node and is hostile: only the two known keys with their closed
//! sets of values are read, bounded in size; anything else is skipped, and no error quotes it.

use super::parse::ParseError;
use crate::pipeline::Facts;

/// The probe (read-only).
pub const PROBE: &str = "if [ -c /dev/kvm ]; then echo kvm=yes; else echo kvm=no; fi\n\
if grep -qw vmx /proc/cpuinfo 2>/dev/null; then echo cpu=vmx; elif grep -qw svm /proc/cpuinfo 2>/dev/null; then echo cpu=svm; else echo cpu=none; fi";

/// At most this much probe output is read.
const MAX_OUTPUT: usize = 1024;

/// The CPU's virtualization extension as `/proc/cpuinfo` flags it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuVirt {
    /// Intel VT-x.
    Vmx,
    /// AMD-V.
    Svm,
    /// Neither flag (off in the firmware, a VM without nested virtualization, or another
    /// architecture, where the flags are named otherwise).
    None,
}

impl CpuVirt {
    fn as_str(self) -> &'static str {
        match self {
            Self::Vmx => "vmx",
            Self::Svm => "svm",
            Self::None => "none",
        }
    }
}

/// A node's virtualization facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvmFacts {
    /// `/dev/kvm` is a character device.
    pub kvm: bool,
    /// The CPU flag.
    pub cpu: CpuVirt,
}

fn invalid(message: &str) -> ParseError {
    ParseError::Invalid {
        what: "the KVM probe",
        message: message.into(),
    }
}

/// Reads the probe's output.
pub fn parse(out: &str) -> Result<KvmFacts, ParseError> {
    if out.len() > MAX_OUTPUT {
        return Err(invalid("more output than the probe prints"));
    }
    let (mut kvm, mut cpu) = (None, None);
    for line in out.lines() {
        match line.trim() {
            "kvm=yes" => kvm = Some(true),
            "kvm=no" => kvm = Some(false),
            "cpu=vmx" => cpu = Some(CpuVirt::Vmx),
            "cpu=svm" => cpu = Some(CpuVirt::Svm),
            "cpu=none" => cpu = Some(CpuVirt::None),
            _ => {}
        }
    }
    Ok(KvmFacts {
        kvm: kvm.ok_or_else(|| invalid("no answer about /dev/kvm"))?,
        cpu: cpu.ok_or_else(|| invalid("no answer about the CPU's flags"))?,
    })
}

/// The prefix of `node`'s KVM facts in the pipeline's [`Facts`].
pub fn fact_prefix(node: &str) -> String {
    format!("kvm/{node}/")
}

/// The [`crate::pipeline::ops::FactParser`] of the probe (keys `kvm`, `cpu`).
pub fn learn(out: &str) -> Result<Vec<(String, String)>, String> {
    parse(out)
        .map(|f| {
            vec![
                (
                    "kvm".to_string(),
                    if f.kvm { "yes" } else { "no" }.to_string(),
                ),
                ("cpu".to_string(), f.cpu.as_str().to_string()),
            ]
        })
        .map_err(|e| e.to_string())
}

impl KvmFacts {
    /// The facts learned for `node`; `None` when they were not gathered.
    pub fn from_facts(facts: &Facts, node: &str) -> Option<Self> {
        let p = fact_prefix(node);
        parse(&format!(
            "kvm={}\ncpu={}\n",
            facts.get(&format!("{p}kvm"))?,
            facts.get(&format!("{p}cpu"))?
        ))
        .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_output_round_trips_and_hostile_output_is_refused() {
        let f = parse("kvm=no\ncpu=vmx\n").expect("probe");
        assert_eq!(
            f,
            KvmFacts {
                kvm: false,
                cpu: CpuVirt::Vmx
            }
        );
        let facts = Facts::default();
        for (k, v) in learn("kvm=yes\ncpu=svm\n").expect("learn") {
            facts.set(format!("{}{k}", fact_prefix("w1")), v);
        }
        assert_eq!(
            KvmFacts::from_facts(&facts, "w1"),
            Some(KvmFacts {
                kvm: true,
                cpu: CpuVirt::Svm
            })
        );
        assert_eq!(KvmFacts::from_facts(&facts, "w2"), None);
        let e = parse("kvm=maybe\u{1b}[31m\ncpu=vmx\n")
            .expect_err("unknown value")
            .to_string();
        assert!(e.contains("/dev/kvm") && !e.contains('\u{1b}'), "{e}");
        assert!(parse("kvm=yes\n").is_err());
        assert!(parse(&"kvm=yes\n".repeat(200)).is_err());
    }
}
