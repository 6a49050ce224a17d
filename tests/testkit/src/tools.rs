//! Running the external tools (skopeo, umoci, htpasswd, openssl) and a tiny HTTP probe.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// An external command failed to start or exited unsuccessfully.
///
/// The command line is shown with credentials masked.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The program could not be started (typically: its Debian package is missing).
    #[error("failed to run `{command}` (is `{program}` installed?)")]
    Spawn {
        /// The command line, credentials masked.
        command: String,
        /// The program name.
        program: String,
        /// The spawn error.
        #[source]
        source: std::io::Error,
    },
    /// The program ran and exited with a failure status.
    #[error("`{command}` exited with {status}:\n{stderr}")]
    Failed {
        /// The command line, credentials masked.
        command: String,
        /// The exit status, as printed by std.
        status: String,
        /// What it printed on stderr (and stdout when stderr was empty).
        stderr: String,
    },
}

/// Flags whose next argument is a secret.
const SECRET_FLAGS: &[&str] = &["--creds", "--src-creds", "--dest-creds", "-u", "--user"];

/// Renders a command line for messages, masking the values of [`SECRET_FLAGS`].
pub(crate) fn display_command(cmd: &Command) -> String {
    let mut out = cmd.get_program().to_string_lossy().into_owned();
    let mut mask_next = false;
    for arg in cmd.get_args() {
        let arg = arg.to_string_lossy();
        out.push(' ');
        if mask_next {
            out.push_str("***");
            mask_next = false;
            continue;
        }
        if let Some((flag, _)) = arg.split_once('=') {
            if SECRET_FLAGS.contains(&flag) {
                out.push_str(flag);
                out.push_str("=***");
                continue;
            }
        }
        mask_next = SECRET_FLAGS.contains(&arg.as_ref());
        out.push_str(&arg);
    }
    out
}

/// Runs `cmd` to completion with `stdin` fed in, returning its output if it succeeded.
pub(crate) fn run_with_stdin(cmd: &mut Command, stdin: &[u8]) -> Result<Output, CommandError> {
    let command = display_command(cmd);
    let program = cmd.get_program().to_string_lossy().into_owned();
    let spawn_error = |source| CommandError::Spawn {
        command: command.clone(),
        program: program.clone(),
        source,
    };
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_error)?;
    if let Some(mut pipe) = child.stdin.take() {
        // A program that exits without reading stdin closes the pipe; its status tells.
        let _ = pipe.write_all(stdin);
    }
    let output = child.wait_with_output().map_err(spawn_error)?;
    if output.status.success() {
        Ok(output)
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        let stderr = if stderr.is_empty() {
            String::from_utf8_lossy(&output.stdout).trim().to_owned()
        } else {
            stderr
        };
        Err(CommandError::Failed {
            command,
            status: output.status.to_string(),
            stderr,
        })
    }
}

/// Runs `cmd` to completion (empty stdin), returning its output if it succeeded.
pub(crate) fn run(cmd: &mut Command) -> Result<Output, CommandError> {
    run_with_stdin(cmd, b"")
}

/// Runs `cmd` and panics with the command line and its stderr if it fails.
pub(crate) fn run_or_panic(cmd: &mut Command, what: &str) -> Output {
    run(cmd).unwrap_or_else(|err| panic!("{what}: {err}"))
}

fn push_creds(cmd: &mut Command, flag: &str, creds: Option<(&str, &str)>) {
    if let Some((user, pass)) = creds {
        cmd.arg(format!("{flag}={user}:{pass}"));
    }
}

/// `skopeo copy --quiet [EXTRA...] SRC DST`.
///
/// `extra` carries flags such as `--dest-tls-verify=false`, `--all` or `--format=v2s2`.
///
/// # Errors
/// If skopeo cannot be started or the copy fails (stderr is in the error).
pub fn skopeo_copy(src: &str, dst: &str, extra: &[&str]) -> Result<(), CommandError> {
    run(Command::new("skopeo")
        .args(["copy", "--quiet"])
        .args(extra)
        .args([src, dst]))
    .map(drop)
}

