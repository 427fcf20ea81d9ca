#!/usr/bin/env bash
# make image: builds the `boundless` image from the Dockerfile without a registry.
#
# The base is Debian 12 made by debootstrap (its python3 is 3.11) and imported into podman;
# the build brings this machine's torch CPU wheel and CA bundle in .image/ (the Dockerfile
# uses them when present). podman runs with runc and no default ulimits
# (scripts/image/containers.conf): crun refuses this machine's cgroups. Where a registry is
# reachable, `docker build -t boundless:0.1.0 .` builds the same Dockerfile on python:3.11-slim.
#
#   IMAGE=localhost/boundless:0.1.0 bash scripts/build_image.sh
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-localhost/boundless:0.1.0}
BASE=${BASE_IMAGE:-localhost/boundless-base:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
export CONTAINERS_CONF="$PWD/scripts/image/containers.conf"

missing=()
for tool in podman debootstrap runc; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
        echo "make image needs ${missing[*]} (Debian: apt-get install podman buildah debootstrap runc, as root)" >&2
        exit 1
    fi
    echo "installing podman, buildah, debootstrap and runc from Debian's packages"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman buildah debootstrap runc >/dev/null
fi

if ! podman image exists "$BASE"; then
    rootfs=$(mktemp -d /tmp/boundless-rootfs.XXXXXX)
    trap 'rm -rf "$rootfs"' EXIT
    echo "debootstrap: Debian 12 with python3 into $rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" "$MIRROR" >/dev/null
    tar -C "$rootfs" -c . | podman import -q - "$BASE" >/dev/null
    rm -rf "$rootfs"
fi

# what the Dockerfile takes when present: torch's CPU wheel (pip would otherwise ask PyTorch's
# index, unreachable here) and the CA bundle this machine's pip trusts
mkdir -p .image/wheels && rm -f .image/wheels/*.whl .image/ca-certificates.crt
wheel=$(find /opt/wheels -maxdepth 1 -name 'torch-2.13.0+cpu-*.whl' 2>/dev/null | head -1 || true)
[ -n "$wheel" ] && cp "$wheel" .image/wheels/
[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt .image/

podman build --network host --build-arg BASE="$BASE" -t "$IMAGE" .
podman image prune --force >/dev/null  # the build stage's layers: only the final stage is kept
echo "built $IMAGE: $(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1 / 1e6}')"
