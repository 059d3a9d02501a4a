//! The CRD: freshness of the committed YAML, its shape, its descriptions, its CEL rules (compiled,
//! costed, and evaluated on the examples and on a table of invalid specs).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod common;

use std::collections::BTreeSet;

use infergate_operator::admission;
use infergate_operator::crd;
use kube::core::cel::{CompiledSchema, compile_schema, estimate_rule_cost};
use serde_json::{Value, json};

const CRD_PATH: &str = "crds/inferenceservices.infergate.dev.yaml";
const REGENERATE: &str =
    "cargo run -p infergate-operator -- crd > crds/inferenceservices.infergate.dev.yaml";

#[test]
fn committed_crd_is_fresh() {
    let generated = crd::crd_yaml().unwrap();
    let path = common::repo_root().join(CRD_PATH);
    if std::env::var_os("INFERGATE_UPDATE_GENERATED").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{CRD_PATH} is stale: the Rust types in operator/src/crd.rs changed. Regenerate it with\n    {REGENERATE}\n(or run the tests with INFERGATE_UPDATE_GENERATED=1)"
    );
}

#[test]
fn docs_field_reference_is_fresh() {
    let path = common::repo_root().join("docs/operator.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let generated = infergate_operator::reference::markdown(&schema());
    let updated = infergate_operator::reference::splice(&doc, &generated)
        .expect("docs/operator.md lacks the generated-reference markers");
    if std::env::var_os("INFERGATE_UPDATE_GENERATED").is_some() {
        std::fs::write(&path, &updated).unwrap();
        return;
    }
    assert!(
        doc == updated,
        "the field reference in docs/operator.md is stale. Regenerate it with\n    INFERGATE_UPDATE_GENERATED=1 cargo test -p infergate-operator --test crd"
    );
}

fn crd_json() -> Value {
    crd::crd_json().unwrap()
}

fn schema() -> Value {
    crd::openapi_schema().unwrap()
}

#[test]
fn names_scope_and_subresources() {
    let crd = crd_json();
    let spec = &crd["spec"];
    assert_eq!(crd["metadata"]["name"], "inferenceservices.infergate.dev");
    assert_eq!(spec["group"], "infergate.dev");
    assert_eq!(spec["scope"], "Namespaced");
    assert_eq!(spec["names"]["kind"], "InferenceService");
    assert_eq!(spec["names"]["plural"], "inferenceservices");
    assert_eq!(spec["names"]["shortNames"], json!(["infsvc"]));
    let versions = spec["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 1);
    let v = &versions[0];
    assert_eq!(v["name"], "v1alpha1");
    assert_eq!(v["served"], true);
    assert_eq!(v["storage"], true);
    assert_eq!(v["subresources"]["status"], json!({}));
    assert_eq!(
        v["subresources"]["scale"],
        json!({
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        })
    );
}

#[test]
fn printer_columns_resolve_on_a_sample_status() {
    let crd = crd_json();
    let columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .unwrap();
    let names: Vec<&str> = columns
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "Ready",
            "Replicas",
            "Model",
            "Extensions",
            "TLS",
            "Cert-Expires",
            "URL",
            "Age"
        ]
    );
    let object = json!({
        "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {
            "readyReplicas": 2,
            "model": {"name": "densenet_onnx", "ready": true, "count": 1},
            "extensionsSummary": "3/4 active",
            "tls": {"summary": "Mutual", "notAfter": "2027-01-15T08:00:00Z",
                    "http": {"state": "Mutual"}, "grpc": {"state": "Mutual"}},
            "url": {"rest": "https://x.ml.svc:8000", "grpc": "x.ml.svc:8001"},
            "conditions": [
                {"type": "Available", "status": "True"},
                {"type": "Ready", "status": "False"},
            ],
        },
    });
    let want = [
        json!("False"),
        json!(2),
        json!("densenet_onnx"),
        json!("3/4 active"),
        json!("Mutual"),
        json!("2027-01-15T08:00:00Z"),
        json!("https://x.ml.svc:8000"),
        json!("2026-01-01T00:00:00Z"),
    ];
    for (column, want) in columns.iter().zip(want) {
        let path = column["jsonPath"].as_str().unwrap();
        assert_eq!(
            json_path(&object, path),
            Some(want),
            "column {}",
            column["name"]
        );
    }
}

