//! A formed batch run on its model, the model's side of the dynamic batcher
//! (`core/batcher.rs`, which decides who joins a batch and when it goes): each request's model
//! spans, the one execution (the request alone as it came, or several joined along the batch
//! dimension by `core/batch.rs`), the execution's statistics, and each request's share of the
//! answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;

use super::batch::{join_inputs, split_outputs};
use super::batch_input::JoinRules;
use super::batcher::{Failed, Job, Ran, Reply, Runner};
use super::model::{Execution, Model};
use super::traced::{self, ModelSpans};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Runs batches on one model.
pub(super) struct ModelRunner(pub Arc<Model>);

impl Runner for ModelRunner {
    fn run(self: Arc<Self>, jobs: Vec<Job>) -> BoxFuture<'static, Vec<Reply>> {
        async move { run(&self.0, jobs).await }.boxed()
    }
}

/// Runs `jobs` as one batch on `model`: one reply per job, in their order.
async fn run(model: &Model, mut jobs: Vec<Job>) -> Vec<Reply> {
    let compute_start = Instant::now();
    let mut replies: Vec<Option<Reply>> = jobs.iter().map(|_| None).collect();
    // A request alone hands its regions on as it came; joined, its inputs are bytes. One whose
    // region cannot be read fails alone.
    // How the model's requests join: only a batcher's model is run here, so it has its rules.
    let plain = JoinRules::default();
    let rules = model.batcher.as_ref().map_or(&plain, |b| b.rules());
    if jobs.len() > 1 || rules.always_join() {
        for (job, reply) in jobs.iter_mut().zip(&mut replies) {
            if let Err(error) = read_regions(job) {
                *reply = Some(Err(Failed::Model {
                    error,
                    infer_end: None,
                    spans: None,
                }));
            }
        }
    }
    let runs: Vec<usize> = (0..jobs.len()).filter(|&i| replies[i].is_none()).collect();
    let mut spans: Vec<Option<ModelSpans>> = runs
        .iter()
        .map(|&i| {
            let job = &jobs[i];
            let traced = job.traced.as_ref()?;
            let request = traced::Request {
                id: &traced.id,
                inputs: &job.inputs,
                input_regions: &job.input_regions,
            };
            Some(ModelSpans::start(
                &traced.scope,
                &model.name,
                model.version,
                request,
                traced.received,
                traced.queued,
                compute_start,
            ))
        })
        .collect();
    let trace = spans.iter().flatten().next().map(ModelSpans::compute);
    let batch: Vec<&Job> = runs.iter().map(|&i| &jobs[i]).collect();
    let outcome = execute(model, rules, &batch, trace, compute_start).await;
    match outcome {
        Ok(Executed { outputs, infer_end }) => {
            for ((&i, outputs), spans) in runs.iter().zip(outputs).zip(&mut spans) {
                replies[i] = Some(Ok(Ran {
                    outputs,
                    compute_start,
                    infer_end,
                    spans: spans.take(),
                }));
            }
        }
        Err((error, infer_end)) => {
            for (&i, spans) in runs.iter().zip(&mut spans) {
                replies[i] = Some(Err(Failed::Model {
                    error: error.clone(),
                    infer_end,
                    spans: spans.take().map(Box::new),
                }));
            }
        }
    }
    replies
        .into_iter()
        .map(|reply| {
            reply.unwrap_or_else(|| {
                Err(Failed::Model {
                    error: Error::internal("a batched request got no share of the answer"),
                    infer_end: None,
                    spans: None,
                })
            })
        })
        .collect()
}

/// Reads the inputs a job left in its client's regions (a backend that takes client regions
/// gets them unread) into bytes, to be joined with other jobs'.
fn read_regions(job: &mut Job) -> Result<()> {
    for (input, region) in job.inputs.iter_mut().zip(job.input_regions.iter_mut()) {
        if let Some(target) = region {
            input.data = target.read()?;
            *region = None;
        }
    }
    Ok(())
}

/// A batch's outputs per request, and when the model had produced them.
struct Executed {
    outputs: Vec<Vec<Tensor>>,
    infer_end: Instant,
}

/// Runs `jobs` as one request: the one job as it came, or several joined. Records the
/// execution in the model's statistics (the requests record themselves).
async fn execute(
    model: &Model,
    rules: &JoinRules,
    jobs: &[&Job],
    trace: Option<&crate::trace::Scope>,
    compute_start: Instant,
) -> std::result::Result<Executed, (Error, Option<Instant>)> {
    let rows: u64 = jobs.iter().map(|j| j.batch_size).sum();
    let Some(first) = jobs.first() else {
        return Err((Error::internal("an empty batch was formed"), None));
    };
    // One job runs as it came; several are joined, and asked for every output any of them
    // asked for, each with the one classification they agree on.
    let (inputs, outputs, classification);
    let execution = if let ([job], false) = (jobs, rules.always_join()) {
        Execution {
            model,
            inputs: &job.inputs,
            input_regions: &job.input_regions,
            outputs: &job.outputs,
            batch_size: job.batch_size,
            parameters: &job.parameters,
            output_shm: &job.output_shm,
            classification: &job.classification,
            trace,
        }
    } else {
        let parts: Vec<&[Tensor]> = jobs.iter().map(|j| j.inputs.as_slice()).collect();
        inputs = join_inputs(&parts, rules).map_err(|e| (e, None))?;
        (outputs, classification) = union_of_outputs(jobs);
        Execution {
            model,
            inputs: &inputs,
            input_regions: &[],
            outputs: &outputs,
            batch_size: rows,
            parameters: &first.parameters,
            output_shm: &[],
            classification: &classification,
            trace,
        }
    };
    let input_end = Instant::now();
    let produced = model
        .backend
        .execute(execution)
        .await
        .map_err(|e| (e, None))?;
    let infer_end = Instant::now();
    if jobs.len() == 1 {
        model.stats.record_execution(
            rows,
            input_end - compute_start,
            infer_end - input_end,
            Duration::ZERO,
        );
        return Ok(Executed {
            outputs: vec![produced],
            infer_end,
        });
    }
    let per_job: Vec<u64> = jobs.iter().map(|j| j.batch_size).collect();
    let split = split_outputs(produced, &per_job).map_err(|e| (e, Some(infer_end)))?;
    model.stats.record_execution(
        rows,
        input_end - compute_start,
        infer_end - input_end,
        infer_end.elapsed(),
    );
    Ok(Executed {
        outputs: split,
        infer_end,
    })
}

/// Every output the jobs asked for, in the order first asked, with the classification asked of
/// the model server for each (the jobs of one batch agree on it).
fn union_of_outputs(jobs: &[&Job]) -> (Vec<String>, Vec<u32>) {
    let mut outputs: Vec<String> = Vec::new();
    let mut classification: Vec<u32> = Vec::new();
    for job in jobs {
        for (name, &k) in job.outputs.iter().zip(&job.classification) {
            if !outputs.contains(name) {
                outputs.push(name.clone());
                classification.push(k);
            }
        }
    }
    (outputs, classification)
}
