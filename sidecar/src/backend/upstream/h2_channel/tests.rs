use super::*;
use crate::backend::upstream::upstream_error;
use crate::error::Code;
use infergate_proto::inference::ServerReadyRequest;
use infergate_proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tokio::net::TcpListener;

fn settings() -> Settings {
    Settings {
        connect_timeout: Duration::from_secs(2),
        stream_window: 1 << 20,
        connection_window: 2 << 20,
    }
}

/// What a peer answers a call with: a message (protobuf bytes) or none, and a gRPC status.
struct Answer {
    message: Option<&'static [u8]>,
    status: u16,
    text: &'static str,
}

/// A gRPC peer that answers one call per connection and then closes it; it reports each
/// call's request body.
async fn peer(listener: TcpListener, answers: Vec<Answer>) -> Vec<Bytes> {
    let mut bodies = Vec::new();
    for answer in answers {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut connection = h2::server::handshake(tcp).await.unwrap();
        let (request, mut respond) = connection.accept().await.unwrap().unwrap();
        let mut body = request.into_body();
        let mut received = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            body.flow_control().release_capacity(chunk.len()).unwrap();
            received.extend_from_slice(&chunk);
        }
        bodies.push(Bytes::from(received));
        let head = Response::builder()
            .header("content-type", "application/grpc")
            .body(())
            .unwrap();
        let mut send = respond.send_response(head, false).unwrap();
        if let Some(message) = answer.message {
            let mut framed = vec![0u8];
            framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
            framed.extend_from_slice(message);
            send.send_data(Bytes::from(framed), false).unwrap();
        }
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", answer.status.into());
        trailers.insert("grpc-message", answer.text.parse().unwrap());
        send.send_trailers(trailers).unwrap();
        // Drive the connection until the answer is out, then drop it.
        let _ = tokio::time::timeout(Duration::from_millis(100), connection.accept()).await;
    }
    bodies
}

async fn client_to(listener: &TcpListener) -> (H2Channel, GrpcInferenceServiceClient<H2Channel>) {
    let url = format!("http://{}", listener.local_addr().unwrap());
    let channel = H2Channel::lazy(&url, settings()).unwrap();
    (channel.clone(), GrpcInferenceServiceClient::new(channel))
}

/// Waits until the channel has seen its connection close.
async fn closed(channel: &H2Channel) {
    for _ in 0..200 {
        let connection = channel.shared.connection.lock().await;
        if connection
            .as_ref()
            .is_some_and(|c| !c.open.load(Ordering::Acquire))
        {
            return;
        }
        drop(connection);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the connection did not close");
}

#[tokio::test]
async fn answers_statuses_and_a_new_connection_after_the_last_one_closed() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (channel, mut client) = client_to(&listener).await;
    let ready = Answer {
        message: Some(&[0x08, 0x01]),
        status: 0,
        text: "",
    };
    let refused = Answer {
        message: None,
        status: 5,
        text: "no model",
    };
    let served = tokio::spawn(peer(listener, vec![ready, refused]));

    let first = client.server_ready(ServerReadyRequest {}).await.unwrap();
    assert!(first.into_inner().ready);
    closed(&channel).await;
    let second = client
        .server_ready(ServerReadyRequest {})
        .await
        .unwrap_err();
    assert_eq!(
        (second.code(), second.message()),
        (tonic::Code::NotFound, "no model")
    );
    // An empty message is still a framed message: five bytes, flag and length.
    let bodies = served.await.unwrap();
    assert_eq!(bodies, vec![Bytes::from_static(&[0, 0, 0, 0, 0]); 2]);
}

#[tokio::test]
async fn nothing_listening_is_unavailable() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (_, mut client) = client_to(&listener).await;
    drop(listener);
    let status = client
        .server_ready(ServerReadyRequest {})
        .await
        .unwrap_err();
    let error = upstream_error(status, "grpc://upstream");
    assert_eq!(error.code, Code::Unavailable, "{}", error.message);
    assert!(
        error
            .message
            .starts_with("upstream model server grpc://upstream is unavailable: "),
        "{}",
        error.message
    );
}

#[test]
fn only_plaintext_urls_with_a_port() {
    assert!(H2Channel::lazy("http://127.0.0.1:8001", settings()).is_ok());
    assert!(H2Channel::lazy("https://127.0.0.1:8001", settings()).is_err());
    assert!(H2Channel::lazy("http://127.0.0.1", settings()).is_err());
    assert!(H2Channel::lazy("not a url", settings()).is_err());
}
