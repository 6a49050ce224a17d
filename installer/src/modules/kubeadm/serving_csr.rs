//! Kubelet serving certificates signed by the cluster CA on the kubeadm path.
//!
//! metrics-server scrapes every kubelet over HTTPS and checks its certificate against the
//! cluster CA (metrics-server README, "Requirements": "Kubelet certificate needs to be signed by
//! cluster Certificate Authority (or disable certificate validation by passing
//! `--kubelet-insecure-tls`)"). A kubeadm kubelet serves a self-signed certificate unless its
//! configuration says `serverTLSBootstrap: true` (kubeadm docs, "Certificate Management with
//! kubeadm", "Kubelet serving certificates"); it then asks for one with a CSR for the signer
//! `kubernetes.io/kubelet-serving`, which kube-controller-manager never approves by itself
//! (kubernetes docs, "Certificate Signing Requests", "Kubernetes signers"). kubespray does the
//! same with `kubelet_rotate_server_certificates` plus an approver.
//!
//! KubeXM approves those CSRs itself, never blindly: a pending CSR is approved only when
//!
//! * its signer is `kubernetes.io/kubelet-serving`;
//! * its requester (`spec.username`, set by the API server from the credentials that made it)
//!   is `system:node:<name>` for a master or worker of this cluster, and the request's subject
//!   is the same `CN=system:node:<name>`, `O=system:nodes` (the signer's permitted subjects);
//! * its usages are within `digital signature`, `key encipherment`, `server auth` and include
//!   `server auth`;
//! * every subject alternative name is that node's own: DNS names only its name (kubeadm sets
//!   the kubelet's `--hostname-override` to it), IP addresses only its `address`,
//!   `internalAddress` and, on a dual-stack cluster, `internalAddressV6` (the kubelet's
//!   `--node-ip`); no other kind of name, and at least one. A real kubelet v1.37.2's dual-stack
//!   CSR (`installer/tests/fixtures/serving-csr`) is the proof (`tests/it/kubeadm.rs`).
//!
//! A CSR that claims a cluster node but fails a check is left pending and, when that node has no
//! acceptable CSR, the step fails naming the CSR and what is wrong with it. CSRs of other
//! requesters are left alone.
//!
//! The kubelet renews its serving certificate with a new CSR late in the certificate's life
//! (`rotateCertificates`). `certs renew` approves such a CSR with the same checks, reading what
//! is pending when it runs (no wait: the kubelets are not starting), also when no certificate of
//! its own is due; so `certs schedule`'s timer approves a renewed serving CSR at its next run.
//! Any re-run of the install approves it too.
//!
//! The kubexm path needs none of this: KubeXM issues each kubelet's serving certificate
//! (`pki/kubelet.crt`, SANs the node's name and addresses) from the cluster CA itself.

use crate::runner::shell::Script;
use crate::script;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension};

use kubexm_manifests::display::escape;

use crate::context::InstallContext;
use crate::modules::k8s::kubectl;
use crate::pipeline::ops::{LearnFacts, Op, RunCommand};
use crate::pipeline::{Facts, Node, Step, StepError};
use crate::runner::shell;

/// The signer of kubelet serving certificates (kubernetes docs, "Kubernetes signers").
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// The organization every node's certificate subject has.
pub const NODES_GROUP: &str = "system:nodes";
/// The usages the signer permits (kubernetes docs, "Kubernetes signers": `["key encipherment",
/// "digital signature", "server auth"]` or without key encipherment).
pub const PERMITTED_USAGES: &[&str] = &["digital signature", "key encipherment", "server auth"];
/// The fact holding the pending serving CSRs (JSON list of [`ServingCsr`]).
pub const FACT: &str = "kubelet-serving-csrs";
/// How long the learn step waits for every node's kubelet to ask (a re-run after the CSRs were
/// garbage-collected waits this long once, then approves what is there).
pub const WAIT: Duration = Duration::from_secs(90);