/// The JSONPath subset the printer columns use: `.a.b` and `.a[?(@.k=="v")].b`.
fn json_path(object: &Value, path: &str) -> Option<Value> {
    let mut current = object.clone();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(filter) = rest.strip_prefix("[?(@.") {
            let end = filter.find(")]")?;
            let (key, value) = filter[..end].split_once("==")?;
            let value = value.trim_matches('"');
            current = current
                .as_array()?
                .iter()
                .find(|item| item.get(key).and_then(Value::as_str) == Some(value))?
                .clone();
            rest = &filter[end + 2..];
        } else {
            let field = rest.strip_prefix('.')?;
            let end = field.find(['.', '[']).unwrap_or(field.len());
            current = current.get(&field[..end])?.clone();
            rest = &field[end..];
        }
    }
    Some(current)
}

#[test]
fn size_and_list_maps() {
    let yaml = crd::crd_yaml().unwrap();
    // Client-side apply keeps the whole object in an annotation limited to 256 KiB: half of it,
    // for a margin (spec.canary.model repeats spec.model's schema).
    assert!(yaml.len() < 128 * 1024, "CRD is {} bytes", yaml.len());
    let s = schema();
    let list_map = |path: &str, key: &str| {
        let node = s.pointer(path).unwrap_or_else(|| panic!("{path}"));
        assert_eq!(node["x-kubernetes-list-type"], "map", "{path}");
        assert_eq!(node["x-kubernetes-list-map-keys"], json!([key]), "{path}");
    };
    list_map("/properties/status/properties/conditions", "type");
    list_map("/properties/status/properties/extensions", "name");
    list_map("/properties/spec/properties/models", "name");
    list_map(
        "/properties/spec/properties/pod/properties/containers",
        "name",
    );
    list_map("/properties/spec/properties/pod/properties/volumes", "name");
    list_map("/properties/spec/properties/model/properties/env", "name");
}

#[test]
fn every_field_has_a_description() {
    fn walk(node: &Value, path: &str, missing: &mut Vec<String>) {
        if let Some(props) = node.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                let p = format!("{path}.{k}");
                if v.get("description")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    missing.push(p.clone());
                }
                walk(v, &p, missing);
            }
        }
        if let Some(items) = node.get("items") {
            walk(items, &format!("{path}[]"), missing);
        }
        if let Some(additional) = node.get("additionalProperties") {
            walk(additional, &format!("{path}{{}}"), missing);
        }
    }
    let s = schema();
    let mut missing = Vec::new();
    walk(&s["properties"]["spec"], "spec", &mut missing);
    walk(&s["properties"]["status"], "status", &mut missing);
    assert!(
        missing.is_empty(),
        "fields without a description: {missing:#?}"
    );
}

#[test]
fn defaults_are_declared_in_the_schema() {
    let s = schema();
    let spec = &s["properties"]["spec"]["properties"];
    assert_eq!(spec["replicas"]["default"], 1);
    assert_eq!(spec["upstream"]["properties"]["grpcPort"]["default"], 9001);
    assert_eq!(
        spec["upstream"]["properties"]["protocol"]["default"],
        "grpc"
    );
    let ports = &spec["sidecar"]["properties"]["ports"]["properties"];
    for (port, want) in [
        ("http", 8000),
        ("grpc", 8001),
        ("metrics", 8002),
        ("admin", 8003),
    ] {
        assert_eq!(ports[port]["default"], want, "{port}");
    }
    assert_eq!(spec["sidecar"]["properties"]["mode"]["default"], "Native");
    assert_eq!(spec["replicas"]["minimum"], 0);
}

/// Collects the rules at every node of a compiled schema.
fn compiled_rules(node: &CompiledSchema, out: &mut Vec<(String, Vec<String>)>) {
    for v in &node.validations {
        match v {
            Ok(result) => {
                let warnings = estimate_rule_cost(&result.rule.rule, node);
                out.push((
                    result.rule.rule.clone(),
                    warnings.into_iter().map(|w| w.message).collect(),
                ));
            }
            Err(e) => panic!("a CEL rule does not compile: {e}"),
        }
    }
    for child in node.properties.values() {
        compiled_rules(child, out);
    }
    if let Some(items) = &node.items {
        compiled_rules(items, out);
    }
    if let Some(additional) = &node.additional_properties {
        compiled_rules(additional, out);
    }
}

#[test]
fn cel_rules_compile_within_the_cost_budget() {
    let compiled = compile_schema(&schema());
    let mut rules = Vec::new();
    compiled_rules(&compiled, &mut rules);
    // 26 of the resource's own, and the 9 of spec.model's type again under spec.canary.model.
    assert_eq!(rules.len(), 35, "rules found: {rules:#?}");
    for (rule, warnings) in rules {
        assert!(warnings.is_empty(), "{rule}: {warnings:?}");
    }
}

