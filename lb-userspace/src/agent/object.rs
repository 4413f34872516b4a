//! The agent's compiled XDP object, `lb-decap`, found as every object of the package is
//! (`crate::objects`): the Debian package installs it as `/usr/lib/lb/lb-decap`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::objects::ObjectFile;

/// The variable that names the object, for tests and for a copy kept elsewhere.
pub const OBJECT_ENV: &str = "LB_DECAP_OBJECT";
/// Where the Debian package installs the object.
pub const PACKAGED_OBJECT: &str = "/usr/lib/lb/lb-decap";

/// The object and how it is looked for.
const OBJECT: ObjectFile = ObjectFile {
    name: "lb-decap",
    env: OBJECT_ENV,
    what: "agent's XDP object",
};

/// The places looked at, in order, for a binary at `exe` when `LB_DECAP_OBJECT` is `env`.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The packaged `/usr/bin/lb` finds `/usr/lib/lb/lb-decap`.
    #[test]
    fn packaged_binary_finds_the_packaged_agent() {
        let all = object_candidates(Some(Path::new("/usr/bin/lb")), None);
        assert_eq!(all[1], PathBuf::from(PACKAGED_OBJECT));
    }
}
