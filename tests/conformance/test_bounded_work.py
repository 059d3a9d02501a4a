"""Bounded work: what a slow, idle or greedy client can hold of the sidecar, and what it gets past
each bound (docs/hardening.md, "Bounded work"). Each test starts a sidecar of its own with small
limits and plays the client as an attacker would, byte by byte where a client library would not.
Sidecar-specific (Triton has none of these bounds), so skipped when the suite is pointed at a
running server."""

from __future__ import annotations

import json
import re
import resource
import socket
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

import conftest
import h2_raw
from support import own_sidecars, raw_request

pytestmark = own_sidecars

LIVE = "/inference.GRPCInferenceService/ServerLive"
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"


def start(tmp_path: Path, limits: dict, name: str = "bounded"):
    """A sidecar with these `limits.*` in its configuration file (JSON is YAML)."""
    directory = tmp_path / name
    directory.mkdir()
    config = directory / "sidecar.yaml"
    config.write_text(json.dumps({"limits": limits}))
    return conftest._start_sidecar(directory, extra_args=["--config", str(config)])


def admin_addr(server) -> str:
    for line in server.log_lines:
        m = re.search(r'"admin_addr":"([^"]+)"', line)
        if m:
            return conftest.connectable(m.group(1))
    raise AssertionError(f"no admin_addr in the log:\n{server.log_tail()}")


def connect(hostport: str, timeout: float = 10.0) -> socket.socket:
    host, _, port = hostport.rpartition(":")
    return socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes the connection within `seconds` (reading and dropping what
    it sends)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            if not sock.recv(65536):
                return True
        except socket.timeout:
            return False
        except (ConnectionResetError, BrokenPipeError):
            return True
    return False


def read_answer(sock: socket.socket, seconds: float) -> bytes:
    """Everything the server sends until it closes or `seconds` pass."""
    data = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
        if b"\r\n\r\n" in data:
            head, _, body = data.partition(b"\r\n\r\n")
            m = re.search(rb"(?i)content-length:\s*(\d+)", head)
            if m and len(body) >= int(m.group(1)):
                break
    return data


def infer_head(length: int) -> bytes:
    return (f"POST /v2/models/simple/infer HTTP/1.1\r\nHost: test\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n").encode()


