# The one `boundless` image the Helm chart runs (helm/boundless): every daemon is a
# subcommand (`boundless ps`, `train`, `model watch`, `serve`).
#   docker build -t boundless:0.1.0 .        where a registry is reachable
#   make image                               without one (scripts/build_image.sh: a Debian
#                                            base made by debootstrap, built with podman)
# Stage 1 installs into a virtual environment, with the CPU build of torch (the default
# wheel would pull several GB of CUDA); stage 2 copies only that environment.
ARG BASE=python:3.11-slim
FROM ${BASE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CERT=/etc/ssl/certs/ca-certificates.crt
# what `make image` brings (.image/: the torch CPU wheel and CA bundle of the building
# machine); empty for a plain docker build, which takes torch from PyTorch's CPU index
COPY .image/ /image/
RUN if [ -f /image/ca-certificates.crt ]; then cp /image/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt; fi \
 && python3 -m venv /opt/boundless
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY boundless boundless
COPY ctr ctr
COPY protos protos
COPY ps ps
COPY trainer trainer
COPY modelmgr modelmgr
COPY serving serving
RUN set -e; wheel=$(ls /image/wheels/torch-2.13.0*.whl 2>/dev/null | head -1); \
    if [ -n "$wheel" ]; then /opt/boundless/bin/pip install "$wheel"; \
    else /opt/boundless/bin/pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0; fi; \
    /opt/boundless/bin/pip install -c constraints.txt '.[all]'

FROM ${BASE}
RUN useradd --uid 10001 --user-group --no-create-home --home-dir /nonexistent boundless \
 && mkdir -p /cache && chown 10001:10001 /cache
COPY --from=build /opt/boundless /opt/boundless
# numba caches its compiled kernels here: the chart mounts a writable volume over it
ENV PATH=/opt/boundless/bin:$PATH NUMBA_CACHE_DIR=/cache/numba PYTHONUNBUFFERED=1
VOLUME /cache
USER 10001:10001
ENTRYPOINT ["boundless"]
CMD ["--help"]
