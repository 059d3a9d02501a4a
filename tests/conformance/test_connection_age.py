"""A connection's maximum age (`limits.max_connection_age_seconds`): a long-lived client is asked
to go (HTTP/2 GOAWAY) however busy it is, so that it reconnects and spreads over pods added
since; the calls open on it, streams included, finish there (within
`limits.max_connection_age_grace_seconds` when one is set).

The clients are the real tritonclient gRPC clients, through a TCP relay that counts the
connections they open; the GOAWAY itself is read off the wire (h2_raw).
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from functools import partial

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

import conftest
import h2_raw
from support import own_sidecars
from test_bounded_work import STREAM, start

pytestmark = own_sidecars


class CountingRelay:
    """A TCP relay on loopback to `target` that counts the connections made through it."""

    def __init__(self, target: str):
        host, port = target.rsplit(":", 1)
        self.target = (host.strip("[]"), int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            server = socket.create_connection(self.target)
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source, sink):
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.listener.close()


def simple_inputs():
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
              grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    return inputs, a + a


def test_a_busy_connection_is_asked_to_go_when_it_reaches_its_age(tmp_path):
    server = start(tmp_path, {"max_connection_age_seconds": 1})
    try:
        busy = h2_raw.Connection(server.grpc)
        busy.server_settings()
        # A stream left open: a call in flight, which the idle timeout would never end.
        busy.send(busy.headers(1, STREAM))
        try:
            goaway = busy.wait_for_goaway(5)
        except TimeoutError:
            pytest.fail("a connection was kept past max_connection_age_seconds")
        assert goaway is not None and goaway.goaway()[1] == 0, goaway  # NO_ERROR
        # The stream it had open is below the last stream the server will still serve.
        assert goaway.goaway()[0] >= 1, goaway.goaway()
        busy.close()
    finally:
        conftest._stop(server.process)


def test_one_grpc_channel_under_load_reconnects_at_its_age_and_loses_no_call(tmp_path):
    server = start(tmp_path, {"max_connection_age_seconds": 1})
    relay = CountingRelay(server.grpc)
    try:
        client = grpcclient.InferenceServerClient(relay.address)
        inputs, want = simple_inputs()
        calls = 0
        ends = time.monotonic() + 4.5
        while time.monotonic() < ends:
            result = client.infer("simple", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), want)
            calls += 1
        client.close()
        # Ages of 0.9–1.1 s over 4.5 s: at least three new connections after the first.
        assert relay.connections >= 4, (relay.connections, calls)
    finally:
        relay.close()
        conftest._stop(server.process)


def stream_for(client, seconds: float, every: float):
    """Sends a `simple` request on one stream every `every` seconds for `seconds`, or until the
    stream breaks; how many were sent, and the answers (or errors) in order."""
    answers = queue.Queue()
    client.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), answers))
    inputs, _ = simple_inputs()
    sent = 0
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        try:
            client.async_stream_infer("simple", inputs, request_id=str(sent))
        except InferenceServerException:
            # The stream is gone; its callback has the reason.
            break
        sent += 1
        time.sleep(every)
    got = []
    try:
        for _ in range(sent):
            got.append(answers.get(timeout=5))
        # The error that broke the stream, if one did, comes after the answers.
        while True:
            got.append(answers.get(timeout=0.5))
    except queue.Empty:
        pass
    client.stop_stream()
    return sent, got


def test_an_open_stream_finishes_on_its_connection_past_the_age(tmp_path):
    server = start(tmp_path, {"max_connection_age_seconds": 1})
    relay = CountingRelay(server.grpc)
    try:
        client = grpcclient.InferenceServerClient(relay.address)
        sent, got = stream_for(client, 3.0, 0.2)
        errors = [error for _, error in got if error is not None]
        assert not errors, errors[:3]
        assert len(got) == sent
        assert [r.get_response().id for r, _ in got] == [str(i) for i in range(sent)]
        # The stream kept its one connection although it was asked to go after about a second.
        assert relay.connections == 1, relay.connections
        client.close()
    finally:
        relay.close()
        conftest._stop(server.process)


def test_a_stream_that_outlives_the_grace_is_closed(tmp_path):
    server = start(tmp_path, {"max_connection_age_seconds": 1,
                              "max_connection_age_grace_seconds": 1})
    relay = CountingRelay(server.grpc)
    try:
        client = grpcclient.InferenceServerClient(relay.address)
        started = time.monotonic()
        sent, got = stream_for(client, 6.0, 0.2)
        took = time.monotonic() - started
        # Answered until about 2 s (age, then grace), then cut: the client is told why.
        answered = [r for r, error in got if error is None]
        errors = [error for _, error in got if error is not None]
        assert answered, got
        assert errors, (sent, len(got))
        assert took < 5.5, took
        client.close()
    finally:
        relay.close()
        conftest._stop(server.process)
