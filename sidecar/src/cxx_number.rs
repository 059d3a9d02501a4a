//! Integers read from text the way Triton reads them, with C++'s `std::stol` / `std::stoi`:
//! leading whitespace and a sign allowed, anything after the digits ignored, and two distinct
//! failures (no digits at all; a value out of the type's range), which Triton words apart.

#[derive(Debug, PartialEq, Eq)]
pub enum CxxParseError {
    /// `std::invalid_argument`: no digits where the number should start.
    Invalid,
    /// `std::out_of_range`.
    OutOfRange,
}

/// `std::stol` on a 64-bit platform.
pub fn stol(text: &str) -> Result<i64, CxxParseError> {
    let text = text.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (sign, rest) = match text.as_bytes().first() {
        Some(b'-') => ("-", &text[1..]),
        Some(b'+') => ("", &text[1..]),
        _ => ("", text),
    };
    let digits = &rest[..rest.bytes().take_while(u8::is_ascii_digit).count()];
    if digits.is_empty() {
        return Err(CxxParseError::Invalid);
    }
    format!("{sign}{digits}")
        .parse()
        .map_err(|_| CxxParseError::OutOfRange)
}

/// `std::stoi`.
pub fn stoi(text: &str) -> Result<i32, CxxParseError> {
    i32::try_from(stol(text)?).map_err(|_| CxxParseError::OutOfRange)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_as_cxx_does() {
        assert_eq!(stol("42"), Ok(42));
        assert_eq!(stol("  -7abc"), Ok(-7));
        assert_eq!(stol("+3"), Ok(3));
        assert_eq!(stol("\t12 34"), Ok(12));
        assert_eq!(stol("abc"), Err(CxxParseError::Invalid));
        assert_eq!(stol("-"), Err(CxxParseError::Invalid));
        assert_eq!(stol(""), Err(CxxParseError::Invalid));
        assert_eq!(stol("99999999999999999999"), Err(CxxParseError::OutOfRange));
        assert_eq!(stoi("2147483647"), Ok(i32::MAX));
        assert_eq!(stoi("2147483648"), Err(CxxParseError::OutOfRange));
        assert_eq!(stoi("-2147483648"), Ok(i32::MIN));
    }
}
