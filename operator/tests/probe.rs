//! Status aggregation against real `infergate-sidecar` processes on loopback: one healthy, one
//! degraded (client shared memory off while the spec asks for it), one that accepts connections
//! but never answers. Pods are objects only; the prober's address map points them at the
//! processes.
//!
//! The sidecar binary comes from `INFERGATE_SIDECAR_BIN` (the test command sets it) or from the
//! workspace's target directory. Without one the test fails, saying how to build it: a test that
//! cannot run is not reported as passed. Failing rather than `#[ignore]` keeps the test in every
//! plain `cargo test --workspace`, where it always runs: the sidecar's own integration tests make
//! cargo build `target/debug/infergate-sidecar` before any test starts. Only a run of this
//! package alone (`cargo test -p infergate-operator`) on a fresh checkout lacks the binary, and
//! there the failure names the command that builds it. `tests/run-all.sh` builds it and sets
//! `INFERGATE_SIDECAR_BIN`, so CI runs the test with no extra flag.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{MINIMAL, with_spec};
use infergate_operator::controller::probe::Prober;
use infergate_operator::controller::status::{Observed, compute};
use infergate_operator::crd::ExtensionState;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

const ADMIN_PORT: i32 = 8003;

/// The sidecar binary: `INFERGATE_SIDECAR_BIN`, else `target/debug` or `target/release` of the
/// workspace. Panics (the test fails) when there is none, with the command that builds it.
fn sidecar_binary() -> PathBuf {
    if let Ok(path) = std::env::var("INFERGATE_SIDECAR_BIN") {
        let path = PathBuf::from(path);
        assert!(
            path.exists(),
            "INFERGATE_SIDECAR_BIN={} does not exist",
            path.display()
        );
        return path;
    }
    let target = common::repo_root().join("target");
    let candidates: Vec<PathBuf> = ["debug", "release"]
        .iter()
        .map(|p| target.join(p).join("infergate-sidecar"))
        .collect();
    candidates
        .iter()
        .find(|p| p.exists())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "this test runs the infergate-sidecar binary and found none (looked at {}): \
                 build it with `cargo build -p infergate-sidecar` (or run `cargo test \
                 --workspace`, which builds it), or set INFERGATE_SIDECAR_BIN to its path",
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" and ")
            )
        })
}

/// A sidecar process, killed on drop.
struct Sidecar {
    child: Child,
    admin: String,
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_sidecar(binary: &PathBuf, extra: &[&str]) -> Sidecar {
    start_sidecar_on(binary, "127.0.0.1", extra)
}

fn start_sidecar_on(binary: &PathBuf, host: &str, extra: &[&str]) -> Sidecar {
    let mut child = Command::new(binary)
        .args([
            "--host",
            host,
            "--http-port",
            "0",
            "--grpc-port",
            "0",
            "--metrics-port",
            "0",
            "--admin-port",
            "0",
        ])
        .args(extra)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start infergate-sidecar");
    let (tx, rx) = std::sync::mpsc::channel();
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("admin_addr=").nth(1) {
                    let addr: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
                    let _ = tx.send(addr.trim_matches('"').to_string());
                }
            }
        });
    }
    let admin = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the sidecar logs its admin address");
    Sidecar { child, admin }
}

