//! What a pipeline run leaves behind: JSON log lines, an events file, a Prometheus text file, and
//! a readable live view on the terminal. Every message goes through the redactor first, so
//! passwords, keys and tokens never reach a file or the screen.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// Events a run records (the events file has one JSON object per line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[allow(missing_docs)]
pub enum Event {
    PipelineStarted,
    PipelineSucceeded,
    PipelineFailed,
    ModuleStarted,
    ModuleSkipped,
    TaskStarted,
    TaskSkipped,
    TaskSucceeded,
    TaskFailed,
    StepStarted,
    StepSkipped,
    StepSucceeded,
    StepRetried,
    StepFailed,
    Warning,
    RollbackStarted,
    StepReverted,
    RevertFailed,
    /// After the pipeline succeeded, the cluster passed `verify-cluster`'s checks (the report
    /// is `verify.json` beside the journal).
    ClusterVerified,
    /// After the pipeline succeeded, a check of `verify-cluster` failed or did not finish.
    ClusterNotVerified,
}

impl Event {
    fn level(self) -> &'static str {
        match self {
            Event::PipelineFailed
            | Event::TaskFailed
            | Event::StepFailed
            | Event::RevertFailed
            | Event::ClusterNotVerified => "ERROR",
            Event::StepRetried | Event::RollbackStarted | Event::Warning => "WARN",
            Event::StepStarted | Event::StepSkipped | Event::StepReverted => "DEBUG",
            _ => "INFO",
        }
    }
}

/// Where in the pipeline something happened.
#[derive(Debug, Clone, Default)]
pub struct At<'a> {
    /// Module.
    pub module: Option<&'a str>,
    /// Task.
    pub task: Option<&'a str>,
    /// Step.
    pub step: Option<&'a str>,
    /// Node.
    pub node: Option<&'a str>,
}

#[derive(Serialize)]
struct Line<'a> {
    timestamp: String,
    level: &'static str,
    pipeline_id: &'a str,
    pipeline: &'a str,
    event: Event,
    #[serde(skip_serializing_if = "Option::is_none")]
    module: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    task: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    step: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<&'a str>,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_ms: Option<u64>,
}

/// Paths of what a run wrote.
#[derive(Debug, Clone)]
pub struct JournalPaths {
    /// JSON log lines.
    pub log: PathBuf,
    /// Events, one JSON object per line.
    pub events: PathBuf,
    /// Prometheus text file (node_exporter textfile format).
    pub metrics: PathBuf,
}

/// The run's recorder.
pub struct Journal {
    pipeline_id: String,
    pipeline: String,
    log: Mutex<File>,
    events: Mutex<File>,
    paths: JournalPaths,
    secrets: Vec<String>,
    live: bool,
    steps: Mutex<BTreeMap<String, (f64, u64)>>,
}

/// A warning as printed without the live view: `warning: [node] text`, the text escaped (it may
/// embed node output) and cut only as a [`Sentence`](kubexm_manifests::display::Sentence) — the
/// warnings are KubeXM's own sentences, whose remedy comes last (issue 33 item 13: the 200
/// character cap for outside values cut it off).
fn warning_line(node: Option<&str>, message: &str) -> String {
    let node = node.map(|n| format!("[{n}] ")).unwrap_or_default();
    format!(
        "warning: {node}{}",
        kubexm_manifests::display::Sentence(message)
    )
}

