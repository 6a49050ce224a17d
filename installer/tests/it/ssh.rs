//! `SshRunner` against a real OpenSSH server on loopback (`kubexm_testkit::Sshd`): key and
//! password auth, sudo with a password for a non-root user, stdin, exit codes, timeouts, uploads,
//! host keys, one multiplexed connection, reconnects.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kubexm_install::runner::ssh::{Secret, SshOptions, SshRunner};
use kubexm_install::runner::{Exec, RunError, Runner, Upload, UploadOutcome, UploadSource};
use kubexm_testkit::{processes_with, sha256_hex, ssh_keygen, sudo_user, wait_until, Sshd};

const NODE: &str = "node1";

/// A running sshd plus a scratch dir holding a known_hosts file that trusts it.
struct Fixture {
    sshd: Sshd,
    tmp: tempfile::TempDir,
}

impl Fixture {
    fn start() -> Fixture {
        let sshd = Sshd::start();
        let tmp = tempfile::tempdir().expect("temp dir");
        sshd.write_known_hosts(&tmp.path().join("known_hosts"));
        Fixture { sshd, tmp }
    }

    fn known_hosts(&self) -> PathBuf {
        self.tmp.path().join("known_hosts")
    }

    /// Root with the fixture's key.
    fn root(&self) -> SshOptions {
        let mut o = SshOptions::new(NODE, self.sshd.host(), "root", self.known_hosts());
        o.port = self.sshd.port();
        o.private_key = Some(self.sshd.user_key());
        o.connect_timeout = Duration::from_secs(10);
        o
    }

    /// The non-root sudo user with key and password.
    fn sudoer(&self) -> SshOptions {
        let (user, password) = sudo_user();
        let mut o = self.root();
        o.user = user.to_string();
        o.password = Some(Secret::new(password));
        o
    }
}

/// A unique token for process markers and file names.
fn unique() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn plain(script: &str) -> Exec {
    Exec {
        script: script.to_string(),
        sudo: false,
        stdin: None,
        timeout: Duration::from_secs(60),
    }
}

