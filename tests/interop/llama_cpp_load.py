"""Loads a GGUF file in llama.cpp (the llama-cpp-python bindings, CPU build) and writes the
prompt's token ids and its greedy completion to OUT_PREFIX.ids / OUT_PREFIX.txt:
  python llama_cpp_load.py FILE.gguf PROMPT MAX_TOKENS OUT_PREFIX
OUT_PREFIX.ids: llama.cpp's ids for PROMPT, space-separated, without BOS. OUT_PREFIX.txt: PROMPT
followed by up to MAX_TOKENS tokens that llama.cpp's greedy sampler picks after BOS + PROMPT,
stopping at EOS. The BOS (the file's tokenizer.ggml.bos_token_id) is put first here when
llama.cpp's own tokenize does not add it (it adds it only where the file says
tokenizer.ggml.add_bos_token = true), and stderr says so. Used by llama_cpp_check.sh (run with
build-llama-cpp/venv's python); knows nothing of trillion.
"""
import os
import sys

from llama_cpp import Llama


def main() -> int:
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    path, prompt, max_tokens, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    # n_ctx=0: the context the file declares (llama.context_length); verbose: llama.cpp's load log
    # goes to stderr.
    llm = Llama(model_path=path, n_ctx=0, n_threads=os.cpu_count(), seed=0, verbose=True)
    ids = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=False)
    with open(out + ".ids", "w") as f:
        f.write(" ".join(str(i) for i in ids))
    context = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=False)
    if context[:1] != [llm.token_bos()]:
        print(f"llama.cpp's tokenize adds no BOS here; putting BOS {llm.token_bos()} first",
              file=sys.stderr)
        context = [llm.token_bos()] + context
    if len(context) + max_tokens > llm.n_ctx():
        print(f"{len(context)} prompt tokens + {max_tokens} exceed the context {llm.n_ctx()}",
              file=sys.stderr)
        return 1
    completion = []
    if max_tokens > 0:
        # temp=0: llama.cpp's greedy sampler (argmax); repeat_penalty=1: the penalty stage is a
        # no-op, so nothing but the logits decides.
        for token in llm.generate(context, temp=0.0, repeat_penalty=1.0):
            if token == llm.token_eos():
                break
            completion.append(token)
            if len(completion) == max_tokens:
                break
    text = llm.detokenize(completion).decode("utf-8", errors="replace")
    with open(out + ".txt", "w") as f:
        f.write(prompt + text)
    print(f"prompt ids {ids}; generated {completion}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
