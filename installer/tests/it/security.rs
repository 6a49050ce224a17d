//! `kubernetes.securityEnhancement`: the audit policy parsed back, the API server's audit flags
//! and the kubeadm mounts, the kubelet's settings, the hardening step's plan on both paths, and
//! nothing of it when off.

use std::sync::Arc;

use kubexm_install::context::InstallContext;
use kubexm_install::modules::kubeadm::config::KubeadmSettings;
use kubexm_install::modules::kubexm::control_plane::{apiserver_flags, ApiServer};
use kubexm_install::modules::kubexm::KubexmCluster;
use kubexm_install::modules::security::{self, SecurityModule, AUDIT_LOG, AUDIT_POLICY};
use kubexm_install::pipeline::{Facts, Module};
use kubexm_install::pipelines::install_pipeline;

use crate::common::Edit as _;
use crate::kubeadm::{example_context, init_text, yaml_docs};
use crate::lb::lab_context;

fn on(t: String) -> String {
    t.edit(
        "  kubernetes:\n",
        "  kubernetes:\n    securityEnhancement: true\n",
    )
}

fn kubexm(t: String) -> String {
    t.edit("type: kubeadm\n    version", "type: kubexm\n    version")
}

/// Every step and op of the pipeline's modules named in `modules`, per host, one line each.
fn plan_text(ctx: &Arc<InstallContext>, modules: &[&str]) -> String {
    let mut out = Vec::new();
    let nodes = ctx.plan_nodes();
    for module in install_pipeline(ctx).modules {
        if !modules.contains(&module.name()) {
            continue;
        }
        out.push(format!("module {}", module.name()));
        for task in module.tasks().expect("tasks") {
            out.push(format!("task {} on {}", task.name, task.hosts.join(",")));
            for step in &task.steps {
                for host in &task.hosts {
                    let node = nodes.iter().find(|n| &n.name == host).expect("node");
                    // Steps that need facts from the nodes (join credentials) are named only.
                    let Ok(ops) = step.ops(node, &Facts::default()) else {
                        out.push(format!("  step {} on {host} (needs facts)", step.name()));
                        continue;
                    };
                    if ops.is_empty() {
                        continue;
                    }
                    out.push(format!("  step {} on {host}", step.name()));
                    for op in ops {
                        let p = op.generic().plan();
                        out.push(format!("    {} {}", p.kind, p.detail));
                    }
                }
            }
        }
    }
    // The control host's temporary work directory.
    (out.join("\n") + "\n").edit(&ctx.pki_dir.display().to_string(), "WORK/pki/lab")
}

fn module_names(ctx: &Arc<InstallContext>) -> Vec<String> {
    install_pipeline(ctx)
        .modules
        .iter()
        .map(|m| m.name().to_string())
        .collect()
}

