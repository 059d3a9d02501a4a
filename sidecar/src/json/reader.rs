//! Parsing. Error texts follow rapidjson's (`Invalid value.`, `Missing a comma or ']' after an
//! array element.`) because clients see them inside Triton's `failed to parse the request JSON
//! buffer: ... at <offset>` message.

use std::borrow::Cow;

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

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JsonError {
    Syntax {
        message: &'static str,
        offset: usize,
    },
    TooDeep {
        limit: u32,
    },
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

    /// The JSON kind, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) | Value::Raw(_) => "array",
            Value::Object(_) => "object",
        }
    }
}

/// Parses a whole document.
pub fn parse(buf: &[u8], max_depth: u32) -> Result<Value<'_>, JsonError> {
    Parser::new(buf, max_depth, false).document()
}

/// Parses a whole document, keeping every array under a `data` key as [`Value::Raw`].
pub fn parse_lazy_data(buf: &[u8], max_depth: u32) -> Result<Value<'_>, JsonError> {
    Parser::new(buf, max_depth, true).document()
}

pub(crate) struct Parser<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
    max_depth: u32,
    lazy_data: bool,
}

impl<'a> Parser<'a> {
    pub(crate) fn new(buf: &'a [u8], max_depth: u32, lazy_data: bool) -> Self {
        Parser {
            buf,
            pos: 0,
            max_depth,
            lazy_data,
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
        if self.buf[self.pos..].starts_with(text) {
            self.pos += text.len();
            Ok(value)
        } else {
            Err(self.err("Invalid value."))
        }
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
                self.skip_array(0)?;
                Value::Raw(&self.buf[start..self.pos])
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
                _ => {
                    self.number()?;
                }
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
                c if c < 0x20 => return Err(self.err("Invalid encoding in string.")),
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
                c if c < 0x20 => return Err(self.err("Invalid encoding in string.")),
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

    pub(crate) fn number(&mut self) -> Result<Number, JsonError> {
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        if self.buf[self.pos..].starts_with(b"NaN") {
            self.pos += 3;
            return Ok(Number::Float(f64::NAN));
        }
        if self.buf[self.pos..].starts_with(b"Infinity") {
            self.pos += 8;
            return Ok(Number::Float(if negative {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }));
        }
        let int_start = self.pos;
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                while matches!(self.peek(), Some(b'0'..=b'9')) {
                    self.pos += 1;
                }
            }
            _ => {
                self.pos = start;
                return Err(self.err("Invalid value."));
            }
        }
        let int_end = self.pos;
        let mut is_float = false;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("Missing fraction part in number."));
            }
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.pos += 1;
            }
            is_float = true;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("Missing exponent in number."));
            }
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.pos += 1;
            }
            is_float = true;
        }
        if !is_float {
            let mut magnitude: u64 = 0;
            let mut overflow = false;
            for &d in &self.buf[int_start..int_end] {
                match magnitude
                    .checked_mul(10)
                    .and_then(|m| m.checked_add(u64::from(d - b'0')))
                {
                    Some(m) => magnitude = m,
                    None => {
                        overflow = true;
                        break;
                    }
                }
            }
            if !overflow {
                if !negative {
                    return Ok(Number::Uint(magnitude));
                }
                if magnitude <= i64::MAX as u64 + 1 {
                    return Ok(Number::Int((magnitude as i128).wrapping_neg() as i64));
                }
            }
        }
        // SAFETY-free: the span is ASCII digits, sign, '.', 'e' only.
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Value<'_>, JsonError> {
        parse(s.as_bytes(), 100)
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
        assert!(p("1.").is_err());
        assert!(p("1e").is_err());
        assert!(p("01").is_err());
        assert!(p("\"abc").is_err());
        assert!(p("1e999").is_err());
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
