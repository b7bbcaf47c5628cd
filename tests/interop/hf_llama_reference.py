#!/usr/bin/env python3
# An independent Hugging Face Llama forward, written from transformers' modeling_llama formulas
# (RMSNorm, rotate_half RoPE with inv_freq = theta^(-2i/d), repeat_kv grouped-query attention,
# SiLU-gated MLP) and the safetensors spec, in plain Python doubles (no trillion code): reads
# DIR/config.json and DIR/model.safetensors and prints the next-token logits after the given ids
# as JSON (tests/interop/torch_llama.py is the PyTorch version, run where PyTorch is installed).
#   hf_llama_reference.py DIR ID [ID ...]
import json, math, struct, sys


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    data = blob[8 + n :]
    codes = {"F32": ("f", 4), "F64": ("d", 8), "BF16": (None, 2)}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        code, size = codes[t["dtype"]]
        begin, end = t["data_offsets"]
        raw = data[begin:end]
        count = (end - begin) // size
        if code is None:  # bf16: the top half of a float32
            vals = [struct.unpack("<f", b"\0\0" + raw[2 * i : 2 * i + 2])[0] for i in range(count)]
        else:
            vals = list(struct.unpack("<%d%s" % (count, code), raw))
        out[name] = (t["shape"], vals)
    return out


def matvec(w, shape, x):  # y = W x, W [out, in] row-major
    o, i = shape
    return [sum(w[r * i + c] * x[c] for c in range(i)) for r in range(o)]


def rmsnorm(x, w, eps):
    r = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    return [v * r * g for v, g in zip(x, w)]


def plain_forward(cfg, W, ids):
    C, NH = cfg["hidden_size"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", NH)
    HD = cfg.get("head_dim") or C // NH
    eps, theta = cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
    inv_freq = [theta ** (-2.0 * i / HD) for i in range(HD // 2)]

    def rope(v, pos):  # v of one head: v * cos + rotate_half(v) * sin
        h = HD // 2
        out = list(v)
        for i in range(h):
            c, s = math.cos(pos * inv_freq[i]), math.sin(pos * inv_freq[i])
            out[i] = v[i] * c - v[h + i] * s
            out[h + i] = v[h + i] * c + v[i] * s
        return out

    emb_shape, emb = W["model.embed_tokens.weight"]
    xs = [emb[t * C : (t + 1) * C] for t in ids]
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        g = lambda n: W[p + n]
        ks, vs, qs = [], [], []
        for pos, x in enumerate(xs):
            h = rmsnorm(x, g("input_layernorm.weight")[1], eps)
            q = matvec(g("self_attn.q_proj.weight")[1], g("self_attn.q_proj.weight")[0], h)
            k = matvec(g("self_attn.k_proj.weight")[1], g("self_attn.k_proj.weight")[0], h)
            v = matvec(g("self_attn.v_proj.weight")[1], g("self_attn.v_proj.weight")[0], h)
            qs.append([rope(q[j * HD : (j + 1) * HD], pos) for j in range(NH)])
            ks.append([rope(k[j * HD : (j + 1) * HD], pos) for j in range(KV)])
            vs.append([v[j * HD : (j + 1) * HD] for j in range(KV)])
        new = []
        for pos, x in enumerate(xs):
            heads = []
            for j in range(NH):
                kvh = j // (NH // KV)  # repeat_kv
                sc = [sum(a * b for a, b in zip(qs[pos][j], ks[t][kvh])) / math.sqrt(HD)
                      for t in range(pos + 1)]
                m = max(sc)
                e = [math.exp(s - m) for s in sc]
                z = sum(e)
                heads += [sum(e[t] / z * vs[t][kvh][d] for t in range(pos + 1)) for d in range(HD)]
            o = matvec(g("self_attn.o_proj.weight")[1], g("self_attn.o_proj.weight")[0], heads)
            x = [a + b for a, b in zip(x, o)]
            h = rmsnorm(x, g("post_attention_layernorm.weight")[1], eps)
            gate = matvec(g("mlp.gate_proj.weight")[1], g("mlp.gate_proj.weight")[0], h)
            up = matvec(g("mlp.up_proj.weight")[1], g("mlp.up_proj.weight")[0], h)
            act = [a / (1.0 + math.exp(-a)) * b for a, b in zip(gate, up)]
            d = matvec(g("mlp.down_proj.weight")[1], g("mlp.down_proj.weight")[0], act)
            new.append([a + b for a, b in zip(x, d)])
        xs = new
    h = rmsnorm(xs[-1], W["model.norm.weight"][1], eps)
    head = W["model.embed_tokens.weight" if cfg.get("tie_word_embeddings") else "lm_head.weight"]
    return matvec(head[1], head[0], h)


def main():
    d, ids = sys.argv[1], [int(a) for a in sys.argv[2:]]
    with open(d + "/config.json") as f:
        cfg = json.load(f)
    W = read_safetensors(d + "/model.safetensors")
    print(json.dumps(plain_forward(cfg, W, ids)))


if __name__ == "__main__":
    main()
