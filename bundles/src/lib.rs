//! The KubeXM bundle format, shared by `kubexm-build` (writes bundles) and `kubexm-install`
//! (verifies and unpacks them). See `bundles/README.md` for the layout.
#![warn(missing_docs)]

pub mod manifest;

/// Version of the bundle layout written in `bundle.json`.
pub const FORMAT_VERSION: u32 = 1;
