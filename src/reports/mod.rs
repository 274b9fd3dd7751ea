//! Reports the commands compute and the printer renders: `rag status`'s.

pub mod status;
