//! Kubernetes constants and helpers every area shares: the admin kubeconfig and `kubectl` on a
//! master, KubeXM's state directory next to kubeadm's, kubeadm's PKI and stacked etcd paths, the
//! API server's port and URL, the cluster's images by name.
//!
//! A leaf: it imports no other module of [`crate::modules`], so component and day-2 modules can
//! all use it without importing each other.

use crate::runner::shell::Script;
use crate::script;
use std::path::PathBuf;

use crate::context::InstallContext;
use crate::pipeline::ops::{Op, RunCommand};
use crate::pipeline::StepError;

/// The cluster's admin kubeconfig on every master.
pub const ADMIN_CONF: &str = "/etc/kubernetes/admin.conf";

/// `kubectl` with the admin kubeconfig (on a master).
pub fn kubectl() -> Script {
    script!("{KUBECTL} --kubeconfig {ADMIN_CONF}")
}

/// kubectl on the masters.
pub const KUBECTL: &str = "/usr/local/bin/kubectl";

/// KubeXM's files next to kubeadm's (init output, join configuration, patches); root only.
pub const STATE_DIR: &str = "/etc/kubernetes/kubexm";

/// Stacked etcd's data directory (kubeadm's default).
pub const STACKED_ETCD_DATA: &str = "/var/lib/etcd";

/// The cluster image whose last path component is `name`.
pub fn image_named(ctx: &InstallContext, name: &str) -> Result<String, StepError> {
    ctx.image_references()
        .into_iter()
        .find(|r| {
            r.parse::<kubexm_manifests::image_ref::ImageRef>()
                .is_ok_and(|i| i.basename() == name)
        })
        .ok_or_else(|| {
            StepError::Invalid(format!(
                "no {name} image in the bundle (or the catalog's resolution): rebuild the bundle for this cluster"
            ))
        })
}

/// KubeXM's ECDSA key `src` (PKCS#8, `BEGIN PRIVATE KEY`) written to `dest` as SEC1 (`BEGIN EC
/// PRIVATE KEY`, root only). kubeadm's `--upload-certs` carries the external etcd client key to
/// the other control-plane nodes, and kubeadm v1.20's `join` refuses an ECDSA key in PKCS#8 when
/// it writes it back ("error downloading certs: unknown data found in Secret entry":
/// client-go's keyutil before PKCS#8 EC support; measured with real kubeadm v1.20.2 in the
/// lab). SEC1 is read by every version.
pub fn ec_key_in_sec1(src: &str, dest: &str) -> Op {
    let (s, d) = (
        crate::runner::shell::quoted(src),
        crate::runner::shell::quoted(dest),
    );
    Op::Run(
        RunCommand::new(script!(
            "set -e\numask 077\nopenssl ec -in {s} -out {d}.kubexm-part 2>/dev/null\nmv -f {d}.kubexm-part {d}", s = s, d = d
        ))
        .unless(script!(
            "head -n 1 {d} 2>/dev/null | grep -qx -- '-----BEGIN EC PRIVATE KEY-----' && [ \"$(openssl ec -in {s} -pubout 2>/dev/null)\" = \"$(openssl ec -in {d} -pubout 2>/dev/null)\" ]", d = d, s = s
        ))
        .undo(script!("rm -f {d}", d = d)),
    )
}

/// Where the cluster's admin kubeconfig is kept on the control host.
pub fn admin_kubeconfig_path(ctx: &InstallContext) -> PathBuf {
    ctx.pki_dir.join("admin.conf")
}

/// `https://ADDRESS:PORT`, bracketing IPv6 addresses.
pub fn host_url(address: &str, port: u16) -> String {
    if address.contains(':') {
        format!("https://[{address}]:{port}")
    } else {
        format!("https://{address}:{port}")
    }
}

/// Port the API servers listen on (the backends).
pub const APISERVER_PORT: u16 = 6443;

/// Where the local proxy listens.
pub const LOCAL_API: &str = "https://127.0.0.1:6443";

/// Where kubeadm keeps its PKI on a master.
pub const KUBEADM_PKI: &str = "/etc/kubernetes/pki";

/// The controller-manager's signing certificate while the cluster CA is rotated.
pub const CA_SIGNER: &str = "/etc/kubernetes/pki/ca-signer.crt";
