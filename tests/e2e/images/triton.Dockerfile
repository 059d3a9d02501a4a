# Triton Inference Server 2.51, CPU only, from the nvidia-pytriton 0.7.0 wheel (its tritonserver
# with the python backend), laid out as in Triton's own images: /opt/tritonserver holds bin/,
# backends/ and caches/, so `tritonserver --model-repository=...` needs no other flag.
# BASE: Debian's Python 3.11 (tests/e2e/images.sh assembles it); the build context holds the
# site-packages of the venv tests/upstream/triton-env.sh installs.
ARG BASE
FROM ${BASE}
# Where Debian's python3 looks for local packages: the python backend's stub (started through
# bash, embedding Debian's libpython3.11) finds numpy there without any environment.
COPY site-packages/ /usr/local/lib/python3.11/dist-packages/
RUN mkdir -p /opt && ln -s /usr/local/lib/python3.11/dist-packages/pytriton/tritonserver /opt/tritonserver
ENV LD_LIBRARY_PATH=/usr/local/lib/python3.11/dist-packages/nvidia_pytriton.libs \
    PATH=/opt/tritonserver/bin:/usr/local/bin:/usr/bin:/bin
WORKDIR /tmp
EXPOSE 8000 8001 8002
CMD ["tritonserver", "--model-repository=/models"]
