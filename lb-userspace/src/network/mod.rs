//! Network vServices: Maglev tables and the XDP map writer.

pub mod maglev;
