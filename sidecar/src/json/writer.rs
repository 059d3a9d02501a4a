//! Compact JSON output (no spaces), strings escaped as rapidjson escapes them and otherwise
//! written byte for byte.

use super::number::write_f64;

#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn with_capacity(n: usize) -> Self {
        Writer {
            buf: Vec::with_capacity(n),
        }
    }

    pub fn raw(&mut self, s: &str) -> &mut Self {
        self.buf.extend_from_slice(s.as_bytes());
        self
    }

    pub fn byte(&mut self, b: u8) -> &mut Self {
        self.buf.push(b);
        self
    }

    /// `"key":`
    pub fn key(&mut self, key: &str) -> &mut Self {
        self.string(key.as_bytes());
        self.buf.push(b':');
        self
    }

    pub fn string(&mut self, s: &[u8]) -> &mut Self {
        self.buf.reserve(s.len() + 2);
        self.buf.push(b'"');
        let mut start = 0;
        for (i, &c) in s.iter().enumerate() {
            let escape: Option<&[u8]> = match c {
                b'"' => Some(b"\\\""),
                b'\\' => Some(b"\\\\"),
                b'\n' => Some(b"\\n"),
                b'\r' => Some(b"\\r"),
                b'\t' => Some(b"\\t"),
                0x08 => Some(b"\\b"),
                0x0c => Some(b"\\f"),
                c if c < 0x20 => None,
                _ => continue,
            };
            self.buf.extend_from_slice(&s[start..i]);
            match escape {
                Some(e) => self.buf.extend_from_slice(e),
                None => {
                    const HEX: &[u8; 16] = b"0123456789ABCDEF";
                    self.buf.extend_from_slice(b"\\u00");
                    self.buf.push(HEX[usize::from(c >> 4)]);
                    self.buf.push(HEX[usize::from(c & 15)]);
                }
            }
            start = i + 1;
        }
        self.buf.extend_from_slice(&s[start..]);
        self.buf.push(b'"');
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        let mut b = itoa::Buffer::new();
        self.buf.extend_from_slice(b.format(v).as_bytes());
        self
    }

    pub fn i64(&mut self, v: i64) -> &mut Self {
        let mut b = itoa::Buffer::new();
        self.buf.extend_from_slice(b.format(v).as_bytes());
        self
    }

    /// A tensor shape: `[d0,d1,...]`.
    pub fn i64_array(&mut self, values: &[i64]) -> &mut Self {
        self.byte(b'[');
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                self.byte(b',');
            }
            self.i64(*v);
        }
        self.byte(b']')
    }

    /// Opens a tensor's object with its three fixed members, as the protocol orders them:
    /// `{"name":…,"datatype":…,"shape":[…]` (the caller adds the rest and closes it).
    pub fn tensor_head(&mut self, name: &str, datatype: &str, shape: &[i64]) -> &mut Self {
        self.byte(b'{')
            .key("name")
            .string(name.as_bytes())
            .byte(b',');
        self.key("datatype").string(datatype.as_bytes()).byte(b',');
        self.key("shape").i64_array(shape)
    }

    pub fn f64(&mut self, v: f64) -> &mut Self {
        write_f64(&mut self.buf, v);
        self
    }

    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.buf
            .extend_from_slice(if v { b"true" } else { b"false" });
        self
    }

    /// Writes a `serde_json` value (used for small documents such as configs and statistics).
    pub fn json(&mut self, v: &serde_json::Value) -> &mut Self {
        match v {
            serde_json::Value::Null => self.raw("null"),
            serde_json::Value::Bool(b) => self.bool(*b),
            serde_json::Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    self.u64(u)
                } else if let Some(i) = n.as_i64() {
                    self.i64(i)
                } else {
                    self.f64(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            serde_json::Value::String(s) => self.string(s.as_bytes()),
            serde_json::Value::Array(items) => {
                self.byte(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.byte(b',');
                    }
                    self.json(item);
                }
                self.byte(b']')
            }
            serde_json::Value::Object(members) => {
                self.byte(b'{');
                for (i, (k, item)) in members.iter().enumerate() {
                    if i > 0 {
                        self.byte(b',');
                    }
                    self.key(k);
                    self.json(item);
                }
                self.byte(b'}')
            }
        }
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        let mut w = Writer::default();
        w.string(b"a\"b\\c\n\x01/\xff");
        assert_eq!(w.buf, b"\"a\\\"b\\\\c\\n\\u0001/\xff\"");
    }
}
