//! Progress: bars on a terminal, one log line per finished item otherwise.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Allows or forbids bars for the whole process (`-q` and JSON logs forbid them).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Progress reporting for a whole command.
#[derive(Clone)]
pub struct Progress {
    multi: Option<MultiProgress>,
}

impl Progress {
    /// Bars when stderr is a terminal, log lines otherwise.
    pub fn auto() -> Self {
        let multi = (ENABLED.load(Ordering::Relaxed) && std::io::stderr().is_terminal())
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        Self { multi }
    }

    /// Starts one item of `total` bytes (0 when unknown).
    pub fn item(&self, label: &str, total: u64) -> Item {
        let bar = self.multi.as_ref().map(|m| {
            let bar = m.add(ProgressBar::new(total));
            let style = ProgressStyle::with_template(
                "{spinner} {msg:50!} {bytes:>10}/{total_bytes:10} {bytes_per_sec:>12}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.set_message(label.to_owned());
            bar
        });
        Item {
            bar,
            label: label.to_owned(),
            started: Instant::now(),
            bytes: 0,
        }
    }
}

/// One download or upload in progress.
pub struct Item {
    bar: Option<ProgressBar>,
    label: String,
    started: Instant,
    bytes: u64,
}

impl Item {
    /// Sets the total once known.
    pub fn set_total(&self, total: u64) {
        if let Some(b) = &self.bar {
            b.set_length(total);
        }
    }

    /// Adds transferred bytes.
    pub fn inc(&mut self, n: u64) {
        self.bytes += n;
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }

    /// Restarts the count (a retry from scratch).
    pub fn reset(&mut self, position: u64) {
        self.bytes = position;
        if let Some(b) = &self.bar {
            b.set_position(position);
        }
    }

    /// Marks the item done.
    pub fn finish(self, what: &str) {
        match self.bar {
            Some(b) => b.finish_and_clear(),
            None => tracing::info!(
                item = %self.label,
                bytes = self.bytes,
                duration_ms = self.started.elapsed().as_millis() as u64,
                "{what}"
            ),
        }
    }
}
