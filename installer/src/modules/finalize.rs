//! Finalization, once the cluster and its add-ons are up (issue 19; the seed's ChownModule):
//! on every master whose SSH user is not root, that user's `~/.kube/config` holds the admin
//! kubeconfig, so `kubectl` works for them after logging in. `~/.kube` is theirs with mode
//! 0700 and the file theirs with mode 0600 (it holds the admin's key).
//!
//! The user's own `~/.kube/config`, when one is there and is not the admin kubeconfig already,
//! is kept beside it as `config.kubexm-bak` (once: a later run does not replace the first
//! copy) and put back by the revert; the revert removes only what this wrote (the file while it
//! is still the admin kubeconfig, `~/.kube` when it is left empty), and so does `delete`
//! ([`delete_module`], first: the admin kubeconfig tells the copy apart). The control host's copy of
//! the admin kubeconfig is fetched where `admin.conf` is made (the kubeadm and kubexm modules).

use crate::script;
use std::sync::Arc;

use kubexm_manifests::model::KubernetesType;
use kubexm_manifests::resolve::Role;

use crate::context::InstallContext;
use crate::modules::k8s::ADMIN_CONF;
use crate::modules::kubexm::KubexmCluster;
use crate::pipeline::ops::{Op, RunCommand};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};
use crate::runner::shell::{self, Script};

/// The admin kubeconfig on a master of `ctx`'s cluster.
pub fn admin_conf_on_masters(ctx: &Arc<InstallContext>) -> Result<String, StepError> {
    match ctx.cluster.file.spec.kubernetes.kind {
        KubernetesType::Kubeadm => Ok(ADMIN_CONF.to_string()),
        KubernetesType::Kubexm => Ok(KubexmCluster::new(ctx)?.layout.conf("admin.conf")),
    }
}

/// Whether `node` logs in as a user other than root (who gets the admin kubeconfig when the
/// node is a master).
pub fn has_non_root_user(ctx: &InstallContext, node: &str) -> bool {
    ssh_user(ctx, node).is_some_and(|u| u != "root")
}

/// The SSH user of `node` in cluster.yaml.
fn ssh_user<'a>(ctx: &'a InstallContext, node: &str) -> Option<&'a str> {
    ctx.cluster
        .file
        .spec
        .hosts
        .iter()
        .find(|h| h.name == node)
        .map(|h| h.user.as_str())
}

/// Finalization.
pub struct FinalizeModule(pub Arc<InstallContext>);

impl FinalizeModule {
    /// The masters whose SSH user is not root.
    fn masters_with_users(&self) -> Vec<String> {
        self.0
            .with_role(Role::Master)
            .into_iter()
            .filter(|m| has_non_root_user(&self.0, m))
            .collect()
    }
}

impl Module for FinalizeModule {
    fn name(&self) -> &str {
        "finalize"
    }

    fn skip(&self) -> Option<String> {
        self.masters_with_users().is_empty().then(|| {
            "every master's SSH user is root: root's kubectl uses the admin kubeconfig on the masters"
                .to_string()
        })
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let masters = self.masters_with_users();
        if masters.is_empty() {
            return Ok(Vec::new());
        }
        Ok(vec![Task::new("user-kubeconfig", masters).step(
            UserKubeconfig {
                ctx: self.0.clone(),
                src: admin_conf_on_masters(&self.0)?,
            },
        )])
    }
}

/// The SSH user's `~/.kube/config` holds the admin kubeconfig (owned by them, 0700/0600).
pub struct UserKubeconfig {
    ctx: Arc<InstallContext>,
    /// The admin kubeconfig on the node.
    src: String,
}

