//! Request, tensor and response parameters (the protocol's `parameters` maps).

/// One parameter value. REST carries JSON bool/number/string; gRPC a oneof of the same kinds.
#[derive(Clone, Debug, PartialEq)]
pub enum ParamValue {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    String(String),
}

/// Parameters in the order they were given.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parameters(pub Vec<(String, ParamValue)>);

impl Parameters {
    pub fn get(&self, key: &str) -> Option<&ParamValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn insert(&mut self, key: impl Into<String>, value: ParamValue) {
        let key = key.into();
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key, value)),
        }
    }

    /// A non-negative integer parameter (`priority`, `timeout`: the front ends have checked
    /// their kinds); 0 when absent or of another kind.
    pub fn unsigned(&self, key: &str) -> u64 {
        match self.get(key) {
            Some(ParamValue::Uint(n)) => *n,
            Some(ParamValue::Int(n)) => u64::try_from(*n).unwrap_or(0),
            _ => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &(String, ParamValue)> {
        self.0.iter()
    }
}
