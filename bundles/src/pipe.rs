//! What both binaries do when their standard output is a pipe that closes early
//! (`kubexm-install plan | head`): Rust ignores SIGPIPE, so `println!` panics with "failed
//! printing to stdout: Broken pipe"; a command-line tool should stop quietly instead, as if the
//! signal had ended it. (Restoring SIGPIPE's default needs `unsafe`, which the crates forbid.)

/// Installs a panic hook that turns a panic from writing to a closed standard output into a
/// quiet exit with status 141 (128 + SIGPIPE, what a shell reports for a process the signal
/// ended); every other panic goes to the previous hook unchanged.
pub fn exit_quietly_on_broken_pipe() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if is_broken_stdout(message) {
            std::process::exit(141);
        }
        previous(info);
    }));
}

/// Whether a panic message is std's for a write to a closed standard output.
fn is_broken_stdout(message: &str) -> bool {
    message.starts_with("failed printing to stdout") && message.contains("Broken pipe")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_broken_stdout_is_recognised() {
        assert!(is_broken_stdout(
            "failed printing to stdout: Broken pipe (os error 32)"
        ));
        assert!(!is_broken_stdout(
            "failed printing to stdout: No space left on device"
        ));
        assert!(!is_broken_stdout("index out of bounds: Broken pipe"));
    }
}