impl UserKubeconfig {
    /// The commands for `user` (quoted here; the home directory is the user's in passwd).
    pub fn command(src: &str, user: &str) -> RunCommand {
        let src_raw = src;
        let home = home_of(user);
        let src = shell::quoted(src);
        RunCommand::new(script!(
            "set -e\n{home}\n\
             if [ -z \"$home\" ] || [ ! -d \"$home\" ]; then echo \"user $u has no home directory on this node (getent passwd)\" >&2; exit 1; fi\n\
             if [ ! -s {src} ]; then echo \"{src_raw} is missing: the admin kubeconfig was not written on this master\" >&2; exit 1; fi\n\
             g=$(id -gn \"$u\")\n\
             install -d -m 0700 -o \"$u\" -g \"$g\" \"$d\"\n\
             chown \"$u:$g\" \"$d\"\nchmod 0700 \"$d\"\n\
             if [ -e \"$f\" ] && ! cmp -s {src} \"$f\" && ! ours && [ ! -e \"$f.kubexm-bak\" ]; then cp -p \"$f\" \"$f.kubexm-bak\"; fi\n\
             sha256sum <{src} | cut -d' ' -f1 >>\"$s\"\n\
             install -m 0600 -o \"$u\" -g \"$g\" {src} \"$f.kubexm-part\"\n\
             mv -f \"$f.kubexm-part\" \"$f\"", home = home, src = src, src_raw = shell::in_double_quotes(src_raw)
        ))
        .unless(script!(
            "{home}\n[ -n \"$home\" ] && cmp -s {src} \"$f\" && [ \"$(stat -c '%U %a' \"$d\")\" = \"$u 700\" ] && [ \"$(stat -c '%U %a' \"$f\")\" = \"$u 600\" ]", home = home, src = src
        ))
        .undo(Self::removal(src_raw, user))
    }

    /// Removes what [`Self::command`] wrote: the file while it is a copy KubeXM made (the
    /// admin kubeconfig now, or an earlier one whose sha256 it recorded), then the user's own
    /// copy back from `config.kubexm-bak`, `~/.kube` when left empty.
    pub fn removal(src: &str, user: &str) -> Script {
        let (home, src) = (home_of(user), shell::quoted(src));
        script!(
            "{home}\n[ -n \"$home\" ] || exit 0\n\
             if [ -f \"$f\" ] && {{ cmp -s {src} \"$f\" || ours; }}; then rm -f \"$f\"; fi\n\
             rm -f \"$s\" \"$f.kubexm-part\"\n\
             if [ -e \"$f.kubexm-bak\" ] && [ ! -e \"$f\" ]; then mv \"$f.kubexm-bak\" \"$f\"; fi\n\
             rmdir \"$d\" 2>/dev/null || true",
            home = home,
            src = src
        )
    }

    /// True when [`Self::removal`] has nothing (left) to do.
    pub fn removed(src: &str, user: &str) -> Script {
        let (home, src) = (home_of(user), shell::quoted(src));
        script!(
            "{home}\n[ -z \"$home\" ] && exit 0\n[ ! -e \"$s\" ] && ! {{ [ -f \"$f\" ] && cmp -s {src} \"$f\"; }} && ! {{ [ -e \"$f.kubexm-bak\" ] && [ ! -e \"$f\" ]; }}",
            home = home,
            src = src
        )
    }
}

/// Shell setting `u`, `home` (from passwd), `d` (`~/.kube`), `f` (`~/.kube/config`), `s` (the
/// sha256 of every copy KubeXM wrote there, so a stale copy after the admin kubeconfig changed,
/// e.g. by `certs renew`, is still known as KubeXM's, not backed up as the user's own) and
/// `ours` (whether `f` is such a copy).
fn home_of(user: &str) -> Script {
    script!(
        "u={}\nhome=$(getent passwd \"$u\" | cut -d: -f6)\nd=\"$home/.kube\"\nf=\"$d/config\"\ns=\"$f.kubexm-sha256\"\nours() {{ [ -f \"$s\" ] && [ -f \"$f\" ] && grep -qxF \"$(sha256sum <\"$f\" | cut -d' ' -f1)\" \"$s\"; }}",
        user
    )
}

