//! A small JSON reader and writer with the dialect Triton's HTTP front end speaks: `NaN`,
//! `Infinity` and `-Infinity` literals in both directions, byte strings without UTF-8
//! validation, an explicit nesting limit, and rapidjson's number formatting. Tensor `data`
//! arrays are not materialized as values: the reader keeps their span and [`data`] decodes it
//! straight into a typed little-endian buffer once the datatype is known.

pub mod data;
mod decoded;
mod elements;
mod grisu;
mod number;
mod parts;
mod reader;
mod writer;

pub use data::parse_lazy_data;
pub use number::write_f64;
pub use reader::{JsonError, Number, Value, parse};
pub use writer::Writer;
