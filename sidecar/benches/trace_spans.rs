//! What tracing costs one request, on its own: the spans of a traced inference as the sidecar
//! makes them (root with its events, the model's span, `compute`, an `upstream` client span and
//! its `traceparent`), handed to the OpenTelemetry batch processor; the same request in Triton's
//! trace-file mode (its 14 timestamps and header as JSON, written to a file in a temporary
//! directory every 1000 traces); and what an untraced request pays when tracing is configured
//! but at level OFF. The exporter sends to a port where nothing listens (its failures are its
//! own thread's), and a full queue drops spans, as in production.
//!
//! `cargo bench -p infergate-sidecar --bench trace_spans` (add `-- ROUNDS` for other than 10).
//! Prints the fastest round's nanoseconds per request.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Instant;

use infergate_config::TraceConfig;
use infergate_sidecar::protocol::Protocol;
use infergate_sidecar::trace::{Kind, Tracing};

const REQUESTS: u32 = 20_000;

fn tracing(level: &str) -> Tracing {
    configured(&[
        "mode=opentelemetry",
        &format!("level={level}"),
        "rate=1",
        "opentelemetry,url=127.0.0.1:9/v1/traces",
    ])
}

fn configured(settings: &[&str]) -> Tracing {
    let settings: Vec<String> = settings.iter().map(|s| s.to_string()).collect();
    Tracing::new(TraceConfig::parse(&settings).unwrap()).unwrap()
}

/// One request's spans, as the HTTP front, the pipeline and the upstream backend make them.
fn traced_request(tracing: &Tracing) {
    let received = Instant::now();
    let context = || {
        HashMap::from([(
            "traceparent".to_string(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_string(),
        )])
    };
    let Some(mut root) = tracing.start("simple", || true, context, Protocol::Http, received) else {
        return;
    };
    root.event("HTTP_RECV_END", Instant::now());
    let scope = root.scope().clone();
    let mut model = scope.start("simple", Kind::Server, received);
    model.model("simple", 1, "");
    model.event("REQUEST_START", received);
    model.event("QUEUE_START", Instant::now());
    let mut compute = model
        .scope()
        .start("compute", Kind::Internal, Instant::now());
    compute.event("COMPUTE_START", Instant::now());
    compute.event("COMPUTE_INPUT_END", Instant::now());
    let upstream = compute
        .scope()
        .start("upstream", Kind::Client, Instant::now());
    black_box(upstream.context_headers());
    upstream.end(Instant::now());
    compute.event("COMPUTE_OUTPUT_START", Instant::now());
    compute.event("COMPUTE_END", Instant::now());
    compute.end(Instant::now());
    model.event("REQUEST_END", Instant::now());
    model.end(Instant::now());
    root.event("INFER_RESPONSE_COMPLETE", Instant::now());
    infergate_sidecar::trace::end_root(root, Protocol::Http, None);
}

fn fastest(rounds: u32, mut each: impl FnMut()) -> f64 {
    (0..rounds)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..REQUESTS {
                each();
            }
            started.elapsed().as_nanos() as f64 / f64::from(REQUESTS)
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let rounds = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = runtime.enter();
    let off = tracing("OFF");
    let on = tracing("TIMESTAMPS");
    let untraced = fastest(rounds, || {
        black_box(off.start(
            "simple",
            || true,
            HashMap::new,
            Protocol::Http,
            Instant::now(),
        ));
    });
    let traced = fastest(rounds, || traced_request(&on));
    let dir = tempfile::tempdir().unwrap();
    let file = format!("triton,file={}", dir.path().join("trace.json").display());
    let to_file = configured(&[
        &file,
        "triton,log-frequency=1000",
        "level=TIMESTAMPS",
        "rate=1",
    ]);
    let written = fastest(rounds, || traced_request(&to_file));
    println!("untraced request, tracing configured at level OFF: {untraced:.1} ns");
    println!("traced request (4 spans, 13 events, a traceparent): {traced:.0} ns");
    println!("traced request into Triton's trace file (15 objects): {written:.0} ns");
    on.shutdown();
    to_file.shutdown();
}