impl Journal {
    /// Opens `WORK/runs/<pipeline_id>/{log,events}.jsonl`; metrics go to `WORK/metrics/kubexm.prom`.
    /// `secrets` are replaced by `***` wherever they appear in a message.
    pub fn create(work_dir: &Path, pipeline: &str, secrets: Vec<String>) -> std::io::Result<Self> {
        let pipeline_id = new_pipeline_id();
        let dir = work_dir.join("runs").join(&pipeline_id);
        if !work_dir.exists() {
            crate::private_dir::ensure_private_dir(work_dir)?;
        }
        crate::private_dir::ensure_private_dir(&work_dir.join("runs"))?;
        crate::private_dir::ensure_private_dir(&dir)?;
        let paths = JournalPaths {
            log: dir.join("log.jsonl"),
            events: dir.join("events.jsonl"),
            metrics: work_dir.join("metrics").join("kubexm.prom"),
        };
        Ok(Self {
            log: Mutex::new(File::create(&paths.log)?),
            events: Mutex::new(File::create(&paths.events)?),
            pipeline_id,
            pipeline: pipeline.to_string(),
            paths,
            secrets: secrets.into_iter().filter(|s| s.len() >= 3).collect(),
            live: std::io::stderr().is_terminal() && crate::progress::enabled(),
            steps: Mutex::new(BTreeMap::new()),
        })
    }

    /// Also print the live view when stderr is not a terminal (CI logs).
    pub fn with_live_view(mut self, live: bool) -> Self {
        self.live = live;
        self
    }

    /// The run's id.
    pub fn pipeline_id(&self) -> &str {
        &self.pipeline_id
    }

    /// Files written.
    pub fn paths(&self) -> &JournalPaths {
        &self.paths
    }

