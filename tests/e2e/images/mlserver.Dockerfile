# MLServer 1.7.1 from PyPI. BASE: Debian's Python 3.11 (tests/e2e/images.sh assembles it); the
# build context holds the site-packages of the venv tests/upstream/mlserver-env.sh installs.
# Models and their runtimes come from the model directory, as with MLServer's own image.
ARG BASE
FROM ${BASE}
COPY site-packages/ /usr/local/lib/python3.11/dist-packages/
RUN mkdir -p /usr/local/bin \
 && printf '#!/usr/bin/python3\nimport sys\nfrom mlserver.cli import main\nsys.exit(main())\n' \
      >/usr/local/bin/mlserver \
 && chmod 0755 /usr/local/bin/mlserver
# MLServer keeps its metrics files in the working directory: one any user can write.
WORKDIR /tmp
EXPOSE 8080 8081 8082
CMD ["mlserver", "start", "/mnt/models"]
