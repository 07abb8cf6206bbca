//! Pod status: what picolet reports to the API server about the pods it runs.

pub mod generate;

pub use generate::generate;
pub mod manager;
#[cfg(feature = "apiserver")]
pub mod patch;
