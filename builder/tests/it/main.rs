//! CLI tests of `kubexm-build` (one test binary).

mod resolve_cli;
