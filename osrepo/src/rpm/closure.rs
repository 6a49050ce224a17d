//! The dependency closure over `primary.xml`, as dnf resolves it for a host with none of the
//! packages: every `Requires` (`rpmlib(…)` features are rpm's own), satisfied by a package name,
//! a `Provides` entry (versioned with rpm's comparison) or a file listed in primary; rich
//! dependencies `(a or b)`, `(a and b)`, `(a if b)` and `(a unless b)`; the highest EVR of each
//! name among the target architecture and `noarch`.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, VecDeque};

use super::metadata::{Capability, RpmPackage};
use super::version::Evr;
use crate::deb::closure::{ClosureProblem, Request};

/// The packages of one architecture (and `noarch`), with what they provide.
pub struct RpmUniverse<'a> {
    provides: HashMap<&'a str, Vec<(&'a RpmPackage, &'a Capability)>>,
    files: HashMap<&'a str, Vec<&'a RpmPackage>>,
}

impl<'a> RpmUniverse<'a> {
    /// `arch` is the rpm architecture (`x86_64`, `aarch64`).
    pub fn new(arch: &str, packages: impl IntoIterator<Item = &'a RpmPackage>) -> Self {
        let mut candidates: HashMap<&str, &RpmPackage> = HashMap::new();
        for p in packages
            .into_iter()
            .filter(|p| p.arch == arch || p.arch == "noarch")
        {
            match candidates.get(p.name.as_str()) {
                Some(have) if have.evr.compare(&p.evr) != Ordering::Less => {}
                _ => {
                    candidates.insert(&p.name, p);
                }
            }
        }
        let mut provides: HashMap<&str, Vec<(&RpmPackage, &Capability)>> = HashMap::new();
        let mut files: HashMap<&str, Vec<&RpmPackage>> = HashMap::new();
        let mut names: Vec<&&RpmPackage> = candidates.values().collect();
        names.sort_by_key(|p| (p.name.len(), p.name.as_str()));
        for p in names {
            for c in &p.provides {
                provides.entry(c.name.as_str()).or_default().push((p, c));
            }
            for f in &p.files {
                files.entry(f.as_str()).or_default().push(p);
            }
        }
        Self { provides, files }
    }

    /// Packages satisfying a simple (non-rich) requirement, the package of that name first.
    fn satisfiers(&self, req: &Capability) -> Vec<&'a RpmPackage> {
        let mut out: Vec<&RpmPackage> = Vec::new();
        if req.name.starts_with('/') {
            out.extend(self.files.get(req.name.as_str()).into_iter().flatten());
        }
        for (p, prov) in self.provides.get(req.name.as_str()).into_iter().flatten() {
            if matches_version(req, prov) && !out.iter().any(|o| o.name == p.name) {
                out.push(p);
            }
        }
        out.sort_by_key(|p| p.name != req.name);
        out
    }
}

/// Whether a provided capability satisfies the requirement's version range.
fn matches_version(req: &Capability, prov: &Capability) -> bool {
    let (Some(rf), Some(rv)) = (&req.flags, &req.evr) else {
        return true;
    };
    // A provide carries `EQ` and its version; other flags are treated as that version too.
    let (Some(_), Some(pv)) = (&prov.flags, &prov.evr) else {
        // An unversioned provide satisfies any version (rpm's rule).
        return true;
    };
    let c = pv.compare(rv);
    match rf.as_str() {
        "EQ" => c == Ordering::Equal,
        "LT" => c == Ordering::Less,
        "LE" => c != Ordering::Greater,
        "GT" => c == Ordering::Greater,
        "GE" => c != Ordering::Less,
        _ => false,
    }
}

/// A parsed rich dependency.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rich {
    Simple(Capability),
    Or(Vec<Rich>),
    And(Vec<Rich>),
    /// `(a if b)`: a is needed when b is installed.
    If(Box<Rich>, Box<Rich>),
}