    /// Replaces every secret in `text` with `***`.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), "***");
            }
        }
        out
    }

    /// Records an event (log line + event line + live view).
    pub fn record(&self, event: Event, at: &At<'_>, message: &str, duration: Option<Duration>) {
        let message = self.redact(message);
        let line = Line {
            timestamp: rfc3339(SystemTime::now()),
            level: event.level(),
            pipeline_id: &self.pipeline_id,
            pipeline: &self.pipeline,
            event,
            module: at.module,
            task: at.task,
            step: at.step,
            node: at.node,
            message: message.clone(),
            duration_ms: duration.map(|d| d.as_millis() as u64),
        };
        if let Ok(json) = serde_json::to_string(&line) {
            if let Ok(mut f) = self.log.lock() {
                let _ = writeln!(f, "{json}");
            }
            if event.level() != "DEBUG" || matches!(event, Event::StepSkipped | Event::StepReverted)
            {
                if let Ok(mut f) = self.events.lock() {
                    let _ = writeln!(f, "{json}");
                }
            }
        }
        if matches!(event, Event::StepSucceeded | Event::StepSkipped) {
            if let (Some(step), Some(d), Ok(mut m)) = (at.step, duration, self.steps.lock()) {
                let e = m.entry(step.to_string()).or_insert((0.0, 0));
                e.0 += d.as_secs_f64();
                e.1 += 1;
            }
        }
        if self.live {
            self.live_line(event, at, &message, duration);
        } else if event == Event::Warning {
            // Without the live view a warning would be in the journal only: the operator sees
            // it as the run goes (node output, escaped).
            eprintln!("{}", warning_line(at.node, &message));
        }
    }

    fn live_line(&self, event: Event, at: &At<'_>, message: &str, duration: Option<Duration>) {
        let mark = match event {
            Event::PipelineStarted | Event::ModuleStarted | Event::TaskStarted => "▶",
            Event::ModuleSkipped | Event::TaskSkipped | Event::StepSkipped => "·",
            Event::StepSucceeded
            | Event::TaskSucceeded
            | Event::PipelineSucceeded
            | Event::ClusterVerified => "✓",
            Event::StepRetried | Event::RollbackStarted | Event::StepReverted => "↺",
            Event::Warning => "!",
            Event::StepFailed
            | Event::TaskFailed
            | Event::PipelineFailed
            | Event::RevertFailed
            | Event::ClusterNotVerified => "✗",
            Event::StepStarted => return,
        };
        let place = [at.module, at.task, at.step]
            .iter()
            .flatten()
            .copied()
            .collect::<Vec<_>>()
            .join(" › ");
        let node = at.node.map(|n| format!("[{n}] ")).unwrap_or_default();
        let took = duration
            .map(|d| format!(" ({:.1}s)", d.as_secs_f64()))
            .unwrap_or_default();
        eprintln!(
            "{mark} {node}{place}{}{took}",
            if message.is_empty() {
                String::new()
            } else {
                format!(": {message}")
            }
        );
    }

    /// Writes the Prometheus text file: run counters accumulate across runs (kept in
    /// `counters.json` beside it), durations are this run's.
    pub fn write_metrics(&self, succeeded: bool, duration: Duration) -> std::io::Result<()> {
        let dir = self
            .paths
            .metrics
            .parent()
            .unwrap_or(Path::new("."))
            .to_path_buf();
        std::fs::create_dir_all(&dir)?;
        let counters_path = dir.join("counters.json");
        let mut counters: BTreeMap<String, u64> = std::fs::read(&counters_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let status = if succeeded { "success" } else { "failure" };
        *counters
            .entry(format!("{}\t{status}", self.pipeline))
            .or_default() += 1;
        write_atomic(
            &counters_path,
            &serde_json::to_vec(&counters).unwrap_or_default(),
        )?;

        let mut text = String::new();
        text.push_str("# HELP kubexm_pipeline_total Pipeline runs by result.\n# TYPE kubexm_pipeline_total counter\n");
        for (key, n) in &counters {
            let (p, s) = key.split_once('\t').unwrap_or((key, ""));
            text.push_str(&format!(
                "kubexm_pipeline_total{{pipeline=\"{}\",status=\"{}\"}} {n}\n",
                escape_label(p),
                escape_label(s)
            ));
        }
        text.push_str("# HELP kubexm_pipeline_duration_seconds Duration of the last run.\n# TYPE kubexm_pipeline_duration_seconds gauge\n");
        text.push_str(&format!(
            "kubexm_pipeline_duration_seconds{{pipeline=\"{}\",status=\"{status}\"}} {:.3}\n",
            escape_label(&self.pipeline),
            duration.as_secs_f64()
        ));
        text.push_str("# HELP kubexm_step_duration_seconds Time spent in each step during the last run (all nodes).\n# TYPE kubexm_step_duration_seconds summary\n");
        if let Ok(m) = self.steps.lock() {
            for (step, (sum, count)) in m.iter() {
                let s = escape_label(step);
                text.push_str(&format!(
                    "kubexm_step_duration_seconds_sum{{step=\"{s}\"}} {sum:.3}\nkubexm_step_duration_seconds_count{{step=\"{s}\"}} {count}\n"
                ));
            }
        }
        write_atomic(&self.paths.metrics, text.as_bytes())
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

fn new_pipeline_id() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "{}-{:x}{:05x}",
        rfc3339(SystemTime::now())
            .replace([':', '-'], "")
            .trim_end_matches('Z')
            .replace('T', "-")
            .split('.')
            .next()
            .unwrap_or(""),
        std::process::id(),
        now.subsec_micros()
    )
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` in UTC.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, dd) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{dd:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_timestamps() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_795_000_000_123);
        assert_eq!(rfc3339(t), "2026-11-18T11:06:40.123Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }

    /// Issue 33 item 13: the installer's own warnings are printed whole (their remedy is at
    /// the end), still escaped.
    #[test]
    fn a_warning_keeps_its_remedy() {
        let warning = "node worker2 (kernel 5.14.0-503.el9.x86_64, cgroup v1, rocky 9.5): cgroup v1 is in maintenance mode upstream and the kubelet of Kubernetes v1.35.4 runs on it only because spec.kubernetes.kubelet.failCgroupV1 is false; move the node to the unified hierarchy (kernel argument systemd.unified_cgroup_hierarchy=1, then reboot) before an upgrade that removes cgroup v1 support";
        assert!(warning.len() > kubexm_manifests::display::MAX_SHOWN);
        assert_eq!(
            warning_line(Some("worker2"), warning),
            format!("warning: [worker2] {warning}")
        );
        assert_eq!(
            warning_line(None, "from the node: \u{1b}[2J"),
            r"warning: from the node: \u{1b}[2J"
        );
    }
}
