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

/// One word quoted, as shell text ready to paste into a [`Script`] (or a `format!`): what
/// [`quote`] gives, typed as shell.
pub fn quoted(word: &str) -> Script {
    Script(quote(word))
}

/// A value for the inside of a single-quoted region of a template (`sed 's#x#{v}#'`): its own
/// single quotes closed and escaped (`'\''`), so it stays inside the region and is never syntax.
pub fn in_single_quotes(value: &str) -> Script {
    Script(value.replace('\'', r"'\''"))
}

/// A value for the inside of a double-quoted region of a template (`echo "node {n} failed"`):
/// `\`, `"`, `$` and `` ` `` escaped with a backslash, so nothing in it expands.
pub fn in_double_quotes(value: &str) -> Script {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | '"' | '$' | '`') {
            out.push('\\');
        }
        out.push(c);
    }
    Script(out)
}

/// Text for a `# comment` line of a template: line breaks become spaces, so the text cannot
/// leave the comment.
pub fn comment(text: &str) -> Script {
    Script(text.replace(['\n', '\r'], " "))
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
            self.words.push(g.into_string());
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

/// Shell text for a node, safe by construction: it is made only of text written in KubeXM's
/// source (`&'static str` fragments, [`script!`](crate::script) templates, the upper-case
/// constants those templates name) and of values that were quoted on the way in
/// ([`Script::arg`], the named arguments of [`script!`](crate::script), [`words`], [`globs`]).
///
/// There is no `From<String>`: a runtime string becomes part of a script only as a quoted word,
/// or through [`Script::trusted_shell`], the one escape hatch, which says at its call site why
/// the text is already shell (`grep -rn trusted_shell installer/src` lists them all).
///
/// ```
/// use kubexm_install::runner::shell::Script;
/// let s = Script::new("rm -rf --").arg("/var/lib/x y").line(Script::new("systemctl daemon-reload"));
/// assert_eq!(s.as_str(), "rm -rf -- '/var/lib/x y'\nsystemctl daemon-reload");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Script(String);

impl Script {
    /// Literal program text.
    pub fn new(text: &'static str) -> Self {
        Self(text.to_string())
    }

    /// No text at all.
    pub fn empty() -> Self {
        Self(String::new())
    }

    /// Text that is already shell but was assembled at run time (a script read back from a
    /// template rendered by KubeXM, a fragment built from other [`Script`]s through string
    /// operations). Every call says why its text cannot carry an unquoted value; a source
    /// test counts them.
    pub fn trusted_shell(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// What [`script!`](crate::script) expands to: the template is a literal whose
    /// placeholders are quoted arguments, [`Script`]s, numbers or upper-case constants
    /// (checked while compiling). Not for use outside the macro.
    #[doc(hidden)]
    pub fn __from_template(text: String) -> Self {
        Self(text)
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The text, owned.
    pub fn into_string(self) -> String {
        self.0
    }

    /// Literal program text appended as it is (no separator).
    #[must_use]
    pub fn lit(mut self, text: &'static str) -> Self {
        self.0.push_str(text);
        self
    }

    /// One argument, quoted, after a space.
    #[must_use]
    pub fn arg(mut self, word: impl ShellArg) -> Self {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        self.0.push_str(&word.shell_word());
        self
    }

    /// Several arguments, each quoted, space-separated.
    #[must_use]
    pub fn args<I>(mut self, words: I) -> Self
    where
        I: IntoIterator,
        I::Item: ShellArg,
    {
        for w in words {
            self = self.arg(w);
        }
        self
    }

    fn joined(mut self, sep: &str, next: Script) -> Self {
        if self.0.is_empty() {
            return next;
        }
        if next.0.is_empty() {
            return self;
        }
        self.0.push_str(sep);
        self.0.push_str(&next.0);
        self
    }

    /// `self && next`.
    #[must_use]
    pub fn and(self, next: impl Into<Script>) -> Self {
        self.joined(" && ", next.into())
    }

    /// `self || next`.
    #[must_use]
    pub fn or(self, next: impl Into<Script>) -> Self {
        self.joined(" || ", next.into())
    }

    /// `self; next`.
    #[must_use]
    pub fn seq(self, next: impl Into<Script>) -> Self {
        self.joined("; ", next.into())
    }

    /// `self | next`.
    #[must_use]
    pub fn pipe(self, next: impl Into<Script>) -> Self {
        self.joined(" | ", next.into())
    }

    /// `next` on the following line.
    #[must_use]
    pub fn line(self, next: impl Into<Script>) -> Self {
        self.joined("\n", next.into())
    }

    /// `self > path`, the path quoted.
    #[must_use]
    pub fn to_file(mut self, path: impl ShellArg) -> Self {
        self.0.push_str(" > ");
        self.0.push_str(&path.shell_word());
        self
    }

    /// `self >> path`, the path quoted.
    #[must_use]
    pub fn append_to(mut self, path: impl ShellArg) -> Self {
        self.0.push_str(" >> ");
        self.0.push_str(&path.shell_word());
        self
    }

    /// `self < path`, the path quoted.
    #[must_use]
    pub fn from_file(mut self, path: impl ShellArg) -> Self {
        self.0.push_str(" < ");
        self.0.push_str(&path.shell_word());
        self
    }

    /// Scripts joined by `sep` (literal text: `"\n"`, `" && "`, `"; "`); empty ones are kept,
    /// as `Vec::join` keeps empty strings.
    pub fn join<I>(parts: I, sep: &'static str) -> Self
    where
        I: IntoIterator,
        I::Item: Into<Script>,
    {
        let mut out = String::new();
        for (i, p) in parts.into_iter().enumerate() {
            if i > 0 {
                out.push_str(sep);
            }
            out.push_str(&p.into().0);
        }
        Self(out)
    }

    /// Whether the text is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::ops::Deref for Script {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Script {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Script {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Script {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&'static str> for Script {
    fn from(text: &'static str) -> Self {
        Self::new(text)
    }
}

impl From<Sh> for Script {
    fn from(sh: Sh) -> Self {
        Self(sh.to_string())
    }
}

impl From<Script> for String {
    fn from(s: Script) -> Self {
        s.0
    }
}

impl PartialEq<str> for Script {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Script {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// A value as it goes into shell text: strings and paths quoted (one word, never syntax),
/// numbers as digits, [`Script`] and [`Sh`] as the shell they already are.
pub trait ShellArg {
    /// The shell text for this value.
    fn shell_word(&self) -> std::borrow::Cow<'_, str>;
}

impl ShellArg for str {
    fn shell_word(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Owned(quote(self))
    }
}

impl ShellArg for String {
    fn shell_word(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Owned(quote(self))
    }
}

impl ShellArg for std::borrow::Cow<'_, str> {
    fn shell_word(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Owned(quote(self))
    }
}

impl ShellArg for std::path::Path {
    fn shell_word(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Owned(quote(&self.to_string_lossy()))
    }
}

impl ShellArg for std::path::PathBuf {
    fn shell_word(&self) -> std::borrow::Cow<'_, str> {
        self.as_path().shell_word()
    }
}

impl ShellArg for Script {
    fn shell_word(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed(&self.0)
    }
}

impl ShellArg for Sh {
    fn shell_word(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Owned(self.to_string())
    }
}

impl<T: ShellArg + ?Sized> ShellArg for &T {
    fn shell_word(&self) -> std::borrow::Cow<'_, str> {
        (**self).shell_word()
    }
}

macro_rules! digits {
    ($($t:ty),*) => {$(
        impl ShellArg for $t {
            fn shell_word(&self) -> std::borrow::Cow<'_, str> {
                std::borrow::Cow::Owned(self.to_string())
            }
        }
    )*};
}
digits!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize);

/// Shell text from a literal template, like `format!`, with every argument quoted by
/// construction: `script!("rm -rf -- {dir}\nsystemctl daemon-reload", dir = path)`.
///
/// Arguments are named (`name = value`) or all positional (`{}`), and go in through
/// [`ShellArg`]: strings and paths quoted, numbers as digits, [`Script`]/[`Sh`] as shell. The
/// template may also name upper-case constants (`{ADMIN_CONF}`), which are program text. A
/// placeholder that would capture a local variable unquoted, or a format spec (`{x:?}`), is a
/// compile error:
///
/// ```compile_fail
/// use kubexm_install::script;
/// let dir = String::from("/var/lib/x");
/// let _ = script!("rm -rf -- {dir}"); // captures `dir` unquoted: refused
/// ```
///
/// ```compile_fail
/// use kubexm_install::pipeline::ops::RunCommand;
/// let dir = String::from("/var/lib/x");
/// let _ = RunCommand::new(format!("rm -rf -- {dir}")); // a String is not a Script
/// ```
///
/// ```
/// use kubexm_install::script;
/// let dir = String::from("/var/lib/x y");
/// assert_eq!(script!("rm -rf -- {dir}", dir = dir).as_str(), "rm -rf -- '/var/lib/x y'");
/// ```
#[macro_export]
macro_rules! script {
    ($template:literal $(,)?) => {{
        const _: () = $crate::runner::shell::__check_template($template, &[]);
        $crate::runner::shell::Script::__from_template(::std::format!($template))
    }};
    ($template:literal, $($name:ident = $value:expr),+ $(,)?) => {{
        const _: () = $crate::runner::shell::__check_template(
            $template,
            &[$(::std::stringify!($name)),+],
        );
        $crate::runner::shell::Script::__from_template(::std::format!(
            $template,
            $($name = $crate::runner::shell::ShellArg::shell_word(&$value)),+
        ))
    }};
    ($template:literal, $($value:expr),+ $(,)?) => {{
        const _: () = $crate::runner::shell::__check_template($template, &[]);
        $crate::runner::shell::Script::__from_template(::std::format!(
            $template,
            $($crate::runner::shell::ShellArg::shell_word(&$value)),+
        ))
    }};
}

/// Quoted words, space-separated (`'a b' c`): a list of values as shell arguments.
pub fn words<I>(values: I) -> Script
where
    I: IntoIterator,
    I::Item: ShellArg,
{
    Script::empty().args(values)
}

/// Checks a [`script!`](crate::script) template while compiling: every `{name}` placeholder is
/// either a named argument of the macro (quoted on the way in) or an upper-case constant
/// (program text). A local value captured by name would go in unquoted, so it does not compile.
#[doc(hidden)]
pub const fn __check_template(template: &str, named: &[&str]) {
    let b = template.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'{' {
            i += 1;
            continue;
        }
        if i + 1 < b.len() && b[i + 1] == b'{' {
            i += 2;
            continue;
        }
        let start = i + 1;
        let mut end = start;
        while end < b.len() && b[end] != b'}' && b[end] != b':' {
            end += 1;
        }
        if end < b.len() && b[end] == b':' {
            // `{:?}` would wrap a quoted word in Rust's escaping, `{:.3}` would cut it: a
            // formatted number goes in as a pre-formatted string.
            panic!("script!: no format specs in a template: format the value first");
        }
        if end > start
            && !all_digits(b, start, end)
            && !is_constant(b, start, end)
            && !is_named(b, start, end, named)
        {
            panic!("script!: a placeholder captures a local value, which would go in unquoted: pass it as `name = value` (quoted) or as a Script");
        }
        i = end;
    }
}

