//! Shell text shared by every runner: quoting, the timeout wrapper and the upload scripts, so the
//! local and SSH runners behave the same way on a node.

use std::time::Duration;

/// Quotes one word for POSIX `sh` (single quotes; embedded quotes closed and escaped).
pub fn quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@+%".contains(&b))
    {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// One command line for a node's `sh`, built word by word: every argument is quoted, so a value
/// from cluster.yaml or a node can never become shell syntax. What quoting cannot express (a
/// redirection, a pipe, `||`) goes in with [`Sh::op`], which takes only text written in KubeXM's
/// own source (`&'static str`), never a runtime value.
///
/// ```
/// use kubexm_install::runner::shell::Sh;
/// let line = Sh::new("rm").arg("-rf").arg("--").arg("/var/lib/x y").to_string();
/// assert_eq!(line, "rm -rf -- '/var/lib/x y'");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sh {
    words: Vec<String>,
}

impl Sh {
    /// A command line starting with `program` (quoted like any argument).
    pub fn new(program: &str) -> Self {
        Self {
            words: vec![quote(program)],
        }
    }

    /// One argument, quoted.
    #[must_use]
    pub fn arg(mut self, word: impl AsRef<str>) -> Self {
        self.words.push(quote(word.as_ref()));
        self
    }

    /// Several arguments, each quoted.
    #[must_use]
    pub fn args<I, S>(mut self, words: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.words
            .extend(words.into_iter().map(|w| quote(w.as_ref())));
        self
    }

    /// Shell syntax written in KubeXM's source (`>`, `2>/dev/null`, `||`, `&&`): the one way in
    /// for unquoted text, and it cannot carry a runtime value.
    #[must_use]
    pub fn op(mut self, syntax: &'static str) -> Self {
        self.words.push(syntax.to_string());
        self
    }

    /// Paths that may hold globs (`/var/lib/kubexm/staging/containerd-*`), space-separated as
    /// callers keep them: see [`globs`].
    #[must_use]
    pub fn globs(mut self, paths: &str) -> Self {
        let g = globs(paths);
        if !g.is_empty() {
            self.words.push(g);
        }
        self
    }
}

impl std::fmt::Display for Sh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.words.join(" "))
    }
}

impl From<Sh> for String {
    fn from(sh: Sh) -> Self {
        sh.to_string()
    }
}