fn parse_rich(s: &str) -> Option<Rich> {
    let s = s.trim();
    if !s.starts_with('(') {
        // `name [op evr]`
        let mut it = s.split_whitespace();
        let name = it.next()?.to_owned();
        let (flags, evr) = match (it.next(), it.next()) {
            (Some(op), Some(v)) => {
                let flags = match op {
                    "=" | "==" => "EQ",
                    "<" => "LT",
                    "<=" => "LE",
                    ">" => "GT",
                    ">=" => "GE",
                    _ => return None,
                };
                let (epoch, rest) = match v.split_once(':') {
                    Some((e, r)) => (e.parse().ok()?, r),
                    None => (0, v),
                };
                let (version, release) = match rest.rsplit_once('-') {
                    Some((v, r)) => (v.to_owned(), Some(r.to_owned())),
                    None => (rest.to_owned(), None),
                };
                (
                    Some(flags.to_owned()),
                    Some(Evr {
                        epoch,
                        version,
                        release,
                    }),
                )
            }
            _ => (None, None),
        };
        return Some(Rich::Simple(Capability { name, flags, evr }));
    }
    let inner = s.strip_prefix('(')?.strip_suffix(')')?;
    // Split at top-level keywords.
    let mut parts = Vec::new();
    let mut ops = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for tok in tokenize(inner) {
        match tok.as_str() {
            "(" => {
                depth += 1;
                cur.push_str(&tok);
            }
            ")" => {
                depth -= 1;
                cur.push_str(&tok);
            }
            "or" | "and" | "if" | "unless" | "with" | "without" | "else" if depth == 0 => {
                parts.push(std::mem::take(&mut cur));
                ops.push(tok);
            }
            _ => {
                if !cur.is_empty() && !cur.ends_with('(') {
                    cur.push(' ');
                }
                cur.push_str(&tok);
            }
        }
    }
    parts.push(cur);
    let parsed: Vec<Rich> = parts.iter().map(|p| parse_rich(p)).collect::<Option<_>>()?;
    match ops.first().map(String::as_str) {
        None => parsed.into_iter().next(),
        Some("or") if ops.iter().all(|o| o == "or") => Some(Rich::Or(parsed)),
        Some("and" | "with") if ops.iter().all(|o| o == "and" || o == "with") => {
            Some(Rich::And(parsed))
        }
        Some("if") if ops.len() == 1 => {
            let mut it = parsed.into_iter();
            Some(Rich::If(Box::new(it.next()?), Box::new(it.next()?)))
        }
        // `(a unless b)` / `(a without b)`: a is what a host without b needs.
        Some("unless" | "without") if ops.len() == 1 => parsed.into_iter().next(),
        _ => None,
    }
}

fn tokenize(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in s.chars() {
        if c == '(' || c == ')' {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            out.push(c.to_string());
        } else if c.is_whitespace() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push(c);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The closure of `requests` for `universe`, sorted by name; or every problem found.
pub fn closure<'a>(
    universe: &RpmUniverse<'a>,
    requests: &[Request],
) -> Result<Vec<(&'a RpmPackage, String)>, Vec<ClosureProblem>> {
    let mut chosen: BTreeMap<&'a str, (&'a RpmPackage, String)> = BTreeMap::new();
    let mut queue = VecDeque::new();
    let mut problems = Vec::new();
    let mut conditional: Vec<(Rich, Rich, String)> = Vec::new();
    for r in requests {
        let cap = Capability {
            name: r.name.clone(),
            flags: None,
            evr: None,
        };
        match universe.satisfiers(&cap).first() {
            Some(p) => {
                if !chosen.contains_key(p.name.as_str()) {
                    chosen.insert(&p.name, (*p, format!("requested by {}", r.reason)));
                    queue.push_back(*p);
                }
            }
            None => problems.push(ClosureProblem::Missing {
                package: r.name.clone(),
                reason: r.reason.clone(),
            }),
        }
    }
    loop {
        while let Some(p) = queue.pop_front() {
            for req in &p.requires {
                if req.name.starts_with("rpmlib(") {
                    continue;
                }
                let rich = if req.name.starts_with('(') {
                    match parse_rich(&req.name) {
                        Some(r) => r,
                        None => {
                            problems.push(ClosureProblem::Unsatisfiable {
                                relation: format!(
                                    "{} (a rich dependency KubeXM cannot read)",
                                    req.name
                                ),
                                needed_by: p.label(),
                            });
                            continue;
                        }
                    }
                } else {
                    Rich::Simple(req.clone())
                };
                if let Rich::If(a, b) = rich {
                    conditional.push((*a, *b, p.label()));
                    continue;
                }
                require(
                    universe,
                    &rich,
                    &p.label(),
                    &req.to_string(),
                    &mut chosen,
                    &mut queue,
                    &mut problems,
                );
            }
        }
        // `(a if b)`: once everything else is chosen, add a where b was chosen.
        let mut more = false;
        for (a, b, by) in std::mem::take(&mut conditional) {
            if satisfied(universe, &b, &chosen) && !satisfied(universe, &a, &chosen) {
                require(
                    universe,
                    &a,
                    &by,
                    "(conditional)",
                    &mut chosen,
                    &mut queue,
                    &mut problems,
                );
                more = true;
            }
        }
        if !more {
            break;
        }
    }
    if problems.is_empty() {
        Ok(chosen.into_values().collect())
    } else {
        problems.dedup();
        Err(problems)
    }
}