fn pod(name: &str, ip: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        status: Some(PodStatus {
            pod_ip: Some(ip.into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        }),
        ..Pod::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn healthy_degraded_and_silent_pods() {
    let binary = sidecar_binary();
    let healthy = start_sidecar(&binary, &["--allow-client-shm"]);
    let degraded = start_sidecar(&binary, &[]);
    // Accepts connections (the kernel completes the handshake) and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();

    let map = HashMap::from([
        (format!("10.0.0.1:{ADMIN_PORT}"), healthy.admin.clone()),
        (format!("10.0.0.2:{ADMIN_PORT}"), degraded.admin.clone()),
        (format!("10.0.0.3:{ADMIN_PORT}"), silent_addr),
    ]);
    let prober = Prober::new(Duration::from_millis(500), map);
    let mut not_ready = pod("d-not-ready", "10.0.0.4");
    not_ready
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()[0]
        .status = "False".into();
    let pods = vec![
        pod("a-healthy", "10.0.0.1"),
        pod("b-degraded", "10.0.0.2"),
        pod("c-silent", "10.0.0.3"),
        not_ready,
    ];

    let started = Instant::now();
    let reports = prober.probe_ready_pods(&pods, ADMIN_PORT).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "probes are bounded in time"
    );
    let names: Vec<&str> = reports.iter().map(|r| r.pod.as_str()).collect();
    assert_eq!(
        names,
        ["a-healthy", "b-degraded", "c-silent"],
        "pods that are not ready are not asked"
    );
    assert!(reports[0].outcome.as_ref().unwrap().ready);
    assert!(reports[1].outcome.as_ref().unwrap().ready);
    let err = reports[2].outcome.as_ref().unwrap_err();
    assert!(err.contains("did not answer within 500 ms"), "{err}");

    let isvc = with_spec(
        "svc",
        &format!(
            "{MINIMAL}  extensions:\n    systemSharedMemory:\n      enabled: true\n      size: 1Gi\n"
        ),
    );
    let deployment = common::deployment_with_status(true, 4, 3);
    let now = Time(Timestamp::from_second(1_700_000_000).unwrap());
    let status = compute(
        &isvc,
        &Observed {
            deployment: Some(&deployment),
            pods: &[],
            refusal: None,
            reports: &reports,
            now,
        },
        None,
    );

    let shm = status
        .extensions
        .iter()
        .find(|e| e.name == "system_shared_memory")
        .unwrap();
    assert_eq!(shm.state, ExtensionState::Degraded, "{shm:?}");
    assert_eq!(shm.reason.as_deref(), Some("active on 1 of 2 pods"));
    assert_eq!(shm.pods_reporting, 2);
    let binary_data = status
        .extensions
        .iter()
        .find(|e| e.name == "binary_tensor_data")
        .unwrap();
    assert_eq!(binary_data.state, ExtensionState::Active);
    let cuda = status
        .extensions
        .iter()
        .find(|e| e.name == "cuda_shared_memory")
        .unwrap();
    assert!(!cuda.requested);
    let condition = |kind: &str| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == kind)
            .unwrap()
            .clone()
    };
    assert_eq!(condition("Degraded").status, "True");
    assert_eq!(condition("Degraded").reason, "PodsNotReporting");
    assert!(condition("Degraded").message.contains("c-silent"));
    assert_eq!(condition("ModelReady").status, "True");
    assert_eq!(
        condition("ExtensionsReady").status,
        "True",
        "degraded still counts as serving"
    );
    assert_eq!(condition("Ready").status, "True");
    // The built-in backend reports no model list; the spec names none either.
    assert_eq!(status.model, None);
    drop((healthy, degraded, silent));
}

/// `status.tls` as the sidecars serve it: a sidecar whose ports take mutual TLS, read through
/// its admin port, which stays plain HTTP for the operator's prober.
#[tokio::test(flavor = "multi_thread")]
async fn tls_is_reported_as_the_sidecars_serve_it() {
    let binary = sidecar_binary();
    let data = common::repo_root().join("sidecar/tests/data/tls");
    let file = |name: &str| data.join(name).display().to_string();
    let (cert, key, ca) = (file("server-v1.crt"), file("server.key"), file("ca.crt"));
    let mutual = start_sidecar(
        &binary,
        &[
            "--grpc-use-ssl-mutual=true",
            "--grpc-server-cert",
            &cert,
            "--grpc-server-key",
            &key,
            "--grpc-root-cert",
            &ca,
            "--http-use-ssl-mutual=true",
            "--http-server-cert",
            &cert,
            "--http-server-key",
            &key,
            "--http-root-cert",
            &ca,
        ],
    );
    let plain = start_sidecar(&binary, &[]);
    let map = HashMap::from([
        (format!("10.0.0.1:{ADMIN_PORT}"), mutual.admin.clone()),
        (format!("10.0.0.2:{ADMIN_PORT}"), plain.admin.clone()),
    ]);
    let prober = Prober::new(Duration::from_secs(2), map);
    let isvc = with_spec(
        "svc",
        &format!("{MINIMAL}  tls:\n    secretName: svc-cert\n    mutual: true\n"),
    );
    let deployment = common::deployment_with_status(true, 2, 2);
    let status_of = |reports| {
        compute(
            &isvc,
            &Observed {
                deployment: Some(&deployment),
                pods: &[],
                refusal: None,
                reports,
                now: Time(Timestamp::from_second(1_700_000_000).unwrap()),
            },
            None,
        )
        .tls
        .unwrap()
    };

    let reports = prober
        .probe_ready_pods(&[pod("a-mutual", "10.0.0.1")], ADMIN_PORT)
        .await;
    let tls = status_of(&reports);
    assert_eq!(tls.summary, "Mutual", "{tls:?}");
    assert_eq!(
        (tls.http.state.as_str(), tls.grpc.state.as_str()),
        ("Mutual", "Mutual")
    );
    // The expiry of sidecar/tests/data/tls/server-v1.crt, as the sidecar read it.
    assert_eq!(tls.not_after.as_deref(), Some("2036-11-28T22:24:11Z"));

    // A pod still in plaintext (an earlier generation, mid-rollout) beside it.
    let pods = [pod("a-mutual", "10.0.0.1"), pod("b-plain", "10.0.0.2")];
    let reports = prober.probe_ready_pods(&pods, ADMIN_PORT).await;
    let tls = status_of(&reports);
    assert_eq!(tls.summary, "Mixed", "{tls:?}");
    assert_eq!(tls.grpc.pods_reporting, 2);
    drop((mutual, plain));
}

