"""Calls a Service whose sidecars serve mutual TLS, from a client pod that holds the CA, its own
client certificate and a stranger's (another CA's), and tells what was served and refused.

    tls.py HOST CERTS_DIR
        tritonclient over gRPC and HTTP with the client certificate (the `classifier` model, an
        identity over four FP32 values: the answer must be the input),
        then the refusals: no certificate, the stranger's, plaintext HTTP and plaintext gRPC,
        and the served certificate's serial number and expiry
    tls.py HOST CERTS_DIR --serial
        only the served certificate's serial number and expiry (a new connection each time)
    tls.py HOST CERTS_DIR --metrics-ip POD_IP
        also scrapes a pod's metrics port as Prometheus would: over TLS without a client
        certificate, trusting the CA and verifying HOST (the certificate names no pod address);
        and in plaintext, which must be refused
    tls.py HOST CERTS_DIR --control-key KEY
        also the control APIs (`auth.controlAPIs.from: Key`) with tritonclient over HTTPS and
        gRPC with the client certificate: the log settings, the trace settings and the
        repository index with the key in its header, and without it (refused)

HOST is the Service's DNS name, resolved through the pod's hostAliases (the node has no cluster
DNS), and checked against the certificate's names as any client would. The last line of output
is a JSON object.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import ssl
import sys

import numpy as np

HTTP_PORT = 8000
GRPC_PORT = 8001
METRICS_PORT = 8002
# The one model the `triton` example serves in the test (its labels entry names it).
MODEL = "classifier"
VALUES = np.array([[0.5, 3.25, -1.0, 2.0]], dtype=np.float32)


def context(certs: str, who: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=f"{certs}/ca.crt")
    if who is not None:
        ctx.load_cert_chain(f"{certs}/{who}.crt", f"{certs}/{who}.key")
    return ctx


def served_certificate(host: str, certs: str) -> dict:
    """The serving certificate of a new connection to the gRPC port, verified against the CA and
    the host name, with the client certificate (the port asks for one)."""
    with socket.create_connection((host, GRPC_PORT), timeout=10) as raw:
        with context(certs, "client").wrap_socket(raw, server_hostname=host) as tls:
            cert = tls.getpeercert()
    return {"serial": cert["serialNumber"], "not_after": cert["notAfter"]}


def refused(call) -> str:
    """"refused" when the call fails, or what it answered."""
    try:
        return f"served: {call()}"
    except Exception:  # noqa: BLE001 - any failure to be served is the point
        return "refused"


def https_get(host: str, certs: str, who: str | None) -> int:
    conn = http.client.HTTPSConnection(host, HTTP_PORT, context=context(certs, who), timeout=10)
    conn.request("GET", "/v2/health/ready")
    return conn.getresponse().status


def plain_http(host: str) -> int:
    conn = http.client.HTTPConnection(host, HTTP_PORT, timeout=10)
    conn.request("GET", "/v2/health/ready")
    return conn.getresponse().status


def scrape(ip: str, host: str, certs: str | None) -> str:
    """The metrics page's first Triton metric line, over TLS to the pod's address with `host`'s
    name verified or, without `certs`, in plaintext."""
    raw = socket.create_connection((ip, METRICS_PORT), timeout=10)
    sock = context(certs, None).wrap_socket(raw, server_hostname=host) if certs else raw
    with sock:
        sock.sendall(f"GET /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                     .encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1] if head.startswith(b"HTTP/1.1 ") else b"none"
    if status != b"200":
        raise RuntimeError(f"answered {head[:60]!r}")
    return next(line for line in body.decode().splitlines() if line.startswith("nv_"))


def grpc_simple(host: str, certs: str, who: str | None, ssl_on: bool = True) -> bool:
    import tritonclient.grpc as grpcclient
    options = {"ssl": True, "root_certificates": f"{certs}/ca.crt"} if ssl_on else {}
    if ssl_on and who is not None:
        options.update(private_key=f"{certs}/{who}.key", certificate_chain=f"{certs}/{who}.crt")
    client = grpcclient.InferenceServerClient(f"{host}:{GRPC_PORT}", **options)
    given = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    given.set_data_from_numpy(VALUES)
    result = client.infer(MODEL, [given], client_timeout=10)
    return bool((result.as_numpy("OUTPUT0") == VALUES).all())


def http_simple(host: str, certs: str) -> bool:
    import tritonclient.http as httpclient
    options = {"ca_certs": f"{certs}/ca.crt", "certfile": f"{certs}/client.crt",
               "keyfile": f"{certs}/client.key"}
    client = httpclient.InferenceServerClient(f"{host}:{HTTP_PORT}", ssl=True,
                                              ssl_options=options, connection_timeout=20,
                                              network_timeout=20)
    given = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    given.set_data_from_numpy(VALUES, binary_data=True)
    result = client.infer(MODEL, [given])
    return bool((result.as_numpy("OUTPUT0") == VALUES).all())


CONTROL_HEADER = "infergate-control-key"


def control_calls(host: str, certs: str, key: str | None) -> dict:
    """The control APIs through the Service over mutual TLS, with `key` in the control header
    (or none): what tritonclient answered for each, or "refused"."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    headers = {CONTROL_HEADER: key} if key else {}
    options = {"ca_certs": f"{certs}/ca.crt", "certfile": f"{certs}/client.crt",
               "keyfile": f"{certs}/client.key"}
    http = httpclient.InferenceServerClient(f"{host}:{HTTP_PORT}", ssl=True, ssl_options=options,
                                            connection_timeout=20, network_timeout=20)
    grpc = grpcclient.InferenceServerClient(
        f"{host}:{GRPC_PORT}", ssl=True, root_certificates=f"{certs}/ca.crt",
        private_key=f"{certs}/client.key", certificate_chain=f"{certs}/client.crt")
    # On gRPC, a restricted protocol's key travels as the metadata key Triton names.
    grpc_headers = {f"triton-grpc-protocol-{CONTROL_HEADER}": key} if key else {}

    def refused(call) -> str:
        try:
            return f"served: {str(call())[:200]}"
        except Exception as e:  # noqa: BLE001 - the refusal's words are the point
            return f"refused: {e}"
    return {
        "http_log_settings": refused(lambda: http.update_log_settings(
            {"log_verbose_level": 0}, headers=headers)),
        "http_trace_settings": refused(lambda: http.update_trace_settings(
            settings={"trace_rate": "1000"}, headers=headers)),
        "http_repository_index": refused(lambda: http.get_model_repository_index(
            headers=headers)),
        "grpc_log_settings": refused(lambda: grpc.update_log_settings(
            {"log_verbose_level": 0}, headers=grpc_headers, as_json=True)),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("host")
    parser.add_argument("certs")
    parser.add_argument("--serial", action="store_true")
    parser.add_argument("--metrics-ip")
    parser.add_argument("--control-key")
    args = parser.parse_args()
    host, certs = args.host, args.certs
    out = {"certificate": served_certificate(host, certs)}
    if not args.serial:
        out.update({
            "grpc_with_certificate": grpc_simple(host, certs, "client"),
            "http_with_certificate": http_simple(host, certs),
            "https_ready_with_certificate": https_get(host, certs, "client"),
            "grpc_without_certificate": refused(lambda: grpc_simple(host, certs, None)),
            "grpc_with_strangers_certificate": refused(
                lambda: grpc_simple(host, certs, "stranger")),
            "https_without_certificate": refused(lambda: https_get(host, certs, None)),
            "https_with_strangers_certificate": refused(
                lambda: https_get(host, certs, "stranger")),
            "plaintext_http": refused(lambda: plain_http(host)),
            "plaintext_grpc": refused(lambda: grpc_simple(host, certs, None, ssl_on=False)),
        })
    if args.control_key:
        out["control_with_key"] = control_calls(host, certs, args.control_key)
        out["control_without_key"] = control_calls(host, certs, None)
    if args.metrics_ip:
        out["metrics_over_tls"] = scrape(args.metrics_ip, host, certs)
        out["metrics_in_plaintext"] = refused(lambda: scrape(args.metrics_ip, host, None))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
