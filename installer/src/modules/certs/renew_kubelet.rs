//! `certs renew` on the kubeadm path, for what the masters' renewal ([`super::renew`]) does not
//! reach: the kubelets' own certificates.
//!
//! * **Workers' client certificates** ([`RenewWorkerClientsModule`]). A kubelet rotates its
//!   client certificate itself while it is valid; once it has expired the kubelet can no longer
//!   ask, and the cluster CA's key is only on the masters. So each worker due makes a new key
//!   and a request for it (`system:node:<name>`, O=`system:nodes`); the key never leaves the
//!   worker, only the request goes to the first master (learned as a fact), which checks its
//!   subject and signature and signs it with the cluster CA (one year, clientAuth);
//!   the certificate comes back to the worker, becomes `kubelet-client-current.pem`, and the
//!   kubelet restarts and must be healthy.
//! * **Serving certificates** ([`RenewServingModule`]). With `serverTLSBootstrap` the kubelet's
//!   serving certificate (`kubelet-server-current.pem`) is signed through a CSR that KubeXM
//!   approves ([`crate::modules::kubeadm::serving_csr`]). A node due sets its current one aside
//!   and restarts its kubelet, which asks again; the first master approves the new CSRs with the
//!   same checks as at install; each node then holds a new certificate.
//!
//! Every node step is guarded by the renewal's marker, so `--resume` never renews twice.

use crate::runner::shell::Script;
use crate::script;
use std::time::Duration;

use base64::Engine as _;

use kubexm_manifests::model::KubernetesType;

use super::renew::{KubeletHealthy, Marker, Renew, KUBELET_PKI};
use crate::context::InstallContext;
use crate::modules::kubeadm::serving_csr::{approval_tasks, await_serving, NodeNames};
use crate::pipeline::ops::{LearnFacts, Op, RunCommand, UploadFile};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};
use crate::runner::shell;

const KUBELET_CONF: &str = "/etc/kubernetes/kubelet.conf";
const CLIENT_CURRENT: &str = "/var/lib/kubelet/pki/kubelet-client-current.pem";
const SERVING_CURRENT: &str = "/var/lib/kubelet/pki/kubelet-server-current.pem";
const CA_CRT: &str = "/etc/kubernetes/pki/ca.crt";
const CA_KEY: &str = "/etc/kubernetes/pki/ca.key";
/// Largest certificate request or certificate accepted from a node (base64 text).
pub const MAX_PEM_B64: usize = 8 << 10;
const FACT_CSR: &str = "kubelet-client-csr/";
const FACT_CERT: &str = "kubelet-client-cert/";

fn not_kubeadm(r: &Renew) -> Option<String> {
    (r.ctx.cluster.file.spec.kubernetes.kind != KubernetesType::Kubeadm).then(|| {
        "kubernetes.type is kubexm: KubeXM issues every kubelet certificate itself".to_string()
    })
}

/// Where a worker keeps the new key of renewal `id` until its certificate arrives.
fn pending_key(id: &str) -> String {
    format!("{KUBELET_PKI}/kubelet-client-kubexm-{id}.key")
}

/// Workers (kubeadm path) whose kubelet client certificate is due.
pub struct RenewWorkerClientsModule(pub Renew);

impl Module for RenewWorkerClientsModule {
    fn name(&self) -> &str {
        "renew-worker-kubelet-clients"
    }
    fn skip(&self) -> Option<String> {
        not_kubeadm(&self.0).or_else(|| {
            self.0.workers.is_empty().then(|| {
                format!(
                    "no worker's kubelet client certificate has fewer than {} days left",
                    self.0.under_days
                )
            })
        })
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let r = &self.0;
        let first = r.ctx.first_master()?.name.clone();
        let marker = r.marker("kubelet-client");
        Ok(vec![
            Task::new("kubelet-client-requests", r.workers.clone()).step(RequestClient {
                id: r.id.clone(),
                marker: marker.clone(),
            }),
            Task::new("sign-kubelet-clients", [first]).step(SignClients {
                workers: r.workers.clone(),
            }),
            Task::new("install-kubelet-clients", r.workers.clone())
                .serial()
                .step(InstallClient {
                    id: r.id.clone(),
                    marker,
                })
                .step(KubeletHealthy),
        ])
    }
}

