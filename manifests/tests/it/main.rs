//! Integration tests of kubexm-manifests (one test binary).

mod attacks;
mod common;
mod props;
mod resolve;
mod validation;
