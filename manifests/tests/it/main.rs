//! Integration tests of kubexm-manifests (one test binary).

mod common;
mod resolve;
mod validation;
