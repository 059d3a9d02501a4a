"""What a pod without the pod's credentials gets from a sidecar, as an attacker in the cluster
would try it: on the admin port (8003), the probes' paths, a drain, and the status with no
credential (in plain HTTP and over TLS), with a wrong token, and (given --client-cert and
--client-key) with the operator's client certificate, over TLS; on the REST port (8000), the control
APIs that change what the service does for everyone (the log settings, the trace settings, a
model load and unload) and shared memory (registering the sidecar's staging pool, or a region
another client of the pod created); and the model server's own ports, past the sidecar.

Run inside the client image (passed to `python3 -` on standard input):

    intrude.py POD_IP [--client-cert PEM --client-key PEM] [--model-port PORT ...]

The last line printed is a JSON object: for each call, [HTTP status, the answer's text (up to
300 characters)]. The test compares it with what it expects.
"""

import argparse
import json
import os
import socket
import ssl
import tempfile
import urllib.error
import urllib.request


def get(url, token=None, context=None):
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10,
                                    context=context) as r:
            return [r.status, r.read().decode(errors="replace")[:300]]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode(errors="replace")[:300]]


def tls_context(cert_pem=None, key_pem=None):
    """TLS to the admin port, whose certificate is the sidecar's own (made at start, verified by
    nobody): the client's certificate, where given, is the credential."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if cert_pem:
        folder = tempfile.mkdtemp()
        cert, key = os.path.join(folder, "tls.crt"), os.path.join(folder, "tls.key")
        with open(cert, "w") as f:
            f.write(cert_pem)
        with open(key, "w") as f:
            f.write(key_pem)
        context.load_cert_chain(cert, key)
    return context


def post(url, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return [r.status, r.read().decode(errors="replace")[:300]]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode(errors="replace")[:300]]


def connect(ip, port):
    """Whether the port accepts a TCP connection: "accepted", or the error's name."""
    try:
        with socket.create_connection((ip, port), timeout=5):
            return "accepted"
    except OSError as e:
        return type(e).__name__


def register(url, name, key):
    return post(f"{url}/v2/systemsharedmemory/region/{name}/register",
                {"key": key, "offset": 0, "byte_size": 4096})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("ip")
    parser.add_argument("--client-cert")
    parser.add_argument("--client-key")
    parser.add_argument("--model-port", type=int, action="append", default=[])
    args = parser.parse_args()
    admin = f"http://{args.ip}:8003"
    got = {
        "livez": get(f"{admin}/livez"),
        "readyz": get(f"{admin}/readyz"),
        "drain": get(f"{admin}/drain?seconds=0"),
        "status": get(f"{admin}/status"),
        "status_wrong_token": get(f"{admin}/status", token="not-the-operators-token-0123456789"),
        "status_over_tls_without_certificate": get(f"https://{args.ip}:8003/status",
                                                   context=tls_context()),
        "silence_the_log": post(f"http://{args.ip}:8000/v2/logging",
                                {"log_error": False, "log_warning": False, "log_info": False}),
        "trace_everything": post(f"http://{args.ip}:8000/v2/trace/setting", {"trace_rate": "1"}),
        "load_a_model": post(f"http://{args.ip}:8000/v2/repository/models/simple/load", {}),
        "unload_a_model": post(f"http://{args.ip}:8000/v2/repository/models/simple/unload", {}),
        # The staging pool's objects are named infergate_staging_<pid>_<n>; a client's region,
        # whatever its name, is in the same /dev/shm.
        "register_the_staging_pool": register(f"http://{args.ip}:8000", "stolen",
                                              "/infergate_staging_1_00"),
        "register_a_clients_region": register(f"http://{args.ip}:8000", "borrowed", "/input_data"),
        # The model server's own ports: bound to loopback, nothing answers on the pod's address.
        "model_ports": {str(port): connect(args.ip, port) for port in args.model_port},
        # Still ready after the tries: the drain did not take the pod out of its Service.
        "readyz_after": get(f"{admin}/readyz"),
        "ready_after": get(f"http://{args.ip}:8000/v2/health/ready"),
    }
    if args.client_cert:
        got["status_with_certificate"] = get(
            f"https://{args.ip}:8003/status",
            context=tls_context(args.client_cert, args.client_key))
    print(json.dumps(got))


main()