fn satisfied(
    universe: &RpmUniverse<'_>,
    r: &Rich,
    chosen: &BTreeMap<&str, (&RpmPackage, String)>,
) -> bool {
    match r {
        Rich::Simple(c) => universe.satisfiers(c).iter().any(|p| {
            chosen
                .get(p.name.as_str())
                .is_some_and(|(q, _)| std::ptr::eq(*q, *p))
        }),
        Rich::Or(v) => v.iter().any(|x| satisfied(universe, x, chosen)),
        Rich::And(v) => v.iter().all(|x| satisfied(universe, x, chosen)),
        Rich::If(a, b) => !satisfied(universe, b, chosen) || satisfied(universe, a, chosen),
    }
}

#[allow(clippy::too_many_arguments)]
fn require<'a>(
    universe: &RpmUniverse<'a>,
    r: &Rich,
    by: &str,
    text: &str,
    chosen: &mut BTreeMap<&'a str, (&'a RpmPackage, String)>,
    queue: &mut VecDeque<&'a RpmPackage>,
    problems: &mut Vec<ClosureProblem>,
) {
    if satisfied(universe, r, chosen) {
        return;
    }
    match r {
        Rich::Simple(c) => match universe.satisfiers(c).first() {
            Some(p) => {
                chosen.insert(&p.name, (*p, format!("{by} requires {text}")));
                queue.push_back(*p);
            }
            None => problems.push(ClosureProblem::Unsatisfiable {
                relation: text.to_owned(),
                needed_by: by.to_owned(),
            }),
        },
        Rich::Or(v) => {
            let pick = v.iter().find(|x| match x {
                Rich::Simple(c) => !universe.satisfiers(c).is_empty(),
                _ => true,
            });
            match pick {
                Some(x) => require(universe, x, by, text, chosen, queue, problems),
                None => problems.push(ClosureProblem::Unsatisfiable {
                    relation: text.to_owned(),
                    needed_by: by.to_owned(),
                }),
            }
        }
        Rich::And(v) => {
            for x in v {
                require(universe, x, by, text, chosen, queue, problems);
            }
        }
        Rich::If(a, b) => {
            if satisfied(universe, b, chosen) {
                require(universe, a, by, text, chosen, queue, problems);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_rich, Rich};

    #[test]
    fn rich_dependencies_parse() {
        let Some(Rich::Or(v)) = parse_rich("(nginx-mod-stream or (haproxy >= 2.4 and keepalived))")
        else {
            panic!("not an or");
        };
        assert_eq!(v.len(), 2);
        assert!(matches!(&v[1], Rich::And(x) if x.len() == 2));
        assert!(matches!(parse_rich("(a if b)"), Some(Rich::If(_, _))));
        let Some(Rich::Simple(c)) = parse_rich("glibc >= 2:2.34-60") else {
            panic!("not simple");
        };
        assert_eq!(
            c.evr.as_ref().map(|e| (e.epoch, e.release.clone())),
            Some((2, Some("60".into())))
        );
    }
}
