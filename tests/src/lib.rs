//! Test support: packet builder and netns harness.
