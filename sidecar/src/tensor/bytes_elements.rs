//! BYTES tensors: each element is a 4-byte little-endian length followed by that many bytes.

/// Why a BYTES buffer does not parse.
#[derive(Debug, PartialEq, Eq)]
pub enum BytesError {
    /// Fewer than 4 bytes remain where a length was expected.
    IncompleteLength { available: usize },
    /// An element's length runs past the end of the buffer.
    IncompleteData,
}

/// Iterates the elements of a serialized BYTES buffer.
pub fn iter(data: &[u8]) -> BytesIter<'_> {
    BytesIter { rest: data }
}

pub struct BytesIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for BytesIter<'a> {
    type Item = Result<&'a [u8], BytesError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        if self.rest.len() < 4 {
            let available = self.rest.len();
            self.rest = &[];
            return Some(Err(BytesError::IncompleteLength { available }));
        }
        let len =
            u32::from_le_bytes([self.rest[0], self.rest[1], self.rest[2], self.rest[3]]) as usize;
        let body = &self.rest[4..];
        if body.len() < len {
            self.rest = &[];
            return Some(Err(BytesError::IncompleteData));
        }
        let (element, rest) = body.split_at(len);
        self.rest = rest;
        Some(Ok(element))
    }
}

/// Counts elements, failing on a malformed buffer.
pub fn count(data: &[u8]) -> Result<u64, BytesError> {
    let mut n = 0u64;
    for element in iter(data) {
        element?;
        n += 1;
    }
    Ok(n)
}

/// Appends one element in serialized form.
pub fn push(out: &mut Vec<u8>, element: &[u8]) {
    out.extend_from_slice(&(element.len() as u32).to_le_bytes());
    out.extend_from_slice(element);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut buf = Vec::new();
        push(&mut buf, b"he\0llo");
        push(&mut buf, b"");
        let items: Vec<&[u8]> = iter(&buf).map(|r| r.unwrap()).collect();
        assert_eq!(items, [&b"he\0llo"[..], &b""[..]]);
        assert_eq!(count(&buf), Ok(2));
    }

    #[test]
    fn malformed() {
        assert_eq!(
            count(&[1, 0]),
            Err(BytesError::IncompleteLength { available: 2 })
        );
        assert_eq!(count(&[5, 0, 0, 0, b'a']), Err(BytesError::IncompleteData));
    }
}
