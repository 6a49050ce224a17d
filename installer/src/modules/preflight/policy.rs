//! How long a preflight check may take: one attempt of two minutes.

use crate::pipeline::Policy;

/// The policy of every preflight check.
pub(super) fn check_policy() -> Policy {
    Policy {
        timeout: std::time::Duration::from_secs(120),
        attempts: 1,
        retry_delay: std::time::Duration::ZERO,
    }
}
