//! Hostile values in every field of cluster.yaml that validation accepts and that reaches a node
//! (issue 35): no value can ever run as shell on a node.
//!
//! The cluster: the test fixture with, in every free-text field `manifests` validation still
//! accepts (host `user` and label values, the five `*Args` flag maps, registry `auths`
//! usernames and passwords, Harbor's admin password), the most hostile value it accepts: a
//! leading `-`, both quotes, `$(touch …)`, backticks, `;`, `&&`, glob characters, a space and
//! non-ASCII text (control characters, newlines included, are refused by validation:
//! `manifests/tests/it/hostile_values.rs`). Each field carries its own marker
//! (`$(touch /tmp/pwned-<field>)`), so a failure names the field.
//!
//! Every pipeline that has a plan is built from it (install on both Kubernetes paths, delete,
//! apply, add-node, renew) and every op of every step on every node is driven
//! (`is_done`, `apply`, `verify`) against a recording runner that answers every script with
//! exit 0: it collects each script exactly as a node's `sh -c` would get it, and each
//! uploaded file that is a shell script.
//!
//! Why parse instead of execute: running the scripts under a stub `PATH` would still run
//! builtins (`cd`, `printf`, `>` redirections into `/etc/…`) for real on this shared machine
//! unless every run were sandboxed in a user and mount namespace, which CI may not allow. So
//! nothing is executed. Each script is (a) checked by `sh -n` (parse only, never runs a
//! command) and (b) scanned by a small POSIX shell tokenizer ([`literal_mask`]) that knows
//! single and double quotes, backslashes, comments, `$(…)` nesting and here-documents: every
//! `$(touch /tmp/pwned…` and `` `touch /tmp/pwned…`` of a marker must start at a byte the
//! shell takes literally (inside single quotes, backslash-escaped, in a comment or in the body
//! of a quoted here-document). A `$` or backtick anywhere else would be expanded, so the value
//! would run: the test fails naming the field, the script and the place.
//!
//! What this does not prove: that a value starting with `-` is never taken as an option (that
//! is each command's `--`), and scripts run through a second `sh -c` level inside a script are
//! checked only at the outer level (their quoting is KubeXM's constant text around `quote()`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use kubexm_install::context::{load_context, InstallContext};
use kubexm_install::facts::ClusterFacts;
use kubexm_install::modules::certs::renew::Renew;
use kubexm_install::pipeline::{Facts, Pipeline};
use kubexm_install::pipelines::add_node::{add_node_pipeline, AddNodes};
use kubexm_install::pipelines::apply::apply_pipeline;
use kubexm_install::pipelines::delete::delete_pipeline;
use kubexm_install::pipelines::install_pipeline;
use kubexm_install::pipelines::renew::renew_pipeline;
use kubexm_install::record::{membership, restrict};
use kubexm_install::runner::{
    Exec, ExecOutput, RunError, Runner, Upload, UploadOutcome, UploadSource,
};
use tokio::time::timeout;

/// The fields given a hostile value: (marker, what it replaces in the fixture, the edit).
fn hostile(field: &str) -> String {
    format!("-{field} it's \\\"$(touch /tmp/pwned-{field})\\\" `touch /tmp/pwned-{field}` ;&& rm -rf *?[x] é")
}

/// The fixture with every accepted free-text field hostile; `kubeadm` for the kubeadm path
/// with Harbor.
fn cluster_text(kubeadm: bool) -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubexm/cluster.yaml"),
    )
    .expect("fixture");
    let h = |f: &str| format!("\"{}\"", hostile(f));
    let mut t = crate::common::edit(
        &text,
        "    - {name: master1, address: 192.168.50.11}\n",
        &format!(
            "    - {{name: master1, address: 192.168.50.11, user: {}}}\n",
            h("user")
        ),
    );
    t = crate::common::edit(
        &t,
        "labels: {disk: ssd}",
        &format!("labels: {{disk: {}}}", h("label")),
    );
    t = crate::common::edit(
        &t,
        "    version: v1.31.13\n",
        &format!(
            "    version: v1.31.13\n    apiserverArgs: {{audit-log-maxage: {}}}\n    controllerManagerArgs: {{v: {}}}\n    schedulerArgs: {{v: {}}}\n    kubeletArgs: {{v: {}}}\n    kubeProxyArgs: {{v: {}}}\n",
            h("apiserver"),
            h("controller"),
            h("scheduler"),
            h("kubelet"),
            h("proxy"),
        ),
    );
    let registry = if kubeadm {
        // kubeadm runs kube-proxy from its configuration file: its flags are refused there.
        t = crate::common::edit(
            &t,
            &format!("    kubeProxyArgs: {{v: {}}}\n", h("proxy")),
            "",
        );
        t = crate::common::edit(
            &t,
            "type: kubexm\n    version:",
            "type: kubeadm\n    version:",
        );
        format!(
            "    type: harbor\n    harborConfig: {{adminPassword: {}}}\n",
            h("harbor")
        )
    } else {
        "    type: registry\n".to_owned()
    };
    crate::common::edit(
        &t,
        "  registry:\n    type: registry\n",
        &format!(
            "  registry:\n{registry}    auths:\n      \"reg.example:5000\": {{username: {}, password: {}}}\n",
            h("reguser"),
            h("regpass")
        ),
    )
}

