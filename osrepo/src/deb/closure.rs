//! The dependency closure of the packages KubeXM installs, computed the way apt chooses on a node
//! that has none of them: every `Pre-Depends` and `Depends` group, the first alternative that can
//! be satisfied (unless one already chosen satisfies the group), the candidate (highest) version
//! of each package across the suites, versioned constraints, virtual packages through `Provides`.
//!
//! Nothing is assumed installed on the node: `Essential: yes` and `Priority: required` packages
//! reached through a dependency are bundled too. A node from an older point release may have an
//! older libc6 or dpkg than a dependency asks for, and then apt must find the newer one in the
//! bundle; apt never installs a bundled package that is already present in a satisfying version.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;

use super::index::{DebPackage, Priority};
use super::relation::{group_text, Relation};
use super::version::DebVersion;

/// A package asked for, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Package name.
    pub name: String,
    /// Who asks (e.g. `node preparation`, `spec.system.debs[0]`).
    pub reason: String,
}

/// A package in the closure and what brought it in.
#[derive(Debug, Clone)]
pub struct Selected<'a> {
    /// The package.
    pub package: &'a DebPackage,
    /// `requested by …` or `NAME=VERSION depends on …`.
    pub reason: String,
}

/// Why a closure cannot be complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClosureProblem {
    /// A requested name is neither a package nor provided by one.
    Missing {
        /// The name.
        package: String,
        /// Who asked.
        reason: String,
    },
    /// A requested name is a virtual package with several providers.
    Ambiguous {
        /// The name.
        package: String,
        /// Who asked.
        reason: String,
        /// The packages that provide it.
        providers: Vec<String>,
    },
    /// No alternative of a dependency can be satisfied.
    Unsatisfiable {
        /// The group as written.
        relation: String,
        /// The package that depends on it.
        needed_by: String,
    },
}

impl fmt::Display for ClosureProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing { package, reason } => {
                write!(f, "package `{package}` ({reason}) is not in the index")
            }
            Self::Ambiguous {
                package,
                reason,
                providers,
            } => write!(
                f,
                "`{package}` ({reason}) is a virtual package provided by {}; name one of them",
                providers.join(", ")
            ),
            Self::Unsatisfiable {
                relation,
                needed_by,
            } => write!(
                f,
                "{needed_by} depends on `{relation}`, which nothing in the index satisfies"
            ),
        }
    }
}

/// Every package of one architecture's indexes (all suites merged), by name and by what they
/// provide. Only the candidate (highest) version of each name is ever chosen, as apt does.
pub struct Universe<'a> {
    arch: String,
    candidates: HashMap<&'a str, &'a DebPackage>,
    providers: HashMap<&'a str, Vec<(&'a DebPackage, Option<&'a DebVersion>)>>,
}

impl<'a> Universe<'a> {
    /// The packages of `arch` (and `all`) among `packages`.
    pub fn new(arch: &str, packages: impl IntoIterator<Item = &'a DebPackage>) -> Self {
        let mut candidates: HashMap<&str, &DebPackage> = HashMap::new();
        for p in packages
            .into_iter()
            .filter(|p| p.arch == arch || p.arch == "all")
        {
            match candidates.get(p.name.as_str()) {
                Some(have) if have.version >= p.version => {}
                _ => {
                    candidates.insert(&p.name, p);
                }
            }
        }
        let mut providers: HashMap<&str, Vec<(&DebPackage, Option<&DebVersion>)>> = HashMap::new();
        for p in candidates.values() {
            for prov in &p.provides {
                providers
                    .entry(prov.name.as_str())
                    .or_default()
                    .push((p, prov.version.as_ref().map(|(_, v)| v)));
            }
        }
        for list in providers.values_mut() {
            list.sort_by(|a, b| provider_rank(a.0).cmp(&provider_rank(b.0)));
        }
        Self {
            arch: arch.to_owned(),
            candidates,
            providers,
        }
    }

    /// The architecture.
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The candidate version of `name`.
    pub fn candidate(&self, name: &str) -> Option<&'a DebPackage> {
        self.candidates.get(name).copied()
    }

    /// Packages whose candidate satisfies `rel`: the package of that name first, then providers.
    fn satisfiers(&self, rel: &Relation) -> Vec<&'a DebPackage> {
        let mut out = Vec::new();
        if let Some(p) = self.candidate(&rel.name) {
            if rel.version_ok(Some(&p.version)) {
                out.push(p);
            }
        }
        if let Some(list) = self.providers.get(rel.name.as_str()) {
            out.extend(
                list.iter()
                    .filter(|(_, v)| rel.version_ok(*v))
                    .map(|(p, _)| *p),
            );
        }
        out
    }
}

