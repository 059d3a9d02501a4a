//! Base64 as Triton's REST front end reads it (libb64's decoder): every character outside the
//! alphabet, padding included, is skipped, and a trailing group of fewer than four characters
//! yields the whole bytes it holds.
//!
//! Why not a strict decoder: Triton's own C++ client (and so perf_analyzer) encodes a CUDA IPC
//! handle with libb64's encoder, which breaks lines after 72 characters and ends with a newline.
//! Triton accepts that; a strict RFC 4648 decoder refuses it.

/// The bytes `text` encodes, read the way Triton reads them. Never fails: what is not base64 is
/// skipped, so a caller checks the length it needs (a CUDA handle is 64 bytes).
pub fn decode(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3 + 2);
    let mut bits: u32 = 0;
    let mut held = 0u8; // how many 6-bit values `bits` holds, 0..=3
    for sextet in text.bytes().filter_map(sextet) {
        bits = (bits << 6) | u32::from(sextet);
        held += 1;
        if held == 4 {
            out.extend_from_slice(&[(bits >> 16) as u8, (bits >> 8) as u8, bits as u8]);
            bits = 0;
            held = 0;
        }
    }
    // Two characters carry one whole byte, three carry two; one carries none. Leftover bits
    // are dropped whatever they are, as libb64 does.
    match held {
        2 => out.push((bits >> 4) as u8),
        3 => out.extend_from_slice(&[(bits >> 10) as u8, (bits >> 2) as u8]),
        _ => {}
    }
    out
}

/// The 6-bit value of one character of the standard alphabet, `None` for anything else.
fn sextet(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