/// Space-separated paths for the shell, globs kept: a word made only of path characters and the
/// glob characters `*` and `?` stays as it is (so it expands); any other word is quoted whole
/// (so it is taken literally and never becomes syntax).
pub fn globs(paths: &str) -> String {
    paths
        .split_whitespace()
        .map(|w| {
            if w.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@+%*?".contains(&b))
            {
                w.to_string()
            } else {
                quote(w)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Wraps a script so the node itself enforces the timeout: coreutils `timeout` runs it in its own
/// process group and kills the whole group (TERM, then KILL 5 s later).
pub fn with_timeout(script: &str, timeout: Duration) -> String {
    let secs = timeout.as_secs().max(1);
    format!("timeout -k 5 {secs} sh -c {}", quote(script))
}

/// The command line for `sudo` reading its password from stdin (`-S`) with no prompt; the
/// password line is written before any other stdin.
pub fn with_sudo_stdin(command: &str) -> String {
    format!("sudo -S -p '' {command}")
}

/// The prompt [`with_sudo_prompt`] makes `sudo` print (on stderr) when it wants the password.
pub const SUDO_PROMPT: &str = "[kubexm-sudo-password]";

/// Printed on stderr by [`with_sudo_prompt`] once `sudo` has let the command start.
pub const SUDO_READY: &str = "[kubexm-sudo-ready]";

/// The command line for `sudo` asking for its password with a recognisable prompt on stderr
/// ([`SUDO_PROMPT`]) and announcing, with [`SUDO_READY`] on stderr, that authentication is over
/// and the command starts.
///
/// Unlike [`with_sudo_stdin`], the caller writes the password only when `sudo` asks for it and
/// the command's stdin only after [`SUDO_READY`]: with `NOPASSWD` rules or cached credentials
/// `sudo` does not read a password line, which would otherwise reach the command's stdin.
pub fn with_sudo_prompt(command: &str) -> String {
    let inner = format!("printf '%s' {} >&2; exec {command}", quote(SUDO_READY));
    format!("sudo -S -p {} sh -c {}", quote(SUDO_PROMPT), quote(&inner))
}

/// Runs `command`, then reads whatever is left of stdin before exiting with its status, so the
/// sender of stdin is never left with bytes nobody reads (a script that ignores its stdin, a
/// command killed by its timeout). A command killed by a signal exits 128+N here.
pub fn drain_stdin_after(command: &str) -> String {
    format!("{command}; kubexm_rc=$?; cat >/dev/null; exit $kubexm_rc")
}

/// The command line for `sudo` that never prompts (NOPASSWD or the control host).
pub fn with_sudo_nopasswd(command: &str) -> String {
    format!("sudo -n {command}")
}

/// Prints the sha256 of `dest`, or nothing when it does not exist.
pub fn remote_sha256(dest: &str) -> String {
    format!(
        "if [ -f {d} ]; then sha256sum -- {d} | cut -d' ' -f1; fi",
        d = quote(dest)
    )
}

/// Exit status of [`receive_file`] when the received bytes do not have the expected sha256.
pub const UPLOAD_MISMATCH: i32 = 93;

/// Shell text choosing the node's fastest sha256 tool into `$kx_h`: `openssl dgst -sha256 -r`
/// (SHA extensions: ~6× coreutils' `sha256sum` on x86-64 with SHA-NI and on arm64) when
/// installed, else `sha256sum`. Both print the hex digest as the first word.
const PICK_HASHER: &str =
    "if command -v openssl >/dev/null 2>&1; then kx_h='openssl dgst -sha256 -r'; else kx_h=sha256sum; fi";

/// Prints the sha256 of `dest` when it is a regular file of exactly `size` bytes, else nothing:
/// the check before an upload, which reads nothing when the size already differs.
pub fn remote_sha256_of_size(dest: &str, size: u64) -> String {
    format!(
        "if [ -f {d} ] && [ \"$(wc -c < {d} 2>/dev/null)\" -eq {size} ] 2>/dev/null; then {PICK_HASHER}; $kx_h < {d} | cut -d' ' -f1; fi",
        d = quote(dest)
    )
}

/// Reads a file from stdin into a temporary name beside `dest`, hashing the bytes as they
/// stream in (one pass: `tee` writes the file and feeds the hasher), checks the sha256, sets
/// the mode and renames it into place (so a broken upload never leaves a half-written
/// destination). A write that fails (disk full) removes the temporary file, so the upload fails
/// even though the stream itself hashed right.
pub fn receive_file(dest: &str, sha256: &str, mode: u32) -> String {
    let d = quote(dest);
    let part = quote(&format!("{dest}.kubexm-part"));
    format!(
        "set -e\n\
         mkdir -p \"$(dirname -- {d})\"\n\
         umask 077\n\
         {PICK_HASHER}\n\
         rm -f -- {part}\n\
         s=$({{ tee -- {part} || rm -f -- {part}; }} | $kx_h | cut -d' ' -f1)\n\
         if [ ! -f {part} ]; then echo \"cannot write {part}\" >&2; exit 1; fi\n\
         if [ \"$s\" != {sha256} ]; then rm -f -- {part}; echo \"sha256 mismatch: expected {sha256}, got $s\" >&2; exit {UPLOAD_MISMATCH}; fi\n\
         chmod {mode:o} {part}\n\
         mv -f -- {part} {d}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_when_needed() {
        assert_eq!(quote("/etc/hosts"), "/etc/hosts");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote("$(reboot)"), "'$(reboot)'");
    }

    #[test]
    fn sudo_prompt_and_drain_wrap_the_command() {
        let line = with_sudo_prompt("timeout -k 5 1 sh -c id");
        assert!(
            line.starts_with("sudo -S -p '[kubexm-sudo-password]' sh -c 'printf "),
            "{line}"
        );
        assert!(
            line.ends_with(">&2; exec timeout -k 5 1 sh -c id'"),
            "{line}"
        );
        assert_eq!(
            drain_stdin_after("cmd"),
            "cmd; kubexm_rc=$?; cat >/dev/null; exit $kubexm_rc"
        );
    }

    /// Runs `script` with `sh -c`, `stdin` on its stdin and `path` as `$PATH`.
    fn sh(script: &str, stdin: &[u8], path: &str) -> std::process::Output {
        use std::io::Write as _;
        let mut child = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(script)
            .env("PATH", path)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("sh");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin)
            .expect("write stdin");
        child.wait_with_output().expect("wait")
    }

    fn sha256_hex(bytes: &[u8]) -> String {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(bytes))
    }

    /// A `$PATH` of the tools the upload scripts need, without `openssl`: the `sha256sum`
    /// fallback.
    fn path_without_openssl(dir: &std::path::Path) -> String {
        for tool in [
            "tee",
            "cut",
            "mkdir",
            "dirname",
            "rm",
            "chmod",
            "mv",
            "wc",
            "sha256sum",
            "cat",
        ] {
            let found = ["/usr/bin", "/bin"]
                .iter()
                .map(|d| std::path::Path::new(d).join(tool))
                .find(|p| p.exists())
                .expect("tool");
            std::os::unix::fs::symlink(found, dir.join(tool)).expect("symlink");
        }
        dir.display().to_string()
    }

    #[test]
    fn receive_file_hashes_the_stream_with_either_hasher() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let bin = tmp.path().join("bin");
        std::fs::create_dir(&bin).expect("mkdir");
        let fallback = path_without_openssl(&bin);
        let content: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let sum = sha256_hex(&content);
        for (i, path) in ["/usr/bin:/bin", fallback.as_str()].into_iter().enumerate() {
            let dest = tmp.path().join(format!("d{i}/sub/file"));
            let dest_s = dest.display().to_string();
            let out = sh(&receive_file(&dest_s, &sum, 0o640), &content, path);
            assert!(out.status.success(), "{path}: {out:?}");
            assert_eq!(std::fs::read(&dest).expect("read"), content);
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(&dest).expect("stat").permissions(),
            );
            assert_eq!(mode & 0o7777, 0o640);

            // The check before an upload: the sum for the same size, nothing for another size.
            let check = sh(
                &remote_sha256_of_size(&dest_s, content.len() as u64),
                b"",
                path,
            );
            assert_eq!(String::from_utf8_lossy(&check.stdout).trim(), sum, "{path}");
            let check = sh(&remote_sha256_of_size(&dest_s, 5), b"", path);
            assert!(
                check.status.success() && check.stdout.is_empty(),
                "{check:?}"
            );
            let missing = format!("{dest_s}.missing");
            let check = sh(&remote_sha256_of_size(&missing, 5), b"", path);
            assert!(
                check.status.success() && check.stdout.is_empty(),
                "{check:?}"
            );

            // Bytes that are not what the sum says: refused, nothing left, dest unchanged.
            let mut corrupted = content.clone();
            corrupted[1234] ^= 1;
            let out = sh(&receive_file(&dest_s, &sum, 0o600), &corrupted, path);
            assert_eq!(out.status.code(), Some(UPLOAD_MISMATCH), "{out:?}");
            assert!(String::from_utf8_lossy(&out.stderr).contains("sha256 mismatch"));
            assert_eq!(std::fs::read(&dest).expect("read"), content);
            assert!(!tmp
                .path()
                .join(format!("d{i}/sub/file.kubexm-part"))
                .exists());
        }
    }

    #[test]
    fn receive_file_never_writes_through_a_planted_part_link() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, b"keep").expect("write");
        let dest = tmp.path().join("file");
        std::os::unix::fs::symlink(&victim, tmp.path().join("file.kubexm-part")).expect("link");
        let out = sh(
            &receive_file(&dest.display().to_string(), &sha256_hex(b"new"), 0o644),
            b"new",
            "/usr/bin:/bin",
        );
        assert!(out.status.success(), "{out:?}");
        assert_eq!(std::fs::read(&victim).expect("read"), b"keep");
        assert_eq!(std::fs::read(&dest).expect("read"), b"new");
    }

    /// Values that would be syntax if pasted raw: each reaches the program as one argument,
    /// unchanged, and nothing in them runs (a real `sh`, a marker file that must not appear).
    #[test]
    fn sh_builder_passes_hostile_values_as_single_words() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let marker = tmp.path().join("pwned");
        let m = marker.display().to_string();
        let hostile = [
            format!("$(touch {m})"),
            format!("`touch {m}`"),
            format!("x; touch {m}"),
            format!("a\ntouch {m}\n"),
            format!("it's \"{m}\" | touch {m}"),
            "-rf".to_string(),
            " leading and trailing ".to_string(),
            "*".to_string(),
            String::new(),
        ];
        for v in &hostile {
            let line = Sh::new("printf").arg("[%s]").arg(v).to_string();
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(&line)
                .current_dir(tmp.path())
                .output()
                .expect("sh");
            assert!(out.status.success(), "{line}: {out:?}");
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                format!("[{v}]"),
                "{line}"
            );
            assert!(!marker.exists(), "{line} ran a command");
        }
    }

    #[test]
    fn globs_expand_only_plain_glob_words() {
        assert_eq!(
            globs("/var/lib/kubexm/staging/containerd-* /run/containerd"),
            "/var/lib/kubexm/staging/containerd-* /run/containerd"
        );
        assert_eq!(globs("/x/$(reboot) /y"), "'/x/$(reboot)' /y");
        assert_eq!(globs("/a;rm"), "'/a;rm'");
        assert_eq!(
            Sh::new("rm")
                .arg("-rf")
                .arg("--")
                .globs("/a/* /b")
                .to_string(),
            "rm -rf -- /a/* /b"
        );
        assert_eq!(
            Sh::new("echo").arg("x").op(">").arg("/etc/f").to_string(),
            "echo x > /etc/f"
        );
    }

    #[test]
    fn timeout_wraps_the_quoted_script() {
        assert_eq!(
            with_timeout("echo 'hi'", Duration::from_millis(1500)),
            r"timeout -k 5 1 sh -c 'echo '\''hi'\'''"
        );
    }
}
