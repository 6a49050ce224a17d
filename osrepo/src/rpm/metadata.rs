//! `repodata/repomd.xml` (which metadata files exist, with their sha256) and `primary.xml` (one
//! `<package>` per RPM: name, EVR, arch, sha256, location, provides, requires, some files).

use quick_xml::events::Event;
use quick_xml::Reader;
use thiserror::Error;

use super::version::Evr;
use super::xml::{attr, text};

/// Metadata that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{file}: {why}")]
pub struct MetadataError {
    /// `repomd.xml` or `primary.xml`.
    pub file: &'static str,
    /// What is wrong (with the package when known).
    pub why: String,
}

/// One `<data>` entry of `repomd.xml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepomdData {
    /// `type` (`primary`, `filelists`, …).
    pub kind: String,
    /// `location href`, relative to the repository root.
    pub href: String,
    /// sha256 of the file as stored (compressed).
    pub sha256: String,
    /// Its size, when given.
    pub size: Option<u64>,
}

type DataParts = (String, Option<String>, Option<String>, Option<u64>);

/// Parses `repomd.xml`.
pub fn parse_repomd(xml: &str) -> Result<Vec<RepomdData>, MetadataError> {
    let err = |why: String| MetadataError {
        file: "repomd.xml",
        why,
    };
    let mut reader = Reader::from_str(xml);
    let mut out = Vec::new();
    // The `<data>` being read: type, location, sha256, size.
    let mut cur: Option<DataParts> = None;
    loop {
        match reader.read_event().map_err(|e| err(e.to_string()))? {
            Event::Start(e) if e.local_name().as_ref() == b"data" => {
                cur = Some((attr(&e, "type").unwrap_or_default(), None, None, None));
            }
            Event::Start(e) if e.local_name().as_ref() == b"checksum" => {
                let kind = attr(&e, "type").unwrap_or_default();
                let value = text(&mut reader).map_err(err)?;
                if let Some(c) = cur.as_mut() {
                    if kind == "sha256" {
                        c.2 = Some(value.trim().to_owned());
                    }
                }
            }
            Event::Start(e) if e.local_name().as_ref() == b"size" => {
                let value = text(&mut reader).map_err(err)?;
                if let Some(c) = cur.as_mut() {
                    c.3 = value.trim().parse().ok();
                }
            }
            Event::Empty(e) | Event::Start(e) if e.local_name().as_ref() == b"location" => {
                if attr(&e, "xml:base").is_some() {
                    return Err(err(
                        "a `location` with `xml:base` points outside the repository".into(),
                    ));
                }
                if let Some(c) = cur.as_mut() {
                    c.1 = attr(&e, "href");
                }
            }
            Event::End(e) if e.local_name().as_ref() == b"data" => {
                if let Some((kind, href, sha, size)) = cur.take() {
                    let href = href.ok_or_else(|| err(format!("data `{kind}` has no location")))?;
                    let sha256 = sha
                        .filter(|s| crate::is_sha256_hex(s))
                        .ok_or_else(|| err(format!("data `{kind}` has no sha256 checksum")))?;
                    if !safe_href(&href, "") {
                        return Err(err(format!(
                            "data `{kind}`: location `{}` is not a safe relative path",
                            href.escape_debug()
                        )));
                    }
                    out.push(RepomdData {
                        kind,
                        href,
                        sha256,
                        size,
                    });
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(out)
}

/// A dependency or capability: `name [flags evr]`; `pre` for `Requires(pre)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capability {
    /// Name (a package, a soname like `libc.so.6()(64bit)`, a path, or a rich `(a or b)`).
    pub name: String,
    /// `EQ`, `LT`, `LE`, `GT`, `GE`.
    pub flags: Option<String>,
    /// Version.
    pub evr: Option<Evr>,
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)?;
        if let (Some(flags), Some(evr)) = (&self.flags, &self.evr) {
            let op = match flags.as_str() {
                "EQ" => "=",
                "LT" => "<",
                "LE" => "<=",
                "GT" => ">",
                "GE" => ">=",
                other => other,
            };
            write!(f, " {op} {evr}")?;
        }
        Ok(())
    }
}

/// One package of `primary.xml`.
#[derive(Debug, Clone)]
pub struct RpmPackage {
    /// Name.
    pub name: String,
    /// Architecture (`x86_64`, `noarch`, …).
    pub arch: String,
    /// Epoch, version, release.
    pub evr: Evr,
    /// sha256 of the `.rpm`.
    pub sha256: String,
    /// `location href`, relative to the repository root.
    pub location: String,
    /// `size package`.
    pub size: u64,
    /// What it provides.
    pub provides: Vec<Capability>,
    /// What it requires.
    pub requires: Vec<Capability>,
    /// Files listed in primary (binaries and /etc).
    pub files: Vec<String>,
    /// The `<package>…</package>` element as the repository wrote it.
    pub xml: String,
    /// Byte range of the `<location …/>` element inside `xml`.
    pub location_span: (usize, usize),
    /// Which of the caller's repositories it came from (0 from the parser).
    pub source: usize,
}

impl RpmPackage {
    /// `name-evr.arch`, for messages.
    pub fn label(&self) -> String {
        format!("{}-{}.{}", self.name, self.evr, self.arch)
    }

    /// The file name of the `.rpm`.
    pub fn basename(&self) -> &str {
        self.location.rsplit('/').next().unwrap_or(&self.location)
    }
}

/// A relative path inside the repository of plain components, ending in `suffix`.
pub(crate) fn safe_href(href: &str, suffix: &str) -> bool {
    href.len() <= 512
        && href.ends_with(suffix)
        && href.split('/').all(|c| {
            !c.is_empty()
                && c != "."
                && c != ".."
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".+~_-^".contains(&b))
        })
}

