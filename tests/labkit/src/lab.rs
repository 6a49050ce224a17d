//! [`Lab`]: a running `tests/lab/lab` lab, torn down on `Drop`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::command::{check, Output};

/// Which node root file system the lab boots (`KUBEXM_LAB_ROOTFS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rootfs {
    /// The OS packages node preparation and the load balancers use, preinstalled.
    #[default]
    Full,
    /// A minimal Debian 12 server with no package source (air-gapped).
    Minimal,
}

impl Rootfs {
    fn as_str(self) -> &'static str {
        match self {
            Rootfs::Full => "full",
            Rootfs::Minimal => "minimal",
        }
    }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct LabSpec {
    /// The lab's name: unique on this machine (the prefix and this process's id).
    pub name: String,
    /// Nodes (`node1`..`nodeN`).
    pub nodes: usize,
    /// The root file system.
    pub rootfs: Rootfs,
}

impl LabSpec {
    /// `nodes` nodes of the full root file system, named `PREFIX<pid>` (at most 10 characters:
    /// the lab name is also the cluster's name).
    #[must_use]
    pub fn new(prefix: &str, nodes: usize) -> LabSpec {
        let mut name = format!("{prefix}{}", std::process::id());
        name.truncate(10);
        LabSpec {
            name,
            nodes,
            rootfs: Rootfs::Full,
        }
    }

    /// The same with another root file system.
    #[must_use]
    pub fn rootfs(mut self, rootfs: Rootfs) -> LabSpec {
        self.rootfs = rootfs;
        self
    }
}

/// What `lab env NAME` says about a running lab.
#[derive(Debug, Clone, Default)]
pub struct LabEnv {
    /// The lab's name.
    pub name: String,
    /// Its state directory (`KUBEXM_LAB_ROOT/labs/NAME`).
    pub dir: PathBuf,
    /// The lab's network namespace (the control host's side of the bridge).
    pub netns: String,
    /// The bridge address, the nodes' gateway.
    pub gateway: String,
    /// The address kept free for the load balancer's VIP.
    pub vip: String,
    /// The SSH client key every node accepts for root (and the sudo user).
    pub ssh_key: PathBuf,
    /// `known_hosts` with every node's host key.
    pub known_hosts: PathBuf,
    /// The sudo user and its password.
    pub user: String,
    /// The sudo user's password (`KUBEXM_LAB_PASSWORD` for the cluster's `passwordEnv`).
    pub user_password: String,
    /// Node name → address.
    pub ips: BTreeMap<String, String>,
}

impl LabEnv {
    /// Parses `lab env`'s `KEY=VALUE` lines.
    #[must_use]
    pub fn parse(text: &str) -> LabEnv {
        let mut env = LabEnv::default();
        for line in text.lines() {
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let v = v.to_string();
            match k {
                "LAB_NAME" => env.name = v,
                "LAB_DIR" => env.dir = v.into(),
                "LAB_NETNS" => env.netns = v,
                "LAB_GATEWAY" => env.gateway = v,
                "LAB_VIP" => env.vip = v,
                "LAB_SSH_KEY" => env.ssh_key = v.into(),
                "LAB_KNOWN_HOSTS" => env.known_hosts = v.into(),
                "LAB_USER" => env.user = v,
                "LAB_USER_PASSWORD" => env.user_password = v,
                _ => {
                    if let Some(node) = k.strip_prefix("LAB_IP_") {
                        env.ips.insert(node.to_string(), v);
                    }
                }
            }
        }
        env
    }
}

/// A running lab. Dropping it runs `lab down` (unless `KEEP_LAB=1`), also while a test panics;
/// a watchdog in a session of its own runs `lab down` when the test process dies without
/// dropping it (SIGTERM from CI's time budget, SIGKILL).
#[derive(Debug)]
pub struct Lab {
    env: LabEnv,
    script: PathBuf,
    keep: bool,
    watchdog: Option<Child>,
}

impl Lab {
    /// Starts a fresh lab (an old one of the same name is torn down first) and waits until every
    /// node runs systemd and sshd.
    ///
    /// # Panics
    /// When `lab up` fails (after tearing down what it started).
    #[must_use]
    pub fn up(spec: &LabSpec) -> Lab {
        let script = crate::lab_dir().join("lab");
        // Nodes share the host kernel: load the modules Kubernetes needs here (a node cannot).
        // Best effort, as before: a host without modprobe has them built in or cannot load them.
        let _ = Command::new("modprobe")
            .args([
                "-a",
                "br_netfilter",
                "overlay",
                "ip_vs",
                "ip_vs_rr",
                "ip_vs_wrr",
                "ip_vs_sh",
                "nf_conntrack",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = Output::run(Command::new(&script).args(["down", &spec.name]));
        let keep = std::env::var("KEEP_LAB").is_ok_and(|v| v == "1");
        // From here on Drop tears down whatever `up` started, even if it fails half-way.
        let mut lab = Lab {
            env: LabEnv {
                name: spec.name.clone(),
                ..LabEnv::default()
            },
            script,
            keep,
            watchdog: None,
        };
        if !keep {
            lab.watchdog = Some(lab.spawn_watchdog());
        }
        let nodes = spec.nodes.to_string();
        let _ = Output::run(
            Command::new(&lab.script)
                .args(["up", "--name", &spec.name, "--nodes", &nodes])
                .env("KUBEXM_LAB_ROOTFS", spec.rootfs.as_str()),
        )
        .ok("lab up");
        let env = lab.script(&["env", &spec.name]).ok("lab env");
        lab.env = LabEnv::parse(&env.stdout);
        check(
            lab.env.ips.len() == spec.nodes && !lab.env.netns.is_empty(),
            "lab env names the lab's namespace and every node",
            &env,
        );
        lab
    }

    /// `sh` waiting for this process to end, then `lab down NAME`; in its own session, so that
    /// a signal to the test's process group does not reach it.
    fn spawn_watchdog(&self) -> Child {
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; exec '{lab}' down '{name}'",
            pid = std::process::id(),
            lab = self.script.display(),
            name = self.env.name,
        );
        Command::new("setsid")
            .args(["sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the lab's watchdog (setsid sh): {e}"))
    }

    /// `tests/lab/lab ARGS`.
    #[must_use]
    pub fn script(&self, args: &[&str]) -> Output {
        Output::run(Command::new(&self.script).args(args))
    }

    /// The lab's name (also the lab cluster's name).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.env.name
    }

