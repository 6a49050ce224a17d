//! Reboot a node and wait, bounded, until it answers again over SSH from a **new** boot.
//!
//! The reboot is scheduled a moment ahead (`systemd-run --on-active=2 systemctl reboot`), so the
//! command that asks for it returns at once and the exec channel never hangs on a connection the
//! node is tearing down. Then the runner is asked for a fresh connection
//! ([`Runner::renew`]) until one answers with a boot id
//! (`/proc/sys/kernel/random/boot_id`) other than the one read before: a node still up on
//! the old boot, or not answering yet, is tried again until the deadline. The fresh connection
//! is the runner's from then on: "one connection per host" holds per boot.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use super::generic::{run_ok, run_test, GenericStep, OpPlan};
use crate::pipeline::error::StepError;
use crate::runner::Runner;

/// Where Linux says which boot this is (a random UUID made at every boot).
pub const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// Asks for a reboot two seconds from now, so that the command itself returns at once. Without
/// systemd-run, a detached `sleep 2; reboot` does the same.
pub const REBOOT_COMMAND: &str = "if command -v systemd-run >/dev/null 2>&1; then\n  systemd-run --quiet --on-active=2 --timer-property=AccuracySec=100ms systemctl reboot\nelse\n  nohup sh -c 'sleep 2; reboot' </dev/null >/dev/null 2>&1 &\nfi";

/// A node's boot id, as Linux prints it: a lowercase UUID (8-4-4-4-12 hex digits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootId(String);

/// A node printed something that is not a boot id (not quoted: it is untrusted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{BOOT_ID_PATH} did not hold a boot id (a lowercase UUID); {len} byte(s) of other output")]
pub struct BadBootId {
    /// How long the output was.
    pub len: usize,
}

