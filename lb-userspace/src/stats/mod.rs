//! Measurements shared by every part that serves traffic or checks health: latency
//! histograms that many threads record into without a lock, read whole by `/metrics`.
//! It imports nothing from the rest of the library, so any layer may use it.

mod histogram;

pub use histogram::{BUCKETS, Histogram, HistogramSnapshot};
