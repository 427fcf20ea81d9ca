# The one `boundless` image the Helm chart runs (helm/boundless): every daemon is a
# subcommand (`boundless ps`, `train`, `model watch`, `serve`).
#   docker build -t boundless:0.1.0 .
# Stage 1 installs into a virtual environment, with the CPU build of torch (the default
# wheel would pull several GB of CUDA); stage 2 copies only that environment.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/boundless
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY boundless boundless
COPY ctr ctr
COPY protos protos
COPY ps ps
COPY trainer trainer
COPY modelmgr modelmgr
COPY serving serving
RUN /opt/boundless/bin/pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0 \
 && /opt/boundless/bin/pip install -c constraints.txt '.[all]'

FROM python:3.11-slim
RUN useradd --uid 10001 --user-group --no-create-home --home-dir /nonexistent boundless \
 && mkdir -p /cache && chown 10001:10001 /cache
COPY --from=build /opt/boundless /opt/boundless
# numba caches its compiled kernels here: the chart mounts a writable volume over it
ENV PATH=/opt/boundless/bin:$PATH NUMBA_CACHE_DIR=/cache/numba PYTHONUNBUFFERED=1
VOLUME /cache
USER 10001:10001
ENTRYPOINT ["boundless"]
CMD ["--help"]
