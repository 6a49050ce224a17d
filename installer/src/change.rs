//! What the user's edited cluster.yaml changes against the installed cluster ([`diff`]): the
//! nodes added, removed or given other roles, and every other difference, which day-2
//! commands refuse (they change `spec.hosts` and `spec.roleGroups` only).

use std::collections::BTreeMap;
use std::fmt;

use kubexm_manifests::validate::{Problem, ValidCluster};
use serde_json::Value;

use crate::record::membership;

/// A node the desired cluster has and the installed one does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedNode {
    /// Its name.
    pub name: String,
    /// Its roles (sorted).
    pub roles: Vec<String>,
}

/// A node in both whose roles differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleChange {
    /// Its name.
    pub name: String,
    /// Roles it gains.
    pub gained: Vec<String>,
    /// Roles it loses.
    pub lost: Vec<String>,
}

/// The difference between the installed and the desired cluster.
#[derive(Debug, Clone, Default)]
pub struct Change {
    /// Nodes to add, in the desired file's order.
    pub added: Vec<AddedNode>,
    /// Installed nodes the desired file does not have.
    pub removed: Vec<String>,
    /// Nodes whose roles change.
    pub roles: Vec<RoleChange>,
    /// Differences day-2 commands do not make (anything but nodes and roles).
    pub problems: Vec<Problem>,
}

impl Change {
    /// Nothing differs.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.roles.is_empty()
            && self.problems.is_empty()
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return writeln!(
                f,
                "  no change: cluster.yaml describes the installed cluster"
            );
        }
        for a in &self.added {
            writeln!(f, "  + {} ({})", a.name, a.roles.join(","))?;
        }
        for r in &self.removed {
            writeln!(f, "  - {r}")?;
        }
        for r in &self.roles {
            let mut parts: Vec<String> = r.gained.iter().map(|g| format!("+{g}")).collect();
            parts.extend(r.lost.iter().map(|l| format!("-{l}")));
            writeln!(f, "  ~ {} roles {}", r.name, parts.join(" "))?;
        }
        for p in &self.problems {
            writeln!(f, "  ! {p}")?;
        }
        Ok(())
    }
}

/// At most this many other differences are listed.
const MAX_PROBLEMS: usize = 20;

/// Compares `installed` (restricted to the nodes in the cluster, see
/// [`crate::record::restrict`]) with `desired` (the user's file, read from `origin`).
pub fn diff(installed: &ValidCluster, desired: &ValidCluster, origin: &str) -> Change {
    let mut change = diff_nodes(installed, desired, origin);
    let paths = spec_differences(installed, desired, MAX_PROBLEMS);
    for (path, was, now) in paths {
        change.problems.push(Problem {
            path,
            message: format!("is {now} in {origin} but {was} in the installed cluster"),
            hint: "add-node, delete-node and etcd change only spec.hosts and spec.roleGroups: put the installed value back (the cluster.yaml last applied is kept in the work directory's clusters/<cluster>/cluster.yaml)".into(),
        });
        if change.problems.len() >= MAX_PROBLEMS {
            break;
        }
    }
    change
}

/// [`diff`] of the nodes alone: the hosts added, removed and re-roled, and the problems with
/// the cluster's name and the hosts' fields; the rest of the spec is not compared (`apply`
/// judges it, [`crate::apply_change`]).
pub fn diff_nodes(installed: &ValidCluster, desired: &ValidCluster, origin: &str) -> Change {
    let mut change = Change::default();
    let have = membership(installed);
    let want = membership(desired);
    for h in &desired.file.spec.hosts {
        let roles = want.get(&h.name).cloned().unwrap_or_default();
        match have.get(&h.name) {
            None => change.added.push(AddedNode {
                name: h.name.clone(),
                roles,
            }),
            Some(old) if *old != roles => change.roles.push(RoleChange {
                name: h.name.clone(),
                gained: roles.iter().filter(|r| !old.contains(r)).cloned().collect(),
                lost: old.iter().filter(|r| !roles.contains(r)).cloned().collect(),
            }),
            Some(_) => {}
        }
    }
    change.removed = have
        .keys()
        .filter(|n| !want.contains_key(*n))
        .cloned()
        .collect();

    let (i, d) = (&installed.file, &desired.file);
    if i.metadata.name != d.metadata.name {
        change.problems.push(Problem {
            path: "metadata.name".into(),
            message: format!(
                "is `{}` in {origin} but the installed cluster is `{}`",
                d.metadata.name, i.metadata.name
            ),
            hint: "pass the cluster.yaml of this cluster".into(),
        });
    }
    let installed_hosts: BTreeMap<&str, &kubexm_manifests::model::Host> =
        i.spec.hosts.iter().map(|h| (h.name.as_str(), h)).collect();
    for (idx, h) in d.spec.hosts.iter().enumerate() {
        let Some(old) = installed_hosts.get(h.name.as_str()) else {
            continue;
        };
        for (field, was, now) in [
            ("address", old.address.clone(), h.address.clone()),
            (
                "internalAddress",
                old.internal().to_string(),
                h.internal().to_string(),
            ),
            ("arch", old.arch.to_string(), h.arch.to_string()),
        ] {
            // An internal address that follows the address is reported once, as the address.
            let follows = field == "internalAddress"
                && old.internal_address.is_none()
                && h.internal_address.is_none();
            if was != now && !follows {
                change.problems.push(Problem {
                    path: format!("spec.hosts[{idx}].{field}"),
                    message: format!(
                        "{} has {field} `{was}` in the installed cluster and `{now}` in {origin}",
                        h.name
                    ),
                    hint: "a node keeps its addresses and architecture: delete it with `kubexm-install delete-node` and add the machine under a new name".into(),
                });
            }
        }
    }
    change
}

/// The paths where the specs of `installed` and `desired` differ outside the nodes (at most
/// `limit`), with short renderings of both values.
pub(crate) fn spec_differences(
    installed: &ValidCluster,
    desired: &ValidCluster,
    limit: usize,
) -> Vec<(String, String, String)> {
    let mut paths = Vec::new();
    differences(
        "spec",
        &spec_without_nodes(installed),
        &spec_without_nodes(desired),
        &mut paths,
        limit,
    );
    paths
}

/// `c`'s spec as JSON without `hosts` and `roleGroups` (the nodes, which day-2 commands change).
fn spec_without_nodes(c: &ValidCluster) -> Value {
    let mut v = serde_json::to_value(&c.file.spec).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.remove("hosts");
        m.remove("roleGroups");
    }
    v
}

/// Paths where `a` and `b` differ (at most `limit`), with short renderings of both values.
fn differences(
    path: &str,
    a: &Value,
    b: &Value,
    out: &mut Vec<(String, String, String)>,
    limit: usize,
) {
    if a == b || out.len() >= limit {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let null = Value::Null;
                differences(
                    &format!("{path}.{k}"),
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    out,
                    limit,
                );
            }
        }
        _ => out.push((path.to_string(), short(a), short(b))),
    }
}

fn short(v: &Value) -> String {
    // JSON rendering: strings are quoted with control characters escaped.
    let s = match v {
        Value::Null => "unset".to_string(),
        other => format!("`{other}`"),
    };
    if s.chars().count() > 80 {
        format!("{}…`", s.chars().take(78).collect::<String>())
    } else {
        s
    }
}
