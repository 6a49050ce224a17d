//! The run's critical path, read back from its journal (`runs/<id>/log.jsonl`): the chain of
//! tasks, each on the node that finished it last, that made the wall time.
//!
//! Modules and tasks run one after another and a task's hosts run in parallel (or one after
//! another), so the wall time is the sum of every task's time plus what happens between tasks
//! (connecting, gathering facts, planning). Within a task the chain is walked backwards from
//! the node whose last step ended last: that node made the task end; when the hosts ran one
//! after another, the node that ended before it started comes before it, and so on.
//!
//! ```no_run
//! use kubexm_install::pipeline::critical_path::CriticalPath;
//! let path = CriticalPath::from_log(std::path::Path::new("work/runs/ID/log.jsonl"))?;
//! print!("{}", path.display(12));
//! # Ok::<(), kubexm_install::pipeline::critical_path::CriticalPathError>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The journal could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CriticalPathError {
    /// Reading the log failed.
    #[error("cannot read the run journal `{}`", path.display())]
    Read {
        /// The log file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// Longest journal line read (longer ones are cut at this size and ignored): a line is one
/// event, whose message is bounded by the executor.
const MAX_LINE: u64 = 1 << 20;

/// One task of the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Module.
    pub module: String,
    /// Task.
    pub task: String,
    /// The nodes, in the order they ran, whose steps made the task's time (one for a task whose
    /// hosts ran in parallel; empty when no step ran, e.g. a resumed task).
    pub nodes: Vec<String>,
    /// When the task started, from the start of the run.
    pub at: Duration,
    /// How long the task took (from its start to its end, all hosts).
    pub took: Duration,
    /// The slowest step on the chain's nodes and its time.
    pub slowest_step: Option<(String, Duration)>,
    /// The task failed.
    pub failed: bool,
}

/// The chain of tasks that made a run's wall time.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CriticalPath {
    /// The run's wall time (from the journal's first to its last event).
    pub wall: Duration,
    /// Every task, in the order it ran.
    pub links: Vec<Link>,
}

#[derive(Deserialize)]
struct Line {
    timestamp: String,
    event: String,
    module: Option<String>,
    task: Option<String>,
    step: Option<String>,
    node: Option<String>,
    duration_ms: Option<u64>,
}

/// One node's steps within a task: first start, last end, slowest step.
#[derive(Default)]
struct Span {
    start: Option<u64>,
    end: Option<u64>,
    slowest: Option<(String, u64)>,
}

struct OpenTask {
    module: String,
    task: String,
    start: u64,
    nodes: BTreeMap<String, Span>,
}

impl CriticalPath {
    /// Reads the run's log (`JournalPaths::log`).
    ///
    /// # Errors
    /// [`CriticalPathError::Read`] when the file cannot be opened or read. Lines that are not
    /// journal events are skipped.
    pub fn from_log(path: &Path) -> Result<Self, CriticalPathError> {
        let read = |source| CriticalPathError::Read {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read)?;
        Self::from_reader(BufReader::new(file)).map_err(read)
    }

    /// Reads a journal from `reader` (one JSON event per line).
    ///
    /// # Errors
    /// The reader's error.
    pub fn from_reader(mut reader: impl BufRead) -> std::io::Result<Self> {
        let mut first: Option<u64> = None;
        let mut last = 0u64;
        let mut links = Vec::new();
        let mut open: Option<OpenTask> = None;
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = (&mut reader).take(MAX_LINE).read_until(b'\n', &mut buf)?;
            if n == 0 {
                break;
            }
            if buf.last() != Some(&b'\n') && n as u64 == MAX_LINE {
                // Too long to be an event: skip the rest of it.
                skip_line(&mut reader)?;
                continue;
            }
            let Ok(line) = serde_json::from_slice::<Line>(&buf) else {
                continue;
            };
            let Some(ts) = parse_timestamp(&line.timestamp) else {
                continue;
            };
            let start = *first.get_or_insert(ts);
            last = last.max(ts);
            match line.event.as_str() {
                "TaskStarted" => {
                    open = Some(OpenTask {
                        module: line.module.unwrap_or_default(),
                        task: line.task.unwrap_or_default(),
                        start: ts,
                        nodes: BTreeMap::new(),
                    });
                }
                "TaskSucceeded" | "TaskFailed" => {
                    if let Some(task) = open.take() {
                        links.push(task.close(ts, start, line.event == "TaskFailed"));
                    }
                }
                "StepStarted" | "StepSucceeded" | "StepSkipped" | "StepFailed" | "StepReverted"
                | "RevertFailed" => {
                    let (Some(task), Some(node)) = (open.as_mut(), line.node) else {
                        continue;
                    };
                    let span = task.nodes.entry(node).or_default();
                    if line.event == "StepStarted" {
                        span.start.get_or_insert(ts);
                        continue;
                    }
                    // An end without a recorded start began `duration_ms` earlier.
                    let begun = ts.saturating_sub(line.duration_ms.unwrap_or(0));
                    span.start = Some(span.start.map_or(begun, |s| s.min(begun)));
                    span.end = Some(span.end.map_or(ts, |e| e.max(ts)));
                    if let (Some(step), Some(ms)) = (line.step, line.duration_ms) {
                        if span.slowest.as_ref().is_none_or(|(_, best)| ms > *best) {
                            span.slowest = Some((step, ms));
                        }
                    }
                }
                _ => {}
            }
        }
        // A run cut short (killed) leaves its last task open: count it up to the last event.
        if let (Some(task), Some(start)) = (open.take(), first) {
            links.push(task.close(last, start, true));
        }
        Ok(Self {
            wall: Duration::from_millis(last - first.unwrap_or(last)),
            links,
        })
    }

    /// Time spent in tasks.
    pub fn in_tasks(&self) -> Duration {
        self.links.iter().map(|l| l.took).sum()
    }

    /// A printable view keeping the `longest` longest tasks (in the order they ran) and
    /// summing up the others.
    pub fn display(&self, longest: usize) -> Display<'_> {
        Display {
            path: self,
            longest,
        }
    }
}