/// A pending `kubernetes.io/kubelet-serving` CSR, as read from the API server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServingCsr {
    /// `metadata.name`.
    pub name: String,
    /// `spec.username`: who made it.
    pub username: String,
    /// `spec.usages`.
    pub usages: Vec<String>,
    /// The request's subject common name.
    pub common_name: String,
    /// The request's subject organizations.
    pub organizations: Vec<String>,
    /// DNS subject alternative names.
    pub dns: Vec<String>,
    /// IP subject alternative names.
    pub ips: Vec<IpAddr>,
    /// Subject alternative names of any other kind (URIs, e-mail addresses), as text.
    pub other_names: Vec<String>,
}

#[derive(Deserialize)]
struct CsrList {
    #[serde(default)]
    items: Vec<CsrItem>,
}

#[derive(Deserialize)]
struct CsrItem {
    metadata: Meta,
    spec: CsrSpec,
    #[serde(default)]
    status: Option<CsrStatus>,
}

#[derive(Deserialize)]
struct Meta {
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CsrSpec {
    #[serde(default)]
    signer_name: String,
    #[serde(default)]
    username: String,
    #[serde(default)]
    usages: Vec<String>,
    #[serde(default)]
    request: String,
}

#[derive(Deserialize)]
struct CsrStatus {
    #[serde(default)]
    conditions: Vec<serde_json::Value>,
}

/// The pending kubelet-serving CSRs of `kubectl get csr -o json` output. A CSR whose request
/// cannot be read is kept with no names (and so never approved).
pub fn pending_serving_csrs(json: &str) -> Result<Vec<ServingCsr>, String> {
    let list: CsrList = serde_json::from_str(json)
        .map_err(|e| format!("`kubectl get csr -o json` printed no CSR list: {e}"))?;
    let mut out = Vec::new();
    for item in list.items {
        if item.spec.signer_name != KUBELET_SERVING_SIGNER
            || item.status.is_some_and(|s| !s.conditions.is_empty())
        {
            continue;
        }
        let mut csr = ServingCsr {
            name: item.metadata.name,
            username: item.spec.username,
            usages: item.spec.usages,
            common_name: String::new(),
            organizations: Vec::new(),
            dns: Vec::new(),
            ips: Vec::new(),
            other_names: Vec::new(),
        };
        if let Err(e) = read_request(&item.spec.request, &mut csr) {
            csr.other_names.push(format!("<unreadable request: {e}>"));
        }
        out.push(csr);
    }
    Ok(out)
}

/// Subject and SANs of `spec.request` (base64 of a PEM `CERTIFICATE REQUEST`).
fn read_request(request: &str, csr: &mut ServingCsr) -> Result<(), String> {
    let pem = base64::engine::general_purpose::STANDARD
        .decode(request.trim())
        .map_err(|e| format!("not base64: {e}"))?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).map_err(|e| format!("not PEM: {e}"))?;
    if pem.label != "CERTIFICATE REQUEST" {
        return Err(format!("a PEM `{}` block", pem.label));
    }
    let (_, req) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&pem.contents)
            .map_err(|e| format!("not a PKCS#10 request: {e}"))?;
    let subject = &req.certification_request_info.subject;
    csr.common_name = subject
        .iter_common_name()
        .filter_map(|a| a.as_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    csr.organizations = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok().map(str::to_string))
        .collect();
    for ext in req.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext {
            for name in &san.general_names {
                match name {
                    GeneralName::DNSName(d) => csr.dns.push((*d).to_string()),
                    GeneralName::IPAddress(b) => match b.len() {
                        4 => csr
                            .ips
                            .extend(<[u8; 4]>::try_from(*b).ok().map(IpAddr::from)),
                        16 => csr
                            .ips
                            .extend(<[u8; 16]>::try_from(*b).ok().map(IpAddr::from)),
                        _ => csr.other_names.push("<malformed IP address>".into()),
                    },
                    other => csr.other_names.push(other.to_string()),
                }
            }
        }
    }
    Ok(())
}

/// The names a node's kubelet may put in its serving certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeNames {
    /// The node's name.
    pub name: String,
    /// Its addresses: `address`, `internalAddress`, and every address of the kubelet's
    /// `--node-ip` (on a dual-stack cluster also the host's `internalAddressV6`: the kubelet
    /// reports each as an InternalIP and puts every one in its serving CSR).
    pub ips: BTreeSet<IpAddr>,
}

