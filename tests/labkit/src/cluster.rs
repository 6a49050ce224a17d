//! Edits of the lab's cluster.yaml, on its parsed tree (not by text substitution): every edit
//! fails when it changes nothing.

use std::path::Path;

use serde_json::{json, Value};

/// A cluster.yaml as a tree.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterYaml {
    tree: Value,
}

impl ClusterYaml {
    /// Parses `text`.
    ///
    /// # Panics
    /// When it is not YAML.
    #[must_use]
    pub fn parse(text: &str) -> ClusterYaml {
        let tree = serde_saphyr::from_str::<Value>(text)
            .unwrap_or_else(|e| panic!("cluster.yaml does not parse: {e}\n{text}"));
        ClusterYaml { tree }
    }

    /// The tree.
    #[must_use]
    pub fn tree(&self) -> &Value {
        &self.tree
    }

    /// Sets the value at the JSON `pointer` (creating missing objects on the way).
    ///
    /// # Panics
    /// When a step of the way is not an object, or the value was already `value`.
    #[must_use]
    #[track_caller]
    pub fn set(mut self, pointer: &str, value: Value) -> ClusterYaml {
        let mut at = &mut self.tree;
        let keys: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
        let (last, parents) = keys.split_last().expect("a non-empty pointer");
        for k in parents {
            let Value::Object(map) = at else {
                panic!("cluster.yaml: {pointer}: `{k}`'s parent is not a map");
            };
            at = map.entry((*k).to_string()).or_insert_with(|| json!({}));
        }
        let Value::Object(map) = at else {
            panic!("cluster.yaml: {pointer}: the parent is not a map");
        };
        let old = map.insert((*last).to_string(), value.clone());
        assert!(
            old.as_ref() != Some(&value),
            "cluster.yaml: {pointer} is {value} already: the edit changes nothing"
        );
        self
    }

    /// `spec.system.osReleases: [debian-12]`: the bundle carries the OS packages as a signed
    /// repository, the nodes' only package source.
    #[must_use]
    pub fn with_os_releases(self) -> ClusterYaml {
        self.set("/spec/system/osReleases", json!(["debian-12"]))
    }

    /// `spec.system.preflight.KEY: VALUE`.
    #[must_use]
    pub fn with_preflight(self, key: &str, value: Value) -> ClusterYaml {
        self.set(&format!("/spec/system/preflight/{key}"), value)
    }

    /// `spec.roleGroups.GROUP: MEMBERS`.
    #[must_use]
    pub fn with_role_group(self, group: &str, members: &[&str]) -> ClusterYaml {
        self.set(&format!("/spec/roleGroups/{group}"), json!(members))
    }

    /// Hosts `nodes` (root, the lab key) added after the others: `(name, address)`.
    ///
    /// # Panics
    /// When `spec.hosts` is not a list.
    #[must_use]
    pub fn with_hosts(mut self, nodes: &[(&str, &str)], key: &Path) -> ClusterYaml {
        let hosts = self
            .tree
            .pointer_mut("/spec/hosts")
            .and_then(Value::as_array_mut)
            .expect("cluster.yaml: spec.hosts is a list");
        for (name, address) in nodes {
            hosts.push(json!({
                "name": name, "address": address, "user": "root",
                "privateKeyPath": key.display().to_string(),
            }));
        }
        self
    }

    /// The YAML text.
    ///
    /// # Panics
    /// When the tree cannot be written (it always can: it came from YAML).
    #[must_use]
    pub fn to_yaml(&self) -> String {
        serde_saphyr::to_string(&self.tree).expect("cluster.yaml renders")
    }

    /// Writes the YAML text to `path`.
    ///
    /// # Panics
    /// When the file cannot be written.
    pub fn write(&self, path: &Path) {
        fs_err::write(path, self.to_yaml()).expect("write cluster.yaml");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAB: &str = include_str!("../../lab/cluster.yaml");

    #[test]
    fn edits_land_where_the_bash_seds_put_them() {
        let c = ClusterYaml::parse(LAB)
            .with_os_releases()
            .with_preflight("etcdFsyncP99Ms", json!(1000))
            .with_role_group("worker", &["node[1:4]"])
            .with_hosts(&[("node4", "10.88.10.14")], Path::new("/k"));
        let again = ClusterYaml::parse(&c.to_yaml());
        assert_eq!(again, c, "the YAML written reads back the same");
        let t = again.tree();
        assert_eq!(
            t.pointer("/spec/system/osReleases/0"),
            Some(&json!("debian-12"))
        );
        assert_eq!(
            t.pointer("/spec/system/preflight/etcdFsyncP99Ms"),
            Some(&json!(1000))
        );
        assert_eq!(
            t.pointer("/spec/system/preflight/kernelModules/0"),
            Some(&json!("overlay"))
        );
        assert_eq!(t.pointer("/spec/hosts/3/name"), Some(&json!("node4")));
        assert_eq!(
            t.pointer("/spec/roleGroups/worker/0"),
            Some(&json!("node[1:4]"))
        );
    }

    #[test]
    #[should_panic(expected = "changes nothing")]
    fn an_edit_that_changes_nothing_fails() {
        let _ = ClusterYaml::parse(LAB).with_role_group("worker", &["node[1:3]"]);
    }
}
