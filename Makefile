# ddltrace: `make test` installs everything into .venv and runs the whole suite; `make demo` shows it at work.
VENV   ?= .venv
PYTHON ?= python3
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: install test lint demo sample-store benchmarks clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[mpi,dev]'
	touch $@

install: $(STAMP)

lint: install
	$(VENV)/bin/ruff check .

# pytest exits 5 when it collected nothing: that is a failure here, not a pass.
test: install lint
	$(PY) -m pytest -q -p no:cacheprovider; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: no test ran" >&2; exit 1; fi; exit $$rc

sample-store: install
	$(PY) sample_traces/make_sample_store.py sample_traces/tiny-store

demo: sample-store
	$(VENV)/bin/ddltrace info sample_traces/tiny-store

benchmarks: install
	for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build dist *.egg-info
