//! The arithmetic of the built-in models.

use std::collections::HashMap;

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt};
use infergate_proto::DataType;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::core::model::{Backend, Execution, Produced};
use crate::error::{Error, Result};
use crate::tensor::{Tensor, bytes_elements, le_elements};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Implementation {
    /// OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 − INPUT1 over INT32 (wrapping).
    AddSubInt32,
    /// The same over INT8 (wrapping).
    AddSubInt8,
    /// The same over BYTES elements holding decimal integers.
    AddSubString,
    /// OUTPUT0 = INPUT0, bytes shared, not copied.
    Identity,
    /// The identity, answered `execute_delay_ms` (a configuration parameter) after the request.
    DelayedIdentity,
    /// OUTPUT = (INPUT + START) × READY.
    SequenceSimple,
    /// OUTPUT = (INPUT + START + END × CORRID) × READY.
    SequenceDyna,
    /// OUTPUT = running sum of INPUT over the sequence (START resets, END forgets).
    Accumulate,
    /// The running sum; the END response also adds the integer value of the string CORRID.
    AccumulateStringId,
    /// Decoupled: one response per IN element (OUT = IN[i], IDX = i), each DELAY[i] ms after
    /// the one before; the request completes WAIT ms after the last.
    Repeat,
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
            Implementation::AddSubInt8 => add_sub_int8(execution.inputs),
            Implementation::AddSubString => {
                add_sub_string(execution.model.name.as_str(), execution.inputs)
            }
            Implementation::Identity => identity(execution.inputs),
            Implementation::DelayedIdentity => {
                let delay = execute_delay_ms(execution.model);
                return async move {
                    sleep_ms(delay).await;
                    identity(execution.inputs)
                }
                .boxed();
            }
            Implementation::SequenceSimple
            | Implementation::SequenceDyna
            | Implementation::Accumulate
            | Implementation::AccumulateStringId => self.sequence(execution.inputs),
            // Requests reach `execute` only once a load made the model non-decoupled.
            Implementation::Repeat => return repeat_as_one(execution.inputs).boxed(),
        };
        futures::future::ready(result).boxed()
    }

    fn execute_decoupled<'a>(
        &'a self,
        execution: Execution<'a>,
        responses: mpsc::Sender<Produced>,
    ) -> BoxFuture<'a, Result<()>> {
        async move {
            if self.implementation != Implementation::Repeat {
                return Err(Error::unsupported(format!(
                    "model '{}' is not decoupled",
                    execution.model.name
                )));
            }
            repeat(execution.inputs, responses).await
        }
        .boxed()
    }
}

/// `repeat_int32`, as Triton's repeat backend answers it; it stops when no one listens any more.
async fn repeat(inputs: &[Tensor], responses: mpsc::Sender<Produced>) -> Result<()> {
    let values = input(inputs, "IN")?;
    let delays = input(inputs, "DELAY")?;
    let wait = input(inputs, "WAIT")?;
    if values.shape != delays.shape {
        return Err(Error::invalid_arg(format!(
            "expected IN and DELAY shape to match, got {} and {}",
            shape_text(&values.shape),
            shape_text(&delays.shape)
        )));
    }
    let wait_ms = le_elements::<4>(&wait.data)
        .next()
        .map_or(0, u32::from_le_bytes);
    let pairs = le_elements::<4>(&values.data).zip(le_elements::<4>(&delays.data));
    for (index, (value, delay)) in pairs.enumerate() {
        if !sleep_while_listened(u32::from_le_bytes(delay), &responses).await {
            return Ok(());
        }
        let tensors = vec![
            Tensor::new(
                "OUT",
                DataType::Int32,
                vec![1],
                Bytes::copy_from_slice(&value),
            ),
            Tensor::new(
                "IDX",
                DataType::Uint32,
                vec![1],
                Bytes::copy_from_slice(&(index as u32).to_le_bytes()),
            ),
        ];
        let response = Produced {
            tensors,
            last: false,
        };
        if responses.send(response).await.is_err() {
            return Ok(()); // no one is listening any more
        }
    }
    sleep_while_listened(wait_ms, &responses).await;
    Ok(())
}

/// `repeat_int32` loaded with `decoupled: false`. Triton's repeat backend sends its responses all
/// the same, and its front ends answer a non-decoupled request once the request is complete
/// (after WAIT) with the one response it got, or, when it got none or several, INTERNAL
/// `expected a single response, got N` (HTTP and gRPC `ModelInfer` alike).
async fn repeat_as_one(inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (tx, mut rx) = mpsc::channel(1);
    let collect = async {
        let first = rx.recv().await;
        let mut count = usize::from(first.is_some());
        while rx.recv().await.is_some() {
            count += 1;
        }
        (first, count)
    };
    let (run, (first, count)) = tokio::join!(repeat(inputs, tx), collect);
    run?;
    match first {
        Some(produced) if count == 1 => Ok(produced.tensors),
        _ => Err(Error::internal(format!(
            "expected a single response, got {count}"
        ))),
    }
}

/// Waits `ms` unless the receiver goes away first; whether it is still there.
async fn sleep_while_listened(ms: u32, responses: &mpsc::Sender<Produced>) -> bool {
    tokio::select! {
        () = sleep_ms(ms) => !responses.is_closed(),
        () = responses.closed() => false,
    }
}

/// The `execute_delay_ms` parameter of a model's configuration; 0 when absent or not a number.
fn execute_delay_ms(model: &crate::core::model::Model) -> u32 {
    model
        .config
        .parameters
        .get("execute_delay_ms")
        .and_then(|p| p.string_value.trim().parse().ok())
        .unwrap_or(0)
}

async fn sleep_ms(ms: u32) {
    if ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(u64::from(ms))).await;
    }
}

/// A shape as Triton's backends print it: `[2,3]`.
fn shape_text(shape: &[i64]) -> String {
    let dims: Vec<String> = shape.iter().map(i64::to_string).collect();
    format!("[{}]", dims.join(","))
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

fn add_sub_int8(inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let a = input(inputs, "INPUT0")?;
    let b = input(inputs, "INPUT1")?;
    let (sum, diff): (Vec<u8>, Vec<u8>) = a
        .data
        .iter()
        .zip(b.data.iter())
        .map(|(&x, &y)| {
            let (x, y) = (x as i8, y as i8);
            (x.wrapping_add(y) as u8, x.wrapping_sub(y) as u8)
        })
        .unzip();
    Ok(vec![
        Tensor::new("OUTPUT0", DataType::Int8, a.shape.clone(), Bytes::from(sum)),
        Tensor::new(
            "OUTPUT1",
            DataType::Int8,
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
mod tests;
