//! [`Sshd`]: a real OpenSSH server (Debian's `openssh-server`) as a child process, and the
//! non-root sudo user ([`sudo_user`]) the SSH tests log in as.

use std::io::Read as _;
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::tools::{self, run_or_panic};

/// The Debian binary (package `openssh-server`).
const SSHD_BIN: &str = "/usr/sbin/sshd";
/// How long [`Sshd::start`] waits for the SSH banner.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// Fresh ports tried when the probed one was taken in the meantime.
const PORT_ATTEMPTS: usize = 5;

/// The non-root user [`sudo_user`] creates.
pub const SUDO_USER: &str = "kubexm-test";
/// Its login and sudo password (a test fixture, not a secret).
pub const SUDO_PASSWORD: &str = "kubexm-Test-pw-7!";

/// A running `sshd -D -e -f CONFIG` on `127.0.0.1`, with its own host key, config, pid file
/// and `authorized_keys` in a temporary directory. Public-key login works for every user with
/// [`Sshd::user_key`]; password login is enabled (`UsePAM no`: shadow passwords). Killed, with
/// every session it serves, on `Drop`.
#[derive(Debug)]
pub struct Sshd {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    host_key_line: String,
}

/// Runs `ssh-keygen` for a new key pair without a passphrase at `path` (and `path.pub`).
///
/// `kind` is `ed25519` or `rsa` (3072 bits).
///
/// # Panics
/// If `ssh-keygen` fails.
pub fn ssh_keygen(path: &Path, kind: &str) {
    let mut cmd = Command::new("ssh-keygen");
    cmd.args(["-q", "-t", kind, "-N", "", "-C", "kubexm-testkit", "-f"])
        .arg(path);
    if kind == "rsa" {
        cmd.args(["-b", "3072"]);
    }
    run_or_panic(&mut cmd, "ssh-keygen");
}

