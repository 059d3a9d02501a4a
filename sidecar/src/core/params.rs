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

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &(String, ParamValue)> {
        self.0.iter()
    }
}
