#!/usr/bin/env bash
# Installs every build and test dependency from Debian packages. Idempotent: installs only
# what is missing, so a second run is quick.
#   scripts/setup.sh [--with-torch]   (--with-torch adds python3-torch, ~1 GB, for the PyTorch
#                                      parity test of tests/interop; without it that test skips)
# It also makes .venv-tests, a Python virtual environment with Hugging Face tokenizers and
# tiktoken from PyPI (pinned), which the tokenizer parity test of tests/data compares against,
# and PyTorch + Hugging Face transformers (pinned; ~80 s and 5.6 GB the first time), whose own
# DeepseekV3ForCausalLM loads trillion's deepseek_v3 export in tests/interop; they are never a
# runtime dependency, and without network those tests skip saying why. Llama 3's tokenizer file
# comes the same way (below).
set -euo pipefail
packages=(
  g++ cmake ninja-build ccache pkg-config git
  libopenblas-openmp-dev libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libxxhash-dev zlib1g-dev libzstd-dev zstd libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  clang libclang-rt-dev
  libdnnl-dev
  python3-venv
)
for arg in "$@"; do
  case "$arg" in
    --with-torch) packages+=(python3-torch) ;;
    *) echo "setup.sh: unknown argument '$arg' (try --with-torch)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -eq 0 ]] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all dependencies present"
fi

# Reference tokenizers for tests/data/pretrained_tokenizer_test.cpp (skipped when absent).
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv-tests"
if ! "$venv/bin/python" -c 'import tokenizers, tiktoken' 2>/dev/null; then
  if python3 -m venv "$venv" && "$venv/bin/pip" install -q tokenizers==0.23.3 tiktoken==0.14.0; then
    echo "setup: .venv-tests has tokenizers and tiktoken"
  else
    echo "setup: could not install tokenizers/tiktoken into .venv-tests (no network?);" \
      "the tokenizer parity test against them will skip" >&2
  fi
fi

# PyTorch and transformers for tests/interop/deepseek_export_test.cpp (skipped when absent).
if [[ -x "$venv/bin/pip" ]] && ! "$venv/bin/python" -c 'import torch, transformers' 2>/dev/null; then
  if "$venv/bin/pip" install -q torch==2.15.0 transformers==5.25.0; then
    echo "setup: .venv-tests has torch and transformers"
  else
    echo "setup: could not install torch/transformers into .venv-tests (no network?);" \
      "the Hugging Face DeepSeek-V3 load test will skip" >&2
  fi
fi

# Llama 3's published tokenizer (tiktoken ranks, 128,000 + 256 specials), for the test that
# compares trillion's encoding of it with tiktoken's (skipped when absent). Meta ships the file
# inside its llama-models wheel on PyPI; it is extracted to .venv-tests/llama3/tokenizer.model and
# checked against its SHA-256. It is test data only (Llama 3 Community License), not committed.
llama3="$venv/llama3/tokenizer.model"
llama3_sha=82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55
if [[ -x "$venv/bin/pip" ]] && ! echo "$llama3_sha  $llama3" | sha256sum -c --status 2>/dev/null; then
  wheels=$(mktemp -d)
  if "$venv/bin/pip" download -q --no-deps llama-models==0.3.0 -d "$wheels" &&
    mkdir -p "$(dirname "$llama3")" &&
    "$venv/bin/python" -c 'import sys, zipfile, glob
z = zipfile.ZipFile(glob.glob(sys.argv[1] + "/*.whl")[0])
open(sys.argv[2], "wb").write(z.read("llama_models/llama3/tokenizer.model"))' "$wheels" "$llama3" &&
    echo "$llama3_sha  $llama3" | sha256sum -c --status; then
    echo "setup: .venv-tests/llama3/tokenizer.model is Llama 3's tokenizer"
  else
    rm -f "$llama3"
    echo "setup: could not fetch Llama 3's tokenizer (llama-models from PyPI);" \
      "the Llama 3 tokenizer test will skip" >&2
  fi
  rm -rf "$wheels"
fi