/// A new key (kept on the worker, 0600) and a certificate request for it, learned as a fact;
/// nothing to learn on a worker this renewal finished.
pub struct RequestClient {
    /// The renewal id.
    pub id: String,
    /// The renewal's marker.
    pub marker: Marker,
}

impl RequestClient {
    /// The script for `node`: prints the request (base64, one line), or nothing when done.
    pub fn script(&self, node: &Node) -> String {
        let key = shell::quoted(&pending_key(&self.id));
        let subject = shell::quoted(&format!("/O=system:nodes/CN=system:node:{}", node.name));
        format!(
            "set -e\numask 077\nif {done}; then exit 0; fi\n\
             [ -s {key} ] || openssl ecparam -name prime256v1 -genkey -noout -out {key}\n\
             openssl req -new -key {key} -subj {subject} | base64 -w0\necho",
            done = self.marker.done()
        )
    }
}

/// A line of base64 text no longer than [`MAX_PEM_B64`] (empty: nothing).
fn one_b64_line(out: &str) -> Result<Option<String>, String> {
    let t = out.trim();
    if t.is_empty() {
        return Ok(None);
    }
    if t.len() > MAX_PEM_B64
        || !t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=')
    {
        return Err(format!(
            "expected one line of base64 of at most {MAX_PEM_B64} bytes"
        ));
    }
    Ok(Some(t.to_string()))
}

/// Parses a worker's answer to [`RequestClient`]'s script (one base64 line of its certificate
/// request, or nothing when done already) into facts. The answer is hostile input: a fuzz target
/// (`tests/fuzz`, `learned_certs`) feeds it anything.
pub fn learn_request(out: &str) -> Result<Vec<(String, String)>, String> {
    Ok(one_b64_line(out)?
        .map(|b| vec![("csr".to_string(), b)])
        .unwrap_or_default())
}

impl Step for RequestClient {
    fn name(&self) -> &str {
        "kubelet-client-request"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Learn(LearnFacts {
            what: format!("{}'s kubelet client certificate request", node.name),
            script: self.script(node),
            parse: learn_request,
            facts: facts.clone(),
            prefix: format!("{FACT_CSR}{}/", node.name),
            timeout: Duration::from_secs(60),
        })])
    }
}

/// The first master checks each worker's request (its own signature; subject exactly
/// `CN=system:node:<name>,O=system:nodes`) and signs it with the cluster CA; the certificates
/// are learned as facts.
pub struct SignClients {
    /// The workers due.
    pub workers: Vec<String>,
}

impl SignClients {
    /// The script for the requests in `facts` (workers with none are skipped: done already).
    pub fn script(&self, facts: &Facts) -> String {
        let mut s = String::from(
            "set -e\numask 077\ntmp=$(mktemp -d); trap 'rm -rf \"$tmp\"' EXIT\n\
             printf 'keyUsage=critical,digitalSignature,keyEncipherment\\nextendedKeyUsage=clientAuth\\nbasicConstraints=critical,CA:FALSE\\n' > \"$tmp/ext\"\n",
        );
        for w in &self.workers {
            let Some(csr) = facts.get(&format!("{FACT_CSR}{w}/csr")) else {
                if facts.is_planning() {
                    s.push_str(&format!(
                        "# {w}: its request (learned when it runs) checked and signed with the cluster CA\n"
                    ));
                }
                continue;
            };
            let want = format!("CN=system:node:{w},O=system:nodes");
            s.push_str(&format!(
                "printf %s {csr} | base64 -d > \"$tmp/r.csr\"\n\
                 openssl req -in \"$tmp/r.csr\" -noout -verify >/dev/null 2>&1 || {{ echo {bad_sig} >&2; exit 1; }}\n\
                 [ \"$(openssl req -in \"$tmp/r.csr\" -noout -subject -nameopt RFC2253)\" = {want_q} ] || {{ echo {bad_subject} >&2; exit 1; }}\n\
                 openssl x509 -req -in \"$tmp/r.csr\" -CA {CA_CRT} -CAkey {CA_KEY} -set_serial 0x$(openssl rand -hex 16) -days 365 -extfile \"$tmp/ext\" -out \"$tmp/r.crt\" 2>/dev/null\n\
                 printf '%s ' {name}; base64 -w0 \"$tmp/r.crt\"; echo\n",
                csr = shell::quoted(&csr),
                bad_sig = shell::quoted(&format!("{w}: its certificate request's signature does not verify")),
                want_q = shell::quoted(&format!("subject={want}")),
                bad_subject = shell::quoted(&format!(
                    "{w}: its certificate request does not name CN=system:node:{w}, O=system:nodes"
                )),
                name = shell::quoted(w),
            ));
        }
        s
    }
}

