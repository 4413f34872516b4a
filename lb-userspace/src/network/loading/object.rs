//! The balancer's compiled XDP object, `lb-xdp`, found as every object of the package is
//! (`crate::objects`): the Debian package installs it as `/usr/lib/lb/lb-xdp`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::objects::ObjectFile;

/// The object and how it is looked for (`LB_XDP_OBJECT` names it).
const OBJECT: ObjectFile = ObjectFile {
    name: "lb-xdp",
    env: "LB_XDP_OBJECT",
    what: "XDP object",
};

/// Where the Debian package installs the object.
pub const PACKAGED_OBJECT: &str = "/usr/lib/lb/lb-xdp";

/// The places looked at, in order, for a binary at `exe` when `LB_XDP_OBJECT` is `env`.
pub fn object_candidates(exe: Option<&Path>, env: Option<OsString>) -> Vec<PathBuf> {
    OBJECT.candidates_for(exe, env)
}

/// Where the object is: the first candidate that exists, else the build path.
pub fn object_path() -> PathBuf {
    OBJECT.path()
}

/// Reads the object, with an error that lists every place looked at and how to get it.
pub fn read_object() -> Result<Vec<u8>> {
    OBJECT.read()
}