/// Builds `skopeo inspect [--tls-verify=false] [--creds=U:P] ARGS REFERENCE`.
fn skopeo_inspect(
    reference: &str,
    tls_verify: bool,
    creds: Option<(&str, &str)>,
    args: &[&str],
) -> Command {
    let mut cmd = Command::new("skopeo");
    cmd.arg("inspect");
    if !tls_verify {
        cmd.arg("--tls-verify=false");
    }
    push_creds(&mut cmd, "--creds", creds);
    cmd.args(args).arg(reference);
    cmd
}

/// The manifest digest (`sha256:...`) of `reference` (e.g. `docker://127.0.0.1:5000/a/b:1`)
/// as `skopeo inspect` reports it: for an index, the digest of the index itself.
///
/// # Errors
/// If skopeo fails (unknown image, 401, registry down...).
pub fn skopeo_inspect_digest(
    reference: &str,
    tls_verify: bool,
    creds: Option<(&str, &str)>,
) -> Result<String, CommandError> {
    // `--raw` + sha256 rather than `--format {{.Digest}}`: the latter resolves an index to
    // the manifest of the host's platform first.
    skopeo_inspect_raw(reference, tls_verify, creds).map(|raw| crate::sha256_digest(&raw))
}

/// The manifest or index bytes of `reference` exactly as the registry serves them.
///
/// # Errors
/// If skopeo fails (unknown image, 401, registry down...).
pub fn skopeo_inspect_raw(
    reference: &str,
    tls_verify: bool,
    creds: Option<(&str, &str)>,
) -> Result<Vec<u8>, CommandError> {
    run(&mut skopeo_inspect(
        reference,
        tls_verify,
        creds,
        &["--raw"],
    ))
    .map(|out| out.stdout)
}

/// Status code of a plain-HTTP `GET url` (`http://host:port/path` only), with optional
/// basic auth. A tiny std-only client, so it works before and without any runtime.
///
/// # Errors
/// If the URL is not plain `http://`, the connection fails, or the reply is not HTTP.
pub fn http_status(url: &str, basic_auth: Option<(&str, &str)>) -> std::io::Result<u16> {
    let invalid = |msg: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, msg);
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| invalid(format!("`{url}` is not an http:// URL")))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    let mut stream = TcpStream::connect(authority)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
    if let Some((user, pass)) = basic_auth {
        request.push_str("Authorization: Basic ");
        request.push_str(&base64(format!("{user}:{pass}").as_bytes()));
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes())?;
    let mut head = Vec::new();
    let mut buf = [0u8; 512];
    while !head.windows(2).any(|w| w == b"\r\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    line.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("`{url}` did not answer with an HTTP status line: {line:?}"),
            )
        })
}

/// Standard base64 with padding (enough for a Basic auth header).
fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `htpasswd -niB USER` with the password on stdin (never on the command line): a bcrypt
/// htpasswd line, as docker-registry requires.
pub(crate) fn htpasswd_line(user: &str, pass: &str) -> String {
    let out = run_with_stdin(
        Command::new("htpasswd").args(["-niB", user]),
        pass.as_bytes(),
    )
    .unwrap_or_else(|err| panic!("creating the registry htpasswd (apache2-utils): {err}"));
    String::from_utf8_lossy(&out.stdout).trim().to_owned() + "\n"
}

/// Whether `path` exists, for messages about missing Debian packages.
pub(crate) fn require_file(path: &Path, package: &str) {
    assert!(
        path.exists(),
        "`{}` is missing: install Debian's `{package}` package (apt-get install -y {package})",
        path.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, expected) in vectors {
            assert_eq!(base64(input.as_bytes()), expected, "input {input:?}");
        }
    }

    #[test]
    fn command_display_masks_credentials() {
        let mut cmd = Command::new("skopeo");
        cmd.args([
            "copy",
            "--dest-creds=alice:s3cret",
            "--creds",
            "bob:hunter2",
            "a",
            "b",
        ]);
        let shown = display_command(&cmd);
        assert_eq!(shown, "skopeo copy --dest-creds=*** --creds *** a b");
        assert!(!shown.contains("s3cret") && !shown.contains("hunter2"));
    }
}
