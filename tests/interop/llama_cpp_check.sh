#!/usr/bin/env bash
# Runs a trillion GGUF export in llama.cpp itself: installs llama-cpp-python 0.3.36 (PyPI; an
# sdist that compiles llama.cpp's C++ with cmake, CPU only and without -march=native) into a
# virtual environment build-llama-cpp/venv once, exports CHECKPOINT as f32 and q8_0 GGUF, and has
# llama.cpp tokenize PROMPT and complete it greedily (tests/interop/llama_cpp_load.py).
# Passes when llama.cpp's token ids equal `trillion tokenizer encode` and its f32 greedy text
# equals `trillion generate --temperature 0` (q8_0 is printed, not compared: quantization moves
# logits). llama_cpp_load.py puts BOS before the prompt as trillion does (llama.cpp adds none
# to these files). Not part of ctest: it needs PyPI, a 170 MB venv and compiling llama.cpp (16-27
# min measured on this project's busy 2-core machine); later runs reuse the venv and take seconds.
#   tests/interop/llama_cpp_check.sh CHECKPOINT_OR_RUN_DIR TOKENIZER.json [PROMPT] [TOKENS]
set -euo pipefail
cd "$(dirname "$0")/../.."
ckpt=${1:?usage: llama_cpp_check.sh CHECKPOINT TOKENIZER.json [PROMPT] [TOKENS]}
tokenizer=${2:?usage: llama_cpp_check.sh CHECKPOINT TOKENIZER.json [PROMPT] [TOKENS]}
prompt=${3:-The jury said}
tokens=${4:-30}
bin=build/trillion
dir=build-llama-cpp
version=0.3.36
py=$dir/venv/bin/python
if ! "$py" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$version')" 2>/dev/null; then
  echo "== installing llama-cpp-python $version into $dir/venv (compiles llama.cpp: minutes)"
  mkdir -p "$dir"
  python3 -m venv "$dir/venv"
  start=$SECONDS
  # GGML_NATIVE=OFF: a portable x86-64 build rather than one for this CPU; no GPU backend is on
  # by default. Pinned: another version is another llama.cpp.
  CMAKE_ARGS="-DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "$py" -m pip install --no-cache-dir "llama-cpp-python==$version" > "$dir/pip.log" 2>&1 ||
    { tail -40 "$dir/pip.log"; exit 1; }
  echo "== installed in $((SECONDS - start)) s (log: $dir/pip.log)"
fi
status=0
want_ids=$($bin tokenizer encode --tokenizer "$tokenizer" --text "$prompt")
want_text=$($bin generate --checkpoint "$ckpt" --tokenizer "$tokenizer" --prompt "$prompt" \
  --max-tokens "$tokens" --temperature 0)
for dtype in f32 q8_0; do
  $bin export --checkpoint "$ckpt" --format gguf --dtype "$dtype" --tokenizer "$tokenizer" --overwrite \
    --out "$dir/model-$dtype.gguf"
  "$py" tests/interop/llama_cpp_load.py "$dir/model-$dtype.gguf" "$prompt" "$tokens" "$dir/out-$dtype" \
    > "$dir/llama-$dtype.log" 2>&1 || { cat "$dir/llama-$dtype.log"; exit 1; }
  echo "== llama.cpp, $dtype: ids $(cat "$dir/out-$dtype.ids")"
  echo "$(cat "$dir/out-$dtype.txt")"
done
echo "== trillion: ids $want_ids"
echo "$want_text"
if [[ "$(cat "$dir/out-f32.ids")" != "$want_ids" ]]; then
  echo "FAIL: llama.cpp tokenizes the prompt differently"; status=1
fi
if [[ "$(cat "$dir/out-f32.txt")" != "$want_text" ]]; then
  echo "FAIL: llama.cpp's f32 greedy text differs from trillion generate"; status=1
fi
((status == 0)) && echo "PASS: llama.cpp loads the GGUF, tokenizes and completes as trillion does"
exit $status