/// Providers are chosen by priority (required first), then by name, so the choice is stable.
fn provider_rank(p: &DebPackage) -> (Priority, &str) {
    (p.priority, p.name.as_str())
}

/// The closure of `requests` in `universe`, sorted by name; or every problem found.
pub fn closure<'a>(
    universe: &Universe<'a>,
    requests: &[Request],
) -> Result<Vec<Selected<'a>>, Vec<ClosureProblem>> {
    let mut chosen: BTreeMap<&'a str, Selected<'a>> = BTreeMap::new();
    let mut queue: VecDeque<&'a DebPackage> = VecDeque::new();
    let mut problems = Vec::new();
    for r in requests {
        let pick = match universe.candidate(&r.name) {
            Some(p) => Some(p),
            None => match universe.providers.get(r.name.as_str()).map(Vec::as_slice) {
                Some([(p, _)]) => Some(*p),
                Some(list) if !list.is_empty() => {
                    problems.push(ClosureProblem::Ambiguous {
                        package: r.name.clone(),
                        reason: r.reason.clone(),
                        providers: list.iter().map(|(p, _)| p.name.clone()).collect(),
                    });
                    None
                }
                _ => {
                    problems.push(ClosureProblem::Missing {
                        package: r.name.clone(),
                        reason: r.reason.clone(),
                    });
                    None
                }
            },
        };
        if let Some(p) = pick {
            if !chosen.contains_key(p.name.as_str()) {
                chosen.insert(
                    &p.name,
                    Selected {
                        package: p,
                        reason: format!("requested by {}", r.reason),
                    },
                );
                queue.push_back(p);
            }
        }
    }
    while let Some(p) = queue.pop_front() {
        let depends = match p.depends() {
            Ok(d) => d,
            Err(e) => {
                problems.push(ClosureProblem::Unsatisfiable {
                    relation: format!("(unreadable Depends: {e})"),
                    needed_by: p.label(),
                });
                continue;
            }
        };
        for group in &depends {
            let alts: Vec<&Relation> = group
                .iter()
                .filter(|r| r.applies_on(universe.arch()))
                .collect();
            if alts.is_empty() || alts.iter().any(|r| satisfied(&chosen, universe, r)) {
                continue;
            }
            match alts
                .iter()
                .find_map(|r| universe.satisfiers(r).first().copied())
            {
                Some(dep) => {
                    chosen.insert(
                        &dep.name,
                        Selected {
                            package: dep,
                            reason: format!("{} depends on {}", p.label(), group_text(group)),
                        },
                    );
                    queue.push_back(dep);
                }
                None => problems.push(ClosureProblem::Unsatisfiable {
                    relation: group_text(group),
                    needed_by: p.label(),
                }),
            }
        }
    }
    if problems.is_empty() {
        Ok(chosen.into_values().collect())
    } else {
        problems.dedup();
        Err(problems)
    }
}

/// Whether a package already chosen satisfies `rel`.
fn satisfied(
    chosen: &BTreeMap<&str, Selected<'_>>,
    universe: &Universe<'_>,
    rel: &Relation,
) -> bool {
    if chosen
        .get(rel.name.as_str())
        .is_some_and(|s| rel.version_ok(Some(&s.package.version)))
    {
        return true;
    }
    universe
        .providers
        .get(rel.name.as_str())
        .is_some_and(|list| {
            list.iter()
                .any(|(p, v)| chosen.contains_key(p.name.as_str()) && rel.version_ok(*v))
        })
}