const fn all_digits(b: &[u8], start: usize, end: usize) -> bool {
    let mut i = start;
    while i < end {
        if !b[i].is_ascii_digit() {
            return false;
        }
        i += 1;
    }
    true
}

/// `SCREAMING_CASE`: a constant (a local of that name would be a `non_snake_case` warning).
const fn is_constant(b: &[u8], start: usize, end: usize) -> bool {
    if !b[start].is_ascii_uppercase() {
        return false;
    }
    let mut i = start;
    while i < end {
        if !(b[i].is_ascii_uppercase() || b[i].is_ascii_digit() || b[i] == b'_') {
            return false;
        }
        i += 1;
    }
    true
}

const fn is_named(b: &[u8], start: usize, end: usize, named: &[&str]) -> bool {
    let mut n = 0;
    while n < named.len() {
        let name = named[n].as_bytes();
        if name.len() == end - start {
            let mut k = 0;
            while k < name.len() && name[k] == b[start + k] {
                k += 1;
            }
            if k == name.len() {
                return true;
            }
        }
        n += 1;
    }
    false
}

/// Space-separated paths for the shell, globs kept: a word made only of path characters and the
/// glob characters `*` and `?` stays as it is (so it expands); any other word is quoted whole
/// (so it is taken literally and never becomes syntax).
pub fn globs(paths: &str) -> Script {
    Script(
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
            .join(" "),
    )
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
    let d = quoted(dest);
    let part = quoted(&format!("{dest}.kubexm-part"));
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
    /// Hostile values: each one reaches the program as one argument, unchanged, and nothing in
    /// it runs; through [`Script::arg`], a named `script!` argument, a positional one and
    /// [`words`].
    #[test]
    fn script_quotes_hostile_values_by_construction() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let marker = tmp.path().join("pwned");
        let m = marker.display().to_string();
        let hostile = [
            "a value with spaces".to_string(),
            "it's \"quoted\"".to_string(),
            format!("$(touch {m})"),
            format!("`touch {m}`"),
            format!("x; touch {m}"),
            format!("x && touch {m} || touch {m}"),
            format!("line\ntouch {m}\n"),
            format!("> {m}"),
            "-rf".to_string(),
            "--".to_string(),
            "*".to_string(),
            "~root".to_string(),
            "$HOME ${PATH}".to_string(),
            "\\".to_string(),
            String::new(),
        ];
        let run = |line: &Script| {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(line.as_str())
                .current_dir(tmp.path())
                .output()
                .expect("sh");
            assert!(out.status.success(), "{line}: {out:?}");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        for v in &hostile {
            let lines = [
                Script::new("printf '[%s]'").arg(v),
                crate::script!("printf '[%s]' {v}", v = v),
                crate::script!("printf '[%s]' {}", v.as_str()),
                crate::script!("printf '[%s]' {v} >/dev/null; printf '[%s]' {v}", v = v),
            ];
            for line in &lines {
                assert_eq!(run(line), format!("[{v}]"), "{line}");
            }
            // Several values: one argument each.
            let w = Script::new("printf '[%s]'").args([v.as_str(), "b c"]);
            assert_eq!(run(&w), format!("[{v}][b c]"), "{w}");
            assert_eq!(
                run(&crate::script!("printf '[%s]' {w}", w = words([v, v]))),
                format!("[{v}][{v}]")
            );
            // Inside a region the template quotes itself.
            let sq = crate::script!("printf '[%s]' 'x{v}y'", v = in_single_quotes(v));
            assert_eq!(run(&sq), format!("[x{v}y]"), "{sq}");
            let dq = crate::script!("printf '[%s]' \"x{v}y\"", v = in_double_quotes(v));
            assert_eq!(run(&dq), format!("[x{v}y]"), "{dq}");
            // A comment line stays a comment.
            let c = crate::script!("# {c}\nprintf ok", c = comment(v));
            assert_eq!(run(&c), "ok", "{c}");
            assert!(!marker.exists(), "a value ran a command: {v:?}");
        }
    }

    #[test]
    fn script_joins_and_redirects_with_literal_syntax_only() {
        let dir = "/var/lib/x y";
        let s = Script::new("rm -rf --")
            .arg(dir)
            .and(Script::new("mkdir -p").arg(dir))
            .or(Script::new("true"))
            .seq(Script::new("echo done").to_file("/tmp/a b"))
            .pipe(Script::new("cat"))
            .line(Script::new("sort").from_file("/x").append_to("/y z"));
        assert_eq!(
            s.as_str(),
            "rm -rf -- '/var/lib/x y' && mkdir -p '/var/lib/x y' || true; echo done > '/tmp/a b' | cat\nsort < /x >> '/y z'"
        );
        assert_eq!(
            Script::join(
                [Script::new("a"), Script::empty(), Script::new("b")],
                " && "
            )
            .as_str(),
            "a &&  && b"
        );
        assert_eq!(Script::empty().and("x").as_str(), "x");
        assert_eq!(words(["a b", "-c", ""]).as_str(), "'a b' -c ''");
        assert_eq!(
            crate::script!(
                "{KUBEADM_TEST} -n {n} --port {p} {s}",
                n = "kube system",
                p = 6443u16,
                s = Script::new("2>/dev/null")
            )
            .as_str(),
            "/usr/local/bin/kubeadm -n 'kube system' --port 6443 2>/dev/null"
        );
        assert_eq!(
            crate::script!(
                "{{ {a}; }} | {b}",
                a = Sh::new("ls").arg("-l"),
                b = quoted("w c")
            )
            .as_str(),
            "{ ls -l; } | 'w c'"
        );
        assert_eq!(in_single_quotes("it's").as_str(), r"it'\''s");
        assert_eq!(in_double_quotes(r#"a"$`\b"#).as_str(), r#"a\"\$\`\\b"#);
        assert_eq!(comment("a\nb\rc").as_str(), "a b c");
    }

    const KUBEADM_TEST: &str = "/usr/local/bin/kubeadm";

    /// The template check that runs while compiling, run here on its own.
    #[test]
    fn templates_refuse_captured_locals_and_format_specs() {
        let ok = |t: &'static str, named: &'static [&'static str]| {
            std::panic::catch_unwind(|| __check_template(t, named)).is_ok()
        };
        assert!(ok(
            "rm -rf -- {dir} {{literal}} {} {0} {ADMIN_CONF}",
            &["dir"]
        ));
        assert!(!ok("rm -rf -- {dir}", &[]), "a captured local");
        assert!(!ok("rm -rf -- {dir}", &["di"]), "a prefix of a name");
        assert!(!ok("x {Dir}", &[]), "mixed case is not a constant");
        assert!(
            !ok("x {v:?}", &["v"]),
            "Debug would re-escape a quoted word"
        );
        assert!(!ok("x {v:.3}", &["v"]), "precision would cut a quoted word");
    }
}
