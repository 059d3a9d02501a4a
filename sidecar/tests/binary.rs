//! The real binary: ports chosen with 0, configuration errors, graceful shutdown on SIGTERM, the
//! malloc restart, and the REST route to an upstream falling back to gRPC.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const BIN: &str = env!("CARGO_BIN_EXE_infergate-sidecar");

/// Sends one request (head, then body) on a fresh connection and returns the whole answer.
fn http_exchange(addr: &str, head: &str, body: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut out = Vec::new();
    stream.read_to_end(&mut out).unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

fn http_get(addr: &str, path: &str) -> String {
    let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    http_exchange(addr, &head, b"")
}

/// A spawned sidecar that is killed when the test ends, also when an assertion fails first.
struct Spawned(std::process::Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Spawned {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Spawned {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// The binary on loopback, every port chosen by the kernel, JSON logs on a piped stderr.
fn spawn_on_free_ports(extra: &[&str]) -> Spawned {
    spawn_with_env(extra, &[])
}

/// The same, with variables set (a value) or removed (`None`) in the binary's environment.
fn spawn_with_env(extra: &[&str], env: &[(&str, Option<&str>)]) -> Spawned {
    let mut command = Command::new(BIN);
    for (name, value) in env {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    let child = command
        .args(["--host", "127.0.0.1", "--log-format", "json"])
        .args(["--http-port", "0", "--grpc-port", "0"])
        .args(["--metrics-port", "0", "--admin-port", "0"])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Spawned(child)
}

#[test]
fn serves_on_chosen_ports_and_drains_on_sigterm() {
    let mut child = spawn_on_free_ports(&[]);
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut http_addr = None;
    let mut admin_addr = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if let Some(addr) = v.get("http_addr").and_then(|a| a.as_str()) {
            assert!(
                v.get("grpc_addr").is_some() && v.get("metrics_addr").is_some(),
                "{line}"
            );
            http_addr = Some(addr.to_string());
            admin_addr = v
                .get("admin_addr")
                .and_then(|a| a.as_str())
                .map(str::to_string);
            break;
        }
    }
    let addr = http_addr.expect("the chosen ports are logged");
    assert!(!addr.ends_with(":0"));
    assert!(http_get(&addr, "/v2/health/ready").starts_with("HTTP/1.1 200"));

    // The admin status says what is live, per extension.
    let admin = http_get(&admin_addr.expect("the admin port is logged"), "/status");
    let body = admin.split("\r\n\r\n").nth(1).unwrap_or_default();
    let status: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(status["backend"]["kind"], "builtin");
    assert_eq!(status["ready"], true);
    let state_of = |name: &str| {
        status["extensions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["state"].clone())
    };
    assert_eq!(
        state_of("classification"),
        Some(serde_json::json!("Active"))
    );
    assert_eq!(
        state_of("system_shared_memory"),
        Some(serde_json::json!("Disabled"))
    );
    assert_eq!(
        state_of("cuda_shared_memory"),
        Some(serde_json::json!("Unsupported"))
    );
    assert!(status["shm"]["present"].is_boolean());

    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status {status}");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(
        rest.iter()
            .any(|l| l.contains("Waiting for in-flight requests to complete.")),
        "{rest:?}"
    );
}

/// Runs the binary on a configuration file holding `yaml`; returns its exit code and stderr.
fn run_with_config(yaml: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn invalid_configuration_reports_every_error_and_exits_2() {
    let (code, stderr) = run_with_config(
        "server:\n  log_level: loud\nlimits:\n  max_json_depth: 0\nbackend:\n  kind: builtin\n  models: [nope]\n",
    );
    assert_eq!(code, Some(2));
    for needle in [
        "server.log_level",
        "limits.max_json_depth",
        "backend.models[0]",
    ] {
        assert!(stderr.contains(needle), "{needle} missing from: {stderr}");
    }
}

#[test]
fn unknown_configuration_field_is_an_error() {
    let (code, stderr) = run_with_config("server:\n  http_prot: 1\n");
    assert_eq!(code, Some(2));
    assert!(stderr.contains("http_prot"), "{stderr}");
}

/// The checks of Triton's L0_http `test.sh` that a bad `--http-restricted-api` stops the server.
#[test]
fn a_bad_restriction_stops_the_sidecar_with_triton_s_words() {
    for (flags, message) in [
        (
            [
                "--http-restricted-api=model-repository,health:k1=v1",
                "--http-restricted-api=metadata,health:k2=v2",
            ],
            "server.http_restricted_api: restricted api 'health' can not be specified in multiple config groups",
        ),
        (
            [
                "--http-restricted-api=model-reposit,health:k1=v1",
                "--http-restricted-api=metadata,health:k2=v2",
            ],
            "server.http_restricted_api: unknown restricted api 'model-reposit'",
        ),
        (
            [
                "--grpc-restricted-protocol=inference:key",
                "--http-restricted-api=metadata:k=v",
            ],
            "server.grpc_restricted_protocol: --grpc-restricted-protocol option format is '<config name>:<setting>=<value>'. Got inference:key",
        ),
    ] {
        let out = Command::new(BIN).args(flags).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(message), "{message} missing from: {stderr}");
    }
}

/// Sends one HTTP/1.1 POST and returns the whole answer.
fn http_post(addr: &str, path: &str, headers: &str, body: &[u8]) -> String {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n{headers}\r\n",
        body.len()
    );
    http_exchange(addr, &head, body)
}

/// Request payloads never reach the log, even at `trace` and even when the answer quotes them
/// back to the client (an error naming the offending element).
#[test]
fn request_payloads_are_not_logged_even_at_trace() {
    const SECRET: &str = "PAYLOAD-7f3a9c";
    let mut child = spawn_on_free_ports(&["--log-level", "trace"]);
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            all.push(line);
        }
        all
    });
    let addr = loop {
        let line = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if let Some(addr) = v.get("http_addr").and_then(|a| a.as_str()) {
            break addr.to_string();
        }
    };

    // JSON tensor data, served.
    let json = format!(
        r#"{{"inputs":[{{"name":"INPUT0","datatype":"BYTES","shape":[1,1],"data":["{SECRET}"]}}]}}"#
    );
    let answer = http_post(
        &addr,
        "/v2/models/simple_identity/infer",
        "",
        json.as_bytes(),
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains(SECRET),
        "the answer carries the tensor: {answer}"
    );
    // Binary tensor data, served.
    let header = r#"{"inputs":[{"name":"INPUT0","datatype":"BYTES","shape":[1,1],"parameters":{"binary_data_size":18}}]}"#;
    let mut body = header.as_bytes().to_vec();
    body.extend_from_slice(&(SECRET.len() as u32).to_le_bytes());
    body.extend_from_slice(SECRET.as_bytes());
    let answer = http_post(
        &addr,
        "/v2/models/simple_identity/infer",
        &format!("Inference-Header-Content-Length: {}\r\n", header.len()),
        &body,
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Refused, with the element quoted back to the client.
    let json = format!(
        r#"{{"inputs":[{{"name":"INPUT0","datatype":"BYTES","shape":[1,16],"data":["{SECRET}","1","1","1","1","1","1","1","1","1","1","1","1","1","1","1"]}},{{"name":"INPUT1","datatype":"BYTES","shape":[1,16],"data":["1","1","1","1","1","1","1","1","1","1","1","1","1","1","1","1"]}}]}}"#
    );
    let answer = http_post(&addr, "/v2/models/simple_string/infer", "", json.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // A malformed body (Triton's answer: 500 with the parser's message).
    let answer = http_post(
        &addr,
        "/v2/models/simple/infer",
        "",
        format!("{{\"inputs\": [{SECRET}").as_bytes(),
    );
    assert!(answer.starts_with("HTTP/1.1 500"), "{answer}");

    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    assert!(child.wait().unwrap().success());
    let log = reader.join().unwrap();
    assert!(log.len() > 5, "trace logging wrote almost nothing: {log:?}");
    let leaked: Vec<&String> = log.iter().filter(|l| l.contains(SECRET)).collect();
    assert!(leaked.is_empty(), "payload in the log: {leaked:#?}");
    // The refusals were logged, by their code alone (their messages quote the payload).
    let failed = |code: &str| {
        let line = format!("[request id: <id_unknown>] Infer failed: {code}");
        log.iter().any(|l| l.contains(&line))
    };
    assert!(failed("Invalid argument") && failed("Internal"), "{log:#?}");
}

/// A stop sent the instant the server says it is serving is still a graceful stop: the signal
/// handlers exist before that line is written (before, SIGTERM's default action killed it).
#[test]
fn sigterm_right_after_the_serving_line_is_graceful() {
    for _ in 0..5 {
        let mut child = spawn_on_free_ports(&[]);
        let lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut rest = lines.map_while(Result::ok);
        rest.by_ref()
            .find(|l| l.contains("infergate-sidecar is serving"))
            .expect("the serving line");
        kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "exit status {status}");
        assert!(rest.any(|l| l.contains("\"stopped\"")), "no 'stopped' line");
    }
}

/// Starts the binary with debug logs and `env`; returns what it logged of glibc's malloc
/// thresholds and whether its environment, read from /proc, holds `GLIBC_TUNABLES` once it
/// serves (the process id the test started is the one that serves).
fn malloc_tuning_with(env: &[(&str, Option<&str>)]) -> (String, bool) {
    let mut child = spawn_with_env(&["--log-level", "debug"], env);
    let lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut tuning = None;
    for line in lines {
        let line = line.unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        let message = v["message"].as_str().unwrap_or_default();
        if message == "malloc thresholds" {
            tuning = v["tuning"].as_str().map(str::to_string);
        } else if message.starts_with("glibc's malloc thresholds are not raised") {
            tuning = Some(format!("Failed: {}", v["reason"]));
        }
        if v.get("http_addr").is_some() {
            break;
        }
    }
    let environ = std::fs::read(format!("/proc/{}/environ", child.id())).unwrap();
    let has_tunables = environ
        .split(|b| *b == 0)
        .any(|entry| entry.starts_with(b"GLIBC_TUNABLES="));
    (
        tuning.expect("the thresholds are logged at debug level"),
        has_tunables,
    )
}

#[test]
fn starts_itself_again_with_raised_malloc_thresholds() {
    let (tuning, has_tunables) =
        malloc_tuning_with(&[("GLIBC_TUNABLES", None), ("INFERGATE_MALLOC_TUNING", None)]);
    if cfg!(all(target_os = "linux", target_env = "gnu")) {
        assert_eq!(tuning, "Active");
        assert!(
            has_tunables,
            "the same process now runs with GLIBC_TUNABLES"
        );
    } else {
        assert_eq!(tuning, "NotGlibc");
    }
}

#[test]
fn malloc_thresholds_of_the_user_or_opt_out_are_left_alone() {
    let (tuning, _) = malloc_tuning_with(&[
        ("GLIBC_TUNABLES", Some("glibc.malloc.trim_threshold=131072")),
        ("INFERGATE_MALLOC_TUNING", None),
    ]);
    assert!(
        matches!(tuning.as_str(), "UserSet" | "NotGlibc"),
        "{tuning}"
    );
    let (tuning, has_tunables) = malloc_tuning_with(&[
        ("GLIBC_TUNABLES", None),
        ("INFERGATE_MALLOC_TUNING", Some("off")),
    ]);
    assert!(
        matches!(tuning.as_str(), "Disabled" | "NotGlibc"),
        "{tuning}"
    );
    assert!(!has_tunables, "no restart when turned off");
}

/// The addresses a spawned sidecar logs (`http_addr`, `grpc_addr`, `metrics_addr`), read from its
/// stderr; the remaining lines keep flowing into the returned channel.
fn logged_addrs(child: &mut Spawned) -> (serde_json::Value, std::sync::mpsc::Receiver<String>) {
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    loop {
        let line = rx.recv_timeout(Duration::from_secs(20)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if v.get("http_addr").is_some() {
            return (v, rx);
        }
    }
}

/// A stand-in REST address: answers every request with 200 and closes the connection, until
/// `stop` is set; then the port is closed and connecting is refused.
fn answering_port(stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    stream.set_nonblocking(false).unwrap();
                    let mut head = [0u8; 4096];
                    let _ = stream.read(&mut head);
                    let _ = stream.write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    );
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    addr
}

fn upstream_calls(metrics_addr: &str) -> (u64, u64) {
    let text = http_get(metrics_addr, "/metrics");
    let count = |protocol: &str| {
        let prefix = format!("infergate_upstream_calls_total{{protocol=\"{protocol}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("no {prefix} in {text}"))
            .parse::<u64>()
            .unwrap()
    };
    (count("grpc"), count("rest"))
}

/// With `rest_url` beside a gRPC upstream, a small call whose REST address no longer answers is
/// sent over gRPC at once (nothing reached the server), and so are the following ones.
#[test]
fn a_small_call_whose_rest_address_is_gone_goes_over_grpc() {
    // The upstream: another sidecar with its built-in models, over gRPC.
    let mut upstream = spawn_on_free_ports(&[]);
    let (upstream_addrs, _upstream_log) = logged_addrs(&mut upstream);
    let grpc = upstream_addrs["grpc_addr"].as_str().unwrap().to_string();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rest = answering_port(stop.clone());

    let dir = std::env::temp_dir().join(format!("infergate-rest-fallback-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("sidecar.yaml");
    std::fs::write(
        &config,
        format!(
            "backend: {{kind: upstream, url: 'grpc://{grpc}', rest_url: 'http://{rest}', probe_interval_seconds: 60, staging_shm_bytes: 0}}\n"
        ),
    )
    .unwrap();
    let mut front = spawn_on_free_ports(&["--config", config.to_str().unwrap()]);
    let (addrs, log) = logged_addrs(&mut front);
    let http = addrs["http_addr"].as_str().unwrap().to_string();
    let metrics = addrs["metrics_addr"].as_str().unwrap().to_string();
    // Discovery done and the REST address found answering.
    loop {
        let line = log.recv_timeout(Duration::from_secs(20)).unwrap();
        if line.contains("calls with small tensors go to the upstream over REST") {
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(100));

    let body = br#"{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[2],"data":[1.5,2.5]}]}"#;
    for expected in [(1, 1), (2, 1)] {
        let answer = http_post(&http, "/v2/models/identity_fp32/infer", "", body);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains(r#""data":[1.5,2.5]"#), "{answer}");
        assert_eq!(upstream_calls(&metrics), expected);
    }
    let warned = log
        .try_iter()
        .any(|l| l.contains("the upstream's REST address does not answer"));
    assert!(warned);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reads HTTP/2 frames from `stream` until one of type `kind` arrives; false after `limit`.
fn h2_frame_arrives(stream: &mut TcpStream, kind: u8, limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    while std::time::Instant::now() < deadline {
        // Whole frames in the buffer: a 9-byte header (length, type, flags, stream) and a payload.
        while buffer.len() >= 9 {
            let length =
                usize::from(buffer[0]) << 16 | usize::from(buffer[1]) << 8 | usize::from(buffer[2]);
            if buffer.len() < 9 + length {
                break;
            }
            if buffer[3] == kind {
                return true;
            }
            buffer.drain(..9 + length);
        }
        match stream.read(&mut chunk) {
            Ok(0) => return false,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            Err(_) => continue,
        }
    }
    false
}

/// Reads one HTTP/1.1 answer head (and its short body) from a keep-alive connection.
fn http_answer(stream: &mut TcpStream) -> String {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut out = Vec::new();
    let mut byte = [0u8; 1];
    while !out.ends_with(b"\r\n\r\n") {
        assert_eq!(
            stream.read(&mut byte).unwrap(),
            1,
            "connection closed early"
        );
        out.push(byte[0]);
    }
    String::from_utf8_lossy(&out).to_lowercase()
}

/// The preStop hook: `/drain?seconds=N` turns readiness off and asks clients to go (gRPC
/// connections get GOAWAY, HTTP/1.1 answers close their connection) while every call is still
/// answered, and answers itself after N seconds.
#[test]
fn drain_keeps_serving_while_sending_clients_away() {
    let mut child = spawn_on_free_ports(&[]);
    let (addrs, _log) = logged_addrs(&mut child);
    let addr = |key: &str| addrs[key].as_str().unwrap().to_string();
    let (http, grpc, admin) = (addr("http_addr"), addr("grpc_addr"), addr("admin_addr"));

    // Connections opened before the drain: HTTP/1.1 kept alive, and HTTP/2 (the gRPC port).
    let mut keep = TcpStream::connect(&http).unwrap();
    keep.write_all(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let before = http_answer(&mut keep);
    assert!(before.starts_with("http/1.1 200"), "{before}");
    assert!(!before.contains("connection: close"), "{before}");
    let mut h2 = TcpStream::connect(&grpc).unwrap();
    h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .unwrap();

    let started = std::time::Instant::now();
    let drainer = std::thread::spawn(move || http_get(&admin, "/drain?seconds=2"));
    const GOAWAY: u8 = 7;
    assert!(
        h2_frame_arrives(&mut h2, GOAWAY, Duration::from_secs(5)),
        "no GOAWAY on the gRPC connection"
    );

    keep.write_all(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let during = http_answer(&mut keep);
    assert!(
        during.starts_with("http/1.1 400"),
        "not ready while draining: {during}"
    );
    assert!(during.contains("connection: close"), "{during}");
    let live = http_get(&http, "/v2/health/live");
    assert!(live.starts_with("HTTP/1.1 200"), "still serving: {live}");

    let answer = drainer.join().unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"draining\":true"), "{answer}");
    assert!(started.elapsed() >= Duration::from_secs(2));
}