/// Fields whose value is expected in at least one script or shell file of some plan.
const REACHES_A_SCRIPT: &[&str] = &["label"];

fn load(work: &Path, text: &str) -> Arc<InstallContext> {
    let file = work.join("cluster.yaml");
    std::fs::write(&file, text).expect("write cluster.yaml");
    let catalog =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubexm/catalog-stand-in.yaml");
    Arc::new(load_context(&file, Some(&catalog), None, work).expect("the hostile cluster loads"))
}

/// A node that records every script and every uploaded shell script, and answers exit 0 with
/// no output.
#[derive(Default)]
struct Recorder {
    scripts: Mutex<Vec<String>>,
}

#[async_trait]
impl Runner for Recorder {
    fn node(&self) -> &str {
        "recorder"
    }
    async fn exec(&self, exec: &Exec) -> Result<ExecOutput, RunError> {
        self.scripts.lock().expect("lock").push(exec.script.clone());
        Ok(ExecOutput {
            code: Some(0),
            stdout: String::new(),
            stderr: String::new(),
        })
    }
    async fn upload(&self, upload: &Upload) -> Result<UploadOutcome, RunError> {
        if let UploadSource::Bytes(b) = &upload.source {
            let text = String::from_utf8_lossy(b);
            if text.starts_with("#!/bin/sh")
                || text.starts_with("#!/bin/bash")
                || text.starts_with("#!/usr/bin/env bash")
            {
                self.scripts.lock().expect("lock").push(text.into_owned());
            }
        }
        Ok(UploadOutcome::Uploaded(0))
    }
}

/// How long one op may wait on the recorder's answers.
const POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// A script a node would get.
struct Script {
    text: String,
    /// Built with planning facts: a value only a node knows (learned by an earlier step) is a
    /// `<placeholder>`, so the text is checked for expansions but not for syntax.
    placeholders: bool,
}

/// Every script every op of `pipeline` sends to any node, without repeats. Steps are built with
/// empty facts; a step that needs a learned value is built with planning facts instead.
async fn scripts_of(pipeline: &Pipeline, ctx: &InstallContext) -> Vec<Script> {
    let nodes = ctx.plan_nodes();
    let planning = Facts::default().for_plan();
    let runner = Recorder::default();
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for m in &pipeline.modules {
        if m.skip().is_some() {
            continue;
        }
        for t in m.tasks().expect("tasks") {
            for s in &t.steps {
                for h in &t.hosts {
                    let node = nodes.iter().find(|n| &n.name == h).expect("a node");
                    let (ops, placeholders) = match s.ops(node, &Facts::default()) {
                        Ok(ops) => (ops, false),
                        Err(_) => match s.ops(node, &planning) {
                            Ok(ops) => (ops, true),
                            Err(_) => continue,
                        },
                    };
                    for op in &ops {
                        let g = op.generic();
                        // Only the scripts matter, not whether the recorder's answers satisfy
                        // the op (a wait that polls for an answer it never gets is cut short:
                        // its script is recorded on the first poll).
                        let _ = timeout(POLL, g.is_done(&runner)).await;
                        let _ = timeout(POLL, g.apply_noted(&runner)).await;
                        let _ = timeout(POLL, g.verify(&runner)).await;
                    }
                    let recorded = std::mem::take(&mut *runner.scripts.lock().expect("lock"));
                    for text in recorded {
                        if seen.insert(text.clone()) {
                            out.push(Script { text, placeholders });
                        }
                    }
                }
            }
        }
    }
    out
}

