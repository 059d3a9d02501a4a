//! Requests joined into one along the batch dimension, and the joined request's outputs split
//! back: the data work of the dynamic batcher (`core/batcher.rs`), which decides who joins.
//!
//! Tensors are row-major with the batch dimension first, so joining is concatenating each
//! input's bytes (BYTES elements included: they are serialized one after another) and splitting
//! is cutting each output's bytes at row boundaries: by size for fixed-size datatypes, by walking
//! the elements for BYTES. The pieces of a split share the joined answer's buffer.

#[cfg(test)]
use bytes::Bytes;
use bytes::BytesMut;
use infergate_proto::DataType;

use super::batch_input::JoinRules;
use super::params::Parameters;
use crate::error::{Error, Result};
use crate::tensor::{Tensor, bytes_elements};

/// What requests must agree on to join one batch: every input's name, datatype and non-batch
/// dimensions (a ragged input's name and datatype only); the parameters the model is sent (one request carries one set); and the
/// classifications its model server is asked for (one per output in one request).
#[derive(Clone, Debug, PartialEq)]
pub struct Signature {
    inputs: Vec<(String, DataType, Vec<i64>)>,
    parameters: Parameters,
    classification: Vec<(String, u32)>,
}

impl Signature {
    /// `inputs` with their full shapes (batch dimension first); `classification` aligned with
    /// `outputs`, 0 where the model server is not asked to classify.
    pub fn new(
        inputs: &[Tensor],
        parameters: &Parameters,
        outputs: &[String],
        classification: &[u32],
        rules: &JoinRules,
    ) -> Signature {
        let mut inputs: Vec<_> = inputs
            .iter()
            .map(|t| {
                let rest = if rules.is_ragged(&t.name) {
                    Vec::new()
                } else {
                    t.shape.get(1..).unwrap_or_default().to_vec()
                };
                (t.name.clone(), t.datatype, rest)
            })
            .collect();
        inputs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut classification: Vec<_> = outputs
            .iter()
            .zip(classification)
            .filter(|(_, k)| **k > 0)
            .map(|(name, k)| (name.clone(), *k))
            .collect();
        classification.sort();
        Signature {
            inputs,
            parameters: parameters.clone(),
            classification,
        }
    }
}

/// The inputs of several requests as one: each input's rows one request after another, in the
/// order of `parts`; a ragged input's elements one request after another in one dimension; then
/// the model's batch inputs. Every part has the same inputs (their `Signature`s are equal); a
/// part's inputs may come in another order than the first's.
pub fn join_inputs(parts: &[&[Tensor]], rules: &JoinRules) -> Result<Vec<Tensor>> {
    let Some((first, rest)) = parts.split_first() else {
        return Ok(Vec::new());
    };
    if rest.is_empty() && !rules.always_join() {
        return Ok(first.to_vec());
    }
    let mut joined = first
        .iter()
        .map(|input| {
            let pieces = parts
                .iter()
                .map(|part| {
                    part.iter().find(|t| t.name == input.name).ok_or_else(|| {
                        Error::internal(format!(
                            "a batch was formed of requests that differ in input '{}'",
                            input.name
                        ))
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let mut data = BytesMut::with_capacity(pieces.iter().map(|t| t.data.len()).sum());
            for piece in &pieces {
                data.extend_from_slice(&piece.data);
            }
            let shape = if rules.is_ragged(&input.name) {
                vec![pieces.iter().map(|t| t.shape.iter().product::<i64>()).sum()]
            } else {
                let rows: i64 = pieces
                    .iter()
                    .map(|t| t.shape.first().copied().unwrap_or(1))
                    .sum();
                let mut shape = input.shape.clone();
                match shape.first_mut() {
                    Some(batch) => *batch = rows,
                    None => shape.push(rows),
                }
                shape
            };
            Ok(Tensor::new(
                input.name.clone(),
                input.datatype,
                shape,
                data.freeze(),
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    joined.extend(rules.batch_inputs(parts)?);
    Ok(joined)
}

/// The outputs of a joined request cut back into each request's rows: `rows[i]` rows for the
/// i-th request, in the order they were joined. Every output must have as many rows as the
/// requests together; one that does not fails the whole batch.
pub fn split_outputs(outputs: Vec<Tensor>, rows: &[u64]) -> Result<Vec<Vec<Tensor>>> {
    let total: u64 = rows.iter().sum();
    let mut split: Vec<Vec<Tensor>> = rows
        .iter()
        .map(|_| Vec::with_capacity(outputs.len()))
        .collect();
    for output in outputs {
        let batch = output.shape.first().copied().unwrap_or(-1);
        if u64::try_from(batch).ok() != Some(total) {
            return Err(Error::internal(format!(
                "output '{}' of a batch of {total} has shape {:?}: its first dimension is not the batch",
                output.name, output.shape
            )));
        }
        let cuts = row_offsets(&output, total)?;
        let mut row = 0usize;
        for (piece, &count) in split.iter_mut().zip(rows) {
            let end = row + count as usize;
            let mut shape = output.shape.clone();
            shape[0] = count as i64;
            piece.push(Tensor::new(
                output.name.clone(),
                output.datatype,
                shape,
                output.data.slice(cuts[row]..cuts[end]),
            ));
            row = end;
        }
    }
    Ok(split)
}

/// Where each of `rows` rows of `output` starts in its bytes, and where the last ends.
fn row_offsets(output: &Tensor, rows: u64) -> Result<Vec<usize>> {
    let malformed = || {
        Error::internal(format!(
            "output '{}' has {} bytes, which do not hold its shape {:?}",
            output.name,
            output.data.len(),
            output.shape
        ))
    };
    let rows = usize::try_from(rows).map_err(|_| malformed())?;
    let per_row = output
        .shape
        .get(1..)
        .unwrap_or_default()
        .iter()
        .try_fold(1usize, |n, &d| {
            usize::try_from(d).ok().and_then(|d| n.checked_mul(d))
        })
        .ok_or_else(malformed)?;
    match output.datatype.element_size() {
        Some(element) => {
            let row_bytes = per_row.checked_mul(element).ok_or_else(malformed)?;
            if row_bytes.checked_mul(rows) != Some(output.data.len()) {
                return Err(malformed());
            }
            Ok((0..=rows).map(|r| r * row_bytes).collect())
        }
        None => {
            // BYTES: walk the serialized elements, `per_row` to a row.
            let mut offsets = Vec::with_capacity(rows + 1);
            offsets.push(0);
            let mut at = 0usize;
            let mut elements = bytes_elements::iter(&output.data);
            for _ in 0..rows {
                for _ in 0..per_row {
                    let element = elements
                        .next()
                        .ok_or_else(malformed)?
                        .map_err(|_| malformed())?;
                    at += 4 + element.len();
                }
                offsets.push(at);
            }
            if at != output.data.len() {
                return Err(malformed());
            }
            Ok(offsets)
        }
    }
}

/// `data` as a tensor's bytes, for tests.
#[cfg(test)]
fn bytes(data: &[u8]) -> Bytes {
    Bytes::copy_from_slice(data)
}

#[cfg(test)]
mod tests;
