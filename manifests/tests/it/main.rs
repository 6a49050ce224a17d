//! Integration tests of kubexm-manifests (one test binary).

mod common;
mod import;
mod resolve;
mod validation;
