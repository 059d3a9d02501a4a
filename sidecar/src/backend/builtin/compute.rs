//! The arithmetic of the built-in models.

use std::collections::HashMap;

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt};
use infergate_proto::DataType;
use parking_lot::Mutex;

use crate::core::model::{Backend, Execution};
use crate::error::{Error, Result};
use crate::tensor::{Tensor, bytes_elements, le_elements};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Implementation {
    /// OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 − INPUT1 over INT32 (wrapping).
    AddSubInt32,
    /// The same over BYTES elements holding decimal integers.
    AddSubString,
    /// OUTPUT0 = INPUT0, bytes shared, not copied.
    Identity,
    /// OUTPUT = (INPUT + START) × READY.
    SequenceSimple,
    /// OUTPUT = (INPUT + START + END × CORRID) × READY.
    SequenceDyna,
    /// OUTPUT = running sum of INPUT over the sequence (START resets, END forgets).
    Accumulate,
    /// The running sum; the END response also adds the integer value of the string CORRID.
    AccumulateStringId,
}

pub struct Builtin {
    implementation: Implementation,
    /// Running sums of accumulating sequence models, by CORRID bytes.
    sums: Mutex<HashMap<Vec<u8>, i64>>,
}

impl Builtin {
    pub fn new(implementation: Implementation) -> Self {
        Builtin {
            implementation,
            sums: Mutex::new(HashMap::new()),
        }
    }

    fn sequence(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let value = |name: &str| -> Result<i64> {
            let t = input(inputs, name)?;
            let bytes: [u8; 4] =
                t.data
                    .get(..4)
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(|| {
                        Error::invalid_arg(format!("input '{name}' must hold one INT32 element"))
                    })?;
            Ok(i64::from(i32::from_le_bytes(bytes)))
        };
        let x = value("INPUT")?;
        let start = value("START")?;
        let ready = value("READY")?;
        let output = match self.implementation {
            Implementation::SequenceSimple => (x + start) * ready,
            Implementation::SequenceDyna => {
                let corrid = input(inputs, "CORRID")?;
                let id = corrid
                    .data
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_le_bytes);
                (x + start + value("END")?.wrapping_mul(id as i64)) * ready
            }
            _ => {
                let end = value("END")? != 0;
                let corrid = input(inputs, "CORRID")?;
                let key = corrid.data.to_vec();
                let mut sums = self.sums.lock();
                let sum = sums.entry(key.clone()).or_insert(0);
                if start != 0 {
                    *sum = 0;
                }
                *sum += x;
                let mut out = *sum;
                if end {
                    sums.remove(&key);
                    if self.implementation == Implementation::AccumulateStringId {
                        let text = bytes_elements::iter(&corrid.data)
                            .next()
                            .and_then(|r| r.ok())
                            .unwrap_or_default();
                        out += std::str::from_utf8(text)
                            .ok()
                            .and_then(|s| s.parse::<i64>().ok())
                            .unwrap_or(0);
                    }
                }
                out
            }
        };
        let shape = input(inputs, "INPUT")?.shape.clone();
        Ok(vec![Tensor::new(
            "OUTPUT",
            DataType::Int32,
            shape,
            Bytes::copy_from_slice(&(output as i32).to_le_bytes()),
        )])
    }
}

impl Backend for Builtin {
    fn execute<'a>(&'a self, execution: Execution<'a>) -> BoxFuture<'a, Result<Vec<Tensor>>> {
        let result = match self.implementation {
            Implementation::AddSubInt32 => add_sub_int32(execution.inputs),
            Implementation::AddSubString => {
                add_sub_string(execution.model.name.as_str(), execution.inputs)
            }
            Implementation::Identity => identity(execution.inputs),
            Implementation::SequenceSimple
            | Implementation::SequenceDyna
            | Implementation::Accumulate
            | Implementation::AccumulateStringId => self.sequence(execution.inputs),
        };
        futures::future::ready(result).boxed()
    }
}

fn input<'a>(inputs: &'a [Tensor], name: &str) -> Result<&'a Tensor> {
    inputs
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| Error::internal(format!("input '{name}' is missing")))
}