/// The `key-type base64` part of a `.pub` file.
fn public_key_fields(pub_path: &Path) -> String {
    let text = fs_err::read_to_string(pub_path).expect("read a public key");
    text.split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

impl Sshd {
    /// Starts sshd on a free loopback port and waits until it sends its SSH banner.
    ///
    /// # Panics
    /// If `openssh-server` is missing, keys cannot be generated, or sshd does not become ready
    /// (its log is in the message).
    #[must_use]
    pub fn start() -> Sshd {
        tools::require_file(Path::new(SSHD_BIN), "openssh-server");
        // Privilege separation directory, normally made by the service unit.
        fs_err::create_dir_all("/run/sshd").expect("create /run/sshd");
        let dir = tempfile::Builder::new()
            .prefix("kubexm-sshd.")
            .tempdir()
            .expect("temp dir for sshd");
        // The login user (not only root) reads authorized_keys under its own uid.
        fs_err::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod the sshd dir");
        let host_key = dir.path().join("host_ed25519");
        ssh_keygen(&host_key, "ed25519");
        let user_key = dir.path().join("id_ed25519");
        ssh_keygen(&user_key, "ed25519");
        let host_key_line = public_key_fields(&host_key.with_extension("pub"));
        let mut sshd = Sshd {
            dir,
            port: 0,
            child: None,
            host_key_line,
        };
        sshd.authorize_key(&user_key.with_extension("pub"));
        for attempt in 1..=PORT_ATTEMPTS {
            let port = crate::free_port();
            match sshd.spawn(port) {
                Ok(()) => return sshd,
                Err(log) if attempt < PORT_ATTEMPTS && log.contains("Address already in use") => {}
                Err(log) => panic!("sshd did not start on 127.0.0.1:{port}; its log:\n{log}"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// Writes the config for `port`, starts sshd and waits for its banner; Err(log) if it died.
    fn spawn(&mut self, port: u16) -> Result<(), String> {
        let d = self.dir.path();
        let config = d.join("sshd_config");
        fs_err::write(
            &config,
            format!(
                "Port {port}\n\
                 ListenAddress 127.0.0.1\n\
                 HostKey {host_key}\n\
                 PidFile {pid}\n\
                 AuthorizedKeysFile {auth}\n\
                 UsePAM no\n\
                 StrictModes no\n\
                 PermitRootLogin yes\n\
                 PubkeyAuthentication yes\n\
                 PasswordAuthentication yes\n\
                 KbdInteractiveAuthentication no\n\
                 MaxStartups 100\n\
                 LogLevel VERBOSE\n",
                host_key = d.join("host_ed25519").display(),
                pid = d.join("sshd.pid").display(),
                auth = d.join("authorized_keys").display(),
            ),
        )
        .expect("write sshd_config");
        let log = std::fs::File::create(self.log_path()).expect("create the sshd log");
        let child = Command::new(SSHD_BIN)
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {SSHD_BIN}: {e}"));
        self.child = Some(child);
        self.port = port;
        let ready = crate::wait_until(READY_TIMEOUT, || {
            if self.exited() {
                return true;
            }
            banner(port)
        });
        if self.exited() || !ready {
            let log = self.log();
            self.stop();
            return Err(log);
        }
        Ok(())
    }

    fn exited(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => !matches!(child.try_wait(), Ok(None)),
            None => true,
        }
    }

    /// `127.0.0.1`.
    #[must_use]
    pub fn host(&self) -> &'static str {
        "127.0.0.1"
    }

    /// The port it listens on.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The temporary directory holding its files.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A private key (ed25519, OpenSSH format, no passphrase) every user may log in with.
    #[must_use]
    pub fn user_key(&self) -> PathBuf {
        self.dir.path().join("id_ed25519")
    }

    /// Adds the public key in `pub_path` to the shared `authorized_keys`.
    ///
    /// # Panics
    /// If the files cannot be read or written.
    pub fn authorize_key(&self, pub_path: &Path) {
        let auth = self.dir.path().join("authorized_keys");
        let mut text = fs_err::read_to_string(&auth).unwrap_or_default();
        text.push_str(&public_key_fields(pub_path));
        text.push('\n');
        fs_err::write(&auth, text).expect("write authorized_keys");
        fs_err::set_permissions(&auth, std::fs::Permissions::from_mode(0o644))
            .expect("chmod authorized_keys");
    }

    /// Its `known_hosts` line: `[127.0.0.1]:PORT ssh-ed25519 AAAA...`.
    #[must_use]
    pub fn known_hosts_line(&self) -> String {
        format!("[{}]:{} {}\n", self.host(), self.port, self.host_key_line)
    }

    /// Writes a `known_hosts` file at `path` holding only [`Sshd::known_hosts_line`].
    ///
    /// # Panics
    /// If the file cannot be written.
    pub fn write_known_hosts(&self, path: &Path) {
        fs_err::write(path, self.known_hosts_line()).expect("write known_hosts");
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("sshd.log")
    }

    /// What sshd has logged so far (`LogLevel VERBOSE`).
    #[must_use]
    pub fn log(&self) -> String {
        fs_err::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Successful logins so far (`Accepted ... for USER` lines): one per SSH connection.
    #[must_use]
    pub fn accepted_logins(&self) -> usize {
        self.log()
            .lines()
            .filter(|l| {
                // "Accepted publickey for root from ...", not "Accepted key ... found at".
                l.contains("Accepted ") && l.contains(" for ") && l.contains(" from ")
            })
            .count()
    }

    /// Kills (SIGKILL) every process serving a connection, and their commands, leaving the
    /// listener up: clients see their connection drop. Returns how many processes were killed.
    pub fn kill_connections(&self) -> usize {
        let Some(child) = self.child.as_ref() else {
            return 0;
        };
        let pids = descendants(child.id());
        kill(&pids);
        pids.len()
    }

    /// Stops the listener and every session (also done on `Drop`).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pids = descendants(child.id());
            let _ = child.kill();
            kill(&pids);
            let _ = child.wait();
        }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether `127.0.0.1:port` accepts a connection and sends an SSH banner.
fn banner(port: u16) -> bool {
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    let Ok(mut stream) = TcpStream::connect_timeout(&addr.into(), Duration::from_secs(1)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut buf = [0u8; 8];
    stream.read_exact(&mut buf).is_ok() && buf.starts_with(b"SSH-")
}

/// `(pid, ppid)` of every process, from `/proc/PID/stat`.
fn process_table() -> Vec<(u32, u32)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (comm) state ppid ...`; comm may contain spaces and parentheses.
            let rest = &stat[stat.rfind(')')? + 1..];
            let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect()
}

/// Every process below `root` (not `root` itself).
fn descendants(root: u32) -> Vec<u32> {
    let table = process_table();
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid) in &table {
            if ppid == parent && !found.contains(&pid) {
                found.push(pid);
                frontier.push(pid);
            }
        }
    }
    found
}

fn kill(pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg("-KILL")
        .args(pids.iter().map(u32::to_string))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Pids of the processes whose command line contains `needle` (from `/proc/PID/cmdline`).
#[must_use]
pub fn processes_with(needle: &str) -> Vec<u32> {
    process_table()
        .into_iter()
        .filter(|&(pid, _)| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|raw| {
                    let line = String::from_utf8_lossy(&raw).replace('\0', " ");
                    line.contains(needle)
                })
                .unwrap_or(false)
        })
        .map(|(pid, _)| pid)
        .collect()
}

/// Makes sure the system user [`SUDO_USER`] exists with password [`SUDO_PASSWORD`] and may run
/// anything through `sudo` **with** that password (`/etc/sudoers.d/kubexm-test`, no `NOPASSWD`).
/// Idempotent and safe to call from concurrent tests and test processes (a file lock).
/// Needs root and the `sudo` package.
///
/// # Panics
/// If not root, or `useradd`/`chpasswd` fail.
pub fn sudo_user() -> (&'static str, &'static str) {
    tools::require_file(Path::new("/usr/bin/sudo"), "sudo");
    let lock = fs_err::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/tmp/kubexm-testkit-sudo-user.lock")
        .expect("open the sudo-user lock file");
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .expect("lock the sudo-user lock file");
    let exists = Command::new("id")
        .args(["-u", SUDO_USER])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !exists {
        run_or_panic(
            Command::new("useradd").args(["-m", "-s", "/bin/sh", SUDO_USER]),
            "useradd (the SSH tests need root)",
        );
    }
    tools::run_with_stdin(
        &mut Command::new("chpasswd"),
        format!("{SUDO_USER}:{SUDO_PASSWORD}\n").as_bytes(),
    )
    .unwrap_or_else(|e| panic!("chpasswd for {SUDO_USER}: {e}"));
    let rule = format!("{SUDO_USER} ALL=(ALL:ALL) ALL\n");
    let path = Path::new("/etc/sudoers.d").join(SUDO_USER);
    if fs_err::read_to_string(&path).ok().as_deref() != Some(rule.as_str()) {
        let tmp = path.with_extension("tmp");
        fs_err::write(&tmp, &rule).expect("write the sudoers rule");
        fs_err::set_permissions(&tmp, std::fs::Permissions::from_mode(0o440))
            .expect("chmod the sudoers rule");
        fs_err::rename(&tmp, &path).expect("install the sudoers rule");
    }
    drop(lock);
    (SUDO_USER, SUDO_PASSWORD)
}