/// Parses the first master's answer to [`SignClients`]'s script (`NAME BASE64` lines) into
/// facts; node names are checked, every certificate is one bounded base64 line. Hostile input,
/// fuzzed like [`learn_request`].
pub fn learn_certs(out: &str) -> Result<Vec<(String, String)>, String> {
    let mut v = Vec::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let (name, b64) = line
            .split_once(' ')
            .ok_or_else(|| "expected NAME BASE64 lines".to_string())?;
        if name.is_empty()
            || name.len() > 253
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
        {
            return Err("a node name that is not one".into());
        }
        let b64 = one_b64_line(b64)?.ok_or_else(|| format!("no certificate for {name}"))?;
        v.push((format!("{FACT_CERT}{name}"), b64));
    }
    Ok(v)
}

impl Step for SignClients {
    fn name(&self) -> &str {
        "sign-kubelet-clients"
    }
    fn ops(&self, _: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Learn(LearnFacts {
            what: "the workers' kubelet client certificates".into(),
            script: self.script(facts),
            parse: learn_certs,
            facts: facts.clone(),
            prefix: String::new(),
            timeout: Duration::from_secs(120),
        })])
    }
}

/// The signed certificate placed beside the worker's new key as `kubelet-client-current.pem`
/// (the key must match it), `kubelet.conf` pointed at that file, the kubelet restarted.
pub struct InstallClient {
    /// The renewal id.
    pub id: String,
    /// The renewal's marker.
    pub marker: Marker,
}

impl InstallClient {
    fn crt(&self) -> String {
        format!("{KUBELET_PKI}/kubelet-client-kubexm-{}.crt", self.id)
    }

    /// The script that installs the certificate uploaded to [`Self::crt`].
    pub fn script(&self) -> Script {
        let key = shell::quoted(&pending_key(&self.id));
        let crt = shell::quoted(&self.crt());
        let pem = shell::quoted(&script!(
            "{KUBELET_PKI}/kubelet-client-kubexm-{}.pem",
            self.id
        ));
        script!(
            "set -e\numask 077\n\
             [ \"$(openssl x509 -in {crt} -noout -pubkey)\" = \"$(openssl pkey -in {key} -pubout)\" ] || {{ echo 'the signed certificate is not for this node'\"'\"'s new key' >&2; exit 1; }}\n\
             cat {crt} {key} > {pem}\n\
             ln -sfn {pem} {cur}.kubexm-new && mv -fT {cur}.kubexm-new {cur}\n\
             sed -i -e \"s#^\\( *\\)client-certificate-data:.*#\\1client-certificate: {cur}#\" -e \"s#^\\( *\\)client-key-data:.*#\\1client-key: {cur}#\" {conf}\n\
             rm -f {crt} {key}\n\
             systemctl restart kubelet\n\
             {record}",
            cur = CLIENT_CURRENT,
            conf = KUBELET_CONF,
            record = self.marker.record(), crt = crt, key = key, pem = pem
        )
    }
}