impl Step for UserKubeconfig {
    fn name(&self) -> &str {
        "user-kubeconfig"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        match ssh_user(&self.ctx, &node.name) {
            Some(user) if user != "root" => Ok(vec![Op::Run(Self::command(&self.src, user))]),
            _ => Ok(Vec::new()),
        }
    }
}

/// The removal for the `delete` pipeline, first after its preflight: while the admin
/// kubeconfig is still there to tell KubeXM's copy from the user's own.
pub fn delete_module(ctx: &Arc<InstallContext>) -> FinalizeDeleteModule {
    FinalizeDeleteModule(FinalizeModule(ctx.clone()))
}

/// Removes the SSH users' copies of the admin kubeconfig (not reverted, as every delete step).
pub struct FinalizeDeleteModule(FinalizeModule);

impl Module for FinalizeDeleteModule {
    fn name(&self) -> &str {
        "delete-finalize"
    }
    fn skip(&self) -> Option<String> {
        self.0.skip()
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let masters = self.0.masters_with_users();
        if masters.is_empty() {
            return Ok(Vec::new());
        }
        Ok(vec![Task::new("delete-user-kubeconfig", masters).step(
            RemoveUserKubeconfig {
                ctx: self.0 .0.clone(),
                src: admin_conf_on_masters(&self.0 .0)?,
            },
        )])
    }
}

/// Removes the SSH user's copy of the admin kubeconfig ([`UserKubeconfig::removal`]).
pub struct RemoveUserKubeconfig {
    ctx: Arc<InstallContext>,
    src: String,
}