    /// What `lab env` said.
    #[must_use]
    pub fn env(&self) -> &LabEnv {
        &self.env
    }

    /// A node's address.
    ///
    /// # Panics
    /// If the lab has no such node.
    #[must_use]
    #[track_caller]
    pub fn ip(&self, node: &str) -> &str {
        self.env
            .ips
            .get(node)
            .unwrap_or_else(|| panic!("lab {} has no node {node}", self.env.name))
    }

    /// The VIP kept free for the load balancer.
    #[must_use]
    pub fn vip(&self) -> &str {
        &self.env.vip
    }

    /// A command to run in the lab's network namespace (`ip netns exec NETNS PROGRAM`).
    #[must_use]
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.env.netns]).arg(program);
        c
    }

    /// Runs `args` in the lab's network namespace.
    #[must_use]
    pub fn exec(&self, args: &[&str]) -> Output {
        let (program, rest) = args.split_first().expect("exec: a program");
        Output::run(self.command(program).args(rest))
    }

    fn ssh_command(&self, program: &str) -> Command {
        let mut c = self.command(program);
        c.arg("-i")
            .arg(&self.env.ssh_key)
            .arg("-o")
            .arg(format!(
                "UserKnownHostsFile={}",
                self.env.known_hosts.display()
            ))
            .args([
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=5",
                "-o",
                "LogLevel=ERROR",
            ]);
        c
    }

    /// Runs the shell `script` on `node` as root over SSH (strict host key checking).
    #[must_use]
    pub fn ssh(&self, node: &str, script: &str) -> Output {
        let target = format!("root@{}", self.ip(node));
        Output::run(self.ssh_command("ssh").arg(target).arg(script))
    }

    /// Whether `script` exits 0 on `node`.
    #[must_use]
    pub fn ssh_ok(&self, node: &str, script: &str) -> bool {
        self.ssh(node, script).success()
    }

    /// `node`'s file at `path` (empty when it cannot be read).
    #[must_use]
    pub fn read(&self, node: &str, path: &str) -> String {
        self.ssh(node, &format!("cat {path} 2>/dev/null")).stdout
    }

    /// Copies the local file `from` to `node`'s `to` (scp).
    ///
    /// # Panics
    /// When the copy fails.
    pub fn copy(&self, from: &Path, node: &str, to: &str) {
        let target = format!("root@{}:{to}", self.ip(node));
        let _ = Output::run(self.ssh_command("scp").arg(from).arg(target)).ok("scp to a node");
    }

    /// Stops `node` (its disk is kept).
    ///
    /// # Panics
    /// When `lab stop-node` fails.
    pub fn stop_node(&self, node: &str) {
        let _ = self
            .script(&["stop-node", &self.env.name, node])
            .ok("lab stop-node");
    }

    /// Boots `node` again and waits until it is ready.
    ///
    /// # Panics
    /// When `lab start-node` fails.
    pub fn start_node(&self, node: &str) {
        let _ = self
            .script(&["start-node", &self.env.name, node])
            .ok("lab start-node");
    }

    /// `tests/lab/cluster.yaml` rewritten for this lab (addresses, key path, name).
    ///
    /// # Panics
    /// When `lab cluster-yaml` fails.
    #[must_use]
    pub fn cluster_yaml(&self) -> String {
        self.script(&["cluster-yaml", &self.env.name])
            .ok("lab cluster-yaml")
            .stdout
    }

    /// Whether `tests/lab/lab list` lists a lab named `name`.
    #[must_use]
    pub fn listed(name: &str) -> bool {
        let out = Output::run(Command::new(crate::lab_dir().join("lab")).arg("list"));
        out.stdout.lines().any(|l| l.trim() == name)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.keep {
            eprintln!(
                "labkit: KEEP_LAB=1: kept lab {} (tests/lab/lab down {0})",
                self.env.name
            );
            return;
        }
        let down = self.script(&["down", &self.env.name]);
        if !down.success() {
            eprintln!("labkit: lab down {} failed\n{down}", self.env.name);
        }
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}
