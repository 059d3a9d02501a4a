"""The server survives misbehaving clients and concurrent load."""

import json
import socket
import threading
import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

from support import SIMPLE_A, SIMPLE_B, assert_serving, binary_body, simple_json_request

BODY = json.dumps(simple_json_request()).encode()


def connect(hostport, timeout=10):
    host, _, port = hostport.rpartition(":")
    return socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)


def http_request_bytes(path, body, extra=""):
    return (
        f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def read_http_response(sock, buf=b""):
    """Read one HTTP/1.1 response with a Content-Length body.

    buf: bytes already received (left over from a previous response).
    Returns (status, body, leftover bytes).
    """
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"connection closed, got {buf!r}")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == "content-length":
            length = int(v.strip())
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed in body")
        rest += chunk
    return status, rest[:length], rest[length:]


def test_client_disconnects_mid_body(http_url):
    for _ in range(5):
        sock = connect(http_url)
        sock.sendall(http_request_bytes("/v2/models/simple/infer", BODY)[: 60 + len(BODY) // 2])
        sock.close()
    assert_serving(http_url)


def test_client_disconnects_before_response(http_url):
    x = np.zeros(1 << 20, dtype=np.float32)
    header = {
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [x.size], "parameters": {"binary_data_size": x.nbytes}}],
        "parameters": {"binary_data_output": True},
    }
    body, headers = binary_body(header, x.tobytes())
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    for _ in range(3):
        sock = connect(http_url)
        sock.sendall(http_request_bytes("/v2/models/identity_fp32/infer", body, extra))
        sock.close()
    time.sleep(0.5)
    assert_serving(http_url)


@pytest.mark.parametrize("garbage", [
    b"\x00\x01\x02\x03" * 64,
    b"GARBAGE / NOT-HTTP\r\n\r\n",
    b"POST /v2/models/simple/infer HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
    b"GET /v2 HTTP/1.1\r\n" + b"X-Long: " + b"a" * 100_000 + b"\r\n\r\n",
])
def test_garbage_on_http_port(http_url, garbage):
    sock = connect(http_url, timeout=5)
    try:
        # The server may answer and close (or reset) while we are still sending.
        sock.sendall(garbage)
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(65536):
            pass
    except OSError:
        pass
    finally:
        sock.close()
    assert_serving(http_url)


def test_garbage_on_grpc_port(grpc_url, grpc_stub):
    sock = connect(grpc_url, timeout=5)
    try:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\xff" * 1000)
        sock.recv(1024)
    except OSError:
        pass
    finally:
        sock.close()
    assert grpc_stub.ServerLive(service_pb2.ServerLiveRequest()).live


def test_keep_alive_across_errors(http_url):
    """One connection: bad request, good request, bad, good."""
    sock = connect(http_url)
    try:
        for body, want in ((b"{bad", 500), (BODY, 200), (b'{"inputs":[]}', 400), (BODY, 200)):
            sock.sendall(http_request_bytes("/v2/models/simple/infer", body))
            status, payload, leftover = read_http_response(sock)
            assert status == want, payload
            assert leftover == b""
            if want == 200:
                assert json.loads(payload)["outputs"][0]["data"] == (SIMPLE_A + SIMPLE_B).reshape(-1).tolist()
    finally:
        sock.close()


@pytest.mark.triton251_differs(
    "pipelined HTTP/1.1 requests: only the first is answered (TRITON.md §12; seen on 2.51 when a "
    "body-less request such as GET is followed by another request)")
def test_pipelined_requests(http_url):
    sock = connect(http_url, timeout=3)
    try:
        live = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
        meta = b"GET /v2 HTTP/1.1\r\nHost: x\r\n\r\n"
        infer = http_request_bytes("/v2/models/simple/infer", BODY)
        sock.sendall(live + meta + infer + live)
        pending = b""
        answers = []
        for _ in range(4):
            status, body, pending = read_http_response(sock, pending)
            answers.append((status, body))
        assert [a[0] for a in answers] == [200, 200, 200, 200]
        assert answers[0][1] == b"" and answers[3][1] == b""
        assert json.loads(answers[1][1])["name"] == "triton"
        assert "outputs" in json.loads(answers[2][1])
        assert pending == b""
    finally:
        sock.close()


