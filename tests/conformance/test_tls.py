"""TLS and mutual TLS on the gRPC port (Triton's `--grpc-use-ssl`, `--grpc-use-ssl-mutual`,
`--grpc-server-cert`, `--grpc-server-key`, `--grpc-root-cert`, which take a value as Triton's do)
and on the HTTP port (the same flags under `--http-*`): the clients users run, unmodified
(tritonclient over both protocols with `ssl=True`, perf_analyzer with its `--ssl-*` options),
the refusals (plaintext to a TLS port, no client certificate or one of another CA where mutual
TLS is on), ALPN, and a certificate renewed while serving (as cert-manager renews a mounted
Secret): new connections get the new one, open ones go on, and a broken file is logged and the
old certificate kept. Certificates are made by the test (openssl). Sidecar-specific setup:
skipped when the suite is pointed at a running server."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import certs
import conftest
from support import find_perf_analyzer, own_sidecars, raw_request

pytestmark = [
    own_sidecars,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make certificates"),
]

sys.path.insert(0, str(conftest.REPO_ROOT / "tests/tools"))
from ports import free_ports  # noqa: E402


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pki")
    authority = certs.ca(folder, "ca")
    other = certs.ca(folder, "other")
    return {
        "folder": folder,
        "ca": authority,
        "server": certs.signed(folder, "server", authority, server=True),
        "client": certs.signed(folder, "client", authority, server=False),
        "stranger": certs.signed(folder, "stranger", other, server=False),
    }


def port_flags(port, pki, mutual=False):
    """One port's TLS flags (`grpc`, `http`, `metrics`: the same set under each prefix)."""
    return [f"--{port}-use-ssl{'-mutual' if mutual else ''}=1",
            f"--{port}-server-cert={pki['server'].cert}",
            f"--{port}-server-key={pki['server'].key}",
            f"--{port}-root-cert={pki['ca'].cert}"]


def grpc_flags(pki, mutual=False):
    return port_flags("grpc", pki, mutual)


def http_flags(pki, mutual=False):
    return port_flags("http", pki, mutual)


def assert_plaintext_refused(port, path):
    """Plaintext HTTP to a TLS port: no answer but a closed connection."""
    with pytest.raises((OSError, http.client.HTTPException)):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", path)
        conn.getresponse()


def assert_refused_without_a_certificate_of_the_roots(pki, port, path):
    """Mutual TLS: no client certificate, or one of another CA, gets no answer."""
    for who in (None, pki["stranger"]):
        with pytest.raises((ssl.SSLError, OSError, http.client.HTTPException)):
            conn = http.client.HTTPSConnection("localhost", port,
                                               context=tls_client(pki, who), timeout=5)
            conn.request("GET", path)
            conn.getresponse()


def simple_grpc(client):
    inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    for i in inputs:
        i.set_data_from_numpy(a)
    result = client.infer("simple", inputs)
    assert (result.as_numpy("OUTPUT0") == 2 * a).all()


def simple_http(client):
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    for i in inputs:
        i.set_data_from_numpy(a, binary_data=True)
    result = client.infer("simple", inputs)
    assert (result.as_numpy("OUTPUT0") == 2 * a).all()


def tls_client(pki, cert=None, alpn=None):
    """A TLS client context trusting the test CA, with a client certificate if given."""
    context = ssl.create_default_context(cafile=str(pki["ca"].cert))
    if cert is not None:
        context.load_cert_chain(str(cert.cert), str(cert.key))
    if alpn:
        context.set_alpn_protocols(alpn)
    return context


