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

/// Reads a file from stdin into a temporary name beside `dest`, checks its sha256, sets the mode
/// and renames it into place (so a broken upload never leaves a half-written destination).
pub fn receive_file(dest: &str, sha256: &str, mode: u32) -> String {
    let d = quote(dest);
    let part = quote(&format!("{dest}.kubexm-part"));
    format!(
        "set -e\n\
         mkdir -p \"$(dirname -- {d})\"\n\
         umask 077\n\
         cat > {part}\n\
         s=$(sha256sum -- {part} | cut -d' ' -f1)\n\
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

    #[test]
    fn timeout_wraps_the_quoted_script() {
        assert_eq!(
            with_timeout("echo 'hi'", Duration::from_millis(1500)),
            r"timeout -k 5 1 sh -c 'echo '\''hi'\'''"
        );
    }
}
