//! The `infergate-operator` binary: `crd`, `render` and `run`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod common;

use std::process::{Command, Output};

fn operator(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_infergate-operator"))
        .args(args)
        .current_dir(common::repo_root())
        .env_remove("INFERGATE_SIDECAR_IMAGE")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn crd_prints_the_committed_crd() {
    let out = operator(&["crd"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let committed = std::fs::read_to_string(
        common::repo_root().join("crds/inferenceservices.infergate.dev.yaml"),
    )
    .unwrap();
    assert!(
        text(&out.stdout) == committed,
        "`infergate-operator crd` differs from the committed CRD (see the crd tests)"
    );
}

#[test]
fn render_prints_a_yaml_stream() {
    let out = operator(&[
        "render",
        "-f",
        "examples/sequence.yaml",
        "--sidecar-image",
        "sc:1",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let docs = infergate_operator::yaml::documents(&stdout).unwrap();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    // The example routes sequences by sidecar: its peers' objects come before the Deployment.
    assert_eq!(
        kinds,
        [
            "ConfigMap",
            "Service",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Deployment",
            "Service",
            "PodDisruptionBudget",
            "NetworkPolicy"
        ]
    );
    assert!(stdout.contains("image: sc:1"));
    // Without a uid in the input, a placeholder is used and said so.
    assert!(text(&out.stderr).contains("placeholder"));

    let out = operator(&["render", "-f", "examples/triton.yaml", "--uid", common::UID]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(common::UID));
    assert!(!text(&out.stderr).contains("placeholder"));
}

#[test]
fn render_reads_several_documents_and_skips_other_kinds() {
    let dir = std::env::temp_dir().join(format!("infergate-operator-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("two.yaml");
    let one = |name: &str| {
        format!(
            "apiVersion: infergate.dev/v1alpha1\nkind: InferenceService\nmetadata: {{name: {name}}}\nspec:\n  model: {{image: x}}\n"
        )
    };
    std::fs::write(
        &file,
        format!(
            "{}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: labels}}\n---\n{}",
            one("a"),
            one("b")
        ),
    )
    .unwrap();
    let out = operator(&["render", "-f", file.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let docs = infergate_operator::yaml::documents(&text(&out.stdout)).unwrap();
    // Per resource: ConfigMap, Deployment, Service, NetworkPolicy.
    assert_eq!(docs.len(), 8);
    assert!(text(&out.stderr).contains("skipping v1 ConfigMap"));
}

#[test]
fn render_rejects_what_the_api_server_would() {
    let dir = std::env::temp_dir().join(format!("infergate-operator-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.yaml");
    std::fs::write(
        &file,
        "apiVersion: infergate.dev/v1alpha1\nkind: InferenceService\nmetadata: {name: bad}\nspec:\n  model: {image: x}\n  upstream: {grpcPort: 8000}\n  extensions:\n    cudaSharedMemory: {enabled: true}\n",
    )
    .unwrap();
    let out = operator(&["render", "-f", file.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("upstream.grpcPort collides"), "{stderr}");
    assert!(stderr.contains("cudaSharedMemory needs a GPU"), "{stderr}");
    assert!(out.stdout.is_empty());

    let out = operator(&["render", "-f", "examples/sidecar-builtin.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no InferenceService"));
}

#[test]
fn run_without_a_cluster_fails_clearly() {
    let home = std::env::temp_dir().join(format!("infergate-no-kube-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_infergate-operator"))
        .args(["run", "--metrics-bind-address", "127.0.0.1:0"])
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", &home)
        .env("KUBECONFIG", home.join("missing"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("Kubernetes API"), "{stderr}");
    assert!(stderr.contains("kubeconfig"), "{stderr}");

    let out = operator(&["run", "--leader-elect"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--leader-election-namespace"));
}