def handshake(port, context, host="localhost"):
    """The server's certificate (DER) and the ALPN protocol chosen, or the error."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            # With TLS 1.3 a refused client certificate is reported after the handshake.
            tls.settimeout(2)
            try:
                tls.recv(1)
            except socket.timeout:
                pass
            return tls.getpeercert(binary_form=True), tls.selected_alpn_protocol()


def port_of(addr):
    return int(addr.rpartition(":")[2])


class HttpsSidecar:
    """A sidecar whose HTTP port speaks TLS (the suite's starter checks readiness in plaintext)."""

    def __init__(self, folder: Path, args, pki):
        self.http, self.grpc, self.metrics, self.admin = free_ports(4)
        self.log = folder / f"sidecar-{self.http}.log"
        self.proc = subprocess.Popen(
            [str(os.environ.get("INFERGATE_SIDECAR_BIN", conftest.DEFAULT_SIDECAR_BIN)),
             f"--http-port={self.http}", f"--grpc-port={self.grpc}",
             f"--metrics-port={self.metrics}", f"--admin-port={self.admin}", "--host=127.0.0.1",
             *args],
            stdout=open(self.log, "wb"), stderr=subprocess.STDOUT)
        context = tls_client(pki, pki["client"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                conn = http.client.HTTPSConnection("localhost", self.http, context=context,
                                                   timeout=2)
                conn.request("GET", "/v2/health/ready")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"not ready over TLS:\n{self.log.read_text()[-3000:]}")

    def stop(self):
        conftest._stop(self.proc)


def test_grpc_over_tls_with_tritonclient(pki, tmp_path):
    server = conftest._start_sidecar(tmp_path, extra_args=grpc_flags(pki))
    try:
        port = port_of(server.grpc)
        client = grpcclient.InferenceServerClient(f"localhost:{port}", ssl=True,
                                                  root_certificates=str(pki["ca"].cert))
        assert client.is_server_live()
        simple_grpc(client)
        # ALPN: h2, as gRPC clients require.
        _, protocol = handshake(port, tls_client(pki, alpn=["h2"]))
        assert protocol == "h2"
        # The admin status tells the operator what each port serves, and until when.
        admin = next(
            conftest.connectable(m.group(1)) for m in
            (re.search(r'"admin_addr":"([^"]+)"', line) for line in server.log_lines) if m)
        tls = json.loads(raw_request(admin, "GET", "/status").body)["tls"]
        expiry = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-in",
                                 str(pki["server"].cert)], capture_output=True, text=True)
        not_after = ssl.cert_time_to_seconds(expiry.stdout.strip().split("=", 1)[1])
        assert tls == {"http": {"enabled": False},
                       "grpc": {"enabled": True, "mutual": False, "not_after": not_after},
                       "metrics": {"enabled": False}}, tls
        # A plaintext client gets nothing.
        plain = grpcclient.InferenceServerClient(f"localhost:{port}")
        with pytest.raises(InferenceServerException):
            plain.is_server_live(client_timeout=5)
    finally:
        conftest._stop(server.process)


def test_grpc_mutual_tls_refuses_clients_without_a_certificate_of_its_roots(pki, tmp_path):
    server = conftest._start_sidecar(tmp_path, extra_args=grpc_flags(pki, mutual=True))
    try:
        port = port_of(server.grpc)
        ca = str(pki["ca"].cert)
        client = grpcclient.InferenceServerClient(
            f"localhost:{port}", ssl=True, root_certificates=ca,
            private_key=str(pki["client"].key), certificate_chain=str(pki["client"].cert))
        assert client.is_server_live()
        simple_grpc(client)
        anonymous = grpcclient.InferenceServerClient(f"localhost:{port}", ssl=True,
                                                     root_certificates=ca)
        with pytest.raises(InferenceServerException):
            anonymous.is_server_live(client_timeout=5)
        stranger = grpcclient.InferenceServerClient(
            f"localhost:{port}", ssl=True, root_certificates=ca,
            private_key=str(pki["stranger"].key), certificate_chain=str(pki["stranger"].cert))
        with pytest.raises(InferenceServerException):
            stranger.is_server_live(client_timeout=5)
    finally:
        conftest._stop(server.process)


def test_http_over_tls_and_mutual_tls_with_tritonclient(pki, tmp_path):
    for mutual in (False, True):
        sidecar = HttpsSidecar(tmp_path, http_flags(pki, mutual), pki)
        try:
            options = {"ca_certs": str(pki["ca"].cert), "certfile": str(pki["client"].cert),
                       "keyfile": str(pki["client"].key)}
            client = httpclient.InferenceServerClient(f"localhost:{sidecar.http}", ssl=True,
                                                      ssl_options=options)
            assert client.is_server_live()
            simple_http(client)
            _, protocol = handshake(sidecar.http, tls_client(pki, pki["client"],
                                                             alpn=["h2", "http/1.1"]))
            assert protocol == "h2"
            assert_plaintext_refused(sidecar.http, "/v2/health/live")
            if mutual:
                assert_refused_without_a_certificate_of_the_roots(pki, sidecar.http,
                                                                  "/v2/health/live")
        finally:
            sidecar.stop()


def scrape(port, context):
    conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=5)
    conn.request("GET", "/metrics")
    answer = conn.getresponse()
    return answer.status, answer.read().decode()