#[test]
fn the_audit_policy_logs_metadata_and_no_bodies() {
    let ctx = lab_context(on);
    let policy = security::audit_policy(&ctx).expect("policy");
    assert_eq!(policy.file.dest, AUDIT_POLICY);
    assert_eq!(policy.file.mode, 0o600);
    let text = String::from_utf8(policy.text().to_vec()).expect("utf-8");
    let docs = yaml_docs(&text);
    assert_eq!(docs.len(), 1);
    let p = &docs[0];
    assert_eq!(p["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(p["kind"], "Policy");
    assert_eq!(p["omitStages"], serde_json::json!(["RequestReceived"]));
    let rules = p["rules"].as_array().expect("rules");
    // Only None and Metadata: no request or response body is ever logged.
    for r in rules {
        let level = r["level"].as_str().expect("level");
        assert!(level == "None" || level == "Metadata", "{r}");
    }
    // Secrets, ConfigMaps and TokenReviews explicitly at Metadata, before the catch-all.
    let secrets = rules
        .iter()
        .position(|r| {
            r["resources"].as_array().is_some_and(|rs| {
                rs.iter()
                    .any(|g| g["resources"].to_string().contains("secrets"))
                    && rs
                        .iter()
                        .any(|g| g["resources"].to_string().contains("configmaps"))
                    && rs
                        .iter()
                        .any(|g| g["resources"].to_string().contains("tokenreviews"))
            })
        })
        .expect("a rule for secrets, configmaps and tokenreviews");
    assert_eq!(rules[secrets]["level"], "Metadata");
    let last = rules.last().expect("catch-all");
    assert_eq!(last, &serde_json::json!({"level": "Metadata"}));
    assert!(secrets < rules.len() - 1);
    // Health probes are not logged.
    assert!(rules
        .iter()
        .any(|r| r["level"] == "None" && r["nonResourceURLs"].to_string().contains("/livez*")));
    insta::assert_snapshot!("audit-policy", text);
}

#[test]
fn kubexm_path_api_server_audits_and_keeps_anonymous_auth() {
    let ctx = lab_context(|t| on(kubexm(t)));
    let k = KubexmCluster::new(&ctx).expect("cluster");
    let node1 = ctx.node("node1").expect("node1");
    let f = apiserver_flags(&k, node1);
    assert_eq!(f.get("audit-policy-file"), Some(AUDIT_POLICY));
    assert_eq!(f.get("audit-log-path"), Some(AUDIT_LOG));
    assert_eq!(f.get("audit-log-maxage"), Some("30"));
    assert_eq!(f.get("audit-log-maxbackup"), Some("10"));
    assert_eq!(f.get("audit-log-maxsize"), Some("100"));
    // The probes of /livez and /readyz are anonymous: never turned off.
    assert_eq!(f.get("anonymous-auth"), None);
    let files = ApiServer { k: Arc::new(k) }.files(node1).expect("files");
    assert_eq!(
        files[0].file.dest, AUDIT_POLICY,
        "the policy before the unit"
    );

    // The user's flags still win.
    let user = lab_context(|t| {
        on(kubexm(t)).edit(
            "    securityEnhancement: true\n",
            "    securityEnhancement: true\n    apiserverArgs: {audit-log-maxage: \"7\"}\n",
        )
    });
    let k = KubexmCluster::new(&user).expect("cluster");
    let f = apiserver_flags(&k, user.node("node1").expect("node1"));
    assert_eq!(f.get("audit-log-maxage"), Some("7"));

    // Off: no audit flag, no policy.
    let off = lab_context(kubexm);
    let k = KubexmCluster::new(&off).expect("cluster");
    let n = off.node("node1").expect("node1");
    assert_eq!(apiserver_flags(&k, n).get("audit-policy-file"), None);
    let files = ApiServer { k: Arc::new(k) }.files(n).expect("files");
    assert_eq!(files.len(), 1);
}

#[test]
fn kubeadm_path_mounts_the_policy_and_locks_the_kubelet() {
    let ctx = example_context(on);
    let s = KubeadmSettings::new(&ctx, Default::default()).expect("settings");
    let init = init_text(&ctx, &s, "master1", false);
    let docs = yaml_docs(&init);
    let api = &docs[1]["apiServer"];
    let args = api["extraArgs"].to_string();
    for want in [
        "audit-policy-file",
        AUDIT_POLICY,
        "audit-log-path",
        AUDIT_LOG,
        "audit-log-maxage",
        "audit-log-maxbackup",
        "audit-log-maxsize",
    ] {
        assert!(args.contains(want), "{want} missing from {args}");
    }
    assert!(!args.contains("anonymous-auth"), "{args}");
    let volumes = api["extraVolumes"].as_array().expect("extraVolumes");
    assert_eq!(volumes.len(), 2);
    assert_eq!(volumes[0]["hostPath"], "/etc/kubernetes/audit");
    assert_eq!(volumes[0]["mountPath"], "/etc/kubernetes/audit");
    assert_eq!(volumes[0]["readOnly"], true);
    assert_eq!(volumes[1]["hostPath"], "/var/log/kubernetes/audit");
    assert_eq!(volumes[1]["readOnly"], false);
    let kubelet = &docs[2];
    assert_eq!(kubelet["kind"], "KubeletConfiguration");
    assert_eq!(kubelet["authentication"]["anonymous"]["enabled"], false);
    assert_eq!(kubelet["authentication"]["webhook"]["enabled"], true);
    assert_eq!(kubelet["authorization"]["mode"], "Webhook");
    assert_eq!(kubelet["readOnlyPort"], 0);
    insta::assert_snapshot!("kubeadm-init-security-enhancement", init);

    // Off: none of it.
    let off = example_context(|t| t);
    let s = KubeadmSettings::new(&off, Default::default()).expect("settings");
    let init = init_text(&off, &s, "master1", false);
    for absent in ["audit", "extraVolumes", "anonymous", "readOnlyPort"] {
        assert!(!init.contains(absent), "{absent} in\n{init}");
    }
}

#[test]
fn kubeadm_path_plan_with_security_enhancement() {
    let ctx = lab_context(on);
    let names = module_names(&ctx);
    let at = |m: &str| names.iter().position(|x| x == m).expect(m);
    assert!(at("kubeadm") < at("security-enhancement"));
    assert!(at("security-enhancement") < at("network"));
    let plan = plan_text(&ctx, &["kubeadm", "security-enhancement"]);
    let policy = plan
        .find("template security/audit-policy.yaml.tera")
        .expect("policy");
    let init = plan.find("kubeadm init").expect("init");
    assert!(
        policy < init,
        "the policy is there before kubeadm init\n{plan}"
    );
    assert!(
        plan.contains("task harden-file-modes on node1,node2,node3"),
        "{plan}"
    );
    insta::assert_snapshot!("kubeadm-plan-security-enhancement", plan);

    assert!(!module_names(&lab_context(|t| t)).contains(&"security-enhancement".to_string()));
    let reason = SecurityModule(lab_context(|t| t)).skip().expect("skipped");
    assert!(reason.contains("securityEnhancement"), "{reason}");
}

#[test]
fn kubexm_path_plan_with_security_enhancement() {
    let ctx = lab_context(|t| on(kubexm(t)));
    let plan = plan_text(&ctx, &["kubexm-control-plane", "security-enhancement"]);
    let policy = plan
        .find("security/audit-policy.yaml.tera")
        .expect("policy");
    let unit = plan.find("kubexm/service.tera").expect("unit");
    assert!(policy < unit, "{plan}");
    assert!(plan.contains("/var/log/kubernetes/audit (700)"), "{plan}");
    insta::assert_snapshot!("kubexm-plan-security-enhancement", plan);
}

#[test]
fn delete_removes_the_audit_files_and_the_record_only_when_enabled() {
    use kubexm_install::pipelines::delete_pipeline;
    let names = |ctx: &Arc<InstallContext>| -> Vec<String> {
        delete_pipeline(ctx)
            .modules
            .iter()
            .map(|m| m.name().to_string())
            .collect()
    };
    let ctx = lab_context(on);
    let n = names(&ctx);
    let at = |m: &str| n.iter().position(|x| x == m).expect(m);
    assert!(
        at("delete-kubeadm").max(at("delete-kubexm")) < at("security-enhancement"),
        "{n:?}"
    );
    let ops = security::delete_ops();
    let p = ops[0].generic().plan();
    assert!(
        p.detail.contains(
            "rm -rf -- /etc/kubernetes/audit /var/log/kubernetes/audit /var/lib/kubexm/security"
        ),
        "{}",
        p.detail
    );
    assert!(!names(&lab_context(|t| t)).contains(&"security-enhancement".to_string()));
}
