//! Test support: packet builder and netns harness.
pub mod fixture_env;
pub mod netns;
pub mod packet;
