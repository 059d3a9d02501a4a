use super::*;
use tokio::net::TcpListener;

fn head(text: &str) -> Head {
    parse_head(text.as_bytes()).unwrap().unwrap()
}

#[test]
fn a_head_gives_its_status_length_and_the_inference_header_length() {
    let h = head(
        "HTTP/1.1 200 OK\r\nContent-Length: 12\r\nInference-Header-Content-Length: 7\r\n\r\nbody",
    );
    assert_eq!(h.status, 200);
    assert_eq!(h.content_length, Some(12));
    assert_eq!(h.header_length, Some(7));
    assert!(h.keep_alive);
    assert_eq!(h.length, 75);
}

#[test]
fn an_incomplete_head_asks_for_more() {
    assert!(
        parse_head(b"HTTP/1.1 200 OK\r\nContent-Len")
            .unwrap()
            .is_none()
    );
}

#[test]
fn connection_close_and_http_1_0_end_the_connection() {
    assert!(!head("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n").keep_alive);
    assert!(!head("HTTP/1.0 200 OK\r\n\r\n").keep_alive);
    assert!(head("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n").keep_alive);
}

#[test]
fn chunks_win_over_a_length() {
    let h = head("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n");
    assert!(h.chunked);
    assert_eq!(h.content_length, None);
}

#[test]
fn bad_lengths_and_garbage_are_errors() {
    assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n").is_err());
    assert!(
        parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").is_err()
    );
    assert!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
}

/// What the test server does with each request it reads.
enum Reply {
    /// Answer, and keep reading on the connection.
    Answer(&'static str),
    /// Answer, then close the connection.
    AnswerAndClose(&'static str),
    /// Close without answering.
    Close,
}

/// A server that takes the replies in turn, one per request it reads, and returns the
/// requests it got once the replies are used up.
async fn serve(replies: Vec<Reply>) -> (String, tokio::task::JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut replies = replies.into_iter().peekable();
        while replies.peek().is_some() {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = Vec::new();
            while replies.peek().is_some() {
                let mut chunk = [0u8; 4096];
                let n = socket.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                buffer.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buffer).to_string();
                let Some(end) = text.find("\r\n\r\n") else {
                    continue;
                };
                let length = text[..end]
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .map_or(0, |v| v.parse::<usize>().unwrap());
                if buffer.len() < end + 4 + length {
                    continue;
                }
                seen.push(text[..end + 4 + length].to_string());
                buffer.drain(..end + 4 + length);
                match replies.next().unwrap() {
                    Reply::Answer(a) => socket.write_all(a.as_bytes()).await.unwrap(),
                    Reply::AnswerAndClose(a) => {
                        socket.write_all(a.as_bytes()).await.unwrap();
                        break;
                    }
                    Reply::Close => break,
                }
            }
        }
        seen
    });
    (address, task)
}

fn post<'a>(body: &'a [Bytes]) -> Request<'a> {
    Request {
        method: "POST",
        path: "/v2/models/m/infer",
        headers: &[("Content-Type", "application/json")],
        body,
    }
}

#[tokio::test]
async fn calls_reuse_one_connection_and_read_lengths_and_chunks() {
    let (address, server) = serve(vec![
        Reply::Answer(
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nInference-Header-Content-Length: 2\r\n\r\nhello",
        ),
        Reply::Answer(
            "HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: 1\r\n\r\n",
        ),
        Reply::Answer(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        ),
    ])
    .await;
    let client = Http1Client::new(&address, Duration::from_secs(2));
    let body = [Bytes::from_static(b"{\"a\":"), Bytes::from_static(b"1}")];
    let first = client.call(&post(&body), 100).await.unwrap();
    assert_eq!(
        (first.status.as_u16(), first.header_length, &first.body[..]),
        (200, Some(2), &b"hello"[..])
    );
    let second = client.call(&post(&body), 100).await.unwrap();
    assert_eq!(
        (second.status.as_u16(), &second.body[..]),
        (400, &b"abcde"[..])
    );
    let third = client.call(&post(&[]), 100).await.unwrap();
    assert_eq!((third.status.as_u16(), third.body.len()), (200, 0));
    drop(client);
    let seen = server.await.unwrap();
    assert_eq!(seen.len(), 3, "all three on one connection: {seen:?}");
    assert!(seen[0].starts_with("POST /v2/models/m/infer HTTP/1.1\r\nHost: 127.0.0.1:"));
    assert!(seen[0].contains("\r\nContent-Length: 7\r\n"));
    assert!(seen[0].ends_with("\r\n\r\n{\"a\":1}"));
    assert!(seen[2].contains("\r\nContent-Length: 0\r\n"));
}

