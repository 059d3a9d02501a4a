# The clients users already have: tritonclient 2.71.0 (HTTP, gRPC, shared-memory utilities) with
# numpy, and perf_analyzer 2.45.0 (from the tritonclient 2.45.0 wheel, with libcudart from
# nvidia-cuda-runtime-cu12 and Debian's libb64). BASE: Debian's Python 3.11; the build context
# holds the site-packages of the conformance venv (tests/tools/setup-python.sh) and perf_analyzer.
ARG BASE
FROM ${BASE}
COPY site-packages/ /usr/local/lib/python3.11/dist-packages/
COPY perf_analyzer /usr/local/bin/perf_analyzer
ENV LD_LIBRARY_PATH=/usr/local/lib/python3.11/dist-packages/nvidia/cuda_runtime/lib
WORKDIR /tmp
CMD ["sleep", "infinity"]