fn capability(e: &quick_xml::events::BytesStart<'_>) -> Option<Capability> {
    let name = attr(e, "name")?;
    let flags = attr(e, "flags");
    let evr = attr(e, "ver").map(|version| Evr {
        epoch: attr(e, "epoch").and_then(|x| x.parse().ok()).unwrap_or(0),
        version,
        release: attr(e, "rel"),
    });
    Some(Capability { name, flags, evr })
}

/// Parses `primary.xml`.
pub fn parse_primary(xml: &str) -> Result<Vec<RpmPackage>, MetadataError> {
    let mut reader = Reader::from_str(xml);
    let mut out = Vec::new();
    let mut start = 0usize;
    let mut cur: Option<RpmPackage> = None;
    let mut section: Option<&'static str> = None;
    loop {
        let before = usize::try_from(reader.buffer_position()).unwrap_or(usize::MAX);
        let label = cur
            .as_ref()
            .map_or_else(|| "?".to_owned(), |p| p.name.clone());
        let err = |why: String| MetadataError {
            file: "primary.xml",
            why: format!("package `{}`: {why}", label.escape_debug()),
        };
        let ev = reader.read_event().map_err(|e| err(e.to_string()))?;
        let after = usize::try_from(reader.buffer_position()).unwrap_or(usize::MAX);
        match ev {
            Event::Start(e) if e.local_name().as_ref() == b"package" => {
                start = before;
                cur = Some(RpmPackage {
                    name: String::new(),
                    arch: String::new(),
                    evr: Evr {
                        epoch: 0,
                        version: String::new(),
                        release: None,
                    },
                    sha256: String::new(),
                    location: String::new(),
                    size: 0,
                    provides: Vec::new(),
                    requires: Vec::new(),
                    files: Vec::new(),
                    xml: String::new(),
                    location_span: (0, 0),
                    source: 0,
                });
            }
            Event::End(e) if e.local_name().as_ref() == b"package" => {
                let Some(mut p) = cur.take() else { continue };
                p.xml = xml.get(start..after).unwrap_or_default().to_owned();
                p.location_span = (p.location_span.0 - start, p.location_span.1 - start);
                if p.name.is_empty() || p.arch.is_empty() || p.evr.version.is_empty() {
                    return Err(err("name, arch or version missing".into()));
                }
                if !crate::is_sha256_hex(&p.sha256) {
                    return Err(err("no sha256 checksum".into()));
                }
                if !safe_href(&p.location, ".rpm") {
                    return Err(err(format!(
                        "location `{}` is not a safe relative path of an .rpm",
                        p.location.escape_debug()
                    )));
                }
                out.push(p);
            }
            Event::Start(e) if cur.is_some() => {
                if let Some(p) = cur.as_mut() {
                    element(&mut reader, p, &mut section, &e, true, (before, after))
                        .map_err(err)?;
                }
            }
            Event::Empty(e) if cur.is_some() => {
                if let Some(p) = cur.as_mut() {
                    element(&mut reader, p, &mut section, &e, false, (before, after))
                        .map_err(err)?;
                }
            }
            Event::End(e)
                if matches!(
                    e.local_name().as_ref(),
                    b"provides"
                        | b"requires"
                        | b"conflicts"
                        | b"obsoletes"
                        | b"suggests"
                        | b"recommends"
                        | b"supplements"
                        | b"enhances"
                ) =>
            {
                section = None;
            }
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(out)
}

/// One element inside `<package>`: `start` is `<x>` (text follows), else `<x/>`.
fn element(
    reader: &mut Reader<&[u8]>,
    p: &mut RpmPackage,
    section: &mut Option<&'static str>,
    e: &quick_xml::events::BytesStart<'_>,
    start: bool,
    span: (usize, usize),
) -> Result<(), String> {
    match e.local_name().as_ref() {
        b"name" if start && section.is_none() => p.name = text(reader)?,
        b"arch" if start => p.arch = text(reader)?,
        b"version" => {
            p.evr = Evr {
                epoch: attr(e, "epoch").and_then(|x| x.parse().ok()).unwrap_or(0),
                version: attr(e, "ver").unwrap_or_default(),
                release: attr(e, "rel"),
            };
        }
        b"checksum" if start => {
            let kind = attr(e, "type");
            let v = text(reader)?;
            if kind.as_deref() == Some("sha256") {
                p.sha256 = v.trim().to_owned();
            }
        }
        b"location" => {
            if attr(e, "xml:base").is_some() {
                return Err("a `location` with `xml:base` points outside the repository".into());
            }
            p.location = attr(e, "href").unwrap_or_default();
            p.location_span = span;
        }
        b"size" => p.size = attr(e, "package").and_then(|x| x.parse().ok()).unwrap_or(0),
        b"provides" if start => *section = Some("provides"),
        b"requires" if start => *section = Some("requires"),
        b"conflicts" | b"obsoletes" | b"suggests" | b"recommends" | b"supplements"
        | b"enhances"
            if start =>
        {
            *section = Some("other");
        }
        b"entry" => {
            if let Some(c) = capability(e) {
                match *section {
                    Some("provides") => p.provides.push(c),
                    Some("requires") => p.requires.push(c),
                    _ => {}
                }
            }
        }
        b"file" if start => p.files.push(text(reader)?),
        _ => {}
    }
    Ok(())
}
