#!/usr/bin/env bash
# GPU check on a machine with torch (CUDA), transformers and peft; no network, no vLLM
# needed. Run it from the folder `python benchmarks/scale/gpu_bundle.py OUT` builds (or from a
# checkout whose Python has cairn's packages):
#
#     bash benchmarks/scale/gpu_check.sh [--out DIR] [--only gen,train,agree,sokoban,vllm]
#
# benchmarks/scale/gpu_check.py says what it measures (generation and training tokens/s with
# MFU for SmolLM2-135M- and Qwen2.5-0.5B-sized models, bf16 vs fp32 log-probs, 3 GiGPO
# iterations of sokoban_smol; vLLM and verl only where vLLM imports) and writes
# gpu_check.md / gpu_check.json (default benchmarks/results/scale/).
# Exit status: 0 all steps ran; 1 a step failed (recorded in the files); 2 no GPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
if ! nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; then
    echo "gpu_check: no NVIDIA GPU (nvidia-smi failed)" >&2
    exit 2
fi
exec "$PY" benchmarks/scale/gpu_check.py "$@"
