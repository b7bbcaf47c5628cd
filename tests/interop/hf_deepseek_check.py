#!/usr/bin/env python3
# Loads exported directories with Hugging Face transformers' AutoModelForCausalLM (config.json's
# model_type picks the class: DeepseekV3ForCausalLM for deepseek_v3; no trillion code) and
# reports, per directory, the logits of every position for the given ids (f32, eager attention)
# and everything the load said: the missing, unexpected and mismatched weights of
# from_pretrained's loading info, and every warning logged by transformers or raised by Python
# while loading. One process checks several directories so torch is imported once per test run.
#   .venv-tests/bin/python hf_deepseek_check.py ID,ID,... DIR [DIR ...]
# Prints one JSON object {DIR: {"config", "model", "logits", "missing", "unexpected", "mismatched",
# "warnings"}}.
import json, logging, sys, warnings

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def check(path, ids, collect):
    collect.messages.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = AutoConfig.from_pretrained(path)
        model, info = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, attn_implementation="eager", output_loading_info=True
        )
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    return {
        "config": type(config).__name__,
        "model": type(model).__name__,
        "logits": logits.double().tolist(),
        "missing": sorted(info.get("missing_keys", [])),
        "unexpected": sorted(info.get("unexpected_keys", [])),
        "mismatched": [str(m) for m in info.get("mismatched_keys", [])],
        "warnings": collect.messages + [str(w.message) for w in caught],
    }


def main():
    ids = [int(t) for t in sys.argv[1].split(",")]
    collect = Collect()
    transformers.logging.set_verbosity_warning()
    logging.getLogger("transformers").addHandler(collect)
    torch.manual_seed(0)
    print(json.dumps({path: check(path, ids, collect) for path in sys.argv[2:]}))


if __name__ == "__main__":
    main()