/// For each byte of `script`: does the shell take it literally (never expands it)?
fn literal_mask(script: &str) -> Vec<bool> {
    #[derive(Clone, Copy, PartialEq)]
    enum Q {
        Plain,
        Single,
        Double,
    }
    let b = script.as_bytes();
    let mut mask = vec![false; b.len()];
    // A stack of (quoting, open parentheses) per `$(` level.
    let mut stack: Vec<(Q, usize)> = vec![(Q::Plain, 0)];
    // Here-documents waiting for the next newline: (delimiter, quoted, strip tabs).
    let mut pending: Vec<(String, bool, bool)> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let (q, depth) = *stack.last().expect("a level");
        let c = b[i];
        match q {
            Q::Single => {
                if c == b'\'' {
                    stack.last_mut().expect("a level").0 = Q::Plain;
                } else {
                    mask[i] = true;
                }
                i += 1;
            }
            Q::Double => {
                match c {
                    b'"' => stack.last_mut().expect("a level").0 = Q::Plain,
                    b'\\' if i + 1 < b.len() => {
                        mask[i + 1] = true;
                        i += 1;
                    }
                    b'$' if b.get(i + 1) == Some(&b'(') => {
                        stack.push((Q::Plain, 0));
                        i += 1;
                    }
                    b'$' | b'`' => {}
                    _ => mask[i] = true,
                }
                i += 1;
            }
            Q::Plain => {
                match c {
                    b'\'' => stack.last_mut().expect("a level").0 = Q::Single,
                    b'"' => stack.last_mut().expect("a level").0 = Q::Double,
                    b'\\' if i + 1 < b.len() => {
                        mask[i + 1] = true;
                        i += 1;
                    }
                    b'#' if i == 0 || b" \t\n;&|(".contains(&b[i - 1]) => {
                        while i < b.len() && b[i] != b'\n' {
                            mask[i] = true;
                            i += 1;
                        }
                        continue;
                    }
                    b'$' if b.get(i + 1) == Some(&b'(') => {
                        stack.push((Q::Plain, 0));
                        i += 1;
                    }
                    b'(' => stack.last_mut().expect("a level").1 += 1,
                    b')' if depth > 0 => stack.last_mut().expect("a level").1 -= 1,
                    b')' if stack.len() > 1 => {
                        stack.pop();
                    }
                    b'<' if b.get(i + 1) == Some(&b'<') && b.get(i + 2) != Some(&b'<') => {
                        i += 2;
                        let strip = b.get(i) == Some(&b'-');
                        if strip {
                            i += 1;
                        }
                        while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
                            i += 1;
                        }
                        let mut word = String::new();
                        let mut quoted = false;
                        while i < b.len() && !b" \t\n;&|<>()".contains(&b[i]) {
                            if b[i] == b'\'' || b[i] == b'"' || b[i] == b'\\' {
                                quoted = true;
                            } else {
                                word.push(char::from(b[i]));
                            }
                            i += 1;
                        }
                        pending.push((word, quoted, strip));
                        continue;
                    }
                    b'\n' if !pending.is_empty() => {
                        i += 1;
                        for (word, quoted, strip) in std::mem::take(&mut pending) {
                            while i < b.len() {
                                let end = b[i..]
                                    .iter()
                                    .position(|&x| x == b'\n')
                                    .map_or(b.len(), |p| i + p);
                                let line = &script[i..end];
                                let line = if strip {
                                    line.trim_start_matches('\t')
                                } else {
                                    line
                                };
                                let is_end = line == word;
                                if !is_end && quoted {
                                    mask[i..end].iter_mut().for_each(|m| *m = true);
                                }
                                i = (end + 1).min(b.len());
                                if is_end {
                                    break;
                                }
                            }
                        }
                        continue;
                    }
                    _ => {}
                }
                i += 1;
            }
        }
    }
    mask
}

/// The places in `script` where a marker's `$(` or backtick would be expanded.
fn expanded_markers(script: &str) -> Vec<String> {
    let mask = literal_mask(script);
    let mut out = Vec::new();
    for needle in ["$(touch /tmp/pwned-", "`touch /tmp/pwned-"] {
        for (at, _) in script.match_indices(needle) {
            if !mask[at] {
                let field: String = script[at + needle.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric())
                    .collect();
                let from = script[..at]
                    .char_indices()
                    .rev()
                    .nth(60)
                    .map_or(0, |(i, _)| i);
                let to = (at + 80).min(script.len());
                let to = (to..=script.len())
                    .find(|&i| script.is_char_boundary(i))
                    .unwrap_or(script.len());
                out.push(format!(
                    "field `{field}` expanded at …{}…",
                    &script[from..to]
                ));
            }
        }
    }
    out
}

