//! CLI tests of `kubexm-build` (one test binary).

mod bundle_delta;
mod bundle_diff;
mod bundle_e2e;
mod bundle_faults;
mod bundle_path;
mod bundle_trust;
mod discover;
mod import_cli;
mod os_repo;
mod os_rpm;
mod resolve_cli;
mod verify_hostile;