#[test]
fn every_example_is_admitted() {
    let examples = common::example_files();
    let names: Vec<&str> = examples.iter().map(|(n, _)| n.as_str()).collect();
    for want in [
        "kserve.yaml",
        "mlserver.yaml",
        "sequence.yaml",
        "triton-gpu-cuda.yaml",
        "triton-s3.yaml",
        "triton-shm.yaml",
        "triton.yaml",
    ] {
        assert!(names.contains(&want), "examples/{want} missing: {names:?}");
    }
    for (name, text) in &examples {
        let docs = infergate_operator::yaml::documents(text).unwrap();
        // Only the InferenceServices: an example may carry what they need (a Secret).
        for doc in docs.iter().filter(|d| d["kind"] == "InferenceService") {
            if let Err(problems) = admission::admit(doc) {
                panic!("examples/{name}:\n{}", problems.join("\n"));
            }
        }
    }
}

/// A valid InferenceService as JSON, to be broken by the table below.
fn valid() -> Value {
    json!({
        "apiVersion": "infergate.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "resnet"},
        "spec": {
            "model": {"image": "nvcr.io/nvidia/tritonserver:24.10-py3"},
        },
    })
}

fn set(object: &mut Value, pointer: &str, value: Value) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let mut node = object;
    for part in parent.split('/').filter(|p| !p.is_empty()) {
        node = node
            .as_object_mut()
            .unwrap()
            .entry(part)
            .or_insert_with(|| json!({}));
    }
    node.as_object_mut().unwrap().insert(key.to_string(), value);
}

/// What is broken, the changes (JSON pointer, new value), a phrase of the expected error.
type Case = (&'static str, Vec<(&'static str, Value)>, &'static str);