impl Step for InstallClient {
    fn name(&self) -> &str {
        "install-kubelet-client"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        let done = self.marker.done();
        let cert = match facts.get(&format!("{FACT_CERT}{}", node.name)) {
            Some(b64) => {
                let pem = base64::engine::general_purpose::STANDARD
                    .decode(b64.as_bytes())
                    .map_err(|e| {
                        StepError::Invalid(format!("{}: the signed certificate: {e}", node.name))
                    })?;
                if !pem.starts_with(b"-----BEGIN CERTIFICATE-----") {
                    return Err(StepError::Invalid(format!(
                        "{}: the signed certificate is not PEM",
                        node.name
                    )));
                }
                pem
            }
            None if facts.is_planning() => {
                format!("<the certificate signed for {}>", node.name).into_bytes()
            }
            // A worker this renewal finished prints no request, so nothing was signed for it.
            None => {
                return Ok(vec![Op::Run(
                    RunCommand::new(script!(
                        "echo {} >&2; exit 1",
                        &format!(
                            "{}: no kubelet client certificate was signed for it",
                            node.name
                        )
                    ))
                    .unless(done),
                )])
            }
        };
        Ok(vec![
            Op::Upload(UploadFile::bytes(cert, self.crt(), 0o644)),
            Op::Run(RunCommand::new(self.script()).unless(done)),
        ])
    }
}

/// Where [`RequestServing`] of renewal (or rotation) `id` sets the serving certificate aside.
pub fn serving_set_aside(id: &str) -> String {
    format!("{SERVING_CURRENT}.kubexm-before-{id}")
}

/// Nodes (kubeadm path) whose kubelet serving certificate is due.
pub struct RenewServingModule(pub Renew);

impl Module for RenewServingModule {
    fn name(&self) -> &str {
        "renew-kubelet-serving"
    }
    fn skip(&self) -> Option<String> {
        not_kubeadm(&self.0).or_else(|| {
            self.0.serving.is_empty().then(|| {
                format!(
                    "no kubelet serving certificate has fewer than {} days left",
                    self.0.under_days
                )
            })
        })
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let r = &self.0;
        let first = r.ctx.first_master()?.name.clone();
        Ok(serving_renewal_tasks(
            &first,
            &r.serving,
            &r.ctx,
            r.marker("kubelet-serving"),
            serving_set_aside(&r.id),
        ))
    }
}

/// How long a kubelet is given to hold its renewed serving certificate after the last approval.
pub const SERVING_FETCH: Duration = Duration::from_secs(180);

/// The tasks that renew the serving certificates of `kubelets` (their names and addresses, for
/// the CSR checks, from `ctx`: [`NodeNames::of`]), approved on the first master `first`: each node sets its
/// certificate aside (to `before`) and restarts its kubelet; the first master waits (bounded)
/// until each has a pending CSR and approves the acceptable ones; each node is given
/// [`SETTLE`](crate::modules::kubeadm::serving_csr::SETTLE) to hold a new certificate; the first master approves what is pending then
/// (no wait); each node must hold a new certificate within [`SERVING_FETCH`].
///
/// The second round is for a kubelet that asked before its restart: a kubelet restarted on a
/// renewed client certificate (the workers' renewal, the CA rotation's reissue) while its serving
/// certificate was due asks at once; that request's key died with the process, but its pending
/// CSR ends the first round's wait, maybe before the restarted kubelet asked (seen in CI on real
/// v1.20.2: node4's new CSR stayed pending and the renewal failed after 180 s).
pub fn serving_renewal_tasks(
    first: &str,
    kubelets: &[String],
    ctx: &InstallContext,
    marker: Marker,
    before: String,
) -> Vec<Task> {
    let nodes: Vec<Node> = ctx
        .nodes
        .iter()
        .filter(|n| kubelets.contains(&n.name))
        .cloned()
        .collect();
    let nodes = NodeNames::all(ctx, &nodes);
    let mut tasks = vec![Task::new("request-serving-certificates", kubelets.to_vec())
        .step(RequestServing { marker })];
    tasks.extend(approval_tasks(&nodes, first, true, true, ""));
    tasks.push(
        Task::new("serving-certificates-settle", kubelets.to_vec()).step(ServingRenewed {
            before: before.clone(),
            required: false,
        }),
    );
    tasks.extend(approval_tasks(&nodes, first, false, true, "-again"));
    tasks.push(
        Task::new("serving-certificates-renewed", kubelets.to_vec()).step(ServingRenewed {
            before,
            required: true,
        }),
    );
    tasks
}

/// The current serving certificate set aside (kept as `.kubexm-before-<id>`) and the kubelet
/// restarted, so it asks for a new one.
pub struct RequestServing {
    /// The renewal's marker.
    pub marker: Marker,
}

