"""Fixtures of the end-to-end tests: a real control plane, a real node running real pods, the
chart installed with real Helm from the images docker/*.Dockerfile builds, and the examples
applied with kubectl, as a user does.

Environment (set by tests/e2e/run):
  INFERGATE_CLUSTER_BIN   kube-apiserver, kubelet, kube-proxy, kubectl, ... (tests/cluster/build.sh)
  INFERGATE_HELM          helm binary
  INFERGATE_E2E_IMAGES    file with one "IMAGE ARCHIVE IMAGE_ID" line per image (tests/e2e/images.sh)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests/cluster"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kube as cluster  # noqa: E402
import scenario  # noqa: E402
from kube import Kube  # noqa: E402


def _env_path(name: str) -> Path:
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set; run the end-to-end tests with tests/e2e/run", returncode=2)
    return Path(value)


def built_images() -> dict[str, tuple[Path, str]]:
    """image -> (archive, image ID) of what tests/e2e/images.sh built."""
    return cluster.images_from(_env_path("INFERGATE_E2E_IMAGES"))


@pytest.fixture(scope="session")
def workdir():
    path = Path(tempfile.mkdtemp(prefix="infergate-e2e-"))
    yield path
    if os.environ.get("INFERGATE_KEEP_E2E_LOGS"):
        print(f"\nend-to-end logs kept in {path}")
    else:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def kube(workdir) -> Kube:
    """The control plane and the node, started once; torn down (host left clean) at the end."""
    k = cluster.start(_env_path("INFERGATE_CLUSTER_BIN"), _env_path("INFERGATE_HELM"),
                      built_images(), workdir)
    yield k
    k.dump_logs()
    k.stop()


@pytest.fixture(scope="session")
def images() -> dict[str, tuple[Path, str]]:
    return built_images()


@pytest.fixture(scope="session")
def release(kube):
    """`helm install` of the chart with the built images, two operator replicas (leader election)."""
    scenario.install_chart(kube)
    yield scenario.RELEASE
    # test_9_uninstall uninstalls; this only covers a run stopped early.
    if kube.helm("status", scenario.RELEASE, "-n", scenario.RELEASE_NS, check=False).returncode == 0:
        kube.helm("uninstall", scenario.RELEASE, "-n", scenario.RELEASE_NS, "--wait", check=False)


@pytest.fixture(scope="session")
def served(kube, release):
    """The examples applied into a namespace that enforces the restricted profile, all Ready."""
    return scenario.apply_examples(kube, kube.work / "repositories")


@pytest.fixture(scope="session")
def client(kube, served):
    """A client pod (tritonclient, perf_analyzer) in the examples' namespace."""
    return scenario.start_client(kube)


def pytest_sessionfinish(session, exitstatus):
    # Leave no background kubectl behind.
    subprocess.run(["pkill", "-f", "kubectl.*infergate-e2e-"], check=False)
