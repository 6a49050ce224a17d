//! Helpers shared by the integration tests: the repository root, a free local port, and edits
//! of fixture text that fail when they do not match (an edit that silently changes nothing
//! leaves a test checking the unedited fixture).

use std::path::PathBuf;

/// The repository root (the workspace, one above this package).
pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// `text` with every `from` replaced by `to`; panics naming `from` when `text` holds none.
#[track_caller]
pub(crate) fn edit(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "fixture edit did not match: `{from}` is not in the text"
    );
    text.replace(from, to)
}

/// `text` with `from` replaced by `to`; panics naming `from` unless it occurs exactly `n` times.
#[track_caller]
pub(crate) fn edit_n(text: &str, from: &str, to: &str, n: usize) -> String {
    let found = text.matches(from).count();
    assert_eq!(
        found, n,
        "fixture edit expected `{from}` {n} time(s), found it {found} time(s)"
    );
    text.replace(from, to)
}

#[test]
#[should_panic(expected = "fixture edit did not match: `absent`")]
fn an_edit_that_does_not_match_fails() {
    let _ = edit("present", "absent", "x");
}

#[test]
#[should_panic(expected = "expected `a` 1 time(s), found it 2 time(s)")]
fn an_edit_that_matches_too_often_fails() {
    let _ = edit_n("a a", "a", "b", 1);
}

#[test]
fn edits_replace_every_match() {
    assert_eq!(edit("a b a", "a", "c"), "c b c");
    assert_eq!(edit_n("a b a", "a", "c", 2), "c b c");
}

/// [`edit`] and [`edit_n`] as methods, for chains of fixture edits.
pub(crate) trait Edit {
    /// [`edit`]: every `from` replaced by `to`; panics naming `from` when there is none.
    fn edit(&self, from: &str, to: &str) -> String;
    /// [`edit_n`]: panics unless `from` occurs exactly `n` times.
    fn edit_n(&self, from: &str, to: &str, n: usize) -> String;
}

impl Edit for str {
    #[track_caller]
    fn edit(&self, from: &str, to: &str) -> String {
        edit(self, from, to)
    }
    #[track_caller]
    fn edit_n(&self, from: &str, to: &str, n: usize) -> String {
        edit_n(self, from, to, n)
    }
}

#[test]
#[should_panic(expected = "fixture edit did not match: `b`")]
fn a_chained_edit_that_does_not_match_fails() {
    let _ = "a".edit("a", "c").edit("b", "d");
}

#[test]
fn chained_edits_replace_every_match() {
    assert_eq!("a b a".edit_n("a", "c", 2).edit("b", "d"), "c d c");
}
