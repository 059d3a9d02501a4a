use super::*;
use crate::core::params::ParamValue;

fn fp32(name: &str, shape: Vec<i64>, values: &[f32]) -> Tensor {
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    Tensor::new(name, DataType::Fp32, shape, bytes(&data))
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
    let joined = join_inputs(&[&a, &b]).unwrap();
    assert_eq!(
        joined[0],
        fp32("X", vec![3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    );
    assert_eq!(joined[1], strings("S", vec![3, 1], &["a", "bb", "ccc"]));
}

#[test]
fn one_request_is_its_own_batch_without_a_copy() {
    let a = [fp32("X", vec![1, 2], &[1.0, 2.0])];
    let joined = join_inputs(&[&a]).unwrap();
    assert_eq!(joined[0].data.as_ptr(), a[0].data.as_ptr());
}

#[test]
fn a_request_missing_an_input_fails_the_join() {
    let a = [fp32("X", vec![1, 1], &[1.0])];
    let b = [fp32("Y", vec![1, 1], &[1.0])];
    assert!(join_inputs(&[&a, &b]).is_err());
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
    let base = Signature::new(
        &[fp32("X", vec![1, 4], &[0.0; 4])],
        &Parameters::default(),
        &outputs,
        &[0],
    );
    // The batch dimension, and the order of inputs, do not matter.
    assert_eq!(
        base,
        Signature::new(
            &[fp32("X", vec![3, 4], &[0.0; 12])],
            &Parameters::default(),
            &outputs,
            &[0]
        )
    );
    assert_ne!(
        base,
        Signature::new(
            &[fp32("X", vec![1, 5], &[0.0; 5])],
            &Parameters::default(),
            &outputs,
            &[0]
        )
    );
    let int = Tensor::new("X", DataType::Int32, vec![1, 4], bytes(&[0; 16]));
    assert_ne!(
        base,
        Signature::new(&[int], &Parameters::default(), &outputs, &[0])
    );
    let mut parameters = Parameters::default();
    parameters.insert("custom", ParamValue::Int(1));
    assert_ne!(
        base,
        Signature::new(
            &[fp32("X", vec![1, 4], &[0.0; 4])],
            &parameters,
            &outputs,
            &[0]
        )
    );
    assert_ne!(
        base,
        Signature::new(
            &[fp32("X", vec![1, 4], &[0.0; 4])],
            &Parameters::default(),
            &outputs,
            &[2]
        )
    );
}