impl NodeNames {
    /// A cluster node's names, as `ctx` configures its kubelet ([`crate::modules::dns::node_ip`]
    /// is the kubelet's `--node-ip` on both paths).
    pub fn of(ctx: &InstallContext, node: &Node) -> Self {
        let node_ip = crate::modules::dns::node_ip(ctx, node);
        let ips = [
            node.address.as_str(),
            node.internal_address.as_str(),
            node_ip.as_str(),
        ]
        .into_iter()
        .flat_map(|a| a.split(','))
        .filter_map(|a| a.trim().parse().ok())
        .collect();
        Self {
            name: node.name.clone(),
            ips,
        }
    }

    /// The names of each of `nodes` (see [`Self::of`]).
    pub fn all(ctx: &InstallContext, nodes: &[Node]) -> Vec<Self> {
        nodes.iter().map(|n| Self::of(ctx, n)).collect()
    }
}

/// Why a CSR is not approved, or the node it is approved for.
pub fn judge<'a>(csr: &ServingCsr, nodes: &'a [NodeNames]) -> Result<&'a NodeNames, String> {
    let Some(claimed) = csr.username.strip_prefix("system:node:") else {
        return Err(format!(
            "requested by `{}`, not a node",
            escape(&csr.username)
        ));
    };
    let Some(node) = nodes.iter().find(|n| n.name == claimed) else {
        return Err(format!(
            "requested by `{}`, not a node of this cluster",
            escape(&csr.username)
        ));
    };
    if csr.common_name != csr.username {
        return Err(format!(
            "its subject CN `{}` is not its requester `{}`",
            escape(&csr.common_name),
            escape(&csr.username)
        ));
    }
    if csr.organizations != [NODES_GROUP] {
        return Err(format!(
            "its subject organizations {:?} are not [\"{NODES_GROUP}\"]",
            csr.organizations
        ));
    }
    if !csr.usages.iter().any(|u| u == "server auth")
        || csr
            .usages
            .iter()
            .any(|u| !PERMITTED_USAGES.contains(&u.as_str()))
    {
        return Err(format!(
            "its usages {:?} are not within {PERMITTED_USAGES:?} with `server auth`",
            csr.usages
        ));
    }
    if !csr.other_names.is_empty() {
        return Err(format!(
            "it asks for names that are neither DNS names nor IP addresses: {}",
            escape(&csr.other_names.join(", "))
        ));
    }
    if csr.dns.is_empty() && csr.ips.is_empty() {
        return Err("it asks for no subject alternative name".into());
    }
    if let Some(d) = csr.dns.iter().find(|d| **d != node.name) {
        return Err(format!(
            "it asks for the DNS name `{}`, not the node's name `{}`",
            escape(d),
            node.name
        ));
    }
    if let Some(ip) = csr.ips.iter().find(|ip| !node.ips.contains(ip)) {
        return Err(format!(
            "it asks for the IP address {ip}, not one of the node's ({})",
            node.ips
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(node)
}

/// The CSRs to approve; an error when a node's only CSRs are refused (each named with why).
pub fn decide(csrs: &[ServingCsr], nodes: &[NodeNames]) -> Result<Vec<String>, String> {
    let mut approve = Vec::new();
    let mut approved_nodes = BTreeSet::new();
    let mut refused: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for csr in csrs {
        match judge(csr, nodes) {
            Ok(node) => {
                approve.push(csr.name.clone());
                approved_nodes.insert(node.name.clone());
            }
            Err(why) => {
                // Only a CSR claiming one of our nodes concerns the install.
                if let Some(n) = csr
                    .username
                    .strip_prefix("system:node:")
                    .filter(|n| nodes.iter().any(|x| x.name == *n))
                {
                    refused
                        .entry(n.to_string())
                        .or_default()
                        .push(format!("CSR {}: {why}", escape(&csr.name)));
                }
            }
        }
    }
    let blocking: Vec<String> = refused
        .into_iter()
        .filter(|(n, _)| !approved_nodes.contains(n))
        .map(|(n, why)| format!("node {n}: {}", why.join("; ")))
        .collect();
    if !blocking.is_empty() {
        return Err(format!(
            "kubelet serving CSRs not approved (the kubelet's certificate must name only its node): {}; check the node's hostname and addresses against cluster.yaml, then approve by hand with `kubectl certificate approve NAME` or delete the CSR and restart the kubelet",
            blocking.join(" | ")
        ));
    }
    Ok(approve)
}

/// Learns the pending kubelet-serving CSRs on the first master, after waiting (bounded) until
/// every node's kubelet has asked when `wait` says so.
pub struct LearnServingCsrs {
    /// The masters and workers.
    pub nodes: Vec<String>,
    /// Wait (at most [`WAIT`]) until every node's kubelet has asked: at install time, when the
    /// kubelets have just started. Without it (`certs renew`) the CSRs pending now are read.
    pub wait: bool,
    /// With `wait`: only a pending CSR counts as asked (`certs renew` restarted kubelets whose
    /// earlier, approved CSRs may still be listed).
    pub pending: bool,
}

impl LearnServingCsrs {
    /// The script: a bounded wait for a kubelet-serving CSR of every node (when `wait`), then the
    /// CSR list.
    pub fn script(&self) -> String {
        let k = kubectl();
        if !self.wait {
            return format!("{k} get csr -o json");
        }
        let wanted: Vec<String> = self
            .nodes
            .iter()
            .map(|n| shell::quote(&format!("system:node:{n}")))
            .collect();
        let tries = WAIT.as_secs() / 3;
        // Pending: no condition yet (jsonpath prints nothing for the missing conditions).
        let list = if self.pending {
            format!(
                "{k} get csr -o jsonpath='{{range .items[?(@.spec.signerName==\"{KUBELET_SERVING_SIGNER}\")]}}{{.spec.username}} {{.status.conditions[*].type}}{{\"\\n\"}}{{end}}' 2>/dev/null | awk 'NF == 1 {{print $1}}'"
            )
        } else {
            format!("{k} get csr -o go-template=\"$tpl\" 2>/dev/null")
        };
        format!(
            "tpl='{{{{range .items}}}}{{{{if eq .spec.signerName \"{KUBELET_SERVING_SIGNER}\"}}}}{{{{.spec.username}}}}{{{{\"\\n\"}}}}{{{{end}}}}{{{{end}}}}'\n\
             i=0\n\
             while [ $i -lt {tries} ]; do\n  \
               have=$({list}) || have=\n  \
               missing=0\n  \
               for n in {wanted}; do printf '%s\\n' \"$have\" | grep -qxF -- \"$n\" || missing=1; done\n  \
               [ $missing = 0 ] && break\n  \
               i=$((i+1)); sleep 3\n\
             done\n\
             {k} get csr -o json",
            wanted = wanted.join(" ")
        )
    }
}

/// Parses the CSR list into the [`FACT`].
fn learn(output: &str) -> Result<Vec<(String, String)>, String> {
    let csrs = pending_serving_csrs(output)?;
    let json = serde_json::to_string(&csrs).map_err(|e| e.to_string())?;
    Ok(vec![(FACT.to_string(), json)])
}

impl Step for LearnServingCsrs {
    fn name(&self) -> &str {
        "kubelet-serving-csrs"
    }
    fn ops(&self, _: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Learn(LearnFacts {
            what: "pending kubelet serving CSRs".into(),
            script: self.script(),
            parse: learn,
            facts: facts.clone(),
            prefix: String::new(),
            timeout: if self.wait { WAIT } else { Duration::ZERO } + Duration::from_secs(60),
        })])
    }
}

