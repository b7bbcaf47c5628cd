#!/usr/bin/env bash
# Runs a trillion GGUF export in llama.cpp itself: installs node-llama-cpp (llama.cpp's C++
# with a prebuilt Linux x64 CPU binary, from the npm registry) into build-llama-cpp/ once, exports
# CHECKPOINT as f32 and q8_0 GGUF, and has llama.cpp tokenize PROMPT and complete it greedily.
# Passes when llama.cpp's token ids equal `trillion tokenizer encode` and its f32 greedy text
# equals `trillion generate --temperature 0` (q8_0 is printed, not compared: quantization moves
# logits). Not part of ctest: it needs the npm registry and ~100 MB.
#   tests/interop/llama_cpp_check.sh CHECKPOINT_OR_RUN_DIR TOKENIZER.json [PROMPT] [TOKENS]
set -euo pipefail
cd "$(dirname "$0")/../.."
ckpt=${1:?usage: llama_cpp_check.sh CHECKPOINT TOKENIZER.json [PROMPT] [TOKENS]}
tokenizer=${2:?usage: llama_cpp_check.sh CHECKPOINT TOKENIZER.json [PROMPT] [TOKENS]}
prompt=${3:-The jury said}
tokens=${4:-30}
bin=build/trillion
dir=build-llama-cpp
if [[ ! -d $dir/node_modules/node-llama-cpp ]]; then
  echo "== installing node-llama-cpp 3.21.1 into $dir"
  mkdir -p "$dir"
  (cd "$dir" && npm init -y >/dev/null && npm i -E --no-audit --no-fund node-llama-cpp@3.21.1)
fi
cp tests/interop/llama_cpp_load.mjs "$dir/"
status=0
want_ids=$($bin tokenizer encode --tokenizer "$tokenizer" --text "$prompt")
want_text=$($bin generate --checkpoint "$ckpt" --tokenizer "$tokenizer" --prompt "$prompt" \
  --max-tokens "$tokens" --temperature 0)
for dtype in f32 q8_0; do
  $bin export --checkpoint "$ckpt" --format gguf --dtype "$dtype" --tokenizer "$tokenizer" --overwrite \
    --out "$dir/model-$dtype.gguf"
  node "$dir/llama_cpp_load.mjs" "$dir/model-$dtype.gguf" "$prompt" "$tokens" "$dir/out-$dtype" \
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