/// This host's address on its default route: what a caller off loopback comes from (no packet
/// is sent; connecting a UDP socket only picks the route).
fn host_address() -> String {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    socket
        .connect("198.51.100.1:9")
        .expect("this test needs an address other than loopback (a default route)");
    socket.local_addr().unwrap().ip().to_string()
}

/// Runs openssl (Debian's) in `dir`.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

/// A CA (`<name>-ca.crt`, `<name>-ca.key`) and a client certificate it signed, as a
/// `kubernetes.io/tls` Secret holds them, in `dir/<name>`: `tls.crt`, `tls.key`, `ca.crt`.
fn client_certificate(dir: &std::path::Path, name: &str) -> PathBuf {
    let out = dir.join(name);
    std::fs::create_dir_all(&out).unwrap();
    openssl(
        &out,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-subj",
            "/CN=status test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    std::fs::write(
        out.join("client.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    openssl(
        &out,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "tls.key",
            "-out",
            "tls.csr",
            "-subj",
            "/CN=infergate-operator",
        ],
    );
    openssl(
        &out,
        &[
            "x509",
            "-req",
            "-in",
            "tls.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-set_serial",
            "7",
            "-days",
            "2",
            "-out",
            "tls.crt",
            "-extfile",
            "client.ext",
        ],
    );
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn the_operators_client_certificate_reads_status_from_outside_the_pod() {
    use infergate_operator::status_client::StatusClientCertificate;
    let binary = sidecar_binary();
    let dir = std::env::temp_dir().join(format!("infergate-status-client-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let operator = client_certificate(&dir, "operator");
    let stranger = client_certificate(&dir, "stranger");
    let config = dir.join("sidecar.yaml");
    std::fs::write(
        &config,
        format!(
            "server:\n  status_client_ca: {}\n",
            operator.join("ca.crt").display()
        ),
    )
    .unwrap();
    // Off loopback, as the operator calls a pod's address: loopback alone would be let in.
    let host = host_address();
    let sidecar = start_sidecar_on(&binary, &host, &[&format!("--config={}", config.display())]);
    let map = HashMap::from([(format!("10.0.0.1:{ADMIN_PORT}"), sidecar.admin.clone())]);
    let prober = |certificate: Option<&StatusClientCertificate>| {
        Prober::new(Duration::from_secs(5), map.clone())
            .with_client_certificate(certificate)
            .unwrap()
    };

    let certificate = StatusClientCertificate::read(&operator).unwrap();
    assert!(certificate.ca_pem().contains("BEGIN CERTIFICATE"));
    let status = prober(Some(&certificate))
        .probe(&format!("10.0.0.1:{ADMIN_PORT}"))
        .await;
    assert!(status.is_ok(), "{status:?}");

    // Without a certificate, over plain HTTP: a credential is asked for.
    let refused = prober(None).probe(&format!("10.0.0.1:{ADMIN_PORT}")).await;
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("401")),
        "{refused:?}"
    );

    // Another CA's certificate: the handshake does not complete.
    let other = StatusClientCertificate::read(&stranger).unwrap();
    let refused = prober(Some(&other))
        .probe(&format!("10.0.0.1:{ADMIN_PORT}"))
        .await;
    assert!(refused.is_err(), "{refused:?}");

    // The certificate is read again when its files change, as a renewed Secret changes them:
    // with the stranger's pair in the operator's files, the same certificate is refused.
    let renewed = prober(Some(&certificate));
    assert!(
        renewed
            .probe(&format!("10.0.0.1:{ADMIN_PORT}"))
            .await
            .is_ok()
    );
    std::thread::sleep(Duration::from_millis(20));
    let first_ca = certificate.ca_pem();
    for file in ["tls.crt", "tls.key", "ca.crt"] {
        std::fs::copy(stranger.join(file), operator.join(file)).unwrap();
    }
    // The CA too, which the next rendering puts into the sidecars' ConfigMaps.
    let new_ca = certificate.ca_pem();
    assert_ne!(new_ca, first_ca);
    assert_eq!(
        new_ca,
        std::fs::read_to_string(stranger.join("ca.crt")).unwrap()
    );
    // A new connection (the pool's idle one would not handshake again).
    let renewed = Prober::new(Duration::from_secs(5), map.clone())
        .with_client_certificate(Some(&certificate))
        .unwrap();
    let refused = renewed.probe(&format!("10.0.0.1:{ADMIN_PORT}")).await;
    assert!(refused.is_err(), "{refused:?}");
    drop(sidecar);
    let _ = std::fs::remove_dir_all(&dir);
}