impl Step for RequestServing {
    fn name(&self) -> &str {
        "request-serving-certificate"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let before = serving_set_aside(&self.marker.id);
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "set -e\nif [ -e {SERVING_CURRENT} ] || [ -L {SERVING_CURRENT} ]; then mv -fT {SERVING_CURRENT} {b}; fi\nsystemctl restart kubelet\n{record}",
                record = self.marker.record(),
                b = &before,
            ))
            .unless(self.marker.done())
            .undo(script!(
                "if [ ! -e {SERVING_CURRENT} ] && [ -L {b} ]; then mv -fT {b} {SERVING_CURRENT}; systemctl restart kubelet; fi",
                b = &before
            )),
        )])
    }
}

/// The node holds a valid serving certificate that is not the one set aside. `required`: awaited
/// for [`SERVING_FETCH`], else the step fails naming the node; otherwise the node is given
/// [`SETTLE`](crate::modules::kubeadm::serving_csr::SETTLE) and the step succeeds either way (a second approval round follows).
pub struct ServingRenewed {
    /// Where [`RequestServing`] set the old one aside.
    pub before: String,
    /// Fail when the node holds no new certificate in time.
    pub required: bool,
}

impl ServingRenewed {
    /// The check: a valid certificate that is not the one set aside.
    fn check(&self) -> Script {
        script!(
            "openssl x509 -in {SERVING_CURRENT} -noout -checkend 0 >/dev/null 2>&1 && ! cmp -s \"$(readlink -f {SERVING_CURRENT})\" \"$(readlink -f {b})\"",
            b = &self.before
        )
    }
}

impl Step for ServingRenewed {
    fn name(&self) -> &str {
        if self.required {
            "serving-certificate-renewed"
        } else {
            "serving-certificate-settle"
        }
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![await_serving(
            format!("{}'s kubelet serving a new certificate", node.name),
            self.check(),
            self.required.then_some(SERVING_FETCH),
        )])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    fn node(name: &str) -> Node {
        Node {
            name: name.into(),
            address: "10.0.0.4".into(),
            internal_address: "10.0.0.4".into(),
            roles: Vec::new(),
            arch: "amd64".into(),
        }
    }

