//! Progress bars for long work (unpacking, seeding): drawn only on a terminal, and only when
//! the binary allows them (`-q` and JSON logs turn them off). Log lines are written either way.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Allows or forbids progress bars for the whole process.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether live output (bars, the pipeline's live view) is allowed: not with `-q` or JSON logs.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// A bar of `total` units drawn with `template` (indicatif's syntax), when allowed and standard
/// error is a terminal.
pub fn bar(total: u64, template: &str) -> Option<indicatif::ProgressBar> {
    if !enabled() || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    Some(bar)
}

/// A reader that advances `bar` by the bytes read through it.
pub struct Counting<R> {
    inner: R,
    bar: Option<indicatif::ProgressBar>,
}

impl<R> Counting<R> {
    /// Counts what is read from `inner` on `bar` (nothing drawn when `None`).
    pub fn new(inner: R, bar: Option<indicatif::ProgressBar>) -> Self {
        Self { inner, bar }
    }
}

impl<R: std::io::Read> std::io::Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(b) = &self.bar {
            b.inc(n as u64);
        }
        Ok(n)
    }
}

impl<R> Drop for Counting<R> {
    fn drop(&mut self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
