#!/usr/bin/env bash
# Prepares the bundled Brown corpus for the experiment scripts once: a 4,096-token BPE trained on
# data/brown.txt.gz and its train/val shards in DIR (default runs/brown-data). Does nothing when
# DIR already holds train.bin and tokenizer.json. Run from the repository root after the build.
#   scripts/brown_data.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-runs/brown-data}
bin=build/trillion
if [[ ! -f $data/train.bin || ! -f $data/tokenizer.json ]]; then
  mkdir -p "$data"
  $bin tokenizer train --vocab 4096 --overwrite --out "$data/tokenizer.json" data/brown.txt.gz
  $bin data prepare --overwrite --tokenizer "$data/tokenizer.json" --out "$data" data/brown.txt.gz
fi