/// The two tasks on the first master `first` that approve the kubelet serving CSRs of `nodes`
/// (every master and worker, with their names: [`NodeNames::all`]): learn the pending ones (after a bounded wait for every node's
/// when `wait`; only a pending CSR ends that wait with `pending`, see [`LearnServingCsrs`]), then
/// approve those [`decide`] accepts. `suffix` ends the tasks' names (a second round has names of
/// its own).
pub fn approval_tasks(
    nodes: &[NodeNames],
    first: &str,
    wait: bool,
    pending: bool,
    suffix: &str,
) -> Vec<crate::pipeline::Task> {
    use crate::pipeline::Task;
    vec![
        Task::new(format!("kubelet-serving-csrs{suffix}"), [first.to_string()]).step(
            LearnServingCsrs {
                nodes: nodes.iter().map(|n| n.name.clone()).collect(),
                wait,
                pending,
            },
        ),
        Task::new(
            format!("approve-kubelet-serving-csrs{suffix}"),
            [first.to_string()],
        )
        .step(ApproveServingCsrs {
            nodes: nodes.to_vec(),
        }),
    ]
}

/// The kubelet's current serving certificate on a kubeadm node (kubelet's certificate directory).
pub const SERVING_CERT: &str = "/var/lib/kubelet/pki/kubelet-server-current.pem";
/// How long a node whose kubelet has no serving certificate after the first approval is given to
/// ask again before the CSRs are read a second time.
pub const SETTLE: Duration = Duration::from_secs(20);
/// How long the kubelets are given to fetch their approved certificates.
pub const FETCH: Duration = Duration::from_secs(90);