/// Convenience for tests and callers: a closure's package names.
pub fn names(selected: &[Selected<'_>]) -> Vec<String> {
    selected.iter().map(|s| s.package.name.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::super::index::parse_packages;
    use super::{closure, names, ClosureProblem, Request, Universe};

    fn stanza(name: &str, version: &str, arch: &str, extra: &str) -> String {
        format!(
            "Package: {name}\nVersion: {version}\nArchitecture: {arch}\n{extra}Filename: pool/main/{name}_{version}_{arch}.deb\nSize: 10\nSHA256: {}\n\n",
            "ab".repeat(32)
        )
    }

    fn req(names: &[&str]) -> Vec<Request> {
        names
            .iter()
            .map(|n| Request {
                name: (*n).to_owned(),
                reason: "test".to_owned(),
            })
            .collect()
    }

    fn index() -> String {
        [
            stanza("app", "1.0-1", "amd64", "Pre-Depends: dpkg (>= 1.17)\nDepends: libc6 (>= 2.34), debconf (>= 0.5) | debconf-2.0, mta | mail-transport-agent, tool:any\n"),
            stanza("libc6", "2.36-9", "amd64", "Depends: libgcc-s1\n"),
            stanza("libc6", "2.36-9+deb12u4", "amd64", "Depends: libgcc-s1\n"),
            stanza("libc6", "2.36-9", "arm64", "Depends: libgcc-s1\n"),
            stanza("libgcc-s1", "12.2.0-14", "amd64", "Depends: libc6 (>= 2.35)\n"),
            stanza("dpkg", "1.21.22", "amd64", "Essential: yes\nPriority: required\n"),
            stanza("cdebconf", "0.270", "amd64", "Provides: debconf-2.0\n"),
            stanza("exim4", "4.96-15", "amd64", "Priority: standard\nProvides: mail-transport-agent\n"),
            stanza("postfix", "3.7.11-0", "amd64", "Priority: optional\nProvides: mail-transport-agent\n"),
            stanza("tool", "2.0", "all", ""),
            stanza("old", "1.0", "amd64", "Depends: libc6 (>= 3.0)\n"),
            stanza("virt-a", "1.0", "amd64", "Provides: virt\n"),
            stanza("virt-b", "1.0", "amd64", "Provides: virt\n"),
            stanza("wants-vers", "1.0", "amd64", "Depends: virt (>= 1.0)\n"),
        ]
        .concat()
    }

    #[test]
    fn closure_follows_alternatives_virtuals_and_candidates() {
        let text = index();
        let pkgs = parse_packages(&text).expect("index");
        let u = Universe::new("amd64", &pkgs);
        let c = closure(&u, &req(&["app"])).expect("closure");
        assert_eq!(
            names(&c),
            [
                "app",
                "cdebconf",
                "dpkg",
                "exim4",
                "libc6",
                "libgcc-s1",
                "tool"
            ]
        );
        let libc = c.iter().find(|s| s.package.name == "libc6").expect("libc6");
        assert_eq!(
            libc.package.version.as_str(),
            "2.36-9+deb12u4",
            "the candidate is the newest"
        );
        assert_eq!(libc.package.arch, "amd64");
        assert!(
            libc.reason
                .contains("app=1.0-1 (amd64) depends on libc6 (>= 2.34)"),
            "{}",
            libc.reason
        );
        // `debconf` does not exist, so the provider of `debconf-2.0` is chosen; `mta` neither, so
        // the provider of `mail-transport-agent` with the higher priority.
        let exim = c.iter().find(|s| s.package.name == "exim4").expect("exim4");
        assert!(
            exim.reason.contains("mta | mail-transport-agent"),
            "{}",
            exim.reason
        );
    }

    #[test]
    fn problems_name_the_package() {
        let text = index();
        let pkgs = parse_packages(&text).expect("index");
        let u = Universe::new("amd64", &pkgs);
        let e =
            closure(&u, &req(&["no-such-pkg", "old", "virt", "wants-vers"])).expect_err("problems");
        assert!(e.contains(&ClosureProblem::Missing {
            package: "no-such-pkg".into(),
            reason: "test".into()
        }));
        assert!(e.iter().any(|p| matches!(p, ClosureProblem::Ambiguous { package, providers, .. } if package == "virt" && providers == &["virt-a", "virt-b"])), "{e:?}");
        let text: Vec<String> = e.iter().map(ToString::to_string).collect();
        assert!(text.iter().any(|t| t == "old=1.0 (amd64) depends on `libc6 (>= 3.0)`, which nothing in the index satisfies"), "{text:?}");
        // An unversioned Provides never satisfies a versioned dependency.
        assert!(
            text.iter()
                .any(|t| t.starts_with("wants-vers=1.0 (amd64) depends on `virt (>= 1.0)`")),
            "{text:?}"
        );
    }
}