#[tokio::test]
async fn close_is_honoured_and_a_closed_idle_connection_is_not_reused() {
    let (address, server) = serve(vec![
        Reply::Answer("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\na"),
        // Kept alive by the answer, closed by the server while idle.
        Reply::AnswerAndClose("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb"),
        Reply::Answer("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nc"),
    ])
    .await;
    let client = Http1Client::new(&address, Duration::from_secs(2));
    assert_eq!(&client.call(&post(&[]), 10).await.unwrap().body[..], b"a");
    assert_eq!(&client.call(&post(&[]), 10).await.unwrap().body[..], b"b");
    // Let the server's end of stream reach the idle connection.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(&client.call(&post(&[]), 10).await.unwrap().body[..], b"c");
    drop(client);
    assert_eq!(server.await.unwrap().len(), 3);
}

/// A server that answers every request (no body) on every connection it accepts with the
/// number of that connection, from 1.
async fn serve_connection_numbers() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        for number in 1u8.. {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 1024];
                while let Ok(n @ 1..) = socket.read(&mut chunk).await {
                    buffer.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                        buffer.drain(..end + 4);
                        let answer =
                            format!("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n{number}");
                        if socket.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    address
}

#[tokio::test]
async fn a_connection_idle_too_long_is_closed_not_reused() {
    let address = serve_connection_numbers().await;
    let client = Http1Client::new(&address, Duration::from_secs(2))
        .with_max_idle_age(Duration::from_millis(200));
    let call = async |client: &Http1Client| client.call(&post(&[]), 10).await.unwrap().body;
    assert_eq!(&call(&client).await[..], b"1");
    assert_eq!(&call(&client).await[..], b"1", "reused while fresh");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        &call(&client).await[..],
        b"2",
        "idle too long: a new connection"
    );
    assert_eq!(&call(&client).await[..], b"2");
}

#[tokio::test]
async fn no_idle_age_means_a_connection_for_every_call() {
    let address = serve_connection_numbers().await;
    let client =
        Http1Client::new(&address, Duration::from_secs(2)).with_max_idle_age(Duration::ZERO);
    for expected in [b"1", b"2", b"3"] {
        assert_eq!(
            &client.call(&post(&[]), 10).await.unwrap().body[..],
            expected
        );
    }
}

#[tokio::test]
async fn limits_and_broken_answers_are_errors() {
    let (address, _server) = serve(vec![
        Reply::AnswerAndClose("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world"),
        Reply::AnswerAndClose(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n",
        ),
        Reply::Close,
    ])
    .await;
    let client = Http1Client::new(&address, Duration::from_secs(2));
    assert!(matches!(
        client.call(&post(&[]), 10).await,
        Err(Error::TooLarge(10))
    ));
    assert!(matches!(
        client.call(&post(&[]), 10).await,
        Err(Error::TooLarge(10))
    ));
    assert!(matches!(
        client.call(&post(&[]), 10).await,
        Err(Error::Broken(_))
    ));
}

#[tokio::test]
async fn a_refused_connection_is_a_connect_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    drop(listener);
    let client = Http1Client::new(&address, Duration::from_secs(2));
    assert!(matches!(
        client.call(&post(&[]), 10).await,
        Err(Error::Connect(_))
    ));
}

#[tokio::test]
async fn a_large_request_is_written_from_its_parts() {
    let (address, server) = serve(vec![Reply::Answer(
        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    )])
    .await;
    let client = Http1Client::new(&address, Duration::from_secs(2));
    let big = Bytes::from(vec![b'x'; 3 * GATHER_BYTES]);
    let body = [Bytes::from_static(b"{}"), big.clone(), big];
    client.call(&post(&body), 10).await.unwrap();
    drop(client);
    let seen = server.await.unwrap();
    assert_eq!(
        seen[0].len() - seen[0].find("\r\n\r\n").unwrap() - 4,
        2 + 6 * GATHER_BYTES
    );
}

#[tokio::test]
async fn a_large_answer_is_read_whole() {
    let body = "y".repeat(300_000);
    let answer: &'static str = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_boxed_str(),
    );
    let (address, _server) = serve(vec![Reply::Answer(answer)]).await;
    let client = Http1Client::new(&address, Duration::from_secs(2));
    let response = client.call(&post(&[]), 1 << 20).await.unwrap();
    assert_eq!(response.body.len(), 300_000);
    assert!(response.body.iter().all(|b| *b == b'y'));
}
