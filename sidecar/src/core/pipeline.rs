//! One inference, start to finish: find the model, validate, execute, select the requested
//! outputs, and count it all in the model's statistics.

use std::time::Instant;

use super::classify::classify;
use super::model::Execution;
use super::params::Parameters;
use super::repository::Repository;
use super::request::{InferRequest, InferResponse};
use super::sequence::SequenceParams;
use super::stats::Timings;
use super::validate::validate;
use crate::error::{Error, Result, request_prefix};

pub async fn infer(repository: &Repository, request: InferRequest) -> Result<InferResponse> {
    let received = Instant::now();
    let model = repository.get(&request.model_name, &request.model_version)?;
    let _pending = model.stats.enter();
    let queued = Instant::now();
    let id = request.id.clone();
    let parameters = request.parameters.clone();
    let sequence = match &model.sequencer {
        Some(_) => match SequenceParams::from_parameters(&request.parameters) {
            Ok(p) => Some(p),
            Err(e) => {
                model.stats.record_failure(received.elapsed(), true);
                return Err(e);
            }
        },
        None => None,
    };

    // Inputs in clients' regions are read here, unless the backend can pass the regions on.
    let mut request = request;
    if !model.backend.takes_client_regions() {
        for input in &mut request.inputs {
            if let Err(e) = input.read_region() {
                model.stats.record_failure(received.elapsed(), true);
                return Err(e);
            }
        }
    }
    let validated = match validate(&model, request) {
        Ok(v) => v,
        Err(e) => {
            model.stats.record_failure(received.elapsed(), true);
            return Err(e);
        }
    };
    // Sequence models: wait for this sequence's turn and a slot; add the control tensors.
    let mut validated = validated;
    let _admission = match (&model.sequencer, &sequence) {
        (Some(scheduler), Some(params)) => {
            let prefix = request_prefix(&id);
            match scheduler
                .admit(
                    params,
                    validated.batch_size,
                    model.max_batch_size > 0,
                    &prefix,
                )
                .await
            {
                Ok(admission) => {
                    validated.inputs.extend(admission.controls.iter().cloned());
                    Some(admission)
                }
                Err(e) => {
                    model.stats.record_failure(received.elapsed(), true);
                    return Err(e);
                }
            }
        }
        _ => None,
    };
    let compute_start = Instant::now();
    let output_names: Vec<String> = validated.outputs.iter().map(|o| o.name.clone()).collect();
    let output_shm: Vec<_> = validated.outputs.iter().map(|o| o.shm.clone()).collect();
    let execution = Execution {
        model: &model,
        inputs: &validated.inputs,
        input_regions: &validated.input_regions,
        outputs: &output_names,
        batch_size: validated.batch_size,
        parameters: &parameters,
        output_shm: &output_shm,
    };
    let produced = match model.backend.execute(execution).await {
        Ok(p) => p,
        Err(e) => {
            model.stats.record_failure(received.elapsed(), false);
            return Err(e);
        }
    };
    let infer_end = Instant::now();

    // Return exactly the requested outputs, in the requested order.
    let mut produced: Vec<Option<_>> = produced.into_iter().map(Some).collect();
    let mut outputs = Vec::with_capacity(validated.outputs.len());
    for wanted in &validated.outputs {
        let found = produced
            .iter_mut()
            .find(|t| t.as_ref().is_some_and(|t| t.name == wanted.name))
            .and_then(Option::take);
        match found {
            Some(tensor) if wanted.classification > 0 => {
                let labels = model.labels.get(&wanted.name).map(Vec::as_slice);
                match classify(
                    &tensor,
                    wanted.classification,
                    model.max_batch_size > 0,
                    labels,
                ) {
                    Ok(classes) => outputs.push(classes),
                    Err(e) => {
                        model.stats.record_failure(received.elapsed(), true);
                        return Err(e);
                    }
                }
            }
            Some(tensor) => {
                // An output without bytes was written into the region by the backend (or is empty).
                if let Some(target) = &wanted.shm
                    && !tensor.data.is_empty()
                    && let Err(e) = target.write(&tensor.name, &tensor.data)
                {
                    model.stats.record_failure(received.elapsed(), false);
                    return Err(e);
                }
                outputs.push(tensor);
            }
            None => {
                model.stats.record_failure(received.elapsed(), false);
                return Err(Error::internal(format!(
                    "model '{}' did not produce output '{}'",
                    model.name, wanted.name
                )));
            }
        }
    }
    let done = Instant::now();
    model.stats.record_success(
        validated.batch_size,
        Timings {
            total: done - received,
            queue: queued - received,
            compute_input: compute_start - queued,
            compute_infer: infer_end - compute_start,
            compute_output: done - infer_end,
        },
    );
    Ok(InferResponse {
        model_name: model.name.clone(),
        model_version: model.version_string(),
        id,
        parameters: Parameters::default(),
        outputs,
        requested: validated.outputs,
    })
}
