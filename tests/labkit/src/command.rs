//! Running a command and keeping what it printed, for checks that show their evidence.

use std::fmt;
use std::process::Command;

/// What a finished command printed, and how it ended.
#[derive(Debug, Clone)]
pub struct Output {
    /// The command line (for messages).
    pub command: String,
    /// Exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Standard output, lossily decoded.
    pub stdout: String,
    /// Standard error, lossily decoded.
    pub stderr: String,
}

/// Lines of a long output shown in a failure message (its head and its tail).
const SHOWN_LINES: usize = 60;

impl Output {
    /// Runs `cmd` to its end, capturing both streams.
    ///
    /// # Panics
    /// If the program cannot be started at all (missing binary): the test's set-up is broken.
    #[must_use]
    pub fn run(cmd: &mut Command) -> Output {
        let command = describe(cmd);
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot start `{command}`: {e}"));
        Output {
            command,
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Whether it exited 0.
    #[must_use]
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// Itself when it exited 0.
    ///
    /// # Panics
    /// Otherwise, with `what`, the command and both streams.
    #[must_use]
    #[track_caller]
    pub fn ok(self, what: &str) -> Output {
        check(self.success(), what, &self);
        self
    }

    /// Standard output without surrounding white space.
    #[must_use]
    pub fn stdout_trimmed(&self) -> &str {
        self.stdout.trim()
    }

    /// Standard output parsed as JSON into `T`.
    ///
    /// # Panics
    /// When it is not `T`'s JSON, with the parse error and the output.
    #[must_use]
    #[track_caller]
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> T {
        match serde_json::from_str(&self.stdout) {
            Ok(v) => v,
            Err(e) => panic!(
                "{} did not print the JSON expected ({e})\n{self}",
                self.command
            ),
        }
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self
            .code
            .map_or_else(|| "killed by a signal".to_string(), |c| format!("exit {c}"));
        writeln!(f, "$ {}  ({code})", self.command)?;
        for (name, text) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            if text.trim().is_empty() {
                writeln!(f, "--- {name}: (empty)")?;
            } else {
                writeln!(f, "--- {name}:")?;
                write_shortened(f, text)?;
            }
        }
        Ok(())
    }
}

/// `text`, or its first and last [`SHOWN_LINES`] lines when longer.
fn write_shortened(f: &mut fmt::Formatter<'_>, text: &str) -> fmt::Result {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= 2 * SHOWN_LINES {
        return writeln!(f, "{}", text.trim_end());
    }
    for l in &lines[..SHOWN_LINES] {
        writeln!(f, "{l}")?;
    }
    writeln!(f, "[... {} lines ...]", lines.len() - 2 * SHOWN_LINES)?;
    for l in &lines[lines.len() - SHOWN_LINES..] {
        writeln!(f, "{l}")?;
    }
    Ok(())
}

/// The command line of `cmd`, for messages.
pub(crate) fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// A named check: passes when `ok`, else fails the test with `what` and the `evidence` (what the
/// check saw: a command's [`Output`], the JSON it read, a list of nodes...).
///
/// # Panics
/// When `ok` is false.
#[track_caller]
pub fn check(ok: bool, what: &str, evidence: &dyn fmt::Display) {
    assert!(ok, "check failed: {what}\n=== what it saw:\n{evidence}");
}
