# make demo: roost's main job on its embedded defaults.  make test: the whole suite.
# make harnesses: Claude Code and Codex from npm (make test installs them first).
# Both install what they need into .venv first (re-run only when pyproject.toml changes).
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
EXTRAS   := test,sglang-protocol,envs,agents,sandboxes,trainer,viewer,grammar
# Installed without their dependencies: sglang is needed only for its protocol classes
# (GenerateReqInput, SamplingParams) and its full dependency set needs a GPU; hermes-agent
# pins exact versions of openai, pydantic, rich, ... that conflict with roost's, and runs
# with the versions here (the modules it imports are listed in the `agents` extra). desktop-env
# (OSWorld's getters and metrics) pins numpy<2, torch 2.5 and cloud SDKs; the modules roost
# imports from it need only what the `envs` extra lists.
SGLANG   := sglang==0.5.3
HERMES   := hermes-agent==0.19.0
OSWORLD  := desktop-env==1.0.2
# Claude Code and Codex, run unchanged against the gateway by tests/rollout/test_gateway_harnesses.py.
# npm skips Claude Code's postinstall; its cli-wrapper.cjs runs the platform binary itself.
HARNESSES := .npm-harnesses
HARNESS_PACKAGES := @anthropic-ai/claude-code@2.1.332 @openai/codex@0.171.0

.PHONY: install harnesses demo test clean

install: $(STAMP)

$(STAMP): pyproject.toml setup.py .ci/constraints.txt Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(PIP) --quiet "torch==2.13.0" -e ".[$(EXTRAS)]"
	$(PIP) --quiet --no-deps "$(SGLANG)" "$(HERMES)" "$(OSWORLD)"
	touch $(STAMP)

harnesses: $(HARNESSES)/.stamp

$(HARNESSES)/.stamp: Makefile
	mkdir -p $(HARNESSES)
	npm install --prefix $(HARNESSES) --no-audit --no-fund --loglevel=error $(HARNESS_PACKAGES)
	touch $@

demo: install
	$(BIN)/roost demo

test: install harnesses
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .roost $(HARNESSES)
