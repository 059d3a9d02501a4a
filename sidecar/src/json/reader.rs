//! Parsing. Error texts follow rapidjson's (`Invalid value.`, `Missing a comma or ']' after an
//! array element.`) because clients see them inside Triton's `failed to parse the request JSON
//! buffer: ... at <offset>` message.

use std::borrow::Cow;

use super::decoded::Decoded;

/// A parsed JSON value. Strings are bytes: JSON text is not required to be valid UTF-8 here,
/// because BYTES tensors carry arbitrary bytes.
#[derive(Clone, Debug, PartialEq)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    Number(Number),
    String(Cow<'a, [u8]>),
    Array(Vec<Value<'a>>),
    Object(Vec<(Cow<'a, [u8]>, Value<'a>)>),
    /// The unparsed text of a tensor `data` array (syntax already checked).
    Raw(&'a [u8]),
    /// A tensor `data` array (its text) already decoded while parsing by the [`DataDecoder`]
    /// the reader was given; see [`Decoded`].
    Decoded(&'a [u8], Decoded),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    /// A non-negative integer that fits in 64 bits.
    Uint(u64),
    /// A negative integer that fits in 64 bits.
    Int(i64),
    /// Anything else: fractions, exponents, integers too large, NaN and infinities.
    Float(f64),
}

impl Number {
    pub fn as_f64(self) -> f64 {
        match self {
            Number::Uint(u) => u as f64,
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }
}

/// Why a JSON text does not parse, in rapidjson's words (what Triton's front end reports).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// The text breaks the grammar at `offset`.
    #[error("{message} at {offset}")]
    Syntax {
        message: &'static str,
        offset: usize,
    },
    /// Arrays and objects nest deeper than the limit.
    #[error("JSON nesting depth exceeds maximum allowed limit ({limit})")]
    TooDeep { limit: u32 },
}

impl JsonError {
    /// The message Triton's HTTP front end gives a client for a body that does not parse.
    pub fn request_message(&self) -> String {
        match self {
            JsonError::Syntax { message, offset } => {
                format!("failed to parse the request JSON buffer: {message} at {offset}")
            }
            JsonError::TooDeep { limit } => {
                format!("JSON nesting depth exceeds maximum allowed limit ({limit})")
            }
        }
    }
}

impl<'a> Value<'a> {
    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        match self {
            Value::Object(members) => members
                .iter()
                .find(|(k, _)| k.as_ref() == key.as_bytes())
                .map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => std::str::from_utf8(s).ok(),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Number(Number::Uint(u)) => Some(*u),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Number(Number::Uint(u)) => i64::try_from(*u).ok(),
            Value::Number(Number::Int(i)) => Some(*i),
            _ => None,
        }
    }

    /// The text of a `data` array kept unparsed ([`Value::Raw`] or [`Value::Decoded`]).
    pub fn raw_data(&self) -> Option<&'a [u8]> {
        match self {
            Value::Raw(raw) | Value::Decoded(raw, _) => Some(raw),
            _ => None,
        }
    }

    /// The JSON kind, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) | Value::Raw(_) | Value::Decoded(..) => "array",
            Value::Object(_) => "object",
        }
    }
}

/// Parses a whole document.
pub fn parse(buf: &[u8], max_depth: u32) -> Result<Value<'_>, JsonError> {
    Parser::new(up_to_nul(buf), max_depth, false).document()
}

/// rapidjson reads a NUL byte as the end of the input: what follows it is never seen (a body
/// that starts with one is empty, a string cut by one misses its closing quote).
fn up_to_nul(buf: &[u8]) -> &[u8] {
    &buf[..memchr::memchr(0, buf).unwrap_or(buf.len())]
}

