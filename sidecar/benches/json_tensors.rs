//! The JSON tensor path on its own, without a socket or a client: parse a request body whose
//! `data` is 1,048,576 FP32 values, decode it into tensor bytes, and write those bytes back as a
//! JSON `data` array — the steps a JSON round trip through the sidecar spends its CPU on.
//! (When the parser decodes the array itself, as it does for these bodies, "decode" is only
//! the copy the bench makes to own the bytes.)
//! Bodies as the benchmark harness (`bench/harness.py`) posts them: "halves" (0.0, 0.5, …,
//! 499.5) and "random" (uniform in [-10, 10) with 7 significant digits).
//!
//! `cargo bench -p infergate-sidecar --bench json_tensors` (add `-- ROUNDS` for other than 20,
//! `-- halves` or `-- random` for one body only).
//! Prints the fastest round's milliseconds per step.

// A benchmark on bodies it builds itself: one that fails to parse is a bug to stop at.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use infergate_proto::DataType;
use infergate_sidecar::json::{self, Value, Writer};

const ELEMENTS: usize = 1_048_576;
const MAX_DEPTH: u32 = 100;

fn body(values: impl Iterator<Item = String>) -> Vec<u8> {
    let data: Vec<String> = values.collect();
    format!(
        r#"{{"inputs":[{{"name":"INPUT0","shape":[{ELEMENTS}],"datatype":"FP32","data":[{}]}}]}}"#,
        data.join(",")
    )
    .into_bytes()
}

fn halves() -> Vec<u8> {
    body((0..ELEMENTS).map(|j| format!("{:?}", (j % 1000) as f64 * 0.5)))
}

/// A xorshift generator: the same body on every run without a dependency.
fn random() -> Vec<u8> {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    body((0..ELEMENTS).map(|_| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let uniform = (state >> 11) as f64 / (1u64 << 53) as f64 * 20.0 - 10.0;
        let text = format!("{uniform:.6e}");
        format!("{:?}", text.parse::<f64>().unwrap_or(0.0))
    }))
}

/// The tensor's bytes: decoded while parsing where the parser could, else from the text.
fn tensor(doc: &Value<'_>) -> Vec<u8> {
    let input = match doc.get("inputs") {
        Some(Value::Array(items)) => &items[0],
        _ => panic!("no inputs"),
    };
    let data = input.get("data").expect("a data array");
    if let Some(bytes) = data.decoded_as(DataType::Fp32, ELEMENTS as u64) {
        return bytes.to_vec();
    }
    let raw = data.raw_data().expect("a data array");
    json::data::decode(raw, DataType::Fp32, ELEMENTS as u64, MAX_DEPTH).expect("the data decodes")
}

/// The fastest round: on a shared machine the others measure the neighbours as well.
fn fastest(times: &[Duration]) -> f64 {
    times.iter().min().map_or(0.0, Duration::as_secs_f64) * 1e3
}

fn measure(name: &str, text: &[u8], rounds: usize) {
    let (mut parse, mut decode, mut encode) = (Vec::new(), Vec::new(), Vec::new());
    let mut written = 0;
    for _ in 0..rounds {
        let start = Instant::now();
        let doc = json::parse_lazy_data(text, MAX_DEPTH).expect("the body parses");
        let parsed = Instant::now();
        let tensor = tensor(&doc);
        let decoded = Instant::now();
        let mut w = Writer::with_capacity(256);
        json::data::encode(&mut w, DataType::Fp32, &tensor);
        let encoded = Instant::now();
        written = w.buf.len();
        parse.push(parsed - start);
        decode.push(decoded - parsed);
        encode.push(encoded - decoded);
    }
    let (p, d, e) = (fastest(&parse), fastest(&decode), fastest(&encode));
    println!(
        "{name:<7} body {:>5.1} MB  parse {p:6.2} ms  decode {d:6.2} ms  encode {e:6.2} ms  \
         total {:6.2} ms  (output {:.1} MB)",
        text.len() as f64 / 1e6,
        p + d + e,
        written as f64 / 1e6
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a number among the arguments is the round count.
    let rounds = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20);
    // A body's name among the arguments measures that body alone.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a == "halves" || a == "random")
        .collect();
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    if wanted("halves") {
        measure("halves", &halves(), rounds);
    }
    if wanted("random") {
        measure("random", &random(), rounds);
    }
}
