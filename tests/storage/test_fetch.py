"""docker/storage-initializer.sh, the init container's fetcher, against a real S3-compatible
server (signature-v4 authentication) and a real HTTP server: the model repository arrives with
its layout and bytes, and each failure exits non-zero with the storage's own error as the
termination message (what the InferenceService's status.lastFailureInfo shows)."""

from __future__ import annotations

import base64
import filecmp
import http.server
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FETCH = REPO / "docker/storage-initializer.sh"
ACCESS_KEY, SECRET_KEY = "infergate-test", "s3cr3t-key-for-tests"
TOKEN = "Bearer test-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen | None = None, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {port}")


@pytest.fixture(scope="session")
def model_repo(tmp_path_factory) -> Path:
    """A Triton model repository (python-backend models, as the end-to-end tests serve)."""
    root = tmp_path_factory.mktemp("repo") / "triton"
    subprocess.run([sys.executable, str(REPO / "tests/upstream/make_triton_repo.py"), str(root)],
                   check=True, capture_output=True)
    return root


@pytest.fixture(scope="session")
def s3(tmp_path_factory, model_repo) -> str:
    """rclone's S3 server over a directory whose `models` bucket holds the repository under
    `triton/`; its endpoint URL."""
    root = tmp_path_factory.mktemp("s3")
    shutil.copytree(model_repo, root / "models" / "triton")
    port = free_port()
    log = open(root.parent / "s3-server.log", "w")
    proc = subprocess.Popen([os.environ["INFERGATE_S3_SERVER"], "serve", "s3", str(root),
                             "--addr", f"127.0.0.1:{port}",
                             "--auth-key", f"{ACCESS_KEY},{SECRET_KEY}"],
                            stdout=log, stderr=subprocess.STDOUT)
    wait_listening(port, proc)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


class Handler(http.server.SimpleHTTPRequestHandler):
    """Files from the served directory; /private/ wants the test token."""

    def do_GET(self):
        if self.path.startswith("/private/") and self.headers.get("Authorization") != TOKEN:
            self.send_error(401, "Unauthorized")
            return
        super().do_GET()

    def do_HEAD(self):
        if self.path.startswith("/private/") and self.headers.get("Authorization") != TOKEN:
            self.send_error(401, "Unauthorized")
            return
        super().do_HEAD()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def web(tmp_path_factory, model_repo) -> str:
    """An HTTP server with the repository as archives and one plain file; its base URL."""
    root = tmp_path_factory.mktemp("web")
    with tarfile.open(root / "triton.tar.gz", "w:gz") as t:
        t.add(model_repo, arcname=".")
    with tarfile.open(root / "triton.tar", "w") as t:
        t.add(model_repo, arcname=".")
    with zipfile.ZipFile(root / "triton.zip", "w") as z:
        for path in sorted(model_repo.rglob("*")):
            z.write(path, path.relative_to(model_repo))
    (root / "private").mkdir()
    shutil.copy(model_repo / "simple" / "config.pbtxt", root / "private" / "config.pbtxt")
    shutil.copy(model_repo / "simple" / "config.pbtxt", root / "config.pbtxt")
    port = free_port()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", port), lambda *a: Handler(*a, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{port}"
    server.shutdown()


class Fetched:
    def __init__(self, proc: subprocess.CompletedProcess, dest: Path, message: str):
        self.code = proc.returncode
        self.stderr = proc.stderr
        self.dest = dest
        self.message = message


def fetch(tmp_path: Path, uri: str, secret: dict[str, str] | None = None,
          uri_from_env: bool = False) -> Fetched:
    """Runs the fetcher as the init container would: URI (or, with `uri_from_env`, the URI in
    an environment variable, as model.storage.uriFrom renders it), destination, the Secret's keys
    as files, and a termination-log file."""
    dest = tmp_path / "mnt-models"
    dest.mkdir()
    env = {k: v for k, v in os.environ.items()
           # This machine's CA-bundle variable would make the S3 client load a bundle of its
           # own; a pod has none. Nothing else of the caller's environment matters.
           if k not in ("AWS_CA_BUNDLE",)}
    if secret is not None:
        secret_dir = tmp_path / "secret"
        secret_dir.mkdir()
        for key, value in secret.items():
            (secret_dir / key).write_text(value)
        env["INFERGATE_STORAGE_SECRET_DIR"] = str(secret_dir)
    log = tmp_path / "termination-log"
    env["INFERGATE_TERMINATION_LOG"] = str(log)
    argument = uri
    if uri_from_env:
        env["INFERGATE_STORAGE_URI"] = uri
        argument = "--uri-from-env=INFERGATE_STORAGE_URI"
    proc = subprocess.run([str(FETCH), argument, str(dest)], env=env, capture_output=True,
                          text=True, timeout=300)
    return Fetched(proc, dest, log.read_text() if log.exists() else "")


def same_tree(a: Path, b: Path):
    files = lambda root: sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files(a) == files(b)
    match, mismatch, errors = filecmp.cmpfiles(a, b, files(a), shallow=False)
    assert not mismatch and not errors, (mismatch, errors)


def s3_secret(endpoint: str, secret_key: str = SECRET_KEY) -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": secret_key,
            "AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1"}


