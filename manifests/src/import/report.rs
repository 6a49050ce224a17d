//! What an import did: the fields mapped, the fields that do not map (each with why) and the
//! choices the importer made where KubeKey and KubeXM differ.

use serde::Serialize;

/// A KubeKey field that is not in the imported cluster.yaml.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unmapped {
    /// Field path in the KubeKey file (`spec.etcd.heartbeatInterval`).
    pub field: String,
    /// The value, shortened, secrets redacted.
    pub value: String,
    /// Why it does not map, and what to do when it matters.
    pub reason: String,
}

/// A value KubeXM needs that the importer chose or changed, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// Field of the written cluster.yaml (`spec.loadBalancer.mode`).
    pub field: String,
    /// What was decided.
    pub what: String,
}

/// The whole account of one import.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// `apiVersion`/`kind` of the source(s), e.g. `kubekey.kubesphere.io/v1alpha2 Cluster`.
    pub source: String,
    /// Number of KubeKey fields carried into cluster.yaml.
    pub mapped: usize,
    /// Fields that do not map.
    pub unmapped: Vec<Unmapped>,
    /// Choices made where the formats differ.
    pub decisions: Vec<Decision>,
}

impl Report {
    /// The report as comment lines for the top of the written cluster.yaml.
    pub fn as_comments(&self, origin: &str) -> String {
        let mut out = format!(
            "# Imported from {origin} ({}) by `kubexm-build import kubekey`.\n",
            self.source
        );
        if !self.decisions.is_empty() {
            out.push_str("#\n# Decided by the importer:\n");
            for d in &self.decisions {
                out.push_str(&format!("#   {}: {}\n", d.field, one_line(&d.what)));
            }
        }
        if self.unmapped.is_empty() {
            out.push_str("#\n# Every KubeKey field was mapped.\n");
        } else {
            out.push_str(&format!(
                "#\n# Not mapped ({} field{}):\n",
                self.unmapped.len(),
                if self.unmapped.len() == 1 { "" } else { "s" }
            ));
            for u in &self.unmapped {
                out.push_str(&format!(
                    "#   {} = {}: {}\n",
                    u.field,
                    one_line(&u.value),
                    one_line(&u.reason)
                ));
            }
        }
        out
    }
}

impl Report {
    /// The report for a terminal: decisions, then each unmapped field with its value and why.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        if !self.decisions.is_empty() {
            out.push_str("decided by the importer:\n");
            for d in &self.decisions {
                out.push_str(&format!(
                    "  {}\n      {}\n",
                    one_line(&d.field),
                    one_line(&d.what)
                ));
            }
        }
        if !self.unmapped.is_empty() {
            out.push_str(&format!("not mapped ({}):\n", self.unmapped.len()));
            for u in &self.unmapped {
                out.push_str(&format!(
                    "  {} = {}\n      {}\n",
                    one_line(&u.field),
                    one_line(&u.value),
                    one_line(&u.reason)
                ));
            }
        }
        out
    }
}

fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}
