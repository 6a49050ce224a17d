//! Debian control files (deb822: `Release`, `Packages`): paragraphs separated by blank lines,
//! `Field: value` lines, continuation lines starting with a space or tab. Values are borrowed
//! slices of the input, so a 60 MB `Packages` index is read without copying it.

use thiserror::Error;

/// A malformed control file.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("line {line}: {why}")]
pub struct ControlError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub why: String,
}

/// One paragraph: its fields in order and the exact text it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paragraph<'a> {
    /// `(name, value)`; the value is trimmed, continuation lines keep their newlines.
    pub fields: Vec<(&'a str, &'a str)>,
    /// The paragraph's text, without the blank line that ends it, ending in `\n`.
    pub raw: &'a str,
    /// 1-based line number of its first line.
    pub line: usize,
}

impl<'a> Paragraph<'a> {
    /// The value of `name` (field names compare case-insensitively, as deb822 says).
    pub fn get(&self, name: &str) -> Option<&'a str> {
        self.fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }
}

/// Splits `text` into paragraphs. Comment lines (`#`) are skipped; a continuation line before any
/// field, a line without `:` or an empty field name is an error.
pub fn paragraphs(text: &str) -> Result<Vec<Paragraph<'_>>, ControlError> {
    let mut out = Vec::new();
    let mut fields: Vec<(&str, &str)> = Vec::new();
    // Byte offsets of the current paragraph and of the current field's value.
    let mut para_start: Option<(usize, usize)> = None;
    let mut value: Option<(usize, usize)> = None; // (field index, value start)
    let mut offset = 0;
    let bytes = text.as_bytes();
    for (n, line) in text.split_inclusive('\n').enumerate() {
        let lineno = n + 1;
        let start = offset;
        offset += line.len();
        let content = line.trim_end_matches(['\n', '\r']);
        if content.trim().is_empty() {
            if let Some((pstart, pline)) = para_start.take() {
                finish_value(text, &mut fields, value.take(), start);
                out.push(Paragraph {
                    fields: std::mem::take(&mut fields),
                    raw: &text[pstart..start],
                    line: pline,
                });
            }
            continue;
        }
        if content.starts_with('#') {
            continue;
        }
        if bytes[start] == b' ' || bytes[start] == b'\t' {
            if value.is_none() {
                return Err(ControlError {
                    line: lineno,
                    why: "continuation line before any field".into(),
                });
            }
            continue;
        }
        let Some(colon) = content.find(':') else {
            return Err(ControlError {
                line: lineno,
                why: format!("`{}` is not `Field: value`", truncate(content)),
            });
        };
        let name = &content[..colon];
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ControlError {
                line: lineno,
                why: format!("`{}` is not a field name", truncate(name)),
            });
        }
        finish_value(text, &mut fields, value.take(), start);
        if para_start.is_none() {
            para_start = Some((start, lineno));
        }
        fields.push((&text[start..start + colon], ""));
        value = Some((fields.len() - 1, start + colon + 1));
    }
    if let Some((pstart, pline)) = para_start {
        finish_value(text, &mut fields, value, text.len());
        let raw = &text[pstart..];
        out.push(Paragraph {
            fields,
            raw,
            line: pline,
        });
    }
    Ok(out)
}

fn finish_value<'a>(
    text: &'a str,
    fields: &mut [(&'a str, &'a str)],
    value: Option<(usize, usize)>,
    end: usize,
) {
    if let Some((idx, start)) = value {
        fields[idx].1 = text[start..end].trim();
    }
}

/// At most 80 characters of untrusted text, for messages.
pub(crate) fn truncate(s: &str) -> String {
    let t: String = s.chars().take(80).collect();
    t.escape_debug().to_string()
}

#[cfg(test)]
mod tests {
    use super::paragraphs;

    #[test]
    fn fields_continuations_and_raw_text() {
        let text = "Package: a\nVersion: 1.0\nDescription: short\n long line\n .\n more\n\n\nPackage: b\nDepends: a (>= 1.0),\n c\n";
        let p = paragraphs(text).expect("parses");
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].get("package"), Some("a"));
        assert_eq!(
            p[0].get("Description"),
            Some("short\n long line\n .\n more")
        );
        assert_eq!(
            p[0].raw,
            "Package: a\nVersion: 1.0\nDescription: short\n long line\n .\n more\n"
        );
        assert_eq!(p[1].get("Depends"), Some("a (>= 1.0),\n c"));
        assert_eq!(p[1].line, 9);
        assert_eq!(p[1].raw, "Package: b\nDepends: a (>= 1.0),\n c\n");
    }

    #[test]
    fn errors_name_the_line() {
        let e = paragraphs("Package: a\nno colon here\n").expect_err("bad line");
        assert_eq!(e.line, 2);
        assert!(e.why.contains("not `Field: value`"), "{e}");
        let e = paragraphs(" leading continuation\n").expect_err("continuation");
        assert_eq!(e.line, 1);
    }
}