def memory(pid: int) -> tuple[int, int]:
    """(resident bytes, data segment bytes): what the process uses, and what it has allocated
    whether or not it has touched it yet."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                  if ":" in line)
    return tuple(int(fields[name].split()[0]) * 1024 for name in ("VmRSS", "VmData"))


def test_the_admin_and_metrics_ports_close_a_request_head_that_never_ends(tmp_path):
    server = start(tmp_path, {"http_header_timeout_seconds": 1})
    try:
        for port in (admin_addr(server), server.metrics):
            sock = connect(port)
            sock.sendall(b"GET /status HTTP/1.1\r\nHost: test\r\n")  # never finished
            assert closed_within(sock, 5), f"{port} kept a request head open past its deadline"
            sock.close()
            # The port still serves complete requests.
            path = "/status" if port != server.metrics else "/metrics"
            assert raw_request(port, "GET", path).status == 200
    finally:
        conftest._stop(server.process)


def test_both_http2_ports_announce_a_finite_stream_limit(tmp_path):
    server = start(tmp_path, {"max_concurrent_streams": 7})
    try:
        for port in (server.grpc, server.http):  # gRPC, and h2c on the HTTP port
            conn = h2_raw.Connection(port)
            settings = conn.server_settings()
            conn.close()
            assert settings.get(h2_raw.SETTINGS_MAX_CONCURRENT_STREAMS) == 7, (port, settings)
    finally:
        conftest._stop(server.process)


def test_a_client_that_makes_the_server_reset_stream_after_stream_gets_goaway(tmp_path):
    # "MadeYouReset" (CVE-2025-8671): each stream is opened declaring `content-length: 0` and
    # then sent a byte of DATA, a stream error the server answers with RST_STREAM. h2's limit on
    # such resets (1024 per connection) ends the connection with ENHANCE_YOUR_CALM instead of
    # letting a client make the server start and kill calls without end.
    server = start(tmp_path, {})
    try:
        conn = h2_raw.Connection(server.grpc)
        conn.server_settings()
        goaway = None
        stream = 1
        try:
            for _ in range(60):  # 3,000 streams at the most
                batch = b""
                for _ in range(50):
                    batch += conn.headers(stream, LIVE, extra=(("content-length", "0"),))
                    batch += h2_raw.frame(h2_raw.DATA, 0, stream, b"x")
                    stream += 2
                conn.send(batch)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server went first: its GOAWAY is already in the buffer
        try:
            goaway = conn.wait_for_goaway(10)
        except TimeoutError:
            pytest.fail(f"no GOAWAY after {stream // 2} streams reset for the client's errors")
        assert goaway is not None, "the connection ended without GOAWAY"
        _, code, _ = goaway.goaway()
        assert code == h2_raw.ENHANCE_YOUR_CALM, goaway
        conn.close()
        # Other clients are served.
        assert grpcclient.InferenceServerClient(server.grpc).is_server_live()
    finally:
        conftest._stop(server.process)


def test_a_connection_over_the_cap_is_refused_with_the_reason(tmp_path):
    server = start(tmp_path, {"max_connections": 3})
    try:
        # HTTP: three connections held open; the fourth is answered 503 and closed.
        held = [connect(server.http) for _ in range(3)]
        time.sleep(0.3)  # accepted
        extra = connect(server.http)
        extra.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: test\r\n\r\n")
        answer = read_answer(extra, 5)
        extra.close()
        assert answer.startswith(b"HTTP/1.1 503"), answer
        assert b"too many connections" in answer, answer
        assert b"retry-after" in answer.lower(), answer
        # One goes: the next connection is served.
        held.pop().close()
        time.sleep(0.3)
        assert raw_request(server.http, "GET", "/v2/health/live").status == 200

        # gRPC: over the cap, an HTTP/2 client reads GOAWAY with the reason.
        grpc_held = [connect(server.grpc) for _ in range(3)]
        time.sleep(0.3)
        conn = h2_raw.Connection(server.grpc)
        goaway = conn.wait_for_goaway(5)
        conn.close()
        assert goaway is not None, "closed without GOAWAY"
        _, code, reason = goaway.goaway()
        assert (code, reason) == (h2_raw.ENHANCE_YOUR_CALM, b"too many connections")
        for sock in held + grpc_held:
            sock.close()
        time.sleep(0.3)
        assert grpcclient.InferenceServerClient(server.grpc).is_server_live()
    finally:
        conftest._stop(server.process)


def test_an_idle_http2_connection_is_asked_to_go_and_a_busy_one_is_not(tmp_path):
    server = start(tmp_path, {"idle_timeout_seconds": 1})
    try:
        idle = h2_raw.Connection(server.grpc)
        idle.server_settings()
        busy = h2_raw.Connection(server.grpc)
        busy.server_settings()
        # A stream left open: a call in flight for as long as it lasts.
        busy.send(busy.headers(1, STREAM))
        try:
            goaway = idle.wait_for_goaway(5)
        except TimeoutError:
            pytest.fail("an idle connection was kept past idle_timeout_seconds")
        assert goaway is not None and goaway.goaway()[1] == 0, goaway  # NO_ERROR
        with pytest.raises(TimeoutError):
            busy.wait_for_goaway(2)
        idle.close()
        busy.close()
    finally:
        conftest._stop(server.process)


def test_a_body_that_trickles_past_the_whole_body_deadline_is_refused(tmp_path):
    server = start(tmp_path, {"http_body_deadline_seconds": 2})
    try:
        sock = connect(server.http)
        sock.sendall(infer_head(1000))
        started = time.monotonic()
        answer = b""
        # One byte every 0.3 s: never stalled long enough for the 30 s stall timeout.
        while time.monotonic() - started < 8:
            try:
                sock.sendall(b" ")
            except (BrokenPipeError, ConnectionResetError):
                break
            sock.settimeout(0.3)
            try:
                answer += sock.recv(65536)
            except socket.timeout:
                continue
            if answer:
                break
        answer += read_answer(sock, 2)
        sock.close()
        assert answer.startswith(b"HTTP/1.1 400"), answer
        assert b"timed out reading the request body: not complete after 2 s" in answer, answer
    finally:
        conftest._stop(server.process)


def test_request_bytes_past_the_budget_are_refused_as_busy(tmp_path):
    server = start(tmp_path, {"max_http_body_bytes": 1 << 20, "max_grpc_message_bytes": 1 << 20,
                              "max_inflight_request_bytes": 1_500_000})
    try:
        # One client holds 900 kB of a body it never finishes.
        holder = connect(server.http)
        holder.sendall(infer_head(1_000_000) + b" " * 900_000)
        time.sleep(0.5)
        # Another's 700 kB would go past the budget: 503, not a bigger process.
        body = b" " * 700_000
        refused = raw_request(server.http, "POST", "/v2/models/simple/infer", body=body)
        assert refused.status == 503, refused
        assert refused.error == "server is busy", refused
        # gRPC the same, UNAVAILABLE.
        client = grpcclient.InferenceServerClient(server.grpc)
        inputs = [grpcclient.InferInput(n, [1, 100_000], "INT32") for n in ("INPUT0", "INPUT1")]
        for i in inputs:
            i.set_data_from_numpy(np.ones((1, 100_000), dtype=np.int32))
        with pytest.raises(InferenceServerException) as e:
            client.infer("simple", inputs)
        assert "server is busy" in str(e.value), e.value
        assert e.value.status() == "StatusCode.UNAVAILABLE", e.value
        # The holder goes: its bytes are given back, and the same request is read again.
        holder.close()
        time.sleep(0.5)
        after = raw_request(server.http, "POST", "/v2/models/simple/infer", body=body)
        # Read whole, then refused as JSON (Triton's 500 for a body that is not JSON).
        assert after.status == 500, after
        assert after.error.startswith("failed to parse the request JSON buffer"), after
    finally:
        conftest._stop(server.process)


def test_bodies_declared_large_and_sent_slowly_hold_no_memory(tmp_path):
    server = start(tmp_path, {})
    try:
        pid = server.process.pid
        rss_before, data_before = memory(pid)
        clients = []
        for _ in range(4):
            sock = connect(server.http)
            sock.sendall(infer_head(48 << 20) + b" " * (64 << 10))
            clients.append(sock)
        time.sleep(1.5)
        rss, data = memory(pid)
        for sock in clients:
            sock.close()
        # Four 48 MiB buffers would be 192 MiB, allocated even where not yet touched; what
        # arrived is 256 KiB.
        assert rss - rss_before < 32 << 20, f"RSS grew by {(rss - rss_before) >> 20} MiB"
        assert data - data_before < 32 << 20, \
            f"{(data - data_before) >> 20} MiB allocated for 256 KiB received"
    finally:
        conftest._stop(server.process)


def test_the_open_file_soft_limit_is_raised_to_the_hard_limit(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 512:
        pytest.skip(f"the hard limit here ({hard}) leaves no room to lower the soft one")
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        server = conftest._start_sidecar(tmp_path)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        limits = Path(f"/proc/{server.process.pid}/limits").read_text()
        row = next(line for line in limits.splitlines() if line.startswith("Max open files"))
        now_soft, now_hard = row.split()[3:5]
        assert now_soft == now_hard, row
    finally:
        conftest._stop(server.process)