impl BootId {
    /// Parses the output of `cat /proc/sys/kernel/random/boot_id` (one trailing newline allowed).
    ///
    /// # Errors
    /// [`BadBootId`] for anything but one lowercase UUID.
    pub fn parse(out: &str) -> Result<Self, BadBootId> {
        let s = out.strip_suffix('\n').unwrap_or(out);
        let groups: Vec<&str> = s.split('-').collect();
        let lens = [8, 4, 4, 4, 12];
        let ok = groups.len() == lens.len()
            && groups.iter().zip(lens).all(|(g, n)| {
                g.len() == n && g.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            });
        if ok {
            Ok(Self(s.to_string()))
        } else {
            Err(BadBootId { len: out.len() })
        }
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BootId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Reads the node's boot id.
///
/// # Errors
/// The runner's error, or [`StepError::Check`] when the node printed something else.
pub async fn boot_id(runner: &dyn Runner) -> Result<BootId, StepError> {
    let out = run_ok(
        runner,
        &format!("cat {BOOT_ID_PATH}"),
        Duration::from_secs(30),
    )
    .await?;
    BootId::parse(&out).map_err(|e| StepError::Check {
        what: format!("{}: boot id", runner.node()),
        message: e.to_string(),
    })
}

/// How long to wait for the node to come back, and how often to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitBounds {
    /// Give up after this long (from the reboot request).
    pub timeout: Duration,
    /// Pause between tries.
    pub interval: Duration,
}

/// What the last try of [`wait_for_new_boot`] saw (for the error).
#[derive(Debug)]
enum Seen {
    Nothing,
    OldBoot,
    Error(String),
}

/// Tries, every `bounds.interval` until `bounds.timeout`, a fresh connection to the node and its
/// boot id; returns the first boot id that differs from `old`.
///
/// # Errors
/// [`StepError::Verify`] when the deadline passes, saying what the last try saw (the old boot
/// id: the node never went down; an error: it never came back).
pub async fn wait_for_new_boot(
    runner: &dyn Runner,
    old: &BootId,
    bounds: WaitBounds,
) -> Result<BootId, StepError> {
    let start = tokio::time::Instant::now();
    let deadline = start + bounds.timeout;
    let mut seen = Seen::Nothing;
    loop {
        let now = tokio::time::Instant::now();
        if now >= deadline {
            break;
        }
        tokio::time::sleep(bounds.interval.min(deadline - now)).await;
        let attempt = async {
            runner.renew().await?;
            boot_id(runner).await
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, attempt).await {
            Ok(Ok(id)) if id != *old => {
                tracing::info!(node = runner.node(), old = %old, new = %id, waited = ?start.elapsed(), "node is back from a new boot");
                return Ok(id);
            }
            Ok(Ok(_)) => seen = Seen::OldBoot,
            Ok(Err(e)) => seen = Seen::Error(e.to_string()),
            Err(_) => break,
        }
    }
    let last = match seen {
        Seen::Nothing => "no try finished".to_string(),
        Seen::OldBoot => {
            format!("it still answers from the boot before ({old}): the reboot did not happen")
        }
        Seen::Error(e) => format!("the last try failed: {e}"),
    };
    Err(StepError::Verify(format!(
        "{} did not come back over SSH from a new boot within {:?}; {last}",
        runner.node(),
        bounds.timeout
    )))
}

/// Reboots the node unless `unless` exits 0, then waits for it (see the module documentation).
#[derive(Debug, Clone)]
pub struct Reboot {
    /// Why, for the plan (e.g. "into the newest installed kernel").
    pub why: String,
    /// A check: exit 0 means no reboot is needed.
    pub unless: Option<String>,
    /// How long the node may take to come back, and how often it is tried.
    pub bounds: WaitBounds,
}

#[async_trait]
impl GenericStep for Reboot {
    fn plan(&self) -> OpPlan {
        OpPlan {
            kind: "reboot",
            detail: format!(
                "reboot {} ({}), then wait up to {:?} for SSH from a new boot id ({BOOT_ID_PATH}) and reconnect{}",
                self.why,
                REBOOT_COMMAND.lines().nth(1).map_or("", str::trim),
                self.bounds.timeout,
                self.unless
                    .as_ref()
                    .map(|u| format!("; skipped when `{u}` passes"))
                    .unwrap_or_default()
            ),
            input: None,
        }
    }
    async fn is_done(&self, runner: &dyn Runner) -> Result<bool, StepError> {
        match &self.unless {
            Some(check) => run_test(runner, check).await,
            None => Ok(false),
        }
    }
    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError> {
        let old = boot_id(runner).await?;
        run_ok(runner, REBOOT_COMMAND, Duration::from_secs(30)).await?;
        tracing::info!(node = runner.node(), boot = %old, "reboot requested");
        wait_for_new_boot(runner, &old, self.bounds).await.map(drop)
    }
    async fn verify(&self, _runner: &dyn Runner) -> Result<(), StepError> {
        // `apply` returned only once the node answered from a new boot.
        Ok(())
    }
    fn revert(&self) -> Option<String> {
        None
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use super::*;
    use crate::runner::{Exec, ExecOutput, RunError, Upload, UploadOutcome};

    const OLD: &str = "0b6a7c1e-2f3d-4e5f-8a9b-0c1d2e3f4a5b";
    const NEW: &str = "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a";

    #[test]
    fn boot_ids_are_lowercase_uuids_and_nothing_else() {
        assert_eq!(
            BootId::parse(&format!("{OLD}\n")).expect("ok").as_str(),
            OLD
        );
        assert_eq!(BootId::parse(OLD).expect("ok").as_str(), OLD);
        for bad in [
            "",
            "\n",
            &OLD.to_uppercase(),
            &format!("{OLD}\n\n"),
            &format!(" {OLD}"),
            &format!("{OLD}\nrm -rf /"),
            "0b6a7c1e2f3d4e5f8a9b0c1d2e3f4a5b",
            "0b6a7c1e-2f3d-4e5f-8a9b-0c1d2e3f4a5",
            "0b6a7c1e-2f3d-4e5f-8a9b-0c1d2e3f4a5g",
            "\u{1b}[31m0b6a7c1e-2f3d-4e5f-8a9b-0c1d2e3f4a5b",
        ] {
            let e = BootId::parse(bad).expect_err("refused");
            assert_eq!(e.len, bad.len(), "{bad:?}");
            assert!(!e.to_string().contains("rm -rf"));
        }
    }

    /// What the fake node answers to `cat boot_id`, in turn (after the list: the last one).
    enum Answer {
        Boot(&'static str),
        Down,
    }

    struct FakeNode {
        answers: Mutex<VecDeque<Answer>>,
        renewals: Mutex<u32>,
        renew_fails_while_down: bool,
        down: Mutex<bool>,
    }

    impl FakeNode {
        fn new(answers: Vec<Answer>) -> Self {
            Self {
                answers: Mutex::new(answers.into()),
                renewals: Mutex::new(0),
                renew_fails_while_down: true,
                down: Mutex::new(false),
            }
        }
        fn renewals(&self) -> u32 {
            *self.renewals.lock().expect("lock")
        }
    }

    fn lost() -> RunError {
        RunError::Connection {
            node: "node1".into(),
            message: "connection refused".into(),
        }
    }

    #[async_trait]
    impl Runner for FakeNode {
        fn node(&self) -> &str {
            "node1"
        }
        async fn exec(&self, exec: &Exec) -> Result<ExecOutput, RunError> {
            assert!(exec.script.contains(BOOT_ID_PATH), "{}", exec.script);
            let mut answers = self.answers.lock().expect("lock");
            let answer = if answers.len() > 1 {
                answers.pop_front()
            } else {
                answers.front().map(|a| match a {
                    Answer::Boot(b) => Answer::Boot(b),
                    Answer::Down => Answer::Down,
                })
            };
            match answer {
                Some(Answer::Boot(b)) => {
                    *self.down.lock().expect("lock") = false;
                    Ok(ExecOutput {
                        code: Some(0),
                        stdout: format!("{b}\n"),
                        stderr: String::new(),
                    })
                }
                _ => {
                    *self.down.lock().expect("lock") = true;
                    Err(lost())
                }
            }
        }
        async fn upload(&self, _: &Upload) -> Result<UploadOutcome, RunError> {
            unreachable!("no uploads")
        }
        async fn renew(&self) -> Result<(), RunError> {
            *self.renewals.lock().expect("lock") += 1;
            if self.renew_fails_while_down && *self.down.lock().expect("lock") {
                // The next exec decides whether the node is back.
                *self.down.lock().expect("lock") = false;
                return Err(lost());
            }
            Ok(())
        }
    }

    fn bounds(timeout_ms: u64, interval_ms: u64) -> WaitBounds {
        WaitBounds {
            timeout: Duration::from_millis(timeout_ms),
            interval: Duration::from_millis(interval_ms),
        }
    }

    fn old() -> BootId {
        BootId::parse(OLD).expect("ok")
    }

    #[tokio::test]
    async fn waits_through_the_old_boot_and_the_outage_for_a_new_boot_id() {
        let node = FakeNode::new(vec![
            Answer::Boot(OLD),
            Answer::Down,
            Answer::Down,
            Answer::Down,
            Answer::Boot(NEW),
        ]);
        let got = wait_for_new_boot(&node, &old(), bounds(5_000, 5))
            .await
            .expect("ok");
        assert_eq!(got.as_str(), NEW);
        // A fresh connection for every try, the last one kept.
        assert!(node.renewals() >= 5, "{}", node.renewals());
    }

    #[tokio::test]
    async fn a_node_that_never_reboots_fails_within_the_bound_naming_the_old_boot() {
        let node = FakeNode::new(vec![Answer::Boot(OLD)]);
        let started = std::time::Instant::now();
        let e = wait_for_new_boot(&node, &old(), bounds(200, 20))
            .await
            .expect_err("refused")
            .to_string();
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(200), "{took:?}");
        assert!(took < Duration::from_secs(2), "{took:?}");
        assert!(e.contains("node1 did not come back"), "{e}");
        assert!(e.contains("the reboot did not happen"), "{e}");
        assert!(e.contains(OLD), "{e}");
    }

    #[tokio::test]
    async fn a_node_that_never_comes_back_fails_within_the_bound_with_the_last_error() {
        let node = FakeNode::new(vec![Answer::Down]);
        let started = std::time::Instant::now();
        let e = wait_for_new_boot(&node, &old(), bounds(150, 20))
            .await
            .expect_err("refused")
            .to_string();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(e.contains("connection refused"), "{e}");
    }

    #[tokio::test]
    async fn hostile_output_is_not_a_new_boot() {
        let node = FakeNode::new(vec![Answer::Boot("$(reboot)"), Answer::Boot(NEW)]);
        let got = wait_for_new_boot(&node, &old(), bounds(2_000, 5))
            .await
            .expect("ok");
        assert_eq!(got.as_str(), NEW);
        let node = FakeNode::new(vec![Answer::Boot("not-a-boot-id")]);
        let e = wait_for_new_boot(&node, &old(), bounds(60, 10))
            .await
            .expect_err("refused")
            .to_string();
        assert!(e.contains("did not hold a boot id"), "{e}");
        assert!(!e.contains("not-a-boot-id"), "{e}");
    }

    #[tokio::test]
    async fn the_reboot_is_skipped_when_its_check_passes() {
        struct Passes;
        #[async_trait]
        impl Runner for Passes {
            fn node(&self) -> &str {
                "node1"
            }
            async fn exec(&self, exec: &Exec) -> Result<ExecOutput, RunError> {
                assert_eq!(exec.script, "true");
                Ok(ExecOutput {
                    code: Some(0),
                    stdout: String::new(),
                    stderr: String::new(),
                })
            }
            async fn upload(&self, _: &Upload) -> Result<UploadOutcome, RunError> {
                unreachable!()
            }
        }
        let r = Reboot {
            why: "into the new kernel".into(),
            unless: Some("true".into()),
            bounds: bounds(1_000, 10),
        };
        assert!(r.is_done(&Passes).await.expect("ok"));
        assert!(r.plan().detail.contains("systemd-run"));
        assert!(r.revert().is_none());
    }
}