impl Step for RemoveUserKubeconfig {
    fn name(&self) -> &str {
        "remove-user-kubeconfig"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        match ssh_user(&self.ctx, &node.name) {
            Some(user) if user != "root" => Ok(vec![Op::Run(
                RunCommand::new(UserKubeconfig::removal(&self.src, user))
                    .unless(UserKubeconfig::removed(&self.src, user)),
            )]),
            _ => Ok(Vec::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;
    use std::path::Path;

    /// Tools that stand in for the user database and ownership (the test cannot create a user):
    /// `alice` lives in `home`, `install`/`chown` ignore owners, `stat` reports alice as owner.
    fn shims(dir: &Path, home: &Path) -> String {
        let real = |tool: &str| {
            let out = std::process::Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .expect("sh");
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        let (install, stat) = (real("install"), real("stat"));
        let tools = [
            (
                "getent",
                format!(
                    "[ \"$2\" = alice ] && echo \"alice:x:1000:1000::{}:/bin/sh\"",
                    home.display()
                ),
            ),
            ("id", "echo alice".to_string()),
            ("chown", "exit 0".to_string()),
            (
                "install",
                format!("a=''\nwhile [ $# -gt 0 ]; do case $1 in -o|-g) shift 2;; *) a=\"$a '$1'\"; shift;; esac; done\neval exec {install} $a"),
            ),
            (
                "stat",
                format!("if [ \"$1\" = -c ] && [ \"$2\" = '%U %a' ]; then printf 'alice %s\\n' \"$({stat} -c %a \"$3\")\"; else exec {stat} \"$@\"; fi"),
            ),
        ];
        for (name, body) in tools {
            let p = dir.join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("shim");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        format!(
            "{}:{}",
            dir.display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    fn sh(path: &str, script: &str) -> bool {
        std::process::Command::new("sh")
            .args(["-c", script])
            .env("PATH", path)
            .status()
            .expect("sh")
            .success()
    }

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).expect("stat").permissions().mode() & 0o777
    }

    #[test]
    fn the_ssh_user_gets_the_admin_kubeconfig_idempotently_and_the_revert_removes_it() {
        let t = tempfile::tempdir().expect("tempdir");
        let (bin, home) = (t.path().join("bin"), t.path().join("home"));
        std::fs::create_dir_all(&bin).expect("bin");
        std::fs::create_dir_all(&home).expect("home");
        let path = shims(&bin, &home);
        let admin = t.path().join("admin.conf");
        std::fs::write(&admin, "apiVersion: v1\nkind: Config\n# admin\n").expect("admin");
        let c = UserKubeconfig::command(&admin.display().to_string(), "alice");
        let (unless, undo) = (
            c.unless.clone().expect("unless"),
            c.undo.clone().expect("undo"),
        );
        let config = home.join(".kube/config");
        let removed = UserKubeconfig::removed(&admin.display().to_string(), "alice");

        assert!(
            sh(&path, &removed),
            "delete: nothing to do before the install"
        );
        assert!(!sh(&path, &unless), "not done before");
        assert!(sh(&path, &c.command), "applied");
        assert_eq!(
            std::fs::read(&config).expect("config"),
            std::fs::read(&admin).expect("admin")
        );
        assert_eq!(mode(&home.join(".kube")), 0o700);
        assert_eq!(mode(&config), 0o600);
        assert!(sh(&path, &unless), "done: a re-run skips it");
        assert!(sh(&path, &c.command), "applying again is harmless");
        assert!(
            !home.join(".kube/config.kubexm-bak").exists(),
            "no backup of our own copy"
        );
        assert!(!sh(&path, &removed), "delete has something to do");
        assert!(sh(&path, &undo), "reverted");
        assert!(
            !config.exists() && !home.join(".kube").exists(),
            "what it wrote is gone"
        );
        assert!(sh(&path, &removed), "delete has nothing left to do");
        assert!(sh(&path, &undo), "reverting twice is harmless");

        // The user's own kubeconfig is kept and put back.
        std::fs::create_dir_all(home.join(".kube")).expect("kube dir");
        std::fs::write(&config, "mine\n").expect("own config");
        std::fs::write(home.join(".kube/other"), "x").expect("other file");
        assert!(!sh(&path, &unless));
        assert!(sh(&path, &c.command));
        assert_eq!(
            std::fs::read_to_string(home.join(".kube/config.kubexm-bak")).expect("backup"),
            "mine\n"
        );
        assert!(sh(&path, &unless));
        assert!(!sh(&path, &removed));
        assert!(sh(&path, &undo));
        assert!(sh(&path, &removed));
        assert_eq!(
            std::fs::read_to_string(&config).expect("restored"),
            "mine\n"
        );
        assert!(home.join(".kube/other").exists(), "the user's files stay");
        std::fs::remove_file(home.join(".kube/other")).expect("rm other");

        // The admin kubeconfig changes (certs renew): the stale copy is KubeXM's, not backed up
        // as the user's, and delete leaves nothing behind.
        std::fs::remove_file(&config).expect("fresh start");
        assert!(sh(&path, &removed));
        assert!(sh(&path, &c.command));
        std::fs::write(&admin, "apiVersion: v1\nkind: Config\n# renewed\n").expect("renewed");
        assert!(!sh(&path, &unless), "stale copy: to do again");
        assert!(sh(&path, &c.command));
        assert!(!home.join(".kube/config.kubexm-bak").exists(), "{:?}", home);
        std::fs::write(&admin, "apiVersion: v1\nkind: Config\n# renewed again\n").expect("again");
        assert!(
            !sh(&path, &removed),
            "a stale copy of ours is still to remove"
        );
        assert!(sh(&path, &undo));
        assert!(sh(&path, &removed));
        assert!(!home.join(".kube").exists(), "nothing of ours left");

        // No such user, no admin kubeconfig: refused with what is wrong.
        let c = UserKubeconfig::command(&admin.display().to_string(), "bob");
        assert!(!sh(&path, &c.command));
        let c = UserKubeconfig::command("/nonexistent/admin.conf", "alice");
        assert!(!sh(&path, &c.command));
        // Hostile user names stay one quoted word.
        let c = UserKubeconfig::command("/etc/kubernetes/admin.conf", "a'; reboot; '");
        assert!(
            c.command.contains(r"u='a'\''; reboot; '\'''"),
            "{}",
            c.command
        );
    }
}
