use super::*;

/// Every RPC of the service has a protocol: the `rpc` lines of the service's definition.
#[test]
fn every_rpc_has_triton_s_protocol() {
    let definition = include_str!("../../../../proto/proto/grpc_service.proto");
    let methods: Vec<&str> = definition
        .lines()
        .filter_map(|line| line.trim().strip_prefix("rpc "))
        .filter_map(|rest| rest.split('(').next())
        .map(str::trim)
        .collect();
    assert_eq!(methods.len(), 20, "{methods:?}");
    for method in methods {
        let path = format!("/inference.GRPCInferenceService/{method}");
        assert!(category(&path).is_some(), "{path}");
    }
}

#[tokio::test]
async fn refused_calls_never_reach_the_service() {
    use tower::ServiceExt;

    let mut config = infergate_config::SidecarConfig::default();
    config.server.grpc_restricted_protocol = vec!["inference,health:key=value".into()];
    let state =
        crate::server::build_state(&config, crate::log::LogControl::detached("info")).unwrap();
    let reached = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = reached.clone();
    let inner = tower::service_fn(move |_: Request<()>| {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async { Ok::<_, Infallible>(Response::new(Body::empty())) }
    });
    let service = Restricted::new(state, inner);
    let call = |path: &str, header: Option<(&'static str, &'static str)>| {
        let mut request = Request::builder().uri(path);
        if let Some((k, v)) = header {
            request = request.header(k, v);
        }
        service.clone().oneshot(request.body(()).unwrap())
    };

    let refused = call("/inference.GRPCInferenceService/ModelStreamInfer", None)
        .await
        .unwrap();
    let status = tonic::Status::from_header_map(refused.headers()).unwrap();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert_eq!(
        status.message(),
        "This protocol is restricted, expecting header 'triton-grpc-protocol-key'"
    );
    let wrong = Some(("triton-grpc-protocol-key", "other"));
    let right = Some(("triton-grpc-protocol-key", "value"));
    for (path, header) in [
        ("/inference.GRPCInferenceService/ModelInfer", None),
        ("/inference.GRPCInferenceService/ModelInfer", wrong),
        (
            "/inference.GRPCInferenceService/ModelInfer",
            Some(("key", "value")),
        ),
        ("/grpc.health.v1.Health/Check", None),
    ] {
        let answer = call(path, header).await.unwrap();
        assert!(answer.headers().contains_key("grpc-status"), "{path}");
    }
    assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 0);
    for (path, header) in [
        ("/inference.GRPCInferenceService/ModelInfer", right),
        ("/inference.GRPCInferenceService/ModelStatistics", None),
        ("/inference.GRPCInferenceService/NoSuchMethod", None),
        ("/grpc.health.v1.Health/Watch", None),
    ] {
        let answer = call(path, header).await.unwrap();
        assert!(!answer.headers().contains_key("grpc-status"), "{path}");
    }
    assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 4);
}

#[test]
fn rpcs_belong_to_triton_s_protocols() {
    use RestrictedCategory as C;
    let rpc = |m: &str| category(&format!("/inference.GRPCInferenceService/{m}"));
    assert_eq!(rpc("ServerLive"), Some(C::Health));
    assert_eq!(rpc("ModelReady"), Some(C::Health));
    assert_eq!(rpc("ServerMetadata"), Some(C::Metadata));
    assert_eq!(rpc("ModelInfer"), Some(C::Inference));
    assert_eq!(rpc("ModelStreamInfer"), Some(C::Inference));
    assert_eq!(rpc("ModelConfig"), Some(C::ModelConfig));
    assert_eq!(rpc("ModelStatistics"), Some(C::Statistics));
    assert_eq!(rpc("RepositoryModelUnload"), Some(C::ModelRepository));
    assert_eq!(rpc("CudaSharedMemoryRegister"), Some(C::SharedMemory));
    assert_eq!(rpc("TraceSetting"), Some(C::Trace));
    assert_eq!(rpc("LogSettings"), Some(C::Logging));
    assert_eq!(rpc("NoSuchMethod"), None);
    assert_eq!(category("/grpc.health.v1.Health/Check"), Some(C::Health));
    assert_eq!(category("/grpc.health.v1.Health/Watch"), None);
    assert_eq!(category("/other.Service/ModelInfer"), None);
}
