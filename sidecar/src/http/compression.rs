//! `Content-Encoding` of requests and `Accept-Encoding` of responses, for inference only, as
//! Triton does it: gzip and deflate (zlib-wrapped) both ways, inflation capped by the body limit.

use std::io::{Read, Write};

use bytes::Bytes;
use flate2::Compression;
use flate2::read::{GzDecoder, ZlibDecoder};
use flate2::write::{GzEncoder, ZlibEncoder};

use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Identity,
    Gzip,
    Deflate,
}

impl Encoding {
    pub fn header_value(self) -> Option<&'static str> {
        match self {
            Encoding::Identity => None,
            Encoding::Gzip => Some("gzip"),
            Encoding::Deflate => Some("deflate"),
        }
    }
}

/// The request's `Content-Encoding`; anything but identity, gzip or deflate is unsupported.
pub fn request_encoding(header: Option<&str>) -> Result<Encoding> {
    match header.map(|h| h.trim().to_ascii_lowercase()).as_deref() {
        None | Some("") | Some("identity") => Ok(Encoding::Identity),
        Some("gzip") => Ok(Encoding::Gzip),
        Some("deflate") => Ok(Encoding::Deflate),
        Some(_) => Err(Error::unsupported("Unsupported compression type")),
    }
}

/// Inflates a request body, refusing to produce more than `limit` bytes (compression bombs).
pub fn inflate(body: &[u8], limit: u64) -> Result<Bytes> {
    // zlib's auto-detection: a gzip body starts with 1f 8b, otherwise it is zlib-wrapped.
    let reader: Box<dyn Read + '_> = if body.starts_with(&[0x1f, 0x8b]) {
        Box::new(GzDecoder::new(body))
    } else {
        Box::new(ZlibDecoder::new(body))
    };
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(limit as usize));
    let read = reader.take(limit + 1).read_to_end(&mut out);
    match read {
        Ok(_) if out.len() as u64 > limit => Err(Error::invalid_arg(format!(
            "Decompressed data size exceeds the maximum allowed value of {limit} bytes. Use --http-max-input-size to increase the limit."
        ))),
        Ok(_) => Ok(Bytes::from(out)),
        Err(e) => Err(Error::invalid_arg(format!(
            "failed to decompress the request body: {e}"
        ))),
    }
}

/// Picks the response encoding from `Accept-Encoding`: the highest `q` among identity, gzip and
/// deflate wins, ties keep the first listed, `q=0` never wins.
pub fn response_encoding(header: Option<&str>) -> Encoding {
    let Some(header) = header else {
        return Encoding::Identity;
    };
    let mut best = (Encoding::Identity, 0.0f32, false);
    for part in header.split(',') {
        let mut pieces = part.split(';');
        let name = pieces.next().unwrap_or("").trim().to_ascii_lowercase();
        let encoding = match name.as_str() {
            "identity" => Encoding::Identity,
            "gzip" => Encoding::Gzip,
            "deflate" => Encoding::Deflate,
            _ => continue,
        };
        let mut q = 1.0f32;
        for param in pieces {
            if let Some(v) = param.trim().strip_prefix("q=") {
                q = v.trim().parse().unwrap_or(0.0);
            }
        }
        if q > 0.0 && (!best.2 || q > best.1) {
            best = (encoding, q, true);
        }
    }
    best.0
}

/// Compresses a whole response body; on failure the caller sends it uncompressed.
pub fn compress(encoding: Encoding, chunks: &[Bytes]) -> Option<Bytes> {
    fn finish<W: Write>(
        mut w: W,
        chunks: &[Bytes],
        done: impl FnOnce(W) -> std::io::Result<Vec<u8>>,
    ) -> Option<Bytes> {
        for c in chunks {
            w.write_all(c).ok()?;
        }
        done(w).ok().map(Bytes::from)
    }
    match encoding {
        Encoding::Identity => None,
        Encoding::Gzip => finish(
            GzEncoder::new(Vec::new(), Compression::fast()),
            chunks,
            |w| w.finish(),
        ),
        Encoding::Deflate => finish(
            ZlibEncoder::new(Vec::new(), Compression::fast()),
            chunks,
            |w| w.finish(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_encoding_weights() {
        assert_eq!(response_encoding(None), Encoding::Identity);
        assert_eq!(response_encoding(Some("gzip")), Encoding::Gzip);
        assert_eq!(response_encoding(Some("deflate, gzip")), Encoding::Deflate);
        assert_eq!(
            response_encoding(Some("deflate;q=0.5, gzip;q=0.8")),
            Encoding::Gzip
        );
        assert_eq!(response_encoding(Some("gzip;q=0, br")), Encoding::Identity);
    }

    #[test]
    fn round_trips_and_caps() {
        let data = Bytes::from(vec![7u8; 10_000]);
        for enc in [Encoding::Gzip, Encoding::Deflate] {
            let packed = compress(enc, std::slice::from_ref(&data)).unwrap();
            assert_eq!(inflate(&packed, 1 << 20).unwrap(), data);
            assert!(inflate(&packed, 1000).is_err());
        }
        assert!(inflate(b"not compressed", 1000).is_err());
        assert!(request_encoding(Some("br")).is_err());
    }
}