def test_metrics_port_over_tls_and_mutual_tls_while_the_admin_port_stays_plain(pki, tmp_path):
    """`--metrics-use-ssl` serves the scrape over TLS (ALPN http/1.1); with `-mutual` a scraper
    without a certificate of the roots is refused. The admin port, the kubelet's probes' port,
    stays plain, and `/status` reports the metrics port's TLS."""
    for mutual in (False, True):
        sidecar = HttpsSidecar(tmp_path, http_flags(pki) + port_flags("metrics", pki, mutual), pki)
        try:
            status, text = scrape(sidecar.metrics, tls_client(pki, pki["client"]))
            assert status == 200 and "nv_inference_request_success" in text, text[:500]
            _, protocol = handshake(sidecar.metrics, tls_client(pki, pki["client"],
                                                                alpn=["h2", "http/1.1"]))
            assert protocol == "http/1.1"
            assert_plaintext_refused(sidecar.metrics, "/metrics")
            if mutual:
                assert_refused_without_a_certificate_of_the_roots(pki, sidecar.metrics,
                                                                  "/metrics")
            # The probes' port is plain HTTP, and reports the metrics port's TLS on loopback.
            admin = f"127.0.0.1:{sidecar.admin}"
            assert raw_request(admin, "GET", "/livez").status == 200
            answer = raw_request(admin, "GET", "/status")
            assert answer.status == 200, answer.body
            reported = answer.json()["tls"]["metrics"]
            assert reported["enabled"] is True and reported["mutual"] is mutual, reported
        finally:
            sidecar.stop()


def test_a_renewed_certificate_is_served_to_new_connections_and_open_ones_go_on(pki, tmp_path):
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(pki["server"].cert, live / "tls.crt")
    shutil.copy(pki["server"].key, live / "tls.key")
    config = tmp_path / "sidecar.yaml"
    config.write_text(json.dumps({"server": {"tls_reload_seconds": 1}}))
    args = ["--config", str(config), "--http-use-ssl=1", f"--http-server-cert={live / 'tls.crt'}",
            f"--http-server-key={live / 'tls.key'}"]
    sidecar = HttpsSidecar(tmp_path, args, pki)
    try:
        context = tls_client(pki)
        before, _ = handshake(sidecar.http, context)
        assert before == ssl.PEM_cert_to_DER_cert(pki["server"].cert.read_text())
        kept = http.client.HTTPSConnection("localhost", sidecar.http, context=context, timeout=10)
        kept.request("GET", "/v2/health/live")
        assert kept.getresponse().read() is not None

        (tmp_path / "renewed").mkdir()
        renewed = certs.signed(tmp_path / "renewed", "server", pki["ca"], server=True, serial=2)
        # Written as a Secret volume is updated: the new files replace the old at once.
        for source, name in ((renewed.cert, "tls.crt"), (renewed.key, "tls.key")):
            shutil.copy(source, live / f".{name}.new")
            os.replace(live / f".{name}.new", live / name)
        wanted = ssl.PEM_cert_to_DER_cert(renewed.cert.read_text())
        deadline = time.monotonic() + 15
        while handshake(sidecar.http, context)[0] != wanted:
            assert time.monotonic() < deadline, "the renewed certificate was not served"
            time.sleep(0.3)
        # The connection opened before goes on.
        kept.request("GET", "/v2/health/live")
        assert kept.getresponse().status == 200
        kept.close()

        # A broken file: logged, and the certificate loaded last is kept.
        (live / "tls.crt").write_text("-----BEGIN CERTIFICATE-----\nnot one\n")
        time.sleep(3)
        assert handshake(sidecar.http, context)[0] == wanted
        assert "do not load" in sidecar.log.read_text()
    finally:
        sidecar.stop()


@pytest.mark.perf_analyzer
def test_perf_analyzer_over_tls_on_both_protocols(pki, tmp_path):
    perf_analyzer = find_perf_analyzer()
    if perf_analyzer is None:
        pytest.skip("perf_analyzer is not installed (tests/tools/setup-python.sh installs it)")
    sidecar = HttpsSidecar(tmp_path, http_flags(pki) + grpc_flags(pki), pki)
    try:
        # Any measurement will do (as in test_perf_analyzer.py): this checks the connection.
        common = [perf_analyzer, "-m", "simple", "--measurement-mode", "time_windows",
                  "--measurement-interval", "1000", "--max-trials", "4",
                  "--stability-percentage", "999", "-c", "1"]
        grpc_run = subprocess.run(
            common + ["-i", "grpc", "-u", f"localhost:{sidecar.grpc}", "--ssl-grpc-use-ssl",
                      f"--ssl-grpc-root-certifications-file={pki['ca'].cert}"],
            capture_output=True, text=True, timeout=120)
        assert grpc_run.returncode == 0, grpc_run.stdout[-2000:] + grpc_run.stderr[-2000:]
        https_run = subprocess.run(
            common + ["-i", "http", "-u", f"https://localhost:{sidecar.http}",
                      f"--ssl-https-ca-certificates-file={pki['ca'].cert}"],
            capture_output=True, text=True, timeout=120)
        assert https_run.returncode == 0, https_run.stdout[-2000:] + https_run.stderr[-2000:]
    finally:
        sidecar.stop()
