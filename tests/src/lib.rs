//! Test support: packet builder and netns harness, and what the benchmarks share.
pub mod bench;
pub mod fixture_env;
pub mod netns;
pub mod packet;