/// Decodes the tensor `data` array at the parser's position, given the members of its object
/// parsed so far and the depth limit, leaving the position after it; `None`, with the position
/// anywhere, when those members do not describe the array or it does not decode as they say.
/// The reader is given one (`json::data` has it) rather than knowing tensor types itself.
pub(crate) type DataDecoder =
    for<'a> fn(&mut Parser<'a>, &[(Cow<'a, [u8]>, Value<'a>)], u32) -> Option<Decoded>;

/// Parses a whole document, keeping every array under a `data` key as [`Value::Raw`], or as
/// [`Value::Decoded`] where `decoder` decodes it as the members of its object written before it
/// describe.
pub(crate) fn parse_lazy_data(
    buf: &[u8],
    max_depth: u32,
    decoder: Option<DataDecoder>,
) -> Result<Value<'_>, JsonError> {
    let mut parser = Parser::new(up_to_nul(buf), max_depth, true);
    parser.data_decoder = decoder;
    parser.document()
}

pub(crate) struct Parser<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
    max_depth: u32,
    lazy_data: bool,
    data_decoder: Option<DataDecoder>,
}

impl<'a> Parser<'a> {
    pub(crate) fn new(buf: &'a [u8], max_depth: u32, lazy_data: bool) -> Self {
        Parser {
            buf,
            pos: 0,
            max_depth,
            lazy_data,
            data_decoder: None,
        }
    }

    pub(crate) fn err(&self, message: &'static str) -> JsonError {
        JsonError::Syntax {
            message,
            offset: self.pos,
        }
    }

