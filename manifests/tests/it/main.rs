//! Integration tests of kubexm-manifests (one test binary).

mod attacks;
mod common;
mod hostile_values;
mod import;
mod props;
mod resolve;
mod validation;
