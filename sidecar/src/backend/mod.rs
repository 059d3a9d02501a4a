//! Where inference runs. `builtin` holds the in-process reference models.

pub mod builtin;
pub mod upstream;