    fn document(mut self) -> Result<Value<'a>, JsonError> {
        self.skip_ws();
        if self.pos >= self.buf.len() {
            return Err(self.err("The document is empty."));
        }
        let value = self.value(0)?;
        self.skip_ws();
        if self.pos < self.buf.len() {
            return Err(self.err("The document root must not be followed by other values."));
        }
        Ok(value)
    }

    pub(crate) fn skip_ws(&mut self) {
        while let Some(&c) = self.buf.get(self.pos) {
            if matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    pub(crate) fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    fn value(&mut self, depth: u32) -> Result<Value<'a>, JsonError> {
        match self.peek() {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b't') => self.literal(b"true", Value::Bool(true)),
            Some(b'f') => self.literal(b"false", Value::Bool(false)),
            Some(b'n') => self.literal(b"null", Value::Null),
            Some(_) => Ok(Value::Number(self.number()?)),
            None => Err(self.err("Invalid value.")),
        }
    }

    fn literal(&mut self, text: &[u8], value: Value<'a>) -> Result<Value<'a>, JsonError> {
        // The first character chose the word; an error is reported where the word stops
        // matching, as rapidjson reports it.
        self.pos += 1;
        if self.consume(&text[1..]) {
            Ok(value)
        } else {
            Err(self.err("Invalid value."))
        }
    }

    /// Moves past as much of `expected` as the input matches; whether it matched all of it.
    fn consume(&mut self, expected: &[u8]) -> bool {
        for &byte in expected {
            if self.peek() != Some(byte) {
                return false;
            }
            self.pos += 1;
        }
        true
    }

    fn check_depth(&self, depth: u32) -> Result<(), JsonError> {
        if depth > self.max_depth {
            Err(JsonError::TooDeep {
                limit: self.max_depth,
            })
        } else {
            Ok(())
        }
    }

    fn object(&mut self, depth: u32) -> Result<Value<'a>, JsonError> {
        self.check_depth(depth)?;
        self.pos += 1; // '{'
        let mut members = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(members));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.err("Missing a name for object member."));
            }
            let key = self.string()?;
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.err("Missing a colon after a name of object member."));
            }
            self.pos += 1;
            self.skip_ws();
            let value = if self.lazy_data && key.as_ref() == b"data" && self.peek() == Some(b'[') {
                let start = self.pos;
                match self.decode_data(&members) {
                    Some(decoded) => Value::Decoded(&self.buf[start..self.pos], decoded),
                    None => {
                        self.pos = start;
                        self.skip_array(0)?;
                        Value::Raw(&self.buf[start..self.pos])
                    }
                }
            } else {
                self.value(depth)?
            };
            members.push((key, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Object(members));
                }
                _ => return Err(self.err("Missing a comma or '}' after an object member.")),
            }
        }
    }

    fn array(&mut self, depth: u32) -> Result<Value<'a>, JsonError> {
        self.check_depth(depth)?;
        self.pos += 1; // '['
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value(depth)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.err("Missing a comma or ']' after an array element.")),
            }
        }
    }

    /// The `data` array at the current position, decoded by the reader's [`DataDecoder`] from
    /// what its object's members parsed so far (`members`) describe, leaving the position after
    /// it. `None`, with the position anywhere, without a decoder or when it does not decode.
    fn decode_data(&mut self, members: &[(Cow<'a, [u8]>, Value<'a>)]) -> Option<Decoded> {
        let decode = self.data_decoder?;
        decode(self, members, self.max_depth)
    }

    /// Skips a `data` array, checking syntax and nesting (depth counted from the array itself,
    /// as Triton counts it for `data`).
    fn skip_array(&mut self, depth: u32) -> Result<(), JsonError> {
        self.check_depth(depth + 1)?;
        self.pos += 1;
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.skip_ws();
            match self.peek() {
                Some(b'[') => self.skip_array(depth + 1)?,
                Some(b'{') => {
                    self.object(depth + 1)?;
                }
                Some(b'"') => {
                    self.skip_string()?;
                }
                Some(b't') => {
                    self.literal(b"true", Value::Null)?;
                }
                Some(b'f') => {
                    self.literal(b"false", Value::Null)?;
                }
                Some(b'n') => {
                    self.literal(b"null", Value::Null)?;
                }
                _ => self.skip_number()?,
            }
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.err("Missing a comma or ']' after an array element.")),
            }
        }
    }

    fn skip_string(&mut self) -> Result<(), JsonError> {
        // Borrowed unless the string has escapes, so skipping costs no allocation.
        self.string().map(|_| ())
    }

    pub(crate) fn string(&mut self) -> Result<Cow<'a, [u8]>, JsonError> {
        self.pos += 1; // '"'
        let start = self.pos;
        // Borrow when there are no escapes.
        loop {
            let Some(&c) = self.buf.get(self.pos) else {
                return Err(self.err("Missing a closing quotation mark in string."));
            };
            match c {
                b'"' => {
                    let s = &self.buf[start..self.pos];
                    self.pos += 1;
                    return Ok(Cow::Borrowed(s));
                }
                b'\\' => break,
                c if c < 0x20 => return Err(self.err("Invalid escape character in string.")),
                _ => self.pos += 1,
            }
        }
        let mut out = self.buf[start..self.pos].to_vec();
        loop {
            let Some(&c) = self.buf.get(self.pos) else {
                return Err(self.err("Missing a closing quotation mark in string."));
            };
            match c {
                b'"' => {
                    self.pos += 1;
                    return Ok(Cow::Owned(out));
                }
                b'\\' => {
                    self.pos += 1;
                    self.escape(&mut out)?;
                }
                c if c < 0x20 => return Err(self.err("Invalid escape character in string.")),
                c => {
                    out.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    fn escape(&mut self, out: &mut Vec<u8>) -> Result<(), JsonError> {
        let Some(&c) = self.buf.get(self.pos) else {
            return Err(self.err("Invalid escape character in string."));
        };
        self.pos += 1;
        let simple = match c {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let mut code = self.hex4()?;
                if (0xD800..0xDC00).contains(&code) {
                    if self.buf.get(self.pos) != Some(&b'\\')
                        || self.buf.get(self.pos + 1) != Some(&b'u')
                    {
                        return Err(self.err("The surrogate pair in string is invalid."));
                    }
                    self.pos += 2;
                    let low = self.hex4()?;
                    if !(0xDC00..0xE000).contains(&low) {
                        return Err(self.err("The surrogate pair in string is invalid."));
                    }
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                }
                let ch = char::from_u32(code).unwrap_or('\u{FFFD}');
                let mut tmp = [0u8; 4];
                out.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
                return Ok(());
            }
            _ => {
                self.pos -= 1;
                return Err(self.err("Invalid escape character in string."));
            }
        };
        out.push(simple);
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let mut code = 0u32;
        for _ in 0..4 {
            let Some(d) = self
                .buf
                .get(self.pos)
                .and_then(|c| (*c as char).to_digit(16))
            else {
                return Err(self.err("Incorrect hex digit after \\u escape in string."));
            };
            code = code * 16 + d;
            self.pos += 1;
        }
        Ok(code)
    }

    /// Checks the syntax of a number in a `data` array without computing its value: the array
    /// is decoded again once its datatype is known, so computing it here would read every
    /// element twice. Same errors at the same offsets as [`Parser::number`], which it defers to
    /// for NaN, the infinities, malformed numbers and any number that might not fit in a double
    /// (one with an exponent, or with more than 300 integer digits).
    fn skip_number(&mut self) -> Result<(), JsonError> {
        let buf = self.buf;
        let is_digit = |at: usize| matches!(buf.get(at), Some(b'0'..=b'9'));
        let mut at = self.pos;
        if buf.get(at) == Some(&b'-') {
            at += 1;
        }
        let int_start = at;
        match buf.get(at) {
            Some(b'0') => at += 1,
            Some(b'1'..=b'9') => {
                while is_digit(at) {
                    at += 1;
                }
            }
            _ => return self.number().map(drop),
        }
        let int_digits = at - int_start;
        if buf.get(at) == Some(&b'.') {
            at += 1;
            if !is_digit(at) {
                return self.number().map(drop);
            }
            while is_digit(at) {
                at += 1;
            }
        }
        if int_digits > 300 || matches!(buf.get(at), Some(b'e' | b'E')) {
            return self.number().map(drop);
        }
        self.pos = at;
        Ok(())
    }

    pub(crate) fn number(&mut self) -> Result<Number, JsonError> {
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        // rapidjson (with its NaN/Inf flag) takes `Inf` as well as `Infinity`, and, like it, a
        // word that stops matching is reported where it stops.
        match self.peek() {
            Some(b'N') => {
                self.pos += 1;
                if self.consume(b"aN") {
                    return Ok(Number::Float(f64::NAN));
                }
                return Err(self.err("Invalid value."));
            }
            Some(b'I') => {
                self.pos += 1;
                if !self.consume(b"nf") || (self.peek() == Some(b'i') && !self.consume(b"inity")) {
                    return Err(self.err("Invalid value."));
                }
                return Ok(Number::Float(if negative {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }));
            }
            _ => {}
        }
        // One pass over the digits, which also accumulates them (wrapping: only used where
        // their count shows it cannot have wrapped).
        let mut mantissa: u64 = 0;
        let int_start = self.pos;
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => mantissa = self.digits(0),
            // Reported after the sign, where rapidjson stops.
            _ => return Err(self.err("Invalid value.")),
        }
        let int_digits = self.pos - int_start;
        let mut fraction_digits = 0;
        let mut is_float = false;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("Miss fraction part in number."));
            }
            let fraction_start = self.pos;
            mantissa = self.digits(mantissa);
            fraction_digits = self.pos - fraction_start;
            is_float = true;
        }
        let mut exponent: Option<i32> = Some(0);
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            let negative_exponent = self.peek() == Some(b'-');
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("Miss exponent in number."));
            }
            let exponent_start = self.pos;
            let e = self.digits(0);
            // More than 4 digits: out of every fast path's range (and maybe wrapped).
            exponent = (self.pos - exponent_start <= 4).then(|| {
                if negative_exponent {
                    -(e as i32)
                } else {
                    e as i32
                }
            });
            is_float = true;
        }
        let digit_count = int_digits + fraction_digits;
        if !is_float && digit_count <= 19 {
            // At most 19 digits: `mantissa` is exact.
            if !negative {
                return Ok(Number::Uint(mantissa));
            }
            if mantissa <= i64::MAX as u64 + 1 {
                return Ok(Number::Int((mantissa as i128).wrapping_neg() as i64));
            }
        }
        if digit_count <= 15
            && let Some(exponent) = exponent
            && let Some(value) = exact_float(mantissa, exponent - fraction_digits as i32)
        {
            return Ok(Number::Float(if negative { -value } else { value }));
        }
        if !is_float {
            // 20 digits: may still fit in a u64.
            let digits = &self.buf[int_start..self.pos];
            let mut magnitude: Option<u64> = Some(0);
            for &d in digits {
                magnitude = magnitude
                    .and_then(|m| m.checked_mul(10))
                    .and_then(|m| m.checked_add(u64::from(d - b'0')));
            }
            match magnitude {
                Some(m) if !negative => return Ok(Number::Uint(m)),
                Some(m) if m <= i64::MAX as u64 + 1 => {
                    return Ok(Number::Int((m as i128).wrapping_neg() as i64));
                }
                _ => {}
            }
        }
        // The general case: the span is ASCII digits, sign, '.', 'e' only.
        let text = std::str::from_utf8(&self.buf[start..self.pos])
            .map_err(|_| self.err("Invalid value."))?;
        let value: f64 = text.parse().map_err(|_| self.err("Invalid value."))?;
        if value.is_infinite() {
            return Err(JsonError::Syntax {
                message: "Number too big to be stored in double.",
                offset: start,
            });
        }
        Ok(Number::Float(value))
    }

    /// Consumes a run of ASCII digits, appending them to `acc` (wrapping on overflow).
    fn digits(&mut self, mut acc: u64) -> u64 {
        while let Some(&d @ b'0'..=b'9') = self.buf.get(self.pos) {
            acc = acc.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
            self.pos += 1;
        }
        acc
    }
}

