//! The one rule for paths inside a bundle, shared by `pack`, `verify` and `SHA256SUMS`.

use thiserror::Error;

/// Why a path may not appear in a bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PathProblem {
    /// The path is empty.
    #[error("is empty")]
    Empty,
    /// The path starts with `/`.
    #[error("is absolute")]
    Absolute,
    /// A component is `..`.
    #[error("has a `..` component")]
    ParentDir,
    /// A component is `.`.
    #[error("has a `.` component")]
    CurDir,
    /// Two slashes in a row, or a trailing slash.
    #[error("has an empty component")]
    EmptyComponent,
    /// A NUL byte.
    #[error("contains a NUL byte")]
    Nul,
    /// A backslash (a path separator on Windows, an escape in `SHA256SUMS`).
    #[error("contains a backslash")]
    Backslash,
    /// A control character such as a newline (breaks `SHA256SUMS` lines).
    #[error("contains a control character")]
    Control,
    /// A top-level name the installer keeps for itself (`.kubexm-unpacked`, the completion
    /// marker of an unpacked tree, and anything else starting with [`RESERVED_PREFIX`]).
    #[error("uses a name reserved for the installer (`{RESERVED_PREFIX}*` at the top level)")]
    Reserved,
}

/// Top-level names starting with this are the installer's own (markers in unpacked trees).
pub const RESERVED_PREFIX: &str = ".kubexm";

/// Checks that `path` is a relative, normalized, `/`-separated path that stays inside the root.
pub(crate) fn check(path: &str) -> Result<(), PathProblem> {
    if path.is_empty() {
        return Err(PathProblem::Empty);
    }
    if path.starts_with('/') {
        return Err(PathProblem::Absolute);
    }
    if path.contains('\0') {
        return Err(PathProblem::Nul);
    }
    if path.contains('\\') {
        return Err(PathProblem::Backslash);
    }
    if path.chars().any(char::is_control) {
        return Err(PathProblem::Control);
    }
    if path.starts_with(RESERVED_PREFIX) {
        return Err(PathProblem::Reserved);
    }
    for component in path.split('/') {
        match component {
            "" => return Err(PathProblem::EmptyComponent),
            "." => return Err(PathProblem::CurDir),
            ".." => return Err(PathProblem::ParentDir),
            _ => {}
        }
    }
    Ok(())
}

/// Every proper ancestor directory of `path` (`a/b/c` → `a`, `a/b`).
pub(crate) fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/').map(move |(i, _)| &path[..i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_normal_paths() {
        for ok in [
            "bundle.json",
            "files/etcd/v3.5.16/amd64/etcd-v3.5.16.tgz",
            "a..b/.c",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn rejects_unsafe_paths() {
        let cases = [
            ("", PathProblem::Empty),
            ("/etc/passwd", PathProblem::Absolute),
            ("../evil", PathProblem::ParentDir),
            ("a/../../evil", PathProblem::ParentDir),
            ("a/..", PathProblem::ParentDir),
            ("./a", PathProblem::CurDir),
            ("a//b", PathProblem::EmptyComponent),
            ("a/", PathProblem::EmptyComponent),
            ("a\0b", PathProblem::Nul),
            ("a\\..\\b", PathProblem::Backslash),
            ("a\nb", PathProblem::Control),
            (".kubexm-unpacked", PathProblem::Reserved),
            (".kubexm/x", PathProblem::Reserved),
        ];
        for (path, problem) in cases {
            assert_eq!(check(path), Err(problem), "{path:?}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// Whatever the bytes, an accepted path joined onto a root stays below it.
        #[test]
        fn accepted_paths_stay_inside(parts in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::strategy::Just("..".to_owned()),
                proptest::strategy::Just(".".to_owned()),
                proptest::strategy::Just(String::new()),
                proptest::strategy::Just(".kubexm-unpacked".to_owned()),
                "[a-z.\\\\\\x00\\n\\x1b]{1,6}",
            ],
            1..6,
        )) {
            let path = parts.join("/");
            if check(&path).is_ok() {
                let root = std::path::Path::new("/root-dir");
                let joined = root.join(&path);
                let mut depth = 0i32;
                for c in std::path::Path::new(&path).components() {
                    match c {
                        std::path::Component::Normal(_) => depth += 1,
                        other => proptest::prop_assert!(false, "{:?} in {:?}", other, path),
                    }
                }
                proptest::prop_assert!(depth >= 1);
                proptest::prop_assert!(joined.starts_with(root));
                proptest::prop_assert!(!path.chars().any(char::is_control));
                proptest::prop_assert!(!path.starts_with(RESERVED_PREFIX));
            }
        }
    }

    #[test]
    fn lists_ancestors() {
        assert_eq!(ancestors("a/b/c").collect::<Vec<_>>(), ["a", "a/b"]);
        assert_eq!(ancestors("a").count(), 0);
    }
}
