# make demo: set everything up and run the exporter against the simulated node.
# make test: set everything up and run the whole test suite (lint, types, tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
DEMO_ADDRESS ?= 127.0.0.1:9410

.PHONY: all venv demo test lint typecheck unit bench stubs tools clean image base-image lock

all: test

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ needed"' \
		|| { echo "podresources-exporter needs Python 3.11 or newer (PYTHON=$(PYTHON))"; exit 1; }
	@$(PYTHON) -m venv $(VENV) \
		|| { echo "python venv failed: on Debian/Ubuntu, apt-get install python3-venv"; exit 1; }
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	@echo "Serving the simulated node on http://$(DEMO_ADDRESS)/ (Ctrl-C stops):"
	@echo "  curl http://$(DEMO_ADDRESS)/debug/allocations?format=text"
	@echo "  curl http://$(DEMO_ADDRESS)/metrics"
	$(BIN)/podresources-exporter --demo --log.format console --web.listen-address $(DEMO_ADDRESS)

# Outside programs some tests drive for real (Prometheus, promtool, gcc): installed with
# apt where that is possible, else those tests skip and say why.
tools:
	@bash scripts/ensure-test-tools.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# The tests mostly wait (polls, timeouts, servers, subprocesses): a worker per CPU (a
# container's CPU quota counted: tests/cpu_budget.py) overlaps the waits; TEST_WORKERS=0
# runs them all in this process. Tests go to the workers one by one, but those marked
# xdist_group, which share a costly module fixture, go to one worker together.
TEST_WORKERS ?= auto
unit: $(STAMP)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup

test: tools lint typecheck unit

bench: $(STAMP)
	$(BIN)/python bench/bench.py

# Regenerate exporter/kubelet/api/ after editing proto/.
stubs: $(STAMP)
	$(BIN)/python scripts/generate_stubs.py

# The container image, with podman, buildah or docker (whichever is here); see the
# Dockerfile's header and scripts/build-image.sh for IMAGE, BASE_IMAGE, PIP_CONF, PIP_CERT.
image:
	bash scripts/build-image.sh

# A Python base image from Debian's packages, where no container registry can be reached.
base-image:
	bash scripts/build-base-image.sh

# Re-pin requirements.lock and requirements-build.lock (with hashes) from pyproject.toml;
# run `make test` and `make image` after.
lock:
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install --quiet pip-tools
	.venv-lock/bin/pip-compile --quiet --generate-hashes --strip-extras --allow-unsafe \
		--no-emit-index-url --output-file requirements.lock pyproject.toml
	.venv-lock/bin/pip-compile --quiet --generate-hashes --strip-extras --allow-unsafe \
		--no-emit-index-url --output-file requirements-build.lock requirements-build.in

clean:
	rm -rf $(VENV) .venv-lock build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
