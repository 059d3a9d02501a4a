use super::*;
use crate::core::params::ParamValue;

fn fp32(name: &str, shape: Vec<i64>, values: &[f32]) -> Tensor {
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    Tensor::new(name, DataType::Fp32, shape, bytes(&data))
}

/// A signature under the plain rules (no ragged input).
fn signature(
    inputs: &[Tensor],
    parameters: &Parameters,
    outputs: &[String],
    classification: &[u32],
) -> Signature {
    Signature::new(
        inputs,
        parameters,
        outputs,
        classification,
        &JoinRules::default(),
    )
}

/// The rules of a model with a ragged input `R` (and a plain input `X`) and the batch inputs
/// `kinds`, each with target `B<kind>`, from `R`.
fn ragged_rules(kinds: &[i32]) -> JoinRules {
    use infergate_proto::inference::{BatchInput, ModelConfig, ModelInput};
    let input = |name: &str, ragged: bool| ModelInput {
        name: name.into(),
        data_type: 11, // TYPE_FP32
        dims: vec![-1],
        allow_ragged_batch: ragged,
        ..Default::default()
    };
    let config = ModelConfig {
        name: "ragged".into(),
        max_batch_size: 8,
        input: vec![input("R", true), input("X", false)],
        batch_input: kinds
            .iter()
            .map(|&kind| BatchInput {
                kind,
                target_name: vec![format!("B{kind}")],
                data_type: 8, // TYPE_INT32
                source_input: vec!["R".into()],
            })
            .collect(),
        ..Default::default()
    };
    JoinRules::for_model(&config).unwrap()
}

fn strings(name: &str, shape: Vec<i64>, values: &[&str]) -> Tensor {
    let mut data = Vec::new();
    for v in values {
        bytes_elements::push(&mut data, v.as_bytes());
    }
    Tensor::new(name, DataType::Bytes, shape, bytes(&data))
}

