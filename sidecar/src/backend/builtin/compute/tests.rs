use super::*;

fn int32(name: &str, v: &[i32]) -> Tensor {
    let data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    Tensor::new(
        name,
        DataType::Int32,
        vec![1, v.len() as i64],
        Bytes::from(data),
    )
}

#[test]
fn add_sub() {
    let out = add_sub_int32(&[int32("INPUT0", &[1, 2]), int32("INPUT1", &[10, 20])]).unwrap();
    assert_eq!(out[0], int32("OUTPUT0", &[11, 22]));
    assert_eq!(out[1], int32("OUTPUT1", &[-9, -18]));
}

#[test]
fn add_sub_int8_wraps() {
    let int8 = |name: &str, v: &[i8]| {
        let data: Vec<u8> = v.iter().map(|x| *x as u8).collect();
        Tensor::new(
            name,
            DataType::Int8,
            vec![1, v.len() as i64],
            Bytes::from(data),
        )
    };
    let out = add_sub_int8(&[int8("INPUT0", &[1, 127, -128]), int8("INPUT1", &[2, 1, 1])]).unwrap();
    assert_eq!(out[0], int8("OUTPUT0", &[3, -128, -127]));
    assert_eq!(out[1], int8("OUTPUT1", &[-1, 126, 127]));
}

fn tensor(name: &str, datatype: DataType, data: &[u8]) -> Tensor {
    let elements = (data.len() / 4) as i64;
    Tensor::new(name, datatype, vec![elements], Bytes::copy_from_slice(data))
}

fn le32(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[tokio::test]
async fn repeat_answers_each_element_in_order_then_ends() {
    let inputs = [
        tensor("IN", DataType::Int32, &le32(&[7, (-3i32) as u32])),
        tensor("DELAY", DataType::Uint32, &le32(&[0, 1])),
        tensor("WAIT", DataType::Uint32, &le32(&[0])),
    ];
    let (tx, mut rx) = mpsc::channel(4);
    repeat(&inputs, tx).await.unwrap();
    for (index, value) in [7i32, -3].into_iter().enumerate() {
        let produced = rx.recv().await.unwrap();
        assert!(!produced.last);
        let response = produced.tensors;
        assert_eq!(response[0].name, "OUT");
        assert_eq!(response[0].data.as_ref(), value.to_le_bytes());
        assert_eq!(response[1].name, "IDX");
        assert_eq!(response[1].data.as_ref(), (index as u32).to_le_bytes());
    }
    assert!(rx.recv().await.is_none(), "nothing after the last element");
}

#[tokio::test]
async fn repeat_stops_when_no_one_listens() {
    let inputs = [
        tensor("IN", DataType::Int32, &le32(&[1, 2])),
        tensor("DELAY", DataType::Uint32, &le32(&[0, 3_600_000])),
        tensor("WAIT", DataType::Uint32, &le32(&[3_600_000])),
    ];
    let (tx, mut rx) = mpsc::channel(4);
    let run = tokio::spawn(async move { repeat(&inputs, tx).await });
    assert!(rx.recv().await.is_some());
    drop(rx); // the second response is an hour away
    let finished = tokio::time::timeout(std::time::Duration::from_secs(10), run).await;
    assert!(matches!(finished, Ok(Ok(Ok(())))), "{finished:?}");
}

fn repeat_inputs(values: &[u32], wait_ms: u32) -> [Tensor; 3] {
    [
        tensor("IN", DataType::Int32, &le32(values)),
        tensor("DELAY", DataType::Uint32, &le32(&vec![0; values.len()])),
        tensor("WAIT", DataType::Uint32, &le32(&[wait_ms])),
    ]
}

#[tokio::test]
async fn non_decoupled_repeat_answers_its_one_response() {
    let out = repeat_as_one(&repeat_inputs(&[1], 1)).await.unwrap();
    assert_eq!(out[0].name, "OUT");
    assert_eq!(out[0].data.as_ref(), 1i32.to_le_bytes());
    assert_eq!(out[1].name, "IDX");
    assert_eq!(out[1].data.as_ref(), 0u32.to_le_bytes());
}

#[tokio::test]
async fn non_decoupled_repeat_refuses_other_counts_as_triton() {
    for (values, count) in [(&[][..], 0), (&[4, 5, 6][..], 3)] {
        let err = repeat_as_one(&repeat_inputs(values, 0)).await.unwrap_err();
        assert_eq!(err.code, crate::error::Code::Internal);
        assert_eq!(
            err.message,
            format!("expected a single response, got {count}")
        );
    }
}

#[tokio::test]
async fn non_decoupled_repeat_keeps_the_model_errors() {
    let mut inputs = repeat_inputs(&[1], 0);
    inputs[1] = tensor("DELAY", DataType::Uint32, &le32(&[0, 0]));
    let err = repeat_as_one(&inputs).await.unwrap_err();
    assert_eq!(err.code, crate::error::Code::InvalidArg);
}

#[tokio::test]
async fn repeat_refuses_delays_that_do_not_match() {
    let inputs = [
        tensor("IN", DataType::Int32, &le32(&[1])),
        tensor("DELAY", DataType::Uint32, &le32(&[0, 0])),
        tensor("WAIT", DataType::Uint32, &le32(&[0])),
    ];
    let (tx, _rx) = mpsc::channel(4);
    let err = repeat(&inputs, tx).await.unwrap_err();
    assert_eq!(
        err.message,
        "expected IN and DELAY shape to match, got [1] and [2]"
    );
}

#[test]
fn add_sub_strings() {
    let enc = |v: &[&str]| {
        let mut b = Vec::new();
        v.iter()
            .for_each(|s| bytes_elements::push(&mut b, s.as_bytes()));
        Bytes::from(b)
    };
    let a = Tensor::new("INPUT0", DataType::Bytes, vec![1, 2], enc(&["1", "5"]));
    let b = Tensor::new("INPUT1", DataType::Bytes, vec![1, 2], enc(&["2", "3"]));
    let out = add_sub_string("simple_string", &[a.clone(), b]).unwrap();
    assert_eq!(out[0].data, enc(&["3", "8"]));
    assert_eq!(out[1].data, enc(&["-1", "2"]));
    let bad = Tensor::new("INPUT1", DataType::Bytes, vec![1, 2], enc(&["x", "3"]));
    assert!(add_sub_string("simple_string", &[a, bad]).is_err());
}