fn identity(inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let t = input(inputs, "INPUT0")?;
    Ok(vec![Tensor::new(
        "OUTPUT0",
        t.datatype,
        t.shape.clone(),
        t.data.clone(),
    )])
}

fn add_sub_int32(inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let a = input(inputs, "INPUT0")?;
    let b = input(inputs, "INPUT1")?;
    let mut sum = Vec::with_capacity(a.data.len());
    let mut diff = Vec::with_capacity(a.data.len());
    for (x, y) in le_elements::<4>(&a.data).zip(le_elements::<4>(&b.data)) {
        let (x, y) = (i32::from_le_bytes(x), i32::from_le_bytes(y));
        sum.extend_from_slice(&x.wrapping_add(y).to_le_bytes());
        diff.extend_from_slice(&x.wrapping_sub(y).to_le_bytes());
    }
    Ok(vec![
        Tensor::new(
            "OUTPUT0",
            DataType::Int32,
            a.shape.clone(),
            Bytes::from(sum),
        ),
        Tensor::new(
            "OUTPUT1",
            DataType::Int32,
            a.shape.clone(),
            Bytes::from(diff),
        ),
    ])
}

fn add_sub_string(model: &str, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let a = input(inputs, "INPUT0")?;
    let b = input(inputs, "INPUT1")?;
    let parse = |element: std::result::Result<&[u8], bytes_elements::BytesError>,
                 name: &str|
     -> Result<i32> {
        let element = element
            .map_err(|_| Error::invalid_arg(format!("malformed BYTES data in input '{name}'")))?;
        std::str::from_utf8(element)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .ok_or_else(|| {
                Error::invalid_arg(format!(
                    "model '{model}' expects decimal integers in input '{name}', got '{}'",
                    String::from_utf8_lossy(element)
                ))
            })
    };
    let mut sum = Vec::new();
    let mut diff = Vec::new();
    for (x, y) in bytes_elements::iter(&a.data).zip(bytes_elements::iter(&b.data)) {
        let (x, y) = (parse(x, "INPUT0")?, parse(y, "INPUT1")?);
        bytes_elements::push(&mut sum, x.wrapping_add(y).to_string().as_bytes());
        bytes_elements::push(&mut diff, x.wrapping_sub(y).to_string().as_bytes());
    }
    Ok(vec![
        Tensor::new(
            "OUTPUT0",
            DataType::Bytes,
            a.shape.clone(),
            Bytes::from(sum),
        ),
        Tensor::new(
            "OUTPUT1",
            DataType::Bytes,
            a.shape.clone(),
            Bytes::from(diff),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int32(name: &str, v: &[i32]) -> Tensor {
        let data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        Tensor::new(
            name,
            DataType::Int32,
            vec![1, v.len() as i64],
            Bytes::from(data),
        )
    }

    #[test]
    fn add_sub() {
        let out = add_sub_int32(&[int32("INPUT0", &[1, 2]), int32("INPUT1", &[10, 20])]).unwrap();
        assert_eq!(out[0], int32("OUTPUT0", &[11, 22]));
        assert_eq!(out[1], int32("OUTPUT1", &[-9, -18]));
    }

    #[test]
    fn add_sub_strings() {
        let enc = |v: &[&str]| {
            let mut b = Vec::new();
            v.iter()
                .for_each(|s| bytes_elements::push(&mut b, s.as_bytes()));
            Bytes::from(b)
        };
        let a = Tensor::new("INPUT0", DataType::Bytes, vec![1, 2], enc(&["1", "5"]));
        let b = Tensor::new("INPUT1", DataType::Bytes, vec![1, 2], enc(&["2", "3"]));
        let out = add_sub_string("simple_string", &[a.clone(), b]).unwrap();
        assert_eq!(out[0].data, enc(&["3", "8"]));
        assert_eq!(out[1].data, enc(&["-1", "2"]));
        let bad = Tensor::new("INPUT1", DataType::Bytes, vec![1, 2], enc(&["x", "3"]));
        assert!(add_sub_string("simple_string", &[a, bad]).is_err());
    }
}
