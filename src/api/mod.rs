pub mod decode;
pub mod pod;
pub mod quantity;
pub mod time;
pub mod validation;
pub use pod::*;
pub use quantity::Quantity;
