//! picolet's Kubernetes object model: the subset of core/v1 Pod it honours,
//! resource quantities, manifest decoding with unknown-field reporting,
//! apiserver-style validation, and RFC 3339 timestamps.

pub mod decode;
pub mod duration;
pub mod fields;
pub mod node;
pub mod pod;
pub mod quantity;
pub mod time;
pub mod validation;

pub use decode::{DecodeError, Decoded, Format, decode_pod, pod_from_value};
pub use duration::{format_duration, parse_duration};
pub use node::Taint;
pub use pod::*;
pub use quantity::{Quantity, QuantityError};
pub use time::{now_rfc3339, rfc3339, unix_nanos_now};
pub use validation::{FieldError, validate_pod};
