//! Integration tests of `kubexm-bundles`: one binary, modules by topic.

mod attacks;
mod bad_bundles;
mod cli;
mod common;
mod pack_errors;
mod round_trip;