#[test]
fn joins_each_input_row_after_row_whatever_order_a_request_lists_them() {
    let a = [
        fp32("X", vec![1, 2], &[1.0, 2.0]),
        strings("S", vec![1, 1], &["a"]),
    ];
    let b = [
        strings("S", vec![2, 1], &["bb", "ccc"]),
        fp32("X", vec![2, 2], &[3.0, 4.0, 5.0, 6.0]),
    ];
    let joined = join_inputs(&[&a, &b], &JoinRules::default()).unwrap();
    assert_eq!(
        joined[0],
        fp32("X", vec![3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    );
    assert_eq!(joined[1], strings("S", vec![3, 1], &["a", "bb", "ccc"]));
}

#[test]
fn one_request_is_its_own_batch_without_a_copy() {
    let a = [fp32("X", vec![1, 2], &[1.0, 2.0])];
    let joined = join_inputs(&[&a], &JoinRules::default()).unwrap();
    assert_eq!(joined[0].data.as_ptr(), a[0].data.as_ptr());
}

#[test]
fn a_request_missing_an_input_fails_the_join() {
    let a = [fp32("X", vec![1, 1], &[1.0])];
    let b = [fp32("Y", vec![1, 1], &[1.0])];
    assert!(join_inputs(&[&a, &b], &JoinRules::default()).is_err());
}

#[test]
fn splits_outputs_back_into_each_requests_rows() {
    let outputs = vec![
        fp32("Y", vec![3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
        strings("S", vec![3, 2], &["a", "b", "cc", "dd", "", "eee"]),
    ];
    let split = split_outputs(outputs, &[1, 2]).unwrap();
    assert_eq!(
        split[0],
        vec![
            fp32("Y", vec![1, 2], &[1.0, 2.0]),
            strings("S", vec![1, 2], &["a", "b"])
        ]
    );
    assert_eq!(
        split[1],
        vec![
            fp32("Y", vec![2, 2], &[3.0, 4.0, 5.0, 6.0]),
            strings("S", vec![2, 2], &["cc", "dd", "", "eee"])
        ]
    );
}

#[test]
fn an_output_without_the_batch_as_first_dimension_fails_the_batch() {
    let outputs = vec![fp32("Y", vec![2, 2], &[1.0, 2.0, 3.0, 4.0])];
    let e = split_outputs(outputs, &[1, 2]).unwrap_err();
    assert!(
        e.message.contains("first dimension is not the batch"),
        "{}",
        e.message
    );
}

#[test]
fn an_output_whose_bytes_do_not_hold_its_shape_fails_the_batch() {
    let short = Tensor::new("Y", DataType::Fp32, vec![2, 2], bytes(&[0; 12]));
    assert!(split_outputs(vec![short], &[1, 1]).is_err());
    let mut truncated = strings("S", vec![2, 1], &["ab", "cd"]);
    truncated.data = truncated.data.slice(..truncated.data.len() - 1);
    assert!(split_outputs(vec![truncated], &[1, 1]).is_err());
    let extra = strings("S", vec![1, 1], &["ab", "cd"]);
    assert!(split_outputs(vec![extra], &[1]).is_err());
}

#[test]
fn signatures_differ_in_shapes_datatypes_parameters_and_delegated_classes() {
    let outputs = ["OUT".to_string()];
    let base = signature(
        &[fp32("X", vec![1, 4], &[0.0; 4])],
        &Parameters::default(),
        &outputs,
        &[0],
    );
    // The batch dimension, and the order of inputs, do not matter.
    assert_eq!(
        base,
        signature(
            &[fp32("X", vec![3, 4], &[0.0; 12])],
            &Parameters::default(),
            &outputs,
            &[0]
        )
    );
    assert_ne!(
        base,
        signature(
            &[fp32("X", vec![1, 5], &[0.0; 5])],
            &Parameters::default(),
            &outputs,
            &[0]
        )
    );
    let int = Tensor::new("X", DataType::Int32, vec![1, 4], bytes(&[0; 16]));
    assert_ne!(
        base,
        signature(&[int], &Parameters::default(), &outputs, &[0])
    );
    let mut parameters = Parameters::default();
    parameters.insert("custom", ParamValue::Int(1));
    assert_ne!(
        base,
        signature(
            &[fp32("X", vec![1, 4], &[0.0; 4])],
            &parameters,
            &outputs,
            &[0]
        )
    );
    assert_ne!(
        base,
        signature(
            &[fp32("X", vec![1, 4], &[0.0; 4])],
            &Parameters::default(),
            &outputs,
            &[2]
        )
    );
}

#[test]
fn ragged_inputs_join_whatever_their_shapes_into_one_dimension() {
    let rules = ragged_rules(&[1]);
    let outputs = ["OUT".to_string()];
    let a = [
        fp32("R", vec![1, 2], &[1.0, 2.0]),
        fp32("X", vec![1, 1], &[9.0]),
    ];
    let b = [
        fp32("R", vec![1, 3], &[3.0, 4.0, 5.0]),
        fp32("X", vec![1, 1], &[8.0]),
    ];
    let sign = |t: &[Tensor]| Signature::new(t, &Parameters::default(), &outputs, &[0], &rules);
    assert_eq!(sign(&a), sign(&b));
    // A plain input still has to agree.
    let c = [
        fp32("R", vec![1, 3], &[3.0, 4.0, 5.0]),
        fp32("X", vec![1, 2], &[8.0, 7.0]),
    ];
    assert_ne!(sign(&a), sign(&c));
    // Without the rule, the ragged input's shapes keep them apart.
    assert_ne!(
        signature(&a, &Parameters::default(), &outputs, &[0]),
        signature(&b, &Parameters::default(), &outputs, &[0])
    );

    let joined = join_inputs(&[&a, &b], &rules).unwrap();
    assert_eq!(joined[0], fp32("R", vec![5], &[1.0, 2.0, 3.0, 4.0, 5.0]));
    assert_eq!(joined[1], fp32("X", vec![2, 1], &[9.0, 8.0]));
    assert_eq!(joined[2], int32("B1", vec![2], &[2, 5]));
    // A request alone is flattened too, so the model always sees one layout.
    let alone = join_inputs(&[&b], &rules).unwrap();
    assert_eq!(alone[0], fp32("R", vec![3], &[3.0, 4.0, 5.0]));
}

#[test]
fn without_batch_inputs_ragged_inputs_join_only_alike_and_are_not_flattened() {
    // The model server could not cut a flat tensor apart (and a Triton behind the sidecar would
    // read its length as the batch size).
    let rules = ragged_rules(&[]);
    assert!(!rules.always_join());
    let outputs = ["OUT".to_string()];
    let a = [
        fp32("R", vec![1, 2], &[1.0, 2.0]),
        fp32("X", vec![1, 1], &[9.0]),
    ];
    let b = [
        fp32("R", vec![1, 3], &[3.0, 4.0, 5.0]),
        fp32("X", vec![1, 1], &[8.0]),
    ];
    let sign = |t: &[Tensor]| Signature::new(t, &Parameters::default(), &outputs, &[0], &rules);
    assert_ne!(sign(&a), sign(&b));
    let c = [
        fp32("R", vec![1, 2], &[6.0, 7.0]),
        fp32("X", vec![1, 1], &[7.0]),
    ];
    assert_eq!(sign(&a), sign(&c));
    let joined = join_inputs(&[&a, &c], &rules).unwrap();
    assert_eq!(joined[0], fp32("R", vec![2, 2], &[1.0, 2.0, 6.0, 7.0]));
    assert_eq!(join_inputs(&[&b], &rules).unwrap(), b.to_vec());
}

fn int32(name: &str, shape: Vec<i64>, values: &[i32]) -> Tensor {
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    Tensor::new(name, DataType::Int32, shape, bytes(&data))
}

#[test]
fn batch_inputs_describe_each_request_as_tritons_backends_do() {
    // Kinds 0..=5: element count, accumulated, accumulated with zero, max as shape, item shape,
    // item shape flattened.
    let rules = ragged_rules(&[0, 1, 2, 3, 4, 5]);
    let a = [
        fp32("R", vec![2, 3], &[0.0; 6]),
        fp32("X", vec![2, 1], &[0.0; 2]),
    ];
    let b = [
        fp32("R", vec![1, 4], &[0.0; 4]),
        fp32("X", vec![1, 1], &[0.0]),
    ];
    let joined = join_inputs(&[&a, &b], &rules).unwrap();
    let batch: Vec<&Tensor> = joined.iter().skip(2).collect();
    assert_eq!(batch[0], &int32("B0", vec![2], &[6, 4]));
    assert_eq!(batch[1], &int32("B1", vec![2], &[6, 10]));
    assert_eq!(batch[2], &int32("B2", vec![3], &[0, 6, 10]));
    assert_eq!(batch[3], &int32("B3", vec![6], &[0; 6]));
    assert_eq!(batch[4], &int32("B4", vec![3, 1], &[3, 3, 4]));
    assert_eq!(batch[5], &int32("B5", vec![3], &[3, 3, 4]));
}

#[test]
fn batch_inputs_triton_refuses_are_refused_at_load() {
    use infergate_proto::inference::{BatchInput, ModelConfig, ModelInput};
    let config = |batch: i32, data_type: i32, source: &[&str], target: &str| ModelConfig {
        name: "m".into(),
        max_batch_size: batch,
        input: vec![ModelInput {
            name: "R".into(),
            data_type: 11,
            dims: vec![-1],
            ..Default::default()
        }],
        batch_input: vec![BatchInput {
            kind: 0,
            target_name: vec![target.into()],
            data_type,
            source_input: source.iter().map(|s| s.to_string()).collect(),
        }],
        ..Default::default()
    };
    assert!(JoinRules::for_model(&config(4, 8, &["R"], "B")).is_ok());
    for (bad, why) in [
        (config(0, 8, &["R"], "B"), "max_batch_size"),
        (config(4, 13, &["R"], "B"), "TYPE_INT32 or TYPE_FP32"),
        (config(4, 8, &[], "B"), "source inputs"),
        (config(4, 8, &["Q"], "B"), "not an input"),
        (config(4, 8, &["R"], "R"), "also an input"),
    ] {
        let error = JoinRules::for_model(&bad).unwrap_err().to_string();
        assert!(error.contains(why), "{error}");
    }
}