/// The install's approval, at its end: [`approval_tasks`] once after a bounded wait for every
/// node's CSR, then again for the nodes whose kubelet still serves no certificate, then every
/// kubelet serving its certificate (awaited, bounded; the error names the node).
///
/// The second round is for a kubelet restarted after it asked (a worker behind the internal
/// load balancer's local proxy is restarted on `127.0.0.1:6443` right after its join): its first
/// CSR is pending, so the first round's wait is over, but the key of that request died with the
/// process; the restarted kubelet asks again, maybe only after the first round read the list
/// (seen on real v1.20.2: the worker's kubelet served no certificate, `kubectl logs` failed with
/// "tls: internal error"). A node with a certificate skips the settling wait, so a re-run does
/// not wait at all.
pub fn install_approval_tasks(nodes: &[NodeNames], first: &str) -> Vec<crate::pipeline::Task> {
    use crate::pipeline::Task;
    let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    let mut tasks = approval_tasks(nodes, first, true, false, "");
    tasks.push(
        Task::new("kubelet-serving-settle", names.clone())
            .step(ServingCertificate { required: false }),
    );
    tasks.extend(approval_tasks(nodes, first, false, false, "-again"));
    tasks.push(
        Task::new("kubelet-serving-certificates", names)
            .step(ServingCertificate { required: true }),
    );
    tasks
}

/// On a node: its kubelet serves a certificate ([`SERVING_CERT`]). `required`: awaited for
/// [`FETCH`], else the step fails naming the node; otherwise a node without one is given
/// [`SETTLE`] (its kubelet asks again meanwhile) and the step succeeds either way.
pub struct ServingCertificate {
    /// Fail when the kubelet does not serve a certificate in time.
    pub required: bool,
}

impl Step for ServingCertificate {
    fn name(&self) -> &str {
        if self.required {
            "kubelet-serving-certificate"
        } else {
            "kubelet-serving-settle"
        }
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![await_serving(
            "the kubelet serving a certificate of the cluster CA (its approved CSR)".into(),
            script!("[ -s {SERVING_CERT} ]"),
            self.required.then_some(FETCH),
        )])
    }
}

/// The op that awaits `check` (a kubelet holding its serving certificate) on a node: with
/// `required`, a wait of that long that fails naming `what`; without, at most [`SETTLE`],
/// succeeding either way (a second approval round follows, for what the kubelet asks meanwhile).
pub fn await_serving(what: String, check: Script, required: Option<Duration>) -> Op {
    if let Some(timeout) = required {
        return Op::Wait(crate::pipeline::ops::WaitFor {
            what,
            check: check.into_string(),
            timeout,
            interval: Duration::from_secs(2),
        });
    }
    let tries = SETTLE.as_secs() / 2;
    Op::Run(
        RunCommand::new(script!(
            "i=0; while [ $i -lt {tries} ] && ! {{ {check}; }}; do i=$((i+1)); sleep 2; done",
            tries = tries,
            check = &check
        ))
        .unless(check)
        // (it succeeds either way: the second round approves what the kubelet asks now)
        .verify("true"),
    )
}

