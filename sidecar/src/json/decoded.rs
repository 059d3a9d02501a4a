//! What the reader keeps of a tensor `data` array that `data` decoded while the document was
//! being parsed ([`Value::Decoded`](super::Value::Decoded)). A module of its own, below both:
//! the reader holds one without looking inside, `data` makes and reads them.

use bytes::Bytes;
use infergate_proto::DataType;

/// A `data` array decoded in the same pass that parsed the document: the elements are read
/// once instead of once to check the syntax and again to decode them. Only a successful decode
/// is kept; anything else leaves the array as [`Value::Raw`](super::Value::Raw) for the decoder
/// to report on, so errors are the same either way. Users check that the datatype and count are
/// the ones they need (see [`Value::decoded_as`](super::Value::decoded_as)).
#[derive(Clone, Debug, PartialEq)]
pub struct Decoded {
    pub datatype: DataType,
    /// The element count, the product of the object's `shape`.
    pub count: u64,
    /// The elements in the wire encoding of `datatype`.
    pub bytes: Bytes,
}
