//! A bundle on its way in, before and after it is unpacked:
//!
//! * [`source`]: where its bytes come from — one `.tar.zst`, or the parts of a split bundle
//!   (`X.parts.json`), read as one stream, each part checked against its sha256;
//! * [`trust`]: whether it is signed by a trusted key — checked on the content digest read from
//!   the head of the stream, before anything is unpacked;
//! * [`site`]: what the site already holds (unpacked bundles, registry blobs): the inventory a
//!   delta bundle is made against;
//! * [`delta`]: a delta bundle refused when its base is absent, else completed from the site
//!   into the full bundle's tree.

pub mod delta;
pub mod site;
pub mod source;
pub mod trust;