    /// Runs `script` with the node paths moved under `root` and systemctl a no-op; (ok, stdout,
    /// stderr).
    fn run(script: &str, root: &Path) -> (bool, String, String) {
        let r = root.display();
        let s = script
            .replace("/etc/kubernetes/pki/", &format!("{r}/pki/"))
            .replace("/var/lib/kubelet/pki", &format!("{r}/kubelet"))
            .replace("/etc/kubernetes/kubelet.conf", &format!("{r}/kubelet.conf"))
            .replace("/etc/kubernetes/kubexm/renewed", &format!("{r}/renewed"))
            .replace("systemctl restart kubelet", ":");
        let out = Command::new("bash")
            .arg("-c")
            .arg(&s)
            .output()
            .expect("bash");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn sh(root: &Path, cmd: &str) {
        let ok = Command::new("bash")
            .arg("-c")
            .arg(cmd)
            .current_dir(root)
            .status()
            .expect("bash")
            .success();
        assert!(ok, "{cmd}");
    }

    /// The worker's request, the master's check and signature, the worker's install, with the
    /// real openssl: the key never leaves the worker, a request for another node is refused, a
    /// certificate for another key is refused.
    #[test]
    fn a_worker_gets_a_client_certificate_signed_by_the_cluster_ca() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path();
        sh(
            root,
            "mkdir -p pki kubelet renewed && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout pki/ca.key -out pki/ca.crt -subj /CN=kubernetes -days 10 2>/dev/null",
        );
        let marker = Marker {
            file: "/etc/kubernetes/kubexm/renewed/kubelet-client".into(),
            id: "t1".into(),
        };
        let req = RequestClient {
            id: "t1".into(),
            marker: marker.clone(),
        };
        let (ok, out, err) = run(&req.script(&node("node4")), root);
        assert!(ok, "{err}");
        let learned = learn_request(&out).expect("one base64 line");
        assert_eq!(learned.len(), 1);
        assert!(root.join("kubelet/kubelet-client-kubexm-t1.key").exists());
        // The same request again (a --resume): the same key.
        let key = std::fs::read(root.join("kubelet/kubelet-client-kubexm-t1.key")).expect("key");
        let (ok, again, _) = run(&req.script(&node("node4")), root);
        assert!(ok);
        assert_eq!(
            std::fs::read(root.join("kubelet/kubelet-client-kubexm-t1.key")).expect("key"),
            key
        );
        assert!(!again.is_empty());

        let facts = Facts::default();
        facts.set(format!("{FACT_CSR}node4/csr"), learned[0].1.clone());
        let sign = SignClients {
            workers: vec!["node4".into(), "node9".into()],
        };
        let script = sign.script(&facts);
        assert!(
            !script.contains("node9"),
            "a worker with no request is skipped"
        );
        let (ok, out, err) = run(&script, root);
        assert!(ok, "{err}");
        let certs = learn_certs(&out).expect("certs");
        assert_eq!(certs.len(), 1);
        assert_eq!(certs[0].0, "kubelet-client-cert/node4");
        let pem = base64::engine::general_purpose::STANDARD
            .decode(&certs[0].1)
            .expect("b64");
        std::fs::write(root.join("signed.crt"), &pem).expect("write");
        let text = Command::new("openssl")
            .args([
                "x509",
                "-noout",
                "-subject",
                "-issuer",
                "-ext",
                "extendedKeyUsage",
                "-nameopt",
                "RFC2253",
                "-in",
            ])
            .arg(root.join("signed.crt"))
            .output()
            .expect("openssl");
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(
            text.contains("subject=CN=system:node:node4,O=system:nodes"),
            "{text}"
        );
        assert!(text.contains("issuer=CN=kubernetes"), "{text}");
        assert!(text.contains("TLS Web Client Authentication"), "{text}");

        // node5's request passed off as node4's: refused before signing.
        let (ok, out5, _) = run(
            &RequestClient {
                id: "t5".into(),
                marker: marker.clone(),
            }
            .script(&node("node5")),
            root,
        );
        assert!(ok);
        let forged = Facts::default();
        forged.set(
            format!("{FACT_CSR}node4/csr"),
            learn_request(&out5).expect("b64")[0].1.clone(),
        );
        let (ok, _, err) = run(&sign.script(&forged), root);
        assert!(!ok);
        assert!(
            err.contains("does not name CN=system:node:node4, O=system:nodes"),
            "{err}"
        );

        // The install: kubelet.conf with an embedded (expired) certificate is pointed at the
        // new current one, which holds the signed certificate and the worker's key.
        std::fs::write(
            root.join("kubelet.conf"),
            "users:\n- name: default-auth\n  user:\n    client-certificate-data: AAAA\n    client-key-data: BBBB\n",
        )
        .expect("write");
        let install = InstallClient {
            id: "t1".into(),
            marker: marker.clone(),
        };
        std::fs::write(root.join("kubelet/kubelet-client-kubexm-t1.crt"), &pem).expect("write");
        let (ok, _, err) = run(&install.script(), root);
        assert!(ok, "{err}");
        let conf = std::fs::read_to_string(root.join("kubelet.conf")).expect("conf");
        let cur = format!("{}/kubelet/kubelet-client-current.pem", root.display());
        assert!(
            conf.contains(&format!("client-certificate: {cur}")),
            "{conf}"
        );
        assert!(conf.contains(&format!("client-key: {cur}")), "{conf}");
        let current = std::fs::read_to_string(&cur).expect("current");
        assert!(current.contains("BEGIN CERTIFICATE") && current.contains("PRIVATE KEY"));
        assert!(!root.join("kubelet/kubelet-client-kubexm-t1.key").exists());
        assert_eq!(
            std::fs::read_to_string(root.join("renewed/kubelet-client"))
                .expect("marker")
                .trim(),
            "t1"
        );
        // Done: the request prints nothing now.
        let (ok, out, _) = run(&req.script(&node("node4")), root);
        assert!(ok && out.trim().is_empty(), "{out}");

        // A certificate for another key is refused.
        let other = InstallClient {
            id: "t5".into(),
            marker: Marker {
                file: "/etc/kubernetes/kubexm/renewed/other".into(),
                id: "t5".into(),
            },
        };
        std::fs::write(root.join("kubelet/kubelet-client-kubexm-t5.crt"), &pem).expect("write");
        let (ok, _, err) = run(&other.script(), root);
        assert!(!ok && err.contains("not for this node's new key"), "{err}");
    }