impl OpenTask {
    fn close(self, end: u64, run_start: u64, failed: bool) -> Link {
        // Walk back from the node that ended last: each earlier link is the node that ended
        // last before the current one started (hosts that ran one after another).
        let mut chain: Vec<&str> = Vec::new();
        let mut before = u64::MAX;
        loop {
            let next = self
                .nodes
                .iter()
                .filter(|(name, span)| {
                    span.end.is_some_and(|e| e <= before) && !chain.contains(&name.as_str())
                })
                .max_by_key(|(_, span)| span.end);
            let Some((name, span)) = next else { break };
            chain.push(name);
            match span.start {
                // ms timestamps: a host that started in the same millisecond as the previous
                // one ended still follows it.
                Some(s) if s > self.start => before = s,
                _ => break,
            }
        }
        chain.reverse();
        let slowest_step = chain
            .iter()
            .filter_map(|n| self.nodes.get(*n).and_then(|s| s.slowest.clone()))
            .max_by_key(|(_, ms)| *ms)
            .map(|(step, ms)| (step, Duration::from_millis(ms)));
        Link {
            nodes: chain.into_iter().map(str::to_owned).collect(),
            at: Duration::from_millis(self.start.saturating_sub(run_start)),
            took: Duration::from_millis(end.saturating_sub(self.start)),
            slowest_step,
            failed,
            module: self.module,
            task: self.task,
        }
    }
}

fn skip_line(reader: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            reader.consume(i + 1);
            return Ok(());
        }
        let n = buf.len();
        reader.consume(n);
    }
}

/// Milliseconds since the epoch of the journal's `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn parse_timestamp(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 24 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[19] != b'.' {
        return None;
    }
    if b[13] != b':' || b[16] != b':' || b[23] != b'Z' {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<u64> { text.get(from..to)?.parse().ok() };
    let (y, m, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hh, mm, ss, ms) = (num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let days = days_from_civil(y, m, d)?;
    Some((((days * 24 + hh) * 60 + mm) * 60 + ss) * 1000 + ms)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (from 1970 on).
fn days_from_civil(y: u64, m: u64, d: u64) -> Option<u64> {
    let y = if m <= 2 { y.checked_sub(1)? } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).checked_sub(719_468)
}

/// See [`CriticalPath::display`].
pub struct Display<'a> {
    path: &'a CriticalPath,
    longest: usize,
}

