"""A small OTLP trace receiver, built from the opentelemetry-proto definitions.

It takes `ExportTraceServiceRequest` over OTLP/HTTP (`POST /v1/traces`, protobuf or JSON, gzip
allowed) and over OTLP/gRPC (`opentelemetry.proto.collector.trace.v1.TraceService/Export`), and
keeps every span it receives, flattened, for tests to read. Run alone, it prints each span as a
line of JSON (or writes the whole export to a file with --out), which is how the example trace in
docs/tracing.md was captured.

    python tests/tools/otlp_receiver.py --http-port 4318 [--grpc-port 4317] [--out trace.json]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import signal
import ssl
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

try:  # the gRPC side is optional: grpcio is present wherever tritonclient[grpc] is
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
except ImportError:  # pragma: no cover
    grpc = None


_ID_KEYS = {"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"}


def _hex_ids_to_base64(node):
    """OTLP/JSON writes trace and span ids in hex, where protobuf's JSON mapping reads base64."""
    if isinstance(node, dict):
        return {
            k: (base64.b64encode(bytes.fromhex(v)).decode() if k in _ID_KEYS and isinstance(v, str) else _hex_ids_to_base64(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids_to_base64(v) for v in node]
    return node


def _base64_ids_to_hex(node):
    """The other way: protobuf's JSON mapping to OTLP/JSON's hex ids."""
    if isinstance(node, dict):
        return {
            k: (base64.b64decode(v).hex() if k in _ID_KEYS and isinstance(v, str) else _base64_ids_to_hex(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_base64_ids_to_hex(v) for v in node]
    return node


def render_tree(spans: list[dict]) -> str:
    """Each trace as an indented tree: service, span, its time from the trace's start, events."""
    lines = []
    for trace_id in dict.fromkeys(s["trace_id"] for s in spans):
        members = [s for s in spans if s["trace_id"] == trace_id]
        ids = {s["span_id"] for s in members}
        start = min(s["start_ns"] for s in members)
        lines.append(f"trace {trace_id}")

        def walk(parent, depth):
            for span in sorted((s for s in members if s["parent_span_id"] == parent
                                or (depth == 1 and s["parent_span_id"] not in ids and parent is None)),
                               key=lambda s: s["start_ns"]):
                offset = (span["start_ns"] - start) / 1e6
                took = (span["end_ns"] - span["start_ns"]) / 1e6
                lines.append(f"{'  ' * depth}{span['service']}: {span['name']}  "
                             f"+{offset:.3f} ms, {took:.3f} ms")
                if span["events"]:
                    lines.append(f"{'  ' * (depth + 2)}" + ", ".join(e["name"] for e in span["events"]))
                walk(span["span_id"], depth + 1)

        walk(None, 1)
    return "\n".join(lines)


def _value(any_value) -> object:
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in any_value.kvlist_value.values}
    return getattr(any_value, kind)


def _attributes(kvs) -> dict:
    return {kv.key: _value(kv.value) for kv in kvs}


def flatten(request: trace_service_pb2.ExportTraceServiceRequest) -> list[dict]:
    """One dict per span: ids in hex, the resource's and scope's names, attributes, events."""
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    {
                        "service": resource.get("service.name"),
                        "resource": resource,
                        "scope": scope_spans.scope.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "kind": span.kind,
                        "start_ns": span.start_time_unix_nano,
                        "end_ns": span.end_time_unix_nano,
                        "attributes": _attributes(span.attributes),
                        "events": [
                            {
                                "name": e.name,
                                "ns": e.time_unix_nano,
                                "attributes": _attributes(e.attributes),
                            }
                            for e in span.events
                        ],
                        "status": {"code": span.status.code, "message": span.status.message},
                    }
                )
    return spans


class Receiver:
    """Listens on HTTP (and gRPC when a port is given); `spans()` is what arrived so far."""

    def __init__(self, http_port: int = 0, grpc_port: int | None = None, host: str = "127.0.0.1",
                 tls: "ssl.SSLContext | None" = None):
        """With `tls`, the HTTP side serves HTTPS with that server context (mutual when it
        verifies clients); a refused handshake delivers nothing."""
        self._lock = threading.Condition()
        self._spans: list[dict] = []
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (the stdlib's name)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = trace_service_pb2.ExportTraceServiceRequest()
                json_body = "json" in (self.headers.get("Content-Type") or "")
                try:
                    if json_body:
                        json_format.ParseDict(_hex_ids_to_base64(json.loads(body)), request)
                    else:
                        request.ParseFromString(body)
                except Exception as e:  # a malformed export is the exporter's bug: say so
                    self.send_error(400, str(e))
                    return
                receiver._add(request)
                answer = trace_service_pb2.ExportTraceServiceResponse()
                out = json_format.MessageToJson(answer).encode() if json_body else answer.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/json" if json_body else "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self._http = ThreadingHTTPServer((host, http_port), Handler)
        if tls is not None:
            # The handshake runs on the handler's thread, at its first read, so a client that
            # fails it only ends its own connection.
            self._http.socket = tls.wrap_socket(self._http.socket, server_side=True,
                                                do_handshake_on_connect=False)
        self.http_port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

        self._grpc = None
        self.grpc_port = None
        if grpc_port is not None and grpc is not None:

            class Service(trace_service_pb2_grpc.TraceServiceServicer):
                def Export(self, request, context):  # noqa: N802 (the service's name)
                    receiver._add(request)
                    return trace_service_pb2.ExportTraceServiceResponse()

            self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
            trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), self._grpc)
            self.grpc_port = self._grpc.add_insecure_port(f"{host}:{grpc_port}")
            self._grpc.start()

    def _add(self, request) -> None:
        with self._lock:
            self.requests.append(request)
            self._spans.extend(flatten(request))
            self._lock.notify_all()

    def spans(self) -> list[dict]:
        with self._lock:
            return list(self._spans)

    def wait_for(self, predicate, timeout: float = 20.0) -> list[dict]:
        """Waits until `predicate(spans)` holds; returns the spans (whatever arrived, on timeout)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate(self._spans):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(left)
            return list(self._spans)

    def clear(self) -> None:
        with self._lock:
            self._spans.clear()
            self.requests.clear()

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        if self._grpc is not None:
            self._grpc.stop(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--http-port", type=int, default=4318)
    parser.add_argument("--grpc-port", type=int)
    parser.add_argument("--out", help="write every export received, as OTLP JSON, to this file on exit")
    parser.add_argument("--tree", action="store_true", help="print the traces as trees on exit")
    args = parser.parse_args()
    def stop(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)  # a background job ignores SIGINT
    receiver = Receiver(args.http_port, args.grpc_port, args.host)
    print(f"OTLP receiver: http={receiver.http_port} grpc={receiver.grpc_port}", flush=True)
    seen = 0
    try:
        while True:
            spans = receiver.wait_for(lambda s: len(s) > seen, timeout=1.0)
            for span in spans[seen:]:
                print(json.dumps(span), flush=True)
            seen = len(spans)
    except KeyboardInterrupt:
        pass
    finally:
        if args.out:
            merged = trace_service_pb2.ExportTraceServiceRequest()
            for request in receiver.requests:
                merged.resource_spans.extend(request.resource_spans)
            with open(args.out, "w") as f:
                json.dump(_base64_ids_to_hex(json_format.MessageToDict(merged)), f, indent=2)
                f.write("\n")
        if args.tree:
            print(render_tree(receiver.spans()), flush=True)
        receiver.close()


if __name__ == "__main__":
    main()