    #[test]
    fn only_bounded_base64_is_learned_from_a_node() {
        assert_eq!(learn_request("").expect("empty"), vec![]);
        assert_eq!(
            learn_request("QUJD\n").expect("b64"),
            vec![("csr".to_string(), "QUJD".to_string())]
        );
        assert!(learn_request("QUJD; rm -rf /").is_err());
        assert!(learn_request(&"A".repeat(MAX_PEM_B64 + 1)).is_err());
        assert_eq!(
            learn_certs("node4 QUJD\n\n").expect("certs"),
            vec![("kubelet-client-cert/node4".to_string(), "QUJD".to_string())]
        );
        assert!(learn_certs("../x QUJD").is_err());
        assert!(learn_certs("node4").is_err());
        assert!(learn_certs("node4 $(id)").is_err());
    }

    /// The renewed check with the real openssl: a valid certificate other than the one set aside
    /// passes; the same one, an expired one or none fails. The settling step runs only when the
    /// check fails and succeeds either way; the required one waits on the same check.
    #[test]
    fn a_serving_certificate_is_renewed_only_when_new_and_valid() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path();
        let cert = |name: &str, days: &str| {
            sh(
                root,
                &format!("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout kubelet/{name}.key -out kubelet/{name}.pem -subj /CN=system:node:node4 {days} 2>/dev/null"),
            )
        };
        sh(root, "mkdir -p kubelet");
        cert("kubelet-server-old", "-days 1");
        cert("kubelet-server-new", "-days 1");
        // Expired (openssl 3.0's req cannot back-date): signed by rcgen, valid in 2020 only.
        let mut params = rcgen::CertificateParams::new(vec!["node4".to_string()]).expect("params");
        params.not_before = time::macros::datetime!(2020-01-01 0:00 UTC);
        params.not_after = time::macros::datetime!(2020-01-02 0:00 UTC);
        let key = rcgen::KeyPair::generate().expect("key");
        let expired = params.self_signed(&key).expect("cert").pem();
        std::fs::write(root.join("kubelet/kubelet-server-expired.pem"), expired).expect("write");
        let before = serving_set_aside("r1");
        sh(
            root,
            &format!(
                "ln -s kubelet-server-old.pem {}",
                before.replace("/var/lib/kubelet/pki", "kubelet")
            ),
        );
        let settle = ServingRenewed {
            before: before.clone(),
            required: false,
        };
        let required = ServingRenewed {
            before,
            required: true,
        };
        let check = settle.check();
        let link = |target: &str| {
            sh(
                root,
                &format!(
                    "rm -f kubelet/kubelet-server-current.pem && {}",
                    if target.is_empty() {
                        "true".to_string()
                    } else {
                        format!("ln -s {target} kubelet/kubelet-server-current.pem")
                    }
                ),
            )
        };
        link("");
        assert!(!run(&check, root).0, "no current certificate");
        link("kubelet-server-old.pem");
        assert!(!run(&check, root).0, "the one set aside");
        link("kubelet-server-expired.pem");
        assert!(!run(&check, root).0, "an expired one");
        link("kubelet-server-new.pem");
        assert!(run(&check, root).0, "a new valid one");

        let ops = settle.ops(&node("node4"), &Facts::default()).expect("ops");
        let [Op::Run(c)] = ops.as_slice() else {
            panic!("one command: {}", ops.len())
        };
        assert_eq!(c.unless.as_deref(), Some(check.as_str()));
        assert_eq!(c.verify.as_deref(), Some("true"));
        assert!(run(&c.command, root).0, "settled at once");
        let ops = required
            .ops(&node("node4"), &Facts::default())
            .expect("ops");
        let [Op::Wait(w)] = ops.as_slice() else {
            panic!("one wait: {}", ops.len())
        };
        assert_eq!(w.check, check.as_str());
        assert_eq!(w.timeout, SERVING_FETCH);
    }
}