impl fmt::Display for Display<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path;
        let secs = |d: Duration| d.as_secs_f64();
        let wall = path.wall;
        let outside = wall.saturating_sub(path.in_tasks());
        writeln!(
            f,
            "critical path: {:.1}s wall, {:.1}s in {} task(s), {:.1}s between tasks (connecting, facts, planning)",
            secs(wall),
            secs(path.in_tasks()),
            path.links.len(),
            secs(outside)
        )?;
        let mut order: Vec<usize> = (0..path.links.len()).collect();
        order.sort_by(|&a, &b| path.links[b].took.cmp(&path.links[a].took).then(a.cmp(&b)));
        order.truncate(self.longest);
        order.sort_unstable();
        for &i in &order {
            let link = &path.links[i];
            let share = if wall.is_zero() {
                0.0
            } else {
                100.0 * secs(link.took) / secs(wall)
            };
            let nodes = if link.nodes.is_empty() {
                String::new()
            } else {
                format!(" [{}]", link.nodes.join(" → "))
            };
            let step = link
                .slowest_step
                .as_ref()
                .map(|(s, d)| format!(", slowest step {s} {:.1}s", secs(*d)))
                .unwrap_or_default();
            writeln!(
                f,
                "  {:>7.1}s  {:>6.1}s {:>3.0}%  {} › {}{nodes}{step}{}",
                secs(link.at),
                secs(link.took),
                share,
                link.module,
                link.task,
                if link.failed { " (failed)" } else { "" }
            )?;
        }
        let rest = path.links.len() - order.len();
        if rest > 0 {
            let shown: Duration = order.iter().map(|&i| path.links[i].took).sum();
            writeln!(
                f,
                "  and {rest} shorter task(s): {:.1}s",
                secs(path.in_tasks().saturating_sub(shown))
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = include_str!("critical_path/fixture.jsonl");

    fn path() -> CriticalPath {
        CriticalPath::from_reader(FIXTURE.as_bytes()).expect("read")
    }

    #[test]
    fn parses_journal_timestamps() {
        assert_eq!(parse_timestamp("1970-01-01T00:00:00.000Z"), Some(0));
        assert_eq!(
            parse_timestamp("2026-11-18T11:06:40.123Z"),
            Some(1_795_000_000_123)
        );
        assert_eq!(
            parse_timestamp("2000-02-29T00:00:00.000Z"),
            Some(951_782_400_000)
        );
        assert_eq!(parse_timestamp("2026-13-18T11:06:40.123Z"), None);
        assert_eq!(parse_timestamp("2026-11-18 11:06:40"), None);
        assert_eq!(parse_timestamp("1969-12-31T23:59:59.999Z"), None);
    }

    #[test]
    fn follows_the_node_that_finished_each_task_last() {
        let path = path();
        assert_eq!(path.wall, Duration::from_millis(20_000));
        let summary: Vec<(&str, Vec<&str>, u128)> = path
            .links
            .iter()
            .map(|l| {
                (
                    l.task.as_str(),
                    l.nodes.iter().map(String::as_str).collect(),
                    l.took.as_millis(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                // node2's steps ended last (parallel hosts).
                ("prepare", vec!["node2"], 5_000),
                // One host after another: the chain is every host, in order.
                ("join", vec!["node1", "node2"], 8_000),
                // Resumed: no step ran.
                ("resumed", vec![], 0),
                ("cni", vec!["node1"], 3_000),
            ]
        );
        assert_eq!(
            path.links[0].slowest_step,
            Some(("install-binaries".to_string(), Duration::from_millis(3_500)))
        );
        assert_eq!(path.links[1].at, Duration::from_millis(6_000));
        assert!(path.links[3].failed);
        assert_eq!(path.in_tasks(), Duration::from_millis(16_000));
    }

    #[test]
    fn prints_the_longest_tasks_in_run_order() {
        let text = path().display(2).to_string();
        assert_eq!(
            text,
            "critical path: 20.0s wall, 16.0s in 4 task(s), 4.0s between tasks (connecting, facts, planning)\n\
             \x20     1.0s     5.0s  25%  runtime › prepare [node2], slowest step install-binaries 3.5s\n\
             \x20     6.0s     8.0s  40%  kubeadm › join [node1 → node2], slowest step join 4.0s\n\
             \x20 and 2 shorter task(s): 3.0s\n"
        );
    }

    #[test]
    fn skips_lines_that_are_not_events_and_bounds_them() {
        let mut text = String::from("not json\n");
        text.push_str(&"x".repeat(usize::try_from(MAX_LINE).unwrap_or(0) + 10));
        text.push('\n');
        text.push_str(FIXTURE);
        let path = CriticalPath::from_reader(text.as_bytes()).expect("read");
        assert_eq!(path.links.len(), 4);
        assert_eq!(path.wall, Duration::from_millis(20_000));
    }

    #[test]
    fn an_interrupted_run_ends_its_open_task_at_the_last_event() {
        let cut: String = FIXTURE
            .lines()
            .take_while(|l| !l.contains("\"TaskSucceeded\""))
            .map(|l| format!("{l}\n"))
            .collect();
        let path = CriticalPath::from_reader(cut.as_bytes()).expect("read");
        assert_eq!(path.links.len(), 1);
        assert!(path.links[0].failed);
        assert_eq!(path.links[0].nodes, vec!["node2".to_string()]);
    }
}