#[test]
fn invalid_specs_are_rejected() {
    assert_eq!(admission::admit(&valid()).map(|_| ()), Ok(()));
    // (what is broken, changes, a phrase of the expected error)
    let cases: Vec<Case> = vec![
        (
            "name with upper case",
            vec![("/metadata/name", json!("ResNet"))],
            "DNS-1035 label",
        ),
        (
            "name longer than 63",
            vec![("/metadata/name", json!("a".repeat(64)))],
            "DNS-1035 label",
        ),
        (
            "negative replicas",
            vec![("/spec/replicas", json!(-1))],
            "spec.replicas: -1 is less than 0",
        ),
        (
            "no image",
            vec![("/spec/model", json!({}))],
            ".spec.model.image: required",
        ),
        (
            "unknown field",
            vec![("/spec/sidecar/typo", json!(1))],
            ".spec.sidecar.typo: unknown field",
        ),
        (
            "unknown protocol",
            vec![("/spec/upstream/protocol", json!("http"))],
            "is not one of",
        ),
        (
            "upstream port on a sidecar port",
            vec![("/spec/upstream/grpcPort", json!(8001))],
            "upstream.grpcPort collides with a sidecar port",
        ),
        (
            "upstream port out of range",
            vec![("/spec/upstream/grpcPort", json!(70000))],
            "is greater than 65535",
        ),
        (
            "REST port on a sidecar port",
            vec![("/spec/upstream/restPort", json!(8000))],
            "upstream.restPort collides with a sidecar port",
        ),
        (
            "a canary's model port on a sidecar port",
            vec![(
                "/spec/canary",
                json!({"trafficPercent": 10, "model": {"image": "m:2", "ports": [{"containerPort": 8000}]}}),
            )],
            "a canary.model.ports entry collides with a sidecar port",
        ),
        (
            "a canary's share above 100",
            vec![(
                "/spec/canary",
                json!({"trafficPercent": 101, "model": {"image": "m:2"}}),
            )],
            "spec.canary.trafficPercent: 101 is greater than 100",
        ),
        (
            "REST port on the gRPC port",
            vec![("/spec/upstream/restPort", json!(9001))],
            "upstream.restPort collides",
        ),
        (
            "REST port out of range",
            vec![("/spec/upstream/restPort", json!(0))],
            "is less than 1",
        ),
        (
            "model port on the REST port",
            vec![
                ("/spec/upstream/restPort", json!(9000)),
                ("/spec/model/ports", json!([{"containerPort": 9000}])),
            ],
            "a model.ports entry uses upstream.restPort",
        ),
        (
            "model port on the sidecar's metrics port",
            vec![("/spec/model/ports", json!([{"containerPort": 8002}]))],
            "a model.ports entry collides",
        ),
        (
            "model port on the upstream port",
            vec![("/spec/model/ports", json!([{"containerPort": 9001}]))],
            "a model.ports entry collides",
        ),
        (
            "sidecar ports equal",
            vec![("/spec/sidecar/ports", json!({"http": 8001}))],
            "sidecar ports must be pairwise different",
        ),
        (
            "CUDA shared memory without a GPU",
            vec![("/spec/extensions/cudaSharedMemory/enabled", json!(true))],
            "cudaSharedMemory needs a GPU",
        ),
        (
            "CUDA shared memory with CPU limits only",
            vec![
                ("/spec/extensions/cudaSharedMemory/enabled", json!(true)),
                ("/spec/model/resources", json!({"limits": {"cpu": "2"}})),
            ],
            "cudaSharedMemory needs a GPU",
        ),
        (
            "rolling limits with Recreate",
            vec![(
                "/spec/rollout",
                json!({"strategy": "Recreate", "maxUnavailable": 1}),
            )],
            "maxSurge and maxUnavailable apply to strategy RollingUpdate only",
        ),
        (
            "a REST upstream without its port",
            vec![("/spec/upstream/protocol", json!("rest"))],
            "upstream.protocol rest needs upstream.restPort, the model server's V2 REST port",
        ),
        (
            "autoscaling with min above max",
            vec![(
                "/spec/autoscaling",
                json!({"minReplicas": 3, "maxReplicas": 2}),
            )],
            "autoscaling.minReplicas must not exceed maxReplicas",
        ),
        (
            "scale to zero with an HPA",
            vec![(
                "/spec/autoscaling",
                json!({"minReplicas": 0, "maxReplicas": 2}),
            )],
            "autoscaling.minReplicas 0 (scale to zero) needs scaleToZero, or engine KEDA",
        ),
        (
            "scale to zero without a pod to start",
            vec![
                ("/spec/replicas", json!(0)),
                ("/spec/scaleToZero", json!({})),
            ],
            "scaleToZero needs replicas of at least 1: the pods it starts from zero",
        ),
        (
            "KEDA triggers on an HPA",
            vec![(
                "/spec/autoscaling",
                json!({"maxReplicas": 2, "extraTriggers": [{"type": "cron"}]}),
            )],
            "autoscaling.extraTriggers are KEDA triggers: they need engine KEDA",
        ),
        (
            "KEDA on pending requests without Prometheus",
            vec![(
                "/spec/autoscaling",
                json!({"maxReplicas": 2, "engine": "KEDA", "metric": "PendingRequests"}),
            )],
            "autoscaling with KEDA on a sidecar metric needs prometheusAddress",
        ),
        (
            "a relative storage mount path",
            vec![("/spec/model/storage", json!({"mountPath": "models"}))],
            "storage.mountPath must be an absolute path below /, without '..'",
        ),
        (
            "a storage mount path that climbs",
            vec![("/spec/model/storage", json!({"mountPath": "/mnt/../etc"}))],
            "storage.mountPath must be an absolute path below /, without '..'",
        ),
        (
            "system shared memory without a size",
            vec![("/spec/extensions/systemSharedMemory/enabled", json!(true))],
            "systemSharedMemory.size must be a quantity greater than 0",
        ),
        (
            "system shared memory of size 0",
            vec![(
                "/spec/extensions/systemSharedMemory",
                json!({"enabled": true, "size": "0"}),
            )],
            "systemSharedMemory.size must be a quantity greater than 0",
        ),
        (
            "system shared memory of a size that is no quantity",
            vec![(
                "/spec/extensions/systemSharedMemory",
                json!({"enabled": true, "size": "lots"}),
            )],
            "systemSharedMemory.size must be a quantity greater than 0",
        ),
        (
            "SingleReplica sequences with two replicas",
            vec![
                ("/spec/replicas", json!(2)),
                (
                    "/spec/extensions/sequence",
                    json!({"enabled": true, "routing": "SingleReplica"}),
                ),
            ],
            "SingleReplica allows at most one replica",
        ),
        (
            "control APIs by key without the key",
            vec![("/spec/auth", json!({"controlAPIs": {"from": "Key"}}))],
            "controlAPIs.from Key needs controlAPIs.key",
        ),
        (
            "a control key that would not be read",
            vec![(
                "/spec/auth",
                json!({"controlAPIs": {"from": "Pod", "key": {"secretName": "k"}}}),
            )],
            "controlAPIs.key is read only with controlAPIs.from Key",
        ),
        (
            "an inference verb that would not be asked",
            vec![(
                "/spec/auth",
                json!({"inference": {"from": "Anyone", "verb": "predict"}}),
            )],
            "inference.audience and inference.verb are read only with inference.from Identity",
        ),
        (
            "a control verb that would not be asked",
            vec![(
                "/spec/auth",
                json!({"controlAPIs": {"from": "Pod", "verb": "admin"}}),
            )],
            "controlAPIs.verb is read only with controlAPIs.from Identity",
        ),
        (
            "TLS from both a Secret and an issuer",
            vec![(
                "/spec/tls",
                json!({"secretName": "cert", "issuerRef": {"name": "ca"}}),
            )],
            "tls takes exactly one of secretName",
        ),
        (
            "TLS from neither",
            vec![("/spec/tls", json!({"mutual": true}))],
            "tls takes exactly one of secretName",
        ),
        (
            "an issuer of an unknown kind",
            vec![(
                "/spec/tls",
                json!({"issuerRef": {"name": "ca", "kind": "Vault"}}),
            )],
            "Vault",
        ),
        (
            "duplicate model names",
            vec![("/spec/models", json!([{"name": "a"}, {"name": "a"}]))],
            "duplicate entry with name",
        ),
        (
            "model name with a slash",
            vec![("/spec/models", json!([{"name": "a/b"}]))],
            "does not match",
        ),
        (
            "labels without outputs",
            vec![(
                "/spec/models",
                json!([{"name": "a", "labels": {"configMap": "l", "outputs": {}}}]),
            )],
            "outputs: too few entries (at least 1)",
        ),
        (
            "unknown sidecar mode",
            vec![("/spec/sidecar/mode", json!("Sidecar"))],
            "is not one of",
        ),
        (
            "extra container without a name",
            vec![("/spec/pod/containers", json!([{"image": "busybox"}]))],
            ".name: required",
        ),
        (
            "quantity that is neither integer nor string",
            vec![("/spec/model/resources", json!({"limits": {"cpu": true}}))],
            "must be an integer or a string",
        ),
        (
            "a password in storageUri",
            vec![(
                "/spec/model/storageUri",
                json!("https://user:hunter2@host/m.tgz"),
            )],
            "carries a user name or password",
        ),
        (
            "a presigned storageUri",
            vec![(
                "/spec/model/storageUri",
                json!("https://b.s3.amazonaws.com/m.tgz?X-Amz-Date=1&X-Amz-Signature=ab"),
            )],
            "carries a signature or token in its query",
        ),
        (
            "a storageUri and a uriFrom",
            vec![
                ("/spec/model/storageUri", json!("s3://b/m")),
                (
                    "/spec/model/storage",
                    json!({"uriFrom": {"secretKeyRef": {"name": "s", "key": "uri"}}}),
                ),
            ],
            "not both",
        ),
        (
            "credentials over http://",
            vec![
                ("/spec/model/storageUri", json!("http://host/m.tgz")),
                ("/spec/model/storage", json!({"secretName": "creds"})),
            ],
            "would travel in clear",
        ),
    ];
    let mut messages_seen = BTreeSet::new();
    let mut failures = Vec::new();
    for (what, changes, want) in cases {
        let mut object = valid();
        for (pointer, value) in changes {
            set(&mut object, pointer, value);
        }
        match admission::admit(&object) {
            Ok(_) => failures.push(format!("{what}: accepted")),
            Err(problems) => {
                let text = problems.join("\n");
                if !text.contains(want) {
                    failures.push(format!("{what}: wanted {want:?}, got\n{text}"));
                }
                messages_seen.extend(problems);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));

    // Every CEL rule's message was produced by at least one case.
    let mut rule_messages = Vec::new();
    collect_messages(&crd_json(), &mut rule_messages);
    for message in rule_messages {
        assert!(
            messages_seen.iter().any(|m| m.contains(&message)),
            "no invalid case breaks the rule with message {message:?}"
        );
    }
}

fn collect_messages(node: &Value, out: &mut Vec<String>) {
    match node {
        Value::Object(map) => {
            if let Some(rules) = map
                .get("x-kubernetes-validations")
                .and_then(Value::as_array)
            {
                out.extend(
                    rules
                        .iter()
                        .filter_map(|r| r["message"].as_str().map(String::from)),
                );
            }
            map.values().for_each(|v| collect_messages(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_messages(v, out)),
        _ => {}
    }
}