async fn connect(opts: SshOptions) -> SshRunner {
    SshRunner::connect(opts).await.expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_root_key_auth_exit_codes_stderr_and_stdin() {
    let f = Fixture::start();
    let runner = connect(f.root()).await;
    assert_eq!(runner.node(), NODE);

    let out = runner.exec(&Exec::root("whoami")).await.expect("whoami");
    assert_eq!(out.stdout, "root\n");
    assert!(out.success());

    let out = runner
        .exec(&plain("echo out; echo 'it''s err' >&2; exit 3"))
        .await
        .expect("exit 3");
    assert_eq!(out.code, Some(3));
    assert_eq!(out.stdout, "out\n");
    assert_eq!(out.stderr, "its err\n");

    let stdin: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let out = runner
        .exec(&plain("sha256sum | cut -d' ' -f1").with_stdin(stdin.clone()))
        .await
        .expect("stdin");
    assert_eq!(out.stdout.trim(), sha256_hex(&stdin));

    // A script that ignores its stdin still finishes.
    let out = runner
        .exec(&plain("echo ignored").with_stdin(vec![b'x'; 4 << 20]))
        .await
        .expect("ignored stdin");
    assert_eq!(out.stdout, "ignored\n");

    // Killed by a signal: no exit code.
    let out = runner.exec(&plain("kill -KILL $$")).await.expect("signal");
    assert_eq!(out.code, None);
    assert_eq!(runner.connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_rsa_key_auth() {
    let f = Fixture::start();
    let key = f.tmp.path().join("id_rsa");
    ssh_keygen(&key, "rsa");
    f.sshd.authorize_key(&key.with_extension("pub"));
    let mut opts = f.root();
    opts.private_key = Some(key);
    let runner = connect(opts).await;
    let out = runner.exec(&plain("id -u")).await.expect("id");
    assert_eq!(out.stdout, "0\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_password_auth() {
    let f = Fixture::start();
    let mut opts = f.sudoer();
    opts.private_key = None;
    let runner = connect(opts).await;
    let out = runner.exec(&plain("whoami")).await.expect("whoami");
    assert_eq!(out.stdout, "kubexm-test\n");
    assert!(f.sshd.log().contains("Accepted password for kubexm-test"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_wrong_password_or_key_is_an_auth_error() {
    let f = Fixture::start();
    let mut opts = f.sudoer();
    opts.private_key = None;
    opts.password = Some(Secret::new("not-the-Password-123"));
    let err = SshRunner::connect(opts)
        .await
        .expect_err("wrong password must fail");
    let text = err.to_string();
    assert!(matches!(err, RunError::Auth { .. }), "{err:?}");
    assert!(
        text.contains(NODE) && text.contains("kubexm-test"),
        "{text}"
    );
    assert!(!text.contains("not-the-Password-123"), "{text}");
    assert!(!format!("{err:?}").contains("not-the-Password-123"));

    let other = f.tmp.path().join("other_ed25519");
    ssh_keygen(&other, "ed25519");
    let mut opts = f.root();
    opts.private_key = Some(other);
    let err = SshRunner::connect(opts)
        .await
        .expect_err("unknown key must fail");
    assert!(matches!(err, RunError::Auth { .. }), "{err:?}");
    assert!(err.to_string().contains("root"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_sudo_with_password_for_non_root_user() {
    let f = Fixture::start();
    let opts = f.sudoer();
    let password = opts
        .password
        .as_ref()
        .map(|p| p.expose().to_string())
        .expect("password");
    assert!(!format!("{opts:?}").contains(&password));
    let runner = connect(opts).await;

    let out = runner.exec(&plain("whoami")).await.expect("whoami");
    assert_eq!(out.stdout, "kubexm-test\n");

    for _ in 0..2 {
        // Twice: the second run must not depend on sudo's credential cache.
        let out = runner
            .exec(&Exec::root("whoami"))
            .await
            .expect("sudo whoami");
        assert_eq!(out.stdout, "root\n", "stderr: {}", out.stderr);
        assert_eq!(out.stderr, "");
        assert!(!out.stdout.contains(&password) && !out.stderr.contains(&password));
    }

    // stdin reaches the script intact, without the password line.
    let out = runner
        .exec(&Exec::root("cat; echo done >&2").with_stdin(b"line one\nline two\n".to_vec()))
        .await
        .expect("sudo cat");
    assert_eq!(out.stdout, "line one\nline two\n");
    assert_eq!(out.stderr, "done\n");
    let out = runner
        .exec(&Exec::root("cat"))
        .await
        .expect("sudo cat, no stdin");
    assert_eq!(out.stdout, "");

    // Exit codes pass through sudo.
    let out = runner.exec(&Exec::root("exit 7")).await.expect("exit 7");
    assert_eq!(out.code, Some(7));

    // A file written through sudo is root's.
    let dest = format!("/root/kubexm-ssh-test-{}", unique());
    let content = b"root owned\n".to_vec();
    let outcome = runner
        .upload(&Upload {
            sha256: sha256_hex(&content),
            source: UploadSource::Bytes(content.clone()),
            dest: dest.clone(),
            mode: 0o600,
            sudo: true,
        })
        .await
        .expect("sudo upload");
    assert_eq!(outcome, UploadOutcome::Uploaded(content.len() as u64));
    let meta = std::fs::metadata(&dest).expect("stat");
    assert_eq!(meta.uid(), 0);
    assert_eq!(std::fs::read(&dest).expect("read"), content);
    let _ = std::fs::remove_file(&dest);

    // Without a password, `sudo -n`: refused at once (the rule needs one), never hangs.
    let mut key_only = f.sudoer();
    key_only.password = None;
    let runner = connect(key_only).await;
    let out = runner.exec(&Exec::root("whoami")).await.expect("sudo -n");
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("password is required"),
        "{}",
        out.stderr
    );

    // A wrong sudo password is an Auth error that does not show it.
    let mut wrong = f.sudoer();
    wrong.private_key = Some(f.sshd.user_key());
    wrong.password = Some(Secret::new("wrong-sudo-Pass-99"));
    let runner = connect(wrong).await;
    let err = runner
        .exec(&Exec::root("whoami"))
        .await
        .expect_err("wrong sudo password");
    assert!(matches!(err, RunError::Auth { .. }), "{err:?}");
    assert!(err.to_string().contains("sudo"), "{err}");
    assert!(!err.to_string().contains("wrong-sudo-Pass-99"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_timeout_kills_the_remote_command() {
    let f = Fixture::start();
    let runner = connect(f.root()).await;
    // A unique duration marks the process: `sleep 300.<unique>`.
    let marker = format!("300.{}", unique());
    let started = Instant::now();
    let err = runner
        .exec(
            &plain(&format!("echo started; sleep {marker}; echo never"))
                .with_timeout(Duration::from_secs(1)),
        )
        .await
        .expect_err("must time out");
    assert!(matches!(err, RunError::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains(NODE));
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert!(
        wait_until(Duration::from_secs(10), || processes_with(&marker)
            .is_empty()),
        "the remote sleep survived the timeout: {:?}",
        processes_with(&marker)
    );
    // The connection is still usable.
    let out = runner.exec(&plain("echo ok")).await.expect("after timeout");
    assert_eq!(out.stdout, "ok\n");
}

fn upload_of(content: &[u8], dest: &Path, mode: u32) -> Upload {
    Upload {
        source: UploadSource::Bytes(content.to_vec()),
        sha256: sha256_hex(content),
        dest: dest.display().to_string(),
        mode,
        sudo: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_upload_skip_and_replace() {
    let f = Fixture::start();
    let runner = connect(f.root()).await;
    let dest = f.tmp.path().join("etc/kubexm/config.yaml");

    let first = b"first: 1\n";
    let outcome = runner
        .upload(&upload_of(first, &dest, 0o640))
        .await
        .expect("upload");
    assert_eq!(outcome, UploadOutcome::Uploaded(first.len() as u64));
    assert_eq!(std::fs::read(&dest).expect("read"), first);
    let meta = std::fs::metadata(&dest).expect("stat");
    assert_eq!(meta.permissions().mode() & 0o7777, 0o640);
    let mtime = (meta.mtime(), meta.mtime_nsec(), meta.ino());

    let again = runner
        .upload(&upload_of(first, &dest, 0o640))
        .await
        .expect("re-upload");
    assert_eq!(again, UploadOutcome::Skipped);
    let meta = std::fs::metadata(&dest).expect("stat");
    assert_eq!((meta.mtime(), meta.mtime_nsec(), meta.ino()), mtime);

    // Changed content replaces the file by rename (a new inode), never in place.
    let second = b"second: 2\nmore\n";
    let src = f.tmp.path().join("second.yaml");
    std::fs::write(&src, second).expect("write source");
    let outcome = runner
        .upload(&Upload {
            source: UploadSource::File(src),
            ..upload_of(second, &dest, 0o600)
        })
        .await
        .expect("replace");
    assert_eq!(outcome, UploadOutcome::Uploaded(second.len() as u64));
    assert_eq!(std::fs::read(&dest).expect("read"), second);
    let meta = std::fs::metadata(&dest).expect("stat");
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    assert_ne!(meta.ino(), mtime.2, "replaced in place");
    assert!(!dest.with_extension("yaml.kubexm-part").exists());

    // Content that does not match its sha256 is refused and the destination left alone.
    let mut bad = upload_of(b"third\n", &dest, 0o600);
    bad.sha256 = sha256_hex(b"something else");
    let err = runner.upload(&bad).await.expect_err("mismatch");
    assert!(matches!(err, RunError::Upload { .. }), "{err:?}");
    assert!(err.to_string().contains("sha256 mismatch"), "{err}");
    assert_eq!(std::fs::read(&dest).expect("read"), second);

    // A node copy of the same size but another content is replaced: the size alone never
    // skips, it only spares hashing a copy of another size.
    let same_size = b"SECOND: 2\nmore\n";
    assert_eq!(same_size.len(), second.len());
    let outcome = runner
        .upload(&upload_of(same_size, &dest, 0o600))
        .await
        .expect("same size");
    assert_eq!(outcome, UploadOutcome::Uploaded(same_size.len() as u64));
    assert_eq!(std::fs::read(&dest).expect("read"), same_size);

    // A local source that is gone is not needed when the node has its content already.
    let outcome = runner
        .upload(&Upload {
            source: UploadSource::File(f.tmp.path().join("gone")),
            ..upload_of(same_size, &dest, 0o600)
        })
        .await
        .expect("skipped without reading the source");
    assert_eq!(outcome, UploadOutcome::Skipped);

    // A missing local source is an Io error naming the node.
    let err = runner
        .upload(&Upload {
            source: UploadSource::File(f.tmp.path().join("missing")),
            ..upload_of(b"x", &dest, 0o600)
        })
        .await
        .expect_err("missing source");
    assert!(matches!(err, RunError::Io { .. }), "{err:?}");
    assert!(err.to_string().starts_with(NODE), "{err}");
}

/// Incompressible bytes without a RNG dependency (xorshift64).
fn noise(len: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_upload_64_mib_file() {
    let f = Fixture::start();
    let runner = connect(f.root()).await;
    let content = noise(64 << 20);
    let sha = sha256_hex(&content);
    let src = f.tmp.path().join("big.bin");
    std::fs::write(&src, &content).expect("write source");
    drop(content);
    let dest = f.tmp.path().join("dest/big.bin");
    let started = Instant::now();
    let outcome = runner
        .upload(&Upload {
            source: UploadSource::File(src.clone()),
            sha256: sha.clone(),
            dest: dest.display().to_string(),
            mode: 0o644,
            sudo: false,
        })
        .await
        .expect("upload 64 MiB");
    eprintln!("64 MiB upload took {:?}", started.elapsed());
    assert_eq!(outcome, UploadOutcome::Uploaded(64 << 20));
    assert_eq!(sha256_hex(&std::fs::read(&dest).expect("read")), sha);

    // One bit flipped in the middle of the stream: hashed on the way in, refused, and nothing
    // left on the node.
    let mut content = std::fs::read(&src).expect("read source");
    content[(32 << 20) + 5] ^= 0x10;
    std::fs::write(&src, &content).expect("corrupt source");
    drop(content);
    let dest = f.tmp.path().join("dest/corrupted.bin");
    let err = runner
        .upload(&Upload {
            source: UploadSource::File(src),
            sha256: sha,
            dest: dest.display().to_string(),
            mode: 0o644,
            sudo: false,
        })
        .await
        .expect_err("corrupted");
    assert!(err.to_string().contains("sha256 mismatch"), "{err}");
    assert!(!dest.exists());
    assert!(!f.tmp.path().join("dest/corrupted.bin.kubexm-part").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_unknown_host_key_refused_then_accepted_and_recorded() {
    let f = Fixture::start();
    let known = f.tmp.path().join("fresh/known_hosts");
    let mut opts = f.root();
    opts.known_hosts = known.clone();

    let err = SshRunner::connect(opts.clone())
        .await
        .expect_err("unknown host key");
    assert!(matches!(err, RunError::HostKey { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("--accept-new-host-keys"), "{text}");
    assert!(text.contains(&known.display().to_string()), "{text}");
    assert!(!known.exists(), "nothing recorded without accept_new");

    opts.accept_new_host_keys = true;
    let runner = connect(opts.clone()).await;
    runner.exec(&plain("true")).await.expect("exec");
    let recorded = std::fs::read_to_string(&known).expect("known_hosts written");
    assert_eq!(recorded, f.sshd.known_hosts_line());
    let mode = std::fs::metadata(&known)
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // Now known: accepted without the flag, and not recorded twice.
    opts.accept_new_host_keys = false;
    connect(opts.clone()).await;
    opts.accept_new_host_keys = true;
    connect(opts).await;
    assert_eq!(
        std::fs::read_to_string(&known).expect("read"),
        f.sshd.known_hosts_line()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_changed_host_key_is_refused_even_with_accept_new() {
    let f = Fixture::start();
    let other = f.tmp.path().join("other_host_key");
    ssh_keygen(&other, "ed25519");
    let fields = std::fs::read_to_string(other.with_extension("pub")).expect("read pub");
    let fields: Vec<&str> = fields.split_whitespace().take(2).collect();
    let line = format!(
        "# recorded earlier\n[{}]:{} {}\n",
        f.sshd.host(),
        f.sshd.port(),
        fields.join(" ")
    );
    std::fs::write(f.known_hosts(), &line).expect("write known_hosts");
    for accept_new in [false, true] {
        let mut opts = f.root();
        opts.accept_new_host_keys = accept_new;
        let err = SshRunner::connect(opts).await.expect_err("changed key");
        assert!(matches!(err, RunError::HostKey { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("CHANGED"), "{text}");
        assert!(
            text.contains(&format!("{} line 2", f.known_hosts().display())),
            "{text}"
        );
        assert!(text.starts_with(NODE), "{text}");
    }
    assert_eq!(
        std::fs::read_to_string(f.known_hosts()).expect("read"),
        line,
        "known_hosts must not change"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_fifty_concurrent_execs_share_one_connection() {
    let f = Fixture::start();
    let runner = std::sync::Arc::new(connect(f.root()).await);
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let runner = runner.clone();
            tokio::spawn(async move {
                runner
                    .exec(&plain(&format!("sleep 0.2; echo {i}")))
                    .await
                    .map(|out| (i, out))
            })
        })
        .collect();
    for task in tasks {
        let (i, out) = task.await.expect("join").expect("exec");
        assert_eq!(out.stdout, format!("{i}\n"));
    }
    // Uploads interleaved with execs, too.
    let uploads: Vec<_> = (0..10)
        .map(|i| {
            let runner = runner.clone();
            let dest = f.tmp.path().join(format!("multi/{i}"));
            tokio::spawn(async move {
                runner
                    .upload(&upload_of(format!("{i}\n").as_bytes(), &dest, 0o644))
                    .await
            })
        })
        .collect();
    for task in uploads {
        task.await.expect("join").expect("upload");
    }
    assert_eq!(runner.connections(), 1);
    assert_eq!(f.sshd.accepted_logins(), 1, "{}", f.sshd.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_reconnects_once_after_the_connection_is_killed() {
    let mut f = Fixture::start();
    let runner = std::sync::Arc::new(connect(f.root()).await);
    runner.exec(&plain("true")).await.expect("first exec");
    assert_eq!(f.sshd.accepted_logins(), 1);

    // Idle connection killed: the next exec reconnects once and succeeds.
    assert!(f.sshd.kill_connections() > 0);
    let out = runner
        .exec(&plain("echo again"))
        .await
        .expect("exec after reconnect");
    assert_eq!(out.stdout, "again\n");
    assert_eq!(runner.connections(), 2);
    assert_eq!(f.sshd.accepted_logins(), 2);

    // Killed while a command runs: not re-run (it may have had effects), a Connection error.
    let marker = format!("300.{}", unique());
    let busy = {
        let runner = runner.clone();
        let script = format!("sleep {marker}");
        tokio::spawn(async move { runner.exec(&plain(&script)).await })
    };
    assert!(
        wait_until(Duration::from_secs(10), || !processes_with(&marker)
            .is_empty()),
        "remote command did not start"
    );
    f.sshd.kill_connections();
    let err = busy
        .await
        .expect("join")
        .expect_err("connection lost mid-command");
    assert!(matches!(err, RunError::Connection { .. }), "{err:?}");
    assert!(err.to_string().contains("may have run"), "{err}");
    assert_eq!(runner.connections(), 2);

    // sshd gone for good: a clear Connection error naming the node.
    f.sshd.stop();
    let err = runner.exec(&plain("true")).await.expect_err("no server");
    assert!(matches!(err, RunError::Connection { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("{NODE}: connection failed")),
        "{text}"
    );
    assert!(text.contains("reconnecting failed"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_renew_replaces_the_connection_and_keeps_the_new_one() {
    let mut f = Fixture::start();
    let runner = connect(f.root()).await;
    runner.exec(&plain("true")).await.expect("first exec");
    // A node that rebooted: the old connection is dead; renew makes the next one, used from
    // then on (no reconnect on the next exec).
    assert!(f.sshd.kill_connections() > 0);
    runner.renew().await.expect("renew");
    assert_eq!(runner.connections(), 2);
    let out = runner.exec(&plain("echo fresh")).await.expect("exec");
    assert_eq!(out.stdout, "fresh\n");
    assert_eq!(runner.connections(), 2);
    assert_eq!(f.sshd.accepted_logins(), 2);
    // A live connection is replaced too (one connection per boot, whatever the old one's state).
    runner.renew().await.expect("renew a live connection");
    runner.exec(&plain("true")).await.expect("exec");
    assert_eq!(runner.connections(), 3);
    // The node not answering: renew fails, naming it.
    f.sshd.stop();
    let err = runner.renew().await.expect_err("no server");
    assert!(matches!(err, RunError::Connection { .. }), "{err:?}");
    assert!(err.to_string().starts_with(NODE), "{err}");
}