@pytest.mark.triton251_differs("URLs over about 8 KB get no response (TRITON.md §12)")
def test_very_long_url_gets_an_answer(http_url):
    sock = connect(http_url, timeout=5)
    try:
        sock.sendall(f"GET /v2/models/{'m' * 9000}/ready HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        status, _, _ = read_http_response(sock)
        assert 400 <= status < 500
    finally:
        sock.close()
    assert_serving(http_url)


def test_concurrent_http_and_grpc(http_url, grpc_url):
    errors = []

    def http_worker(k):
        try:
            import tritonclient.http as httpclient

            client = httpclient.InferenceServerClient(url=http_url)
            for i in range(15):
                a = np.full((1, 16), k * 100 + i, dtype=np.int32)
                inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
                inputs[0].set_data_from_numpy(a)
                inputs[1].set_data_from_numpy(SIMPLE_B, binary_data=(i % 2 == 0))
                r = client.infer("simple", inputs)
                assert (r.as_numpy("OUTPUT0") == a + SIMPLE_B).all()
            client.close()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    def grpc_worker(k):
        try:
            client = grpcclient.InferenceServerClient(url=grpc_url)
            for i in range(15):
                a = np.full((1, 16), k * 100 + i, dtype=np.int32)
                inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
                inputs[0].set_data_from_numpy(a)
                inputs[1].set_data_from_numpy(SIMPLE_B)
                r = client.infer("simple", inputs)
                assert (r.as_numpy("OUTPUT1") == a - SIMPLE_B).all()
            client.close()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=http_worker, args=(k,)) for k in range(4)]
    threads += [threading.Thread(target=grpc_worker, args=(k,)) for k in range(4, 8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert_serving(http_url)


def identity_1m_request(values=np.zeros):
    """A gRPC request to identity_fp32 with one 1M-element (4 MiB) FP32 input."""
    req = service_pb2.ModelInferRequest(model_name="identity_fp32")
    req.inputs.add(name="INPUT0", datatype="FP32", shape=[1 << 20])
    req.raw_input_contents.append(values(1 << 20, np.float32).tobytes())
    return req


def test_grpc_deadline_exceeded_then_serving(grpc_stub, http_url):
    req = identity_1m_request()
    for _ in range(3):
        try:
            grpc_stub.ModelInfer(req, timeout=0.001)
        except Exception as exc:  # noqa: BLE001
            assert exc.code().name in ("DEADLINE_EXCEEDED", "CANCELLED"), exc
    resp = grpc_stub.ModelInfer(req, timeout=30)
    assert len(resp.raw_output_contents[0]) == 4 << 20
    assert_serving(http_url)


def test_the_server_ends_a_call_at_its_grpc_timeout_with_deadline_exceeded(grpc_url):
    """A client with no timer of its own sends `grpc-timeout: 300m` and only the start of its
    message: the server ends the call at the deadline with DEADLINE_EXCEEDED "Deadline Exceeded",
    as gRPC's servers do (tonic's own server answered CANCELLED "Timeout expired")."""
    h2_connection = pytest.importorskip("h2.connection")
    from h2.config import H2Configuration
    from h2.events import ResponseReceived, StreamReset, TrailersReceived

    message = identity_1m_request().SerializeToString()
    framed = b"\0" + len(message).to_bytes(4, "big") + message
    conn = h2_connection.H2Connection(H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    stream = conn.get_next_available_stream_id()
    conn.send_headers(stream, [
        (":method", "POST"), (":scheme", "http"), (":authority", "test"),
        (":path", "/inference.GRPCInferenceService/ModelInfer"),
        ("content-type", "application/grpc"), ("te", "trailers"), ("grpc-timeout", "300m"),
    ])
    conn.send_data(stream, framed[:1000])  # the rest never comes
    sock = connect(grpc_url)
    try:
        sock.sendall(conn.data_to_send())
        start = time.monotonic()
        answer = None
        while answer is None:
            data = sock.recv(65536)
            assert data, "the connection closed without an answer"
            for event in conn.receive_data(data):
                if isinstance(event, (ResponseReceived, TrailersReceived)):
                    headers = dict(event.headers)
                    if "grpc-status" in headers:
                        answer = (headers["grpc-status"], headers.get("grpc-message"))
                elif isinstance(event, StreamReset) and answer is None:
                    answer = ("reset", event.error_code)
            sock.sendall(conn.data_to_send())
        waited = time.monotonic() - start
    finally:
        sock.close()
    assert answer == ("4", "Deadline Exceeded"), answer
    assert 0.25 <= waited < 10, waited


def test_a_deadline_that_passes_while_the_server_works_is_deadline_exceeded(grpc_stub):
    """Whichever side notices first, the client or the server, a call past its deadline ends
    DEADLINE_EXCEEDED "Deadline Exceeded", as with gRPC's own servers (tonic's says CANCELLED
    "Timeout expired" when its timer wins)."""
    # Deadlines are set to fractions of how long the call takes here, so that they pass while the
    # request is being worked on or answered rather than while the client is still sending it.
    # The fastest of five calls: on a busy machine a slow one would set deadlines every later
    # call beats.
    req = identity_1m_request()
    took = []
    for _ in range(5):
        start = time.perf_counter()
        grpc_stub.ModelInfer(req, timeout=30)
        took.append(time.perf_counter() - start)
    fastest = min(took)
    expired = []
    for _ in range(3):
        for step in range(20):
            fraction = 0.3 + 0.035 * step
            try:
                grpc_stub.ModelInfer(req, timeout=fastest * fraction)
            except grpc.RpcError as exc:
                expired.append((round(fraction, 3), exc.code().name, exc.details()))
        if expired:
            break
    assert expired, "every call beat its deadline: nothing was checked"
    for fraction, code, details in expired:
        assert (code, details) == ("DEADLINE_EXCEEDED", "Deadline Exceeded"), (fraction, code, details)


@pytest.mark.triton251_differs(
    "Triton 2.51 dies (SIGSEGV in its gRPC front end) under this many cancelled 4 MiB calls, "
    "which would take the oracle down for the tests after this one",
    run=False,
)
def test_grpc_calls_cancelled_before_they_are_sent_leave_the_connection_serving(grpc_url):
    """gRPC's C core can cancel a call after numbering its stream but before sending it, and
    still reset that stream: a deadline of a millisecond or two on calls queued behind a large
    message does it. That reset must not close the connection under the calls in flight on it
    (an HTTP/2 server that answers it with GOAWAY fails them all with UNAVAILABLE)."""
    big = identity_1m_request()
    options = [
        ("grpc.max_send_message_length", 64 << 20),
        ("grpc.max_receive_message_length", 64 << 20),
    ]
    lock = threading.Lock()
    short_call_codes = set()
    failures = []
    for _ in range(30):
        channel = grpc.insecure_channel(grpc_url, options=options)
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)

        def short_calls():
            for _ in range(4):
                try:
                    stub.ModelInfer(big, timeout=0.002)
                    code = grpc.StatusCode.OK
                except grpc.RpcError as exc:
                    code = exc.code()
                with lock:
                    short_call_codes.add(code)

        def full_call():
            try:
                resp = stub.ModelInfer(big, timeout=60)
                if len(resp.raw_output_contents[0]) != 4 << 20:
                    raise AssertionError("short output")
            except (grpc.RpcError, AssertionError) as exc:
                with lock:
                    failures.append(exc)

        threads = [threading.Thread(target=short_calls) for _ in range(4)]
        threads.append(threading.Thread(target=full_call))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        channel.close()
    assert not failures, f"{len(failures)} of 30 full calls failed, first: {failures[0]}"
    expected = {grpc.StatusCode.OK, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
    assert short_call_codes <= expected, short_call_codes


def test_grpc_stream_cancelled_with_requests_in_flight_then_serving(grpc_stub, http_url):
    """A client that cancels its stream while large requests are still in flight on it: the
    stream ends with CANCELLED, and the server serves new streams and requests as before."""
    import queue

    pending = queue.Queue()
    end = object()
    responses = grpc_stub.ModelStreamInfer(iter(pending.get, end), timeout=60)
    big = identity_1m_request(np.ones)
    pending.put(big)
    first = next(responses)
    assert not first.error_message, first.error_message
    for _ in range(8):
        pending.put(big)
    responses.cancel()
    pending.put(end)
    with pytest.raises(grpc.RpcError) as cancelled:
        for _ in responses:
            pass
    assert cancelled.value.code() == grpc.StatusCode.CANCELLED
    # A fresh stream on the same channel works.
    again = grpc_stub.ModelStreamInfer(iter([big]), timeout=60)
    answers = list(again)
    assert len(answers) == 1 and not answers[0].error_message
    assert len(answers[0].infer_response.raw_output_contents[0]) == 4 << 20
    assert_serving(http_url)
