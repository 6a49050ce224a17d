//! Integration tests of kubexm-manifests (one test binary).

mod attacks;
mod common;
mod resolve;
mod validation;