def test_a_model_repository_comes_from_s3_with_its_layout(tmp_path, s3, model_repo):
    got = fetch(tmp_path, "s3://models/triton", s3_secret(s3))
    assert got.code == 0, got.stderr
    same_tree(got.dest, model_repo)
    assert (got.dest / "simple" / "1" / "model.py").is_file()
    assert got.message == ""


def test_one_object_comes_alone(tmp_path, s3, model_repo):
    got = fetch(tmp_path, "s3://models/triton/simple/config.pbtxt", s3_secret(s3))
    assert got.code == 0, got.stderr
    assert [p.name for p in got.dest.iterdir()] == ["config.pbtxt"]
    assert (got.dest / "config.pbtxt").read_bytes() == \
        (model_repo / "simple" / "config.pbtxt").read_bytes()


def test_wrong_credentials_fail_with_the_servers_answer(tmp_path, s3):
    got = fetch(tmp_path, "s3://models/triton", s3_secret(s3, secret_key="wrong"))
    assert got.code == 1, got.stderr
    assert got.message.startswith("fetching s3://models/triton failed:"), got.message
    assert "SignatureDoesNotMatch" in got.message, got.message
    assert not any(got.dest.iterdir())


def test_no_credentials_are_refused_by_a_server_that_wants_them(tmp_path, s3):
    got = fetch(tmp_path, "s3://models/triton", {"AWS_ENDPOINT_URL": s3})
    assert got.code == 1, got.stderr
    assert "fetching s3://models/triton failed" in got.message


def test_a_missing_prefix_or_bucket_is_reported(tmp_path, s3):
    (tmp_path / "a").mkdir()
    got = fetch(tmp_path / "a", "s3://models/no-such-model", s3_secret(s3))
    assert got.code == 3, got.stderr
    assert got.message.strip() == \
        "nothing found at s3://models/no-such-model (no object under that bucket and prefix)"
    (tmp_path / "b").mkdir()
    got = fetch(tmp_path / "b", "s3://no-such-bucket/triton", s3_secret(s3))
    assert got.code == 1, got.stderr
    assert "directory not found" in got.message or "NoSuchBucket" in got.message, got.message


@pytest.mark.parametrize("archive", ["triton.tar.gz", "triton.tar", "triton.zip"])
def test_an_archive_over_http_is_unpacked(tmp_path, web, model_repo, archive):
    got = fetch(tmp_path, f"{web}/{archive}")
    assert got.code == 0, got.stderr
    same_tree(got.dest, model_repo)


def test_a_plain_file_over_http_is_kept_as_it_is(tmp_path, web, model_repo):
    got = fetch(tmp_path, f"{web}/config.pbtxt")
    assert got.code == 0, got.stderr
    assert [p.name for p in got.dest.iterdir()] == ["config.pbtxt"]


def test_the_authorization_header_comes_from_the_secret(tmp_path, web):
    (tmp_path / "with").mkdir()
    got = fetch(tmp_path / "with", f"{web}/private/config.pbtxt", {"HTTP_AUTHORIZATION": TOKEN})
    assert got.code == 0, got.stderr
    (tmp_path / "without").mkdir()
    got = fetch(tmp_path / "without", f"{web}/private/config.pbtxt")
    assert got.code == 1, got.stderr
    assert "401" in got.message, got.message


def test_a_missing_url_is_reported(tmp_path, web):
    got = fetch(tmp_path, f"{web}/nothing.tar.gz")
    assert got.code == 1, got.stderr
    assert "404" in got.message, got.message


def test_an_unsupported_scheme_is_refused(tmp_path):
    got = fetch(tmp_path, "ftp://example.com/model")
    assert got.code == 2
    assert "unsupported scheme" in got.message


def test_a_presigned_url_comes_from_the_environment_and_never_shows(tmp_path, web):
    """model.storage.uriFrom: the whole URL, signature included, from a Secret's key in the
    environment; it is in no argument, and no message repeats its query."""
    (tmp_path / "ok").mkdir()
    got = fetch(tmp_path / "ok", f"{web}/config.pbtxt?X-Amz-Signature=sekrit-ok",
                uri_from_env=True)
    assert got.code == 0, got.stderr
    assert [p.name for p in got.dest.iterdir()] == ["config.pbtxt"]
    assert "sekrit" not in got.stderr, got.stderr
    (tmp_path / "missing").mkdir()
    got = fetch(tmp_path / "missing", f"{web}/nothing.tar.gz?X-Amz-Signature=sekrit-404",
                uri_from_env=True)
    assert got.code == 1, got.stderr
    assert "404" in got.message and "nothing.tar.gz?<redacted>" in got.message, got.message
    assert "sekrit" not in got.message and "sekrit" not in got.stderr, (got.message, got.stderr)


def test_a_password_in_a_url_never_shows(tmp_path, web):
    host = web.removeprefix("http://")
    got = fetch(tmp_path, f"http://user:hunter2@{host}/nothing.tar.gz?sig=abc123")
    assert got.code == 1, got.stderr
    assert "<redacted>@" in got.message, got.message
    for secret in ("hunter2", "abc123"):
        assert secret not in got.message and secret not in got.stderr, (got.message, got.stderr)


def test_an_empty_uri_variable_is_refused(tmp_path):
    got = fetch(tmp_path, "", uri_from_env=True)
    assert got.code == 2, got.stderr
    assert "INFERGATE_STORAGE_URI is empty" in got.stderr
