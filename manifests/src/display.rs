//! [`Untrusted`]: the one way text from outside (a bundle entry name, a YAML value, a registry's
//! error body, a remote command's output) is shown to a person or written to a log.
//!
//! It escapes every character that could drive a terminal or hide text — C0 and C1 controls
//! (ESC starts ANSI sequences, CR rewrites a line), DEL, and Unicode format characters such as
//! bidirectional overrides and zero-width joiners — as `\u{…}` (`\n`, `\r`, `\t` as such), and
//! cuts long text, saying how long it was: a 50 MB `metadata.name` prints as its first
//! [`MAX_SHOWN`] characters and `… (52428800 bytes)`.
//!
//! ```
//! use kubexm_manifests::display::Untrusted;
//! let shown = Untrusted("\u{1b}[32mseeded 1 images OK\u{1b}[0m").to_string();
//! assert_eq!(shown, r"\u{1b}[32mseeded 1 images OK\u{1b}[0m");
//! ```

use std::fmt::{self, Write};

/// Characters of untrusted text shown before it is cut.
pub const MAX_SHOWN: usize = 200;

/// Characters of a [`Sentence`] shown before it is cut: far above any sentence of KubeXM's own
/// (its longest warnings, with the remedy at their end, are under 1 000), so only a flood of
/// outside text in one is cut.
pub const MAX_SENTENCE: usize = 4096;

/// A sentence of KubeXM's own (a warning, a refusal) that may embed values from outside: escaped
/// like [`Untrusted`], but cut only at [`MAX_SENTENCE`] characters — the [`MAX_SHOWN`] cap meant
/// for a bare outside value would cut the sentence's remedy off.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Sentence<S: AsRef<str>>(pub S);

impl<S: AsRef<str>> fmt::Display for Sentence<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0.as_ref();
        write_escaped(f, text, MAX_SENTENCE, text.len())
    }
}

/// Untrusted text, escaped and cut to [`MAX_SHOWN`] characters when displayed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Untrusted<S: AsRef<str>>(pub S);

/// Untrusted text cut to `max` characters instead of [`MAX_SHOWN`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UntrustedMax<S: AsRef<str>>(pub S, pub usize);

impl<S: AsRef<str>> fmt::Display for Untrusted<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0.as_ref();
        write_escaped(f, text, MAX_SHOWN, text.len())
    }
}

impl<S: AsRef<str>> fmt::Debug for Untrusted<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0.as_ref();
        f.write_char('"')?;
        write_escaped(f, text, MAX_SHOWN, text.len())?;
        f.write_char('"')
    }
}

impl<S: AsRef<str>> fmt::Display for UntrustedMax<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0.as_ref();
        write_escaped(f, text, self.1, text.len())
    }
}

/// Untrusted bytes (lossily decoded), escaped and cut: [`Untrusted`] for what may not be UTF-8.
pub fn bytes(raw: &[u8]) -> String {
    // At most 4 bytes per character: the prefix holds every character that can be shown.
    let cut = &raw[..raw.len().min(MAX_SHOWN * 4)];
    let text = String::from_utf8_lossy(cut);
    let mut out = String::new();
    let _ = write_escaped(&mut out, &text, MAX_SHOWN, raw.len());
    if cut.len() < raw.len() && text.chars().count() <= MAX_SHOWN {
        let _ = write!(out, "… ({} bytes)", raw.len());
    }
    out
}

/// Escapes `text` for display, cut to `max` characters.
pub fn escape(text: &str) -> String {
    Untrusted(text).to_string()
}

/// True for characters that must never reach a terminal raw.
pub fn needs_escape(c: char) -> bool {
    c.is_control() || is_format(c)
}

/// Unicode "format" characters (general category Cf) that reorder or hide text: bidirectional
/// marks, embeddings, overrides and isolates, zero-width characters, the BOM, and the
/// interlinear annotation and tag characters.
fn is_format(c: char) -> bool {
    matches!(c,
        '\u{00ad}'
        | '\u{061c}'
        | '\u{180e}'
        | '\u{200b}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{206f}'
        | '\u{feff}'
        | '\u{fff9}'..='\u{fffb}'
        | '\u{e0000}'..='\u{e007f}')
}

/// Writes `text` escaped, at most `max` characters, then `… (total bytes)` if cut.
fn write_escaped(f: &mut dyn Write, text: &str, max: usize, total: usize) -> fmt::Result {
    for (shown, c) in text.chars().enumerate() {
        if shown == max {
            return write!(f, "… ({total} bytes)");
        }
        match c {
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            c if needs_escape(c) => write!(f, "\\u{{{:x}}}", u32::from(c))?,
            c => f.write_char(c)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 33 item 13: KubeXM's own long sentences keep their end (the remedy); controls in
    /// them are still escaped, and a flood is still cut.
    #[test]
    fn sentences_keep_their_remedy_and_are_still_escaped() {
        let long = format!(
            "{} or list the node's release in spec.system.osReleases",
            "x".repeat(300)
        );
        assert_eq!(Sentence(&long).to_string(), long);
        assert!(
            Untrusted(&long).to_string().ends_with("bytes)"),
            "the cap for outside values"
        );
        assert_eq!(Sentence("a\u{1b}[2Jb").to_string(), r"a\u{1b}[2Jb");
        let flood = "y".repeat(MAX_SENTENCE * 3);
        let shown = Sentence(&flood).to_string();
        assert!(
            shown.ends_with(&format!("… ({} bytes)", flood.len())),
            "{}",
            shown.len()
        );
        assert_eq!(
            shown,
            format!("{}… ({} bytes)", "y".repeat(MAX_SENTENCE), flood.len())
        );
    }

    #[test]
    fn escapes_terminal_controls() {
        assert_eq!(escape("plain `text` ok"), "plain `text` ok");
        assert_eq!(escape("a\u{1b}[2Jb"), r"a\u{1b}[2Jb");
        assert_eq!(escape("line\nnext\rtab\t"), r"line\nnext\rtab\t");
        assert_eq!(escape("\u{7f}\u{9b}"), r"\u{7f}\u{9b}");
        assert_eq!(escape("abc\u{202e}fed"), r"abc\u{202e}fed");
        assert_eq!(escape("zero\u{200b}width"), r"zero\u{200b}width");
        assert_eq!(escape("héllo 世界"), "héllo 世界");
        assert_eq!(format!("{:?}", Untrusted("a\u{7}")), r#""a\u{7}""#);
    }

    #[test]
    fn cuts_long_text_and_says_how_long() {
        let long = "x".repeat(50 << 20);
        let shown = escape(&long);
        assert!(shown.len() < MAX_SHOWN + 40, "{}", shown.len());
        assert!(
            shown.ends_with(&format!("… ({} bytes)", 50 << 20)),
            "{shown}"
        );
        assert_eq!(UntrustedMax("abcdef", 3).to_string(), "abc… (6 bytes)");
        assert_eq!(UntrustedMax("abc", 3).to_string(), "abc");
        let raw = bytes(&[b'a', 0x1b, 0xff]);
        assert_eq!(raw, "a\\u{1b}\u{fffd}");
        let big = bytes(&vec![b'y'; 10_000]);
        assert!(big.ends_with("… (10000 bytes)"), "{big}");
    }
}
