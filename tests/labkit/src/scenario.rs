//! A scenario's clock: each step printed with the seconds since the start, the duration at the
//! end (passed, or failed when the test panics).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A running scenario; prints `== NAME passed in N s` (or `failed after`) when dropped.
#[derive(Debug)]
pub struct Scenario {
    name: String,
    t0: Instant,
    times: RefCell<BTreeMap<String, Duration>>,
}

impl Scenario {
    /// Starts the clock.
    #[must_use]
    pub fn start(name: &str) -> Scenario {
        eprintln!("== {name}: started");
        Scenario {
            name: name.to_string(),
            t0: Instant::now(),
            times: RefCell::new(BTreeMap::new()),
        }
    }

    /// Prints `== [N s] what`.
    pub fn step(&self, what: &str) {
        eprintln!("== [{} s] {what}", self.t0.elapsed().as_secs());
    }

    /// Prints one line of a step's findings, indented.
    pub fn note(&self, line: &str) {
        eprintln!("   {line}");
    }

    /// Runs `f`, records its duration under `key` (shown in the summary) and returns its value.
    pub fn timed<T>(&self, key: &str, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let v = f();
        self.times.borrow_mut().insert(key.to_string(), t.elapsed());
        v
    }

    /// Records `d` under `key` (shown in the summary).
    pub fn record(&self, key: &str, d: Duration) {
        self.times.borrow_mut().insert(key.to_string(), d);
    }

    /// The duration recorded under `key`.
    #[must_use]
    pub fn time(&self, key: &str) -> Option<Duration> {
        self.times.borrow().get(key).copied()
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        let secs = self.t0.elapsed().as_secs();
        if std::thread::panicking() {
            eprintln!("== {} FAILED after {secs} s", self.name);
            return;
        }
        eprintln!("== {} passed in {secs} s", self.name);
        for (k, d) in self.times.borrow().iter() {
            eprintln!("   {k:<26} {:>6.1} s", d.as_secs_f64());
        }
    }
}
