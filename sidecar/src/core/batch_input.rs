//! How a model's requests are joined beyond the plain case, as its configuration asks: Triton's
//! batch inputs (`batch_input`), tensors the batcher adds to every execution to tell the model
//! where each request's part of a ragged input lies, and with them ragged inputs
//! (`allow_ragged_batch`), which then join even when their shapes differ, into one flat tensor.
//!
//! Triton's backends (ONNX Runtime, TensorFlow, PyTorch, TensorRT) take a ragged input as the
//! requests' elements one after another in a one-dimensional tensor; the sidecar sends its model
//! server the same. The batch inputs are computed as Triton's backends compute them
//! (`model_config.proto`, `BatchInput.Kind`): one value per request for the element counts, one
//! row per batch item for the item shapes.

use bytes::{BufMut, Bytes, BytesMut};
use infergate_proto::DataType;
use infergate_proto::inference::ModelConfig;
use infergate_proto::inference::batch_input::Kind;

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// A model's ragged inputs and batch inputs; empty for most models.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JoinRules {
    ragged: Vec<String>,
    batch_inputs: Vec<BatchInputRule>,
}

#[derive(Clone, Debug, PartialEq)]
struct BatchInputRule {
    kind: Kind,
    targets: Vec<String>,
    datatype: DataType,
    source: String,
}

impl JoinRules {
    /// The rules of `config`; a batch input Triton would refuse is refused at load.
    ///
    /// Ragged inputs join flat only for a model that declares batch inputs: a model server
    /// without them could not tell the requests' elements apart, and one that batches by the
    /// first dimension (a Triton behind the sidecar) would take the flat length for a batch
    /// size. For the others, requests join only where their ragged inputs agree in shape.
    pub fn for_model(config: &ModelConfig) -> Result<JoinRules> {
        let ragged = if config.batch_input.is_empty() {
            Vec::new()
        } else {
            config
                .input
                .iter()
                .filter(|i| i.allow_ragged_batch)
                .map(|i| i.name.clone())
                .collect()
        };
        let refuse = |why: String| {
            Error::invalid_arg(format!(
                "batch input of model '{}' is not valid: {why}",
                config.name
            ))
        };
        let mut batch_inputs = Vec::with_capacity(config.batch_input.len());
        for input in &config.batch_input {
            if config.max_batch_size <= 0 {
                return Err(refuse(
                    "batch inputs need a model that batches (max_batch_size > 0)".into(),
                ));
            }
            let kind = Kind::try_from(input.kind)
                .map_err(|_| refuse(format!("unknown kind {}", input.kind)))?;
            let datatype = DataType::from_config(input.data_type)
                .filter(|d| matches!(d, DataType::Int32 | DataType::Fp32))
                .ok_or_else(|| refuse("its data_type must be TYPE_INT32 or TYPE_FP32".into()))?;
            let [source] = input.source_input.as_slice() else {
                return Err(refuse(format!(
                    "it names {} source inputs, expected 1",
                    input.source_input.len()
                )));
            };
            if !config.input.iter().any(|i| &i.name == source) {
                return Err(refuse(format!(
                    "its source input '{source}' is not an input of the model"
                )));
            }
            if input.target_name.is_empty() {
                return Err(refuse("it names no target".into()));
            }
            if let Some(clash) = input
                .target_name
                .iter()
                .find(|t| config.input.iter().any(|i| &&i.name == t))
            {
                return Err(refuse(format!(
                    "its target '{clash}' is also an input of the model"
                )));
            }
            batch_inputs.push(BatchInputRule {
                kind,
                targets: input.target_name.clone(),
                datatype,
                source: source.clone(),
            });
        }
        Ok(JoinRules {
            ragged,
            batch_inputs,
        })
    }

    /// Whether `input` joins whatever its shape (its requests' elements one after another).
    pub fn is_ragged(&self, input: &str) -> bool {
        self.ragged.iter().any(|r| r == input)
    }

    /// Whether even a request alone must be joined: its ragged inputs flattened, its batch inputs
    /// added, so that the model sees the same layout however many requests a batch holds.
    pub fn always_join(&self) -> bool {
        !self.batch_inputs.is_empty()
    }

    /// The batch inputs of the requests `parts` (each request's inputs, full shapes), in the
    /// order of the configuration, one tensor per target.
    pub fn batch_inputs(&self, parts: &[&[Tensor]]) -> Result<Vec<Tensor>> {
        let mut tensors = Vec::new();
        for rule in &self.batch_inputs {
            let shapes = parts
                .iter()
                .map(|inputs| {
                    inputs
                        .iter()
                        .find(|t| t.name == rule.source)
                        .map(|t| t.shape.as_slice())
                        .ok_or_else(|| {
                            Error::invalid_arg(format!(
                                "batch input '{}' needs input '{}', which the request lacks",
                                rule.targets.join(", "),
                                rule.source
                            ))
                        })
                })
                .collect::<Result<Vec<_>>>()?;
            let (values, shape) = rule.values(&shapes);
            let data = encode(&values, rule.datatype);
            for target in &rule.targets {
                tensors.push(Tensor::new(
                    target.clone(),
                    rule.datatype,
                    shape.clone(),
                    data.clone(),
                ));
            }
        }
        Ok(tensors)
    }
}

impl BatchInputRule {
    /// The values and shape of this batch input for requests whose source inputs have `shapes`
    /// (batch dimension first).
    fn values(&self, shapes: &[&[i64]]) -> (Vec<i64>, Vec<i64>) {
        let counts: Vec<i64> = shapes.iter().map(|s| s.iter().product()).collect();
        let accumulated = || {
            counts.iter().scan(0i64, |sum, &n| {
                *sum += n;
                Some(*sum)
            })
        };
        match self.kind {
            Kind::BatchElementCount => {
                let len = counts.len() as i64;
                (counts, vec![len])
            }
            Kind::BatchAccumulatedElementCount => {
                let values: Vec<i64> = accumulated().collect();
                let len = values.len() as i64;
                (values, vec![len])
            }
            Kind::BatchAccumulatedElementCountWithZero => {
                let values: Vec<i64> = std::iter::once(0).chain(accumulated()).collect();
                let len = values.len() as i64;
                (values, vec![len])
            }
            // Only its shape speaks; its elements are zeros.
            Kind::BatchMaxElementCountAsShape => {
                let max = counts.iter().copied().max().unwrap_or(0);
                (vec![0; usize::try_from(max).unwrap_or(0)], vec![max])
            }
            Kind::BatchItemShape | Kind::BatchItemShapeFlatten => {
                // One row per batch item: each of a request's rows repeats its item shape.
                let rank = shapes.first().map_or(0, |s| s.len().saturating_sub(1));
                let mut values = Vec::new();
                let mut items = 0i64;
                for shape in shapes {
                    let (rows, item) = shape.split_first().unwrap_or((&1, &[]));
                    for _ in 0..*rows {
                        values.extend_from_slice(item);
                        items += 1;
                    }
                }
                let shape = if self.kind == Kind::BatchItemShape {
                    vec![items, rank as i64]
                } else {
                    vec![values.len() as i64]
                };
                (values, shape)
            }
        }
    }
}

/// `values` as little-endian elements of `datatype` (INT32 or FP32, checked at load).
fn encode(values: &[i64], datatype: DataType) -> Bytes {
    let mut data = BytesMut::with_capacity(values.len() * 4);
    for &v in values {
        match datatype {
            DataType::Fp32 => data.put_f32_le(v as f32),
            _ => data.put_i32_le(i32::try_from(v).unwrap_or(i32::MAX)),
        }
    }
    data.freeze()
}
