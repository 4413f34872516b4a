//! Configuration: schema, defaults and validation.

mod model;

pub use model::*;
