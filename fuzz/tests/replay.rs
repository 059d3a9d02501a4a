//! Every committed seed (`fuzz/corpus/<target>/`) and every past finding
//! (`fuzz/regressions/<target>/`) through its target's body, as `cargo fuzz run` replays them
//! before exploring, but in the ordinary test build: no libFuzzer, no sanitizer, no nightly flags.
//! A target's body panics when a property of the answer does not hold, so a failure here names
//! the input that broke it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use arbitrary::{Arbitrary, Unstructured};
use infergate_fuzz::{
    bytes_tensor, generate, grpc_infer, http_infer, json_tensor, operator_children, shm_params,
    tls_handshake,
};

/// The request-level targets share one paused-clock runtime and one sidecar state
/// (`harness.rs`); the tests of this file take turns, as libFuzzer runs one input at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn inputs(target: &str) -> Vec<PathBuf> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(dir).join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap_or_else(|e| panic!("{target}: {e}")).path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Runs `body` over every input of `target`; fails with the inputs that panicked.
fn replay(target: &str, body: impl Fn(&[u8])) {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let files = inputs(target);
    assert!(!files.is_empty(), "{target}: no committed input to replay");
    let failed: Vec<String> = files
        .iter()
        .filter(|path| {
            let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            catch_unwind(AssertUnwindSafe(|| body(&data))).is_err()
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "{target}: {} of {} inputs failed: {failed:#?}",
        failed.len(),
        files.len()
    );
}

#[test]
fn http_infer_inputs_replay() {
    replay("http_infer", http_infer::run);
}

#[test]
fn generate_inputs_replay() {
    replay("generate", generate::run);
}

#[test]
fn grpc_infer_inputs_replay() {
    replay("grpc_infer", grpc_infer::run);
}

#[test]
fn json_tensor_inputs_replay() {
    replay("json_tensor", json_tensor::run);
}

#[test]
fn bytes_tensor_inputs_replay() {
    replay("bytes_tensor", bytes_tensor::run);
}

#[test]
fn tls_handshake_inputs_replay() {
    replay("tls_handshake", tls_handshake::run);
}

#[test]
fn operator_children_inputs_replay() {
    replay("operator_children", operator_children::run);
}

/// libFuzzer hands `shm_params` its input decoded as libfuzzer-sys does for a typed target:
/// the whole input through `Arbitrary::arbitrary_take_rest`, skipped when it does not decode.
#[test]
fn shm_params_inputs_replay() {
    replay("shm_params", |data| {
        if let Ok(ops) = Vec::<shm_params::Op>::arbitrary_take_rest(Unstructured::new(data)) {
            shm_params::run(&ops);
        }
    });
}