/// `mantissa × 10^power` when Clinger's fast path applies: a mantissa below 2^53 (the caller
/// passes at most 15 digits) and a power of ten up to 10^22 are both exact doubles, so one
/// correctly rounded multiply or divide is the correctly rounded value. Most numbers in a tensor
/// (`12.5`, `0.0625`, `3.14159`) qualify and skip the general parser's second pass over the
/// text; `None` sends the rest there.
fn exact_float(mut mantissa: u64, mut power: i32) -> Option<f64> {
    use super::number::POW10;
    // `3.0`, `2.50`: drop the fraction's trailing zeros, which often spares the division.
    while power < 0 && mantissa != 0 && mantissa.is_multiple_of(10) {
        mantissa /= 10;
        power += 1;
    }
    let m = mantissa as f64;
    match power {
        0..=22 => Some(m * POW10[power as usize]),
        -22..=-1 => Some(m / POW10[power.unsigned_abs() as usize]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Value<'_>, JsonError> {
        parse(s.as_bytes(), 100)
    }

    /// The lazy parse without a decoder: every `data` array stays text (decoding while parsing
    /// is tested in `json::data`).
    fn parse_lazy_data(buf: &[u8], max_depth: u32) -> Result<Value<'_>, JsonError> {
        super::parse_lazy_data(buf, max_depth, None)
    }

    #[test]
    fn scalars() {
        assert_eq!(p("true").unwrap(), Value::Bool(true));
        assert_eq!(p(" 12 ").unwrap(), Value::Number(Number::Uint(12)));
        assert_eq!(p("-12").unwrap(), Value::Number(Number::Int(-12)));
        assert_eq!(
            p("-9223372036854775808").unwrap(),
            Value::Number(Number::Int(i64::MIN))
        );
        assert_eq!(
            p("-9223372036854775809").unwrap(),
            Value::Number(Number::Float(-9223372036854775809.0))
        );
        assert_eq!(
            p("9999999999999999999").unwrap(),
            Value::Number(Number::Uint(9_999_999_999_999_999_999))
        );
        assert_eq!(p("-0").unwrap(), Value::Number(Number::Int(0)));
        assert_eq!(
            p("18446744073709551615").unwrap(),
            Value::Number(Number::Uint(u64::MAX))
        );
        assert_eq!(
            p("18446744073709551616").unwrap(),
            Value::Number(Number::Float(18446744073709551616.0))
        );
        assert_eq!(p("1.5e2").unwrap(), Value::Number(Number::Float(150.0)));
        assert!(matches!(p("NaN").unwrap(), Value::Number(Number::Float(f)) if f.is_nan()));
        assert_eq!(
            p("-Infinity").unwrap(),
            Value::Number(Number::Float(f64::NEG_INFINITY))
        );
        assert_eq!(
            p(r#""a\u0000b\n""#).unwrap(),
            Value::String(Cow::Owned(b"a\0b\n".to_vec()))
        );
        assert_eq!(p(r#""\ud83d\ude00""#).unwrap().as_str(), Some("😀"));
    }

    #[test]
    fn numbers_read_as_the_general_parser_reads_them() {
        // Short and long mantissas, with fractions and exponents of every size, inside and
        // outside the fast path's range; each must read as Rust's own (correctly rounded) parser
        // reads it, sign of zero included.
        let mut texts: Vec<String> = Vec::new();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let digits = 1 + (seed % 19) as usize;
            let mantissa = format!("{:019}", seed >> 3);
            let (int, fraction) = mantissa[19 - digits..].split_at((seed >> 60) as usize % digits);
            let int = if int.is_empty() {
                "0"
            } else {
                int.trim_start_matches('0')
            };
            let int = if int.is_empty() { "0" } else { int };
            let sign = if seed & 1 == 1 { "-" } else { "" };
            let exponent = match (seed >> 40) % 4 {
                0 => String::new(),
                1 => format!("e{}", (seed >> 20) % 30),
                2 => format!("e-{}", (seed >> 20) % 30),
                _ => format!("E+{}", (seed >> 20) % 400),
            };
            let fraction = if fraction.is_empty() { "0" } else { fraction };
            texts.push(format!("{sign}{int}.{fraction}{exponent}"));
        }
        texts.extend(
            [
                "0.0",
                "-0.0",
                "3.000",
                "2.50e1",
                "1e-22",
                "1e-23",
                "0.0000001e30",
                "12.5",
                "0.1",
                "3.14159",
                "1e22",
                "1e23",
                "9007199254740993.0",
            ]
            .map(String::from),
        );
        for text in &texts {
            let expected: f64 = text.parse().unwrap();
            match p(text) {
                Ok(Value::Number(Number::Float(v))) => {
                    assert_eq!(v.to_bits(), expected.to_bits(), "{text}")
                }
                Err(_) => assert!(expected.is_infinite(), "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn errors_name_offsets() {
        assert_eq!(
            p("").unwrap_err().request_message(),
            "failed to parse the request JSON buffer: The document is empty. at 0"
        );
        assert_eq!(
            p("{\"a\" 1}").unwrap_err(),
            JsonError::Syntax {
                message: "Missing a colon after a name of object member.",
                offset: 5
            }
        );
        assert_eq!(
            p("[1 2]").unwrap_err(),
            JsonError::Syntax {
                message: "Missing a comma or ']' after an array element.",
                offset: 3
            }
        );
        assert_eq!(
            p("{} x").unwrap_err(),
            JsonError::Syntax {
                message: "The document root must not be followed by other values.",
                offset: 3
            }
        );
        // Offsets and texts as Triton's rapidjson reports them (checked against Triton 2.51):
        // a word is reported where it stops matching, a sign without digits after the sign.
        for (text, message, offset) in [
            ("[not]", "Invalid value.", 2),
            ("[nul]", "Invalid value.", 4),
            ("[tru]", "Invalid value.", 4),
            ("[fals]", "Invalid value.", 5),
            ("[Nax]", "Invalid value.", 3),
            ("[Infin]", "Invalid value.", 6),
            ("[-x]", "Invalid value.", 2),
            ("[1.]", "Miss fraction part in number.", 3),
            ("[1.5e+]", "Miss exponent in number.", 6),
        ] {
            assert_eq!(
                p(text).unwrap_err(),
                JsonError::Syntax { message, offset },
                "{text}"
            );
        }
        for (text, infinity) in [("Inf", f64::INFINITY), ("-Inf", f64::NEG_INFINITY)] {
            assert!(matches!(p(text).unwrap(), Value::Number(Number::Float(f)) if f == infinity));
        }
        for (text, message, offset) in [
            ("\0{}", "The document is empty.", 0),
            (
                "[\"a\0\"]",
                "Missing a closing quotation mark in string.",
                3,
            ),
            ("[\"a\u{1}\"]", "Invalid escape character in string.", 3),
            ("[1,\0]", "Invalid value.", 3),
        ] {
            assert_eq!(
                p(text).unwrap_err(),
                JsonError::Syntax { message, offset },
                "{text:?}"
            );
        }
        assert!(p("{}\0 trailing bytes rapidjson never reads").is_ok());
        assert!(p("1.").is_err());
        assert!(p("1e").is_err());
        assert!(p("01").is_err());
        assert!(p("\"abc").is_err());
        assert!(p("1e999").is_err());
    }

    #[test]
    fn data_arrays_fail_as_any_other_array() {
        // `data` arrays are only scanned on the first pass; their errors must be those of a
        // full parse, at the same offsets.
        for data in [
            "[1,-]",
            "[1.]",
            "[1.5e]",
            "[1e400]",
            "[-1E+999]",
            "[01]",
            "[1,2 3]",
            "[Nan]",
            "[-Infinit]",
            "[.5]",
            "[1e5,x]",
        ] {
            let doc = format!(r#"{{"data":{data}}}"#);
            let full = parse(doc.as_bytes(), 100).unwrap_err();
            let lazy = parse_lazy_data(doc.as_bytes(), 100).unwrap_err();
            assert_eq!(lazy, full, "{data}");
        }
        let long = format!(r#"{{"data":[{}]}}"#, "9".repeat(400));
        assert_eq!(
            parse_lazy_data(long.as_bytes(), 100).unwrap_err(),
            parse(long.as_bytes(), 100).unwrap_err()
        );
        let fine = br#"{"data":[0,-0.25,1e3,NaN,-Infinity,123456789012345678901234567890]}"#;
        assert!(matches!(
            parse_lazy_data(fine, 100).unwrap().get("data"),
            Some(Value::Raw(_))
        ));
    }

    #[test]
    fn depth_limit() {
        let deep = "[".repeat(101) + &"]".repeat(101);
        assert_eq!(p(&deep).unwrap_err(), JsonError::TooDeep { limit: 100 });
        let ok = "[".repeat(100) + &"]".repeat(100);
        assert!(p(&ok).is_ok());
    }

    #[test]
    fn lazy_data_keeps_span() {
        let doc = br#"{"inputs":[{"name":"x","data":[[1,2],[3, 4]]}]}"#;
        let v = parse_lazy_data(doc, 100).unwrap();
        let input = match v.get("inputs") {
            Some(Value::Array(items)) => &items[0],
            _ => panic!(),
        };
        assert_eq!(input.get("data"), Some(&Value::Raw(&b"[[1,2],[3, 4]]"[..])));
        let deep = format!(r#"{{"data":{}{}}}"#, "[".repeat(101), "]".repeat(101));
        assert_eq!(
            parse_lazy_data(deep.as_bytes(), 100).unwrap_err(),
            JsonError::TooDeep { limit: 100 }
        );
    }
}
