#!/usr/bin/env python3
"""Encodes texts with Hugging Face `tokenizers` and `tiktoken` (the reference implementations),
for tests/data/pretrained_tokenizer_test.cpp. Usage: tokenizer_reference.py JOB.json OUT.json
JOB: {"texts": [...], "hf": [tokenizer.json paths],
      "tiktoken": [{"path": ranks file, "pattern": regex, "specials": {text: id}}]}
OUT: {path: [[ids of text 0], [ids of text 1], ...]} for every tokenizer. Special-token text is
encoded as ordinary text on both sides (encode_special_tokens, encode_ordinary), as trillion does.
"""
import base64
import json
import sys

import tiktoken
from tokenizers import Tokenizer


def main(job_path, out_path):
    job = json.load(open(job_path, encoding="utf-8"))
    texts = job["texts"]
    out = {}
    for path in job.get("hf", []):
        tok = Tokenizer.from_file(path)
        tok.encode_special_tokens = True
        out[path] = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    for spec in job.get("tiktoken", []):
        ranks = {}
        for line in open(spec["path"], "rb"):
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
        enc = tiktoken.Encoding(name="test", pat_str=spec["pattern"], mergeable_ranks=ranks,
                                special_tokens=spec["specials"])
        out[spec["path"]] = enc.encode_ordinary_batch(texts)
    json.dump(out, open(out_path, "w"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