/// Approves the CSRs [`decide`] accepts, each with `kubectl certificate approve`.
pub struct ApproveServingCsrs {
    /// The names of every master and worker.
    pub nodes: Vec<NodeNames>,
}

impl Step for ApproveServingCsrs {
    fn name(&self) -> &str {
        "approve-kubelet-serving-csrs"
    }
    fn ops(&self, _: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        let k = kubectl();
        let Some(json) = facts.get(FACT) else {
            if facts.is_planning() {
                return Ok(self
                    .nodes
                    .iter()
                    .map(|n| {
                        Op::Run(RunCommand::new(script!(
                            "{k} certificate approve <pending {KUBELET_SERVING_SIGNER} CSR of system:node:{name}, checked>",
                            k = k,
                            name = n.name
                        )))
                    })
                    .collect());
            }
            return Err(StepError::Invalid(
                "the pending kubelet serving CSRs were not learned: the kubelet-serving-csrs task must run first".into(),
            ));
        };
        let csrs: Vec<ServingCsr> = serde_json::from_str(&json)
            .map_err(|e| StepError::Invalid(format!("learned CSR list: {e}")))?;
        let names = decide(&csrs, &self.nodes).map_err(StepError::Invalid)?;
        Ok(names
            .into_iter()
            .map(|name| {
                let q = shell::quoted(&name);
                let approved = script!(
                    "{k} get csr {q} -o jsonpath='{{.status.conditions[*].type}}' | grep -qw Approved",
                    k = k,
                    q = q
                );
                Op::Run(RunCommand {
                    unless: Some(approved.clone()),
                    verify: Some(approved),
                    timeout: Duration::from_secs(60),
                    ..RunCommand::new(script!("{k} certificate approve {q}", k = k, q = q))
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};

    /// A real PKCS#10 request as a kubelet makes it (CN=system:node:NAME, O=system:nodes).
    fn request(cn: &str, org: &str, sans: Vec<SanType>) -> String {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, cn);
        dn.push(DnType::OrganizationName, org);
        params.distinguished_name = dn;
        params.subject_alt_names = sans;
        let key = KeyPair::generate().expect("key");
        let pem = params
            .serialize_request(&key)
            .expect("csr")
            .pem()
            .expect("pem");
        base64::engine::general_purpose::STANDARD.encode(pem)
    }

    fn item(name: &str, user: &str, signer: &str, req: &str, approved: bool) -> serde_json::Value {
        let mut v = serde_json::json!({
            "metadata": {"name": name},
            "spec": {"signerName": signer, "username": user, "request": req,
                      "usages": ["digital signature", "key encipherment", "server auth"]},
            "status": {}
        });
        if approved {
            v["status"]["conditions"] = serde_json::json!([{"type": "Approved", "status": "True"}]);
        }
        v
    }

    /// Two nodes with their IPv4 address and (dual-stack) the IPv6 address of their
    /// `--node-ip`; what [`NodeNames::of`] gives for a real dual-stack context is checked in
    /// `tests/it/kubeadm.rs`.
    fn nodes() -> Vec<NodeNames> {
        ["master1=10.88.10.11", "worker1=10.88.10.14"]
            .iter()
            .map(|s| {
                let (n, ip) = s.split_once('=').expect("pair");
                NodeNames {
                    name: n.into(),
                    ips: [ip.to_string(), format!("fd00::{}", &ip[ip.len() - 2..])]
                        .iter()
                        .map(|a| a.parse().expect("ip"))
                        .collect(),
                }
            })
            .collect()
    }

    fn ip(s: &str) -> SanType {
        SanType::IpAddress(s.parse().expect("ip"))
    }

    fn dns(s: &str) -> SanType {
        SanType::DnsName(s.try_into().expect("dns"))
    }

    #[test]
    fn only_pending_kubelet_serving_csrs_are_read_with_their_names() {
        let good = request(
            "system:node:master1",
            NODES_GROUP,
            vec![dns("master1"), ip("10.88.10.11")],
        );
        let list = serde_json::json!({"items": [
            item("csr-a", "system:node:master1", KUBELET_SERVING_SIGNER, &good, false),
            item("csr-b", "system:node:master1", KUBELET_SERVING_SIGNER, &good, true),
            item("csr-c", "system:node:master1", "kubernetes.io/kube-apiserver-client-kubelet", &good, false),
        ]});
        let csrs = pending_serving_csrs(&list.to_string()).expect("parsed");
        assert_eq!(csrs.len(), 1, "{csrs:?}");
        assert_eq!(csrs[0].name, "csr-a");
        assert_eq!(csrs[0].common_name, "system:node:master1");
        assert_eq!(csrs[0].organizations, [NODES_GROUP]);
        assert_eq!(csrs[0].dns, ["master1"]);
        assert_eq!(csrs[0].ips, ["10.88.10.11".parse::<IpAddr>().expect("ip")]);
        assert!(pending_serving_csrs("not json").is_err());
    }

    fn csr(user: &str, cn: &str, sans: Vec<SanType>) -> ServingCsr {
        let req = request(cn, NODES_GROUP, sans);
        let list = serde_json::json!({"items": [item("csr-x", user, KUBELET_SERVING_SIGNER, &req, false)]});
        pending_serving_csrs(&list.to_string())
            .expect("parsed")
            .remove(0)
    }

    #[test]
    fn a_nodes_own_names_are_approved_anything_else_is_refused() {
        let nodes = nodes();
        let ok = csr(
            "system:node:worker1",
            "system:node:worker1",
            vec![dns("worker1"), ip("10.88.10.14"), ip("fd00::14")],
        );
        assert_eq!(judge(&ok, &nodes).expect("approved").name, "worker1");
        let cases = [
            // Another node's address: a worker asking to be master1 on the wire.
            (
                csr(
                    "system:node:worker1",
                    "system:node:worker1",
                    vec![dns("worker1"), ip("10.88.10.11")],
                ),
                "10.88.10.11",
            ),
            (
                csr(
                    "system:node:worker1",
                    "system:node:worker1",
                    vec![dns("master1")],
                ),
                "DNS name `master1`",
            ),
            (
                csr(
                    "system:node:worker1",
                    "system:node:worker1",
                    vec![dns("kubernetes.default.svc")],
                ),
                "kubernetes.default.svc",
            ),
            (
                csr(
                    "system:node:worker1",
                    "system:node:master1",
                    vec![dns("master1")],
                ),
                "subject CN",
            ),
            (
                csr(
                    "system:node:stranger",
                    "system:node:stranger",
                    vec![dns("stranger")],
                ),
                "not a node of this cluster",
            ),
            (
                csr(
                    "system:serviceaccount:default:x",
                    "system:node:worker1",
                    vec![dns("worker1")],
                ),
                "not a node",
            ),
            (
                csr("system:node:worker1", "system:node:worker1", vec![]),
                "no subject alternative name",
            ),
            (
                csr(
                    "system:node:worker1",
                    "system:node:worker1",
                    vec![SanType::URI("spiffe://x".try_into().expect("uri"))],
                ),
                "neither DNS names nor IP",
            ),
        ];
        for (c, want) in cases {
            let why = judge(&c, &nodes).expect_err("refused");
            assert!(why.contains(want), "{why} (wanted {want})");
        }
        let mut client = ok.clone();
        client.usages.push("client auth".into());
        assert!(judge(&client, &nodes)
            .expect_err("refused")
            .contains("usages"));
        let mut wrong_org = ok.clone();
        wrong_org.organizations = vec!["system:masters".into()];
        assert!(judge(&wrong_org, &nodes)
            .expect_err("refused")
            .contains("organizations"));
    }

    #[test]
    fn a_node_with_only_refused_csrs_fails_the_step_others_are_left_alone() {
        let nodes = nodes();
        let good = csr(
            "system:node:master1",
            "system:node:master1",
            vec![dns("master1"), ip("10.88.10.11")],
        );
        let mut stale = csr(
            "system:node:master1",
            "system:node:master1",
            vec![ip("10.0.0.9")],
        );
        stale.name = "csr-stale".into();
        let mut stranger = csr(
            "system:node:stranger",
            "system:node:stranger",
            vec![dns("stranger")],
        );
        stranger.name = "csr-stranger".into();
        // master1 has an acceptable CSR beside a stale one: only the good one is approved.
        assert_eq!(
            decide(&[good.clone(), stale.clone(), stranger.clone()], &nodes).expect("ok"),
            ["csr-x"]
        );
        let mut bad = csr(
            "system:node:worker1",
            "system:node:worker1",
            vec![dns("worker1"), ip("192.0.2.1")],
        );
        bad.name = "csr-bad".into();
        let err = decide(&[good, bad], &nodes).expect_err("worker1 refused");
        assert!(
            err.contains("node worker1")
                && err.contains("csr-bad")
                && err.contains("192.0.2.1")
                && err.contains("kubectl certificate approve"),
            "{err}"
        );
    }

    #[test]
    fn the_approval_is_idempotent_and_the_plan_names_every_node() {
        let step = ApproveServingCsrs { nodes: nodes() };
        let node = Node {
            name: "master1".into(),
            address: "10.88.10.11".into(),
            internal_address: "10.88.10.11".into(),
            roles: vec![],
            arch: "amd64".into(),
        };
        let planned = step.ops(&node, &Facts::default().for_plan()).expect("plan");
        assert_eq!(planned.len(), 2);
        assert!(
            step.ops(&node, &Facts::default()).is_err(),
            "nothing learned"
        );
        let facts = Facts::default();
        let good = csr(
            "system:node:master1",
            "system:node:master1",
            vec![dns("master1")],
        );
        facts.set(FACT, serde_json::to_string(&[good]).expect("json"));
        let ops = step.ops(&node, &facts).expect("ops");
        let [Op::Run(r)] = ops.as_slice() else {
            panic!("{ops:?}")
        };
        assert!(
            r.command.ends_with("certificate approve csr-x"),
            "{}",
            r.command
        );
        assert!(r
            .unless
            .as_deref()
            .is_some_and(|u| u.contains("grep -qw Approved")));
    }

    #[test]
    fn the_learn_script_waits_for_every_node_then_lists_csrs() {
        let s = LearnServingCsrs {
            nodes: vec!["master1".into(), "worker1".into()],
            wait: true,
            pending: false,
        }
        .script();
        assert!(
            s.contains("for n in system:node:master1 system:node:worker1;"),
            "{s}"
        );
        assert!(
            s.contains(&format!("eq .spec.signerName \"{KUBELET_SERVING_SIGNER}\"")),
            "{s}"
        );
        assert!(s.ends_with("get csr -o json"), "{s}");
        assert!(s.contains("-lt 30 "), "bounded: {s}");
    }

    /// `certs renew` after restarting kubelets: only a pending CSR (no condition) counts, and the
    /// filter keeps exactly the lines without one.
    #[test]
    fn the_pending_wait_counts_only_csrs_without_a_condition() {
        let s = LearnServingCsrs {
            nodes: vec!["node1".into()],
            wait: true,
            pending: true,
        }
        .script();
        assert!(s.contains("{.status.conditions[*].type}"), "{s}");
        let filter = s
            .split(" | ")
            .find(|p| p.starts_with("awk"))
            .and_then(|p| p.split(") ||").next())
            .expect("an awk filter");
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "printf 'system:node:node1 Approved\\nsystem:node:node2 \\nsystem:node:node3 Denied\\n' | {filter}"
            ))
            .output()
            .expect("bash");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "system:node:node2\n");
    }

    /// `certs renew` reads what is pending when it runs: no loop, no sleep.
    #[test]
    fn without_wait_the_learn_script_only_lists_csrs() {
        let s = LearnServingCsrs {
            nodes: vec!["master1".into(), "worker1".into()],
            wait: false,
            pending: false,
        }
        .script();
        assert_eq!(s, format!("{} get csr -o json", kubectl()));
        assert!(!s.contains("sleep"), "{s}");
    }
}