/// `sh -n` (parse only: runs no command) on `script`; bash for bash scripts.
fn syntax_error(script: &str) -> Option<String> {
    let shell = if script.starts_with("#!/bin/bash") || script.starts_with("#!/usr/bin/env bash") {
        "bash"
    } else {
        "sh"
    };
    let mut child = Command::new(shell)
        .arg("-n")
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh -n");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("write the script");
    let out = child.wait_with_output().expect("sh -n");
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The pipelines planned, by name, with the context each is planned against.
fn pipelines(work: &Path) -> Vec<(String, Pipeline, Arc<InstallContext>)> {
    let mut out = Vec::new();
    for kubeadm in [false, true] {
        let path = if kubeadm { "kubeadm" } else { "kubexm" };
        let dir = work.join(path);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let ctx = load(&dir, &cluster_text(kubeadm));
        out.push((
            format!("install ({path})"),
            install_pipeline(&ctx),
            ctx.clone(),
        ));
        out.push((
            format!("delete ({path})"),
            delete_pipeline(&ctx),
            ctx.clone(),
        ));
        out.push((
            format!("apply ({path})"),
            apply_pipeline(&ctx, None),
            ctx.clone(),
        ));
        // add-node: worker2 (with the hostile label) joins the others.
        let keep: BTreeMap<String, Vec<String>> = membership(&ctx.cluster)
            .into_iter()
            .filter(|(n, _)| n != "worker2")
            .collect();
        let cluster = restrict(ctx.cluster.clone(), &keep);
        let installed = Arc::new(InstallContext {
            nodes: kubexm_install::inventory::nodes(&cluster),
            cluster,
            bundle: None,
            pki_dir: ctx.pki_dir.clone(),
            keys: ctx.keys.clone(),
            resolution: ctx.resolution.clone(),
            os_releases: ctx.os_releases.clone(),
        });
        let facts = ClusterFacts::assumed(&installed);
        let new = ["worker2".to_owned()];
        let add = add_node_pipeline(&AddNodes {
            installed: &installed,
            desired: &ctx,
            new: &new,
            facts: &facts,
        })
        .expect("add-node pipeline");
        out.push((format!("add-node ({path})"), add, ctx.clone()));
        let renew = renew_pipeline(&Renew {
            ctx: ctx.clone(),
            id: "1700000000".into(),
            under_days: 30,
            all: true,
            masters: vec!["master1".into(), "master2".into(), "master3".into()],
            etcd: true,
            etcd_expired: false,
            kubernetes: true,
            workers: vec!["worker1".into(), "worker2".into()],
            serving: vec!["worker1".into(), "worker2".into()],
            registry: true,
        });
        out.push((format!("certs renew ({path})"), renew, ctx));
    }
    out
}

#[tokio::test]
async fn no_hostile_value_reaches_a_node_script_unquoted() {
    let work = tempfile::tempdir().expect("tempdir");
    let mut failures = Vec::new();
    let mut checked = 0;
    let mut syntax_checked = 0;
    let mut fields_seen = BTreeSet::new();
    for (name, pipeline, ctx) in pipelines(work.path()) {
        let scripts = scripts_of(&pipeline, &ctx).await;
        assert!(!scripts.is_empty(), "{name}: no script recorded");
        for Script { text, placeholders } in &scripts {
            checked += 1;
            for (at, _) in text.match_indices("/tmp/pwned-") {
                let field: String = text[at + 11..]
                    .chars()
                    .take_while(char::is_ascii_alphanumeric)
                    .collect();
                fields_seen.insert(field);
            }
            for place in expanded_markers(text) {
                failures.push(format!("{name}: {place}\n  script: {text}"));
            }
            if *placeholders {
                continue;
            }
            syntax_checked += 1;
            if let Some(e) = syntax_error(text) {
                failures.push(format!(
                    "{name}: `sh -n` refuses a script: {e}\n  script: {text}"
                ));
            }
        }
    }
    eprintln!("{checked} scripts checked, {syntax_checked} by `sh -n`; fields seen in scripts: {fields_seen:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    for f in REACHES_A_SCRIPT {
        assert!(
            fields_seen.contains(*f),
            "no script holds the hostile `{f}`: the test checks nothing for it"
        );
    }
}

#[test]
fn the_tokenizer_tells_literal_from_expanded() {
    let literal = [
        "echo '$(touch /tmp/pwned-a)'",
        "echo 'it'\\''s $(touch /tmp/pwned-a)'",
        "echo \\$(touch /tmp/pwned-a)",
        "# $(touch /tmp/pwned-a)\ntrue",
        "cat <<'EOF'\n$(touch /tmp/pwned-a)\nEOF\necho done",
        "x=\"$(echo '$(touch /tmp/pwned-a)')\"",
    ];
    for s in literal {
        assert!(expanded_markers(s).is_empty(), "taken as expanded: {s}");
    }
    let expanded = [
        "echo $(touch /tmp/pwned-a)",
        "echo \"$(touch /tmp/pwned-a)\"",
        "echo '' $(touch /tmp/pwned-a)",
        "cat <<EOF\n$(touch /tmp/pwned-a)\nEOF",
        "echo `touch /tmp/pwned-a`",
        "x=\"$(echo $(touch /tmp/pwned-a))\"",
        "echo a#b $(touch /tmp/pwned-a)",
    ];
    for s in expanded {
        assert!(!expanded_markers(s).is_empty(), "taken as literal: {s}");
    }
}
