//! The cluster facts a day-2 command gathers before its plan: every master's Node list and
//! every etcd member asked at once (a broken cluster's masters each cost their whole probe
//! limit), the answers still read in cluster.yaml's order.
//!
//! The nodes are stand-ins: runners answering `kubectl get nodes` and `etcdctl` as the lab's
//! real nodes do. Each answer waits until all three nodes have been asked (a barrier), so a
//! gather that asked them one at a time would find the first node never answering.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kubexm_install::facts;
use kubexm_install::runner::{Exec, ExecOutput, RunError, Runner, Upload, UploadOutcome};
use tokio::sync::Barrier;

use crate::lb::lab_context;

/// How long a stand-in waits for the other nodes to be asked before it answers "asked alone".
const TOGETHER: Duration = Duration::from_secs(20);

struct StandIn {
    name: String,
    api_answers: bool,
    etcd_answers: bool,
    asked_nodes: Arc<Barrier>,
    asked_members: Arc<Barrier>,
}

fn node_list() -> String {
    let items: Vec<String> = (1..=3)
        .map(|i| {
            format!(
                r#"{{"metadata":{{"name":"node{i}","labels":{{"node-role.kubernetes.io/control-plane":""}}}},
                "status":{{"conditions":[{{"type":"Ready","status":"True"}}],"nodeInfo":{{"kubeletVersion":"v1.20.2"}}}}}}"#
            )
        })
        .collect();
    format!(r#"{{"items":[{}]}}"#, items.join(","))
}

fn member_list() -> String {
    let members: Vec<String> = (1..=3)
        .map(|i| {
            format!(
                r#"{{"ID":{i},"name":"node{i}","peerURLs":["https://10.88.10.1{i}:2380"],"clientURLs":["https://10.88.10.1{i}:2379"]}}"#
            )
        })
        .collect();
    format!(r#"{{"members":[{}]}}"#, members.join(","))
}

fn answer(code: i32, stdout: String, stderr: &str) -> ExecOutput {
    ExecOutput {
        code: Some(code),
        stdout,
        stderr: stderr.to_string(),
    }
}

#[async_trait]
impl Runner for StandIn {
    fn node(&self) -> &str {
        &self.name
    }
    async fn exec(&self, exec: &Exec) -> Result<ExecOutput, RunError> {
        let s = &exec.script;
        let (barrier, answers) = if s.contains("get nodes") {
            (&self.asked_nodes, self.api_answers)
        } else if s.contains("member list") {
            (&self.asked_members, self.etcd_answers)
        } else if s.contains("endpoint health") {
            let health = (1..=3)
                .map(|i| format!(r#"{{"endpoint":"https://10.88.10.1{i}:2379","health":true}}"#))
                .collect::<Vec<_>>()
                .join(",");
            return Ok(answer(0, format!("[{health}]"), ""));
        } else {
            return Ok(answer(127, String::new(), "stand-in: unexpected call"));
        };
        if tokio::time::timeout(TOGETHER, barrier.wait())
            .await
            .is_err()
        {
            return Ok(answer(1, String::new(), "asked alone"));
        }
        if self.name == "node1" && s.contains("get nodes") {
            // node1's SSH command is cut off by its limit (the runner's error names the node).
            return Err(RunError::Timeout {
                node: self.name.clone(),
                after: exec.timeout,
                summary: "kubectl get nodes".into(),
            });
        }
        Ok(match (answers, s.contains("get nodes")) {
            (true, true) => answer(0, node_list(), ""),
            (true, false) => answer(0, member_list(), ""),
            (false, true) => answer(1, String::new(), "Error from server (InternalError)"),
            (false, false) => answer(1, String::new(), "context deadline exceeded"),
        })
    }
    async fn upload(&self, _: &Upload) -> Result<UploadOutcome, RunError> {
        Ok(UploadOutcome::Uploaded(0))
    }
}

#[tokio::test]
async fn masters_and_etcd_members_are_asked_at_once_and_read_in_order() {
    // The lab cluster: node1-3 are masters and kubexm etcd members.
    let ctx = lab_context(|t| t);
    let asked_nodes = Arc::new(Barrier::new(3));
    let asked_members = Arc::new(Barrier::new(3));
    let mut runners: BTreeMap<String, Arc<dyn Runner>> = BTreeMap::new();
    for (i, name) in ["node1", "node2", "node3"].into_iter().enumerate() {
        runners.insert(
            name.to_string(),
            Arc::new(StandIn {
                name: name.to_string(),
                // node3's API server answers, node2's answers 500, node1's is cut off.
                api_answers: i == 2,
                // node1's etcd does not answer, node2's and node3's do.
                etcd_answers: i >= 1,
                asked_nodes: asked_nodes.clone(),
                asked_members: asked_members.clone(),
            }),
        );
    }
    let f = facts::gather(&ctx, &runners, BTreeSet::new()).await;
    assert!(
        !f.notes.iter().any(|n| n.contains("asked alone")),
        "a node was asked alone: {:?}",
        f.notes
    );
    assert_eq!(f.api_node.as_deref(), Some("node3"), "{:?}", f.notes);
    assert_eq!(f.nodes.len(), 3);
    assert!(f.nodes.iter().all(|n| n.ready && n.control_plane));
    // The first member in order that answered, and the failures before it, in order.
    let etcd = f.etcd.as_ref().expect("etcd facts");
    assert_eq!(etcd.from, "node2");
    assert_eq!(etcd.members.len(), 3);
    assert!(etcd.health.iter().all(|h| h.health), "{:?}", etcd.health);
    assert_eq!(f.notes.len(), 3, "{:?}", f.notes);
    assert!(
        f.notes[0].starts_with("node1: timed out after 20s running `kubectl get nodes`"),
        "{:?}",
        f.notes
    );
    assert!(f.notes[1].starts_with("node2: `kubectl get nodes` failed: Error from server"));
    assert!(f.notes[2].starts_with("node1: `etcdctl member list` failed: context deadline"));
}
