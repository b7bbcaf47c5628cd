#!/usr/bin/env python3
# A plain PyTorch Llama built from a Hugging Face config.json (no transformers, no trillion code):
# token embedding, RMSNorm, RoPE with rotate_half (inv_freq = theta^(-2i/d)), grouped-query
# attention (query head h reads kv head h // (NH/KV), HF's repeat_kv), SwiGLU MLP, final norm and
# LM head (tied to the embedding when tie_word_embeddings). Weights come from model.safetensors,
# read here from the format spec (8-byte LE header length, JSON header, raw LE data) with struct.
# MoE configs (model_type "trillion_moe": Llama attention + DeepSeek-V3's MoE fields and names)
# replace the MLP of layers >= first_k_dense_replace by DeepSeek-V3's MoE: affinities
# sigmoid(x Wg^T) (or softmax), the top num_experts_per_tok of affinity + e_score_correction_bias
# chosen (with n_group > 1 only among the experts of the topk_group groups, of n_routed_experts /
# n_group consecutive experts each, whose two largest keys sum highest), gates = chosen affinities / their sum (norm_topk_prob), times routed_scaling_factor,
# plus the shared experts (one MLP of width n_shared_experts * moe_intermediate_size).
# Prints the logits of every position for the given ids as JSON, computed in float32:
#   /usr/bin/python3 torch_llama.py DIR ID [ID ...]
import json, math, struct, sys

import torch
from torch import nn


def load_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    data = bytearray(blob[8 + n :])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        raw = data[begin:end]
        if t["dtype"] == "F32":
            v = torch.frombuffer(raw, dtype=torch.float32)
        elif t["dtype"] == "F64":
            v = torch.frombuffer(raw, dtype=torch.float64).float()
        elif t["dtype"] == "BF16":
            v = torch.frombuffer(raw, dtype=torch.bfloat16).float()
        else:
            raise SystemExit("%s: tensor %s has dtype %s (F32, F64, BF16 expected)"
                             % (path, name, t["dtype"]))
        out[name] = v.reshape(t["shape"]).clone()
    return out


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, self.NH = cfg["hidden_size"], cfg["num_attention_heads"]
        self.KV = cfg.get("num_key_value_heads", self.NH)
        self.HD = cfg.get("head_dim") or C // self.NH
        self.q_proj = nn.Linear(C, self.NH * self.HD, bias=False)
        self.k_proj = nn.Linear(C, self.KV * self.HD, bias=False)
        self.v_proj = nn.Linear(C, self.KV * self.HD, bias=False)
        self.o_proj = nn.Linear(self.NH * self.HD, C, bias=False)

    def forward(self, x, cos, sin):  # x [T, C]
        T = x.shape[0]
        q = self.q_proj(x).view(T, self.NH, self.HD).transpose(0, 1)  # [NH, T, HD]
        k = self.k_proj(x).view(T, self.KV, self.HD).transpose(0, 1)  # [KV, T, HD]
        v = self.v_proj(x).view(T, self.KV, self.HD).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        group = self.NH // self.KV
        k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
        scores = q @ k.transpose(1, 2) / math.sqrt(self.HD)
        scores = scores + torch.full((T, T), float("-inf")).triu(1)  # causal
        out = torch.softmax(scores, -1) @ v  # [NH, T, HD]
        return self.o_proj(out.transpose(0, 1).reshape(T, self.NH * self.HD))


class MLP(nn.Module):
    def __init__(self, cfg, width=None):
        super().__init__()
        C, F = cfg["hidden_size"], width or cfg["intermediate_size"]
        self.gate_proj = nn.Linear(C, F, bias=False)
        self.up_proj = nn.Linear(C, F, bias=False)
        self.down_proj = nn.Linear(F, C, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Gate(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E = cfg["n_routed_experts"]
        self.weight = nn.Parameter(torch.zeros(E, cfg["hidden_size"]))
        self.sigmoid = cfg.get("scoring_func", "sigmoid") == "sigmoid"
        if self.sigmoid:
            self.e_score_correction_bias = nn.Parameter(torch.zeros(E))


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        FE, self.K = cfg["moe_intermediate_size"], cfg["num_experts_per_tok"]
        self.scale = cfg.get("routed_scaling_factor", 1.0)
        self.groups = cfg.get("n_group") or 1
        self.kept_groups = cfg.get("topk_group") or self.groups
        self.gate = Gate(cfg)
        self.experts = nn.ModuleList([MLP(cfg, FE) for _ in range(cfg["n_routed_experts"])])
        shared = cfg.get("n_shared_experts", 0)
        self.shared_experts = MLP(cfg, shared * FE) if shared else None

    def forward(self, x):  # x [T, C]
        logits = x @ self.gate.weight.t()
        if self.gate.sigmoid:
            scores = torch.sigmoid(logits)
            key = scores + self.gate.e_score_correction_bias
        else:
            scores = torch.softmax(logits, -1)
            key = scores
        if self.kept_groups < self.groups:  # group-limited: drop the other groups' experts
            T, E = key.shape
            per_group = key.view(T, self.groups, E // self.groups)
            group_score = per_group.topk(2, -1).values.sum(-1)  # [T, G]
            kept = group_score.topk(self.kept_groups, -1).indices
            allowed = torch.zeros(T, self.groups, dtype=torch.bool)
            allowed[torch.arange(T).unsqueeze(1), kept] = True
            allowed = allowed.unsqueeze(-1).expand(T, self.groups, E // self.groups).reshape(T, E)
            key = key.masked_fill(~allowed, float("-inf"))
        chosen = torch.topk(key, self.K, -1).indices  # [T, K]
        gates = scores.gather(-1, chosen)
        gates = gates / gates.sum(-1, keepdim=True) * self.scale
        out = torch.zeros_like(x)
        for t in range(x.shape[0]):
            for k in range(self.K):
                out[t] += gates[t, k] * self.experts[int(chosen[t, k])](x[t : t + 1])[0]
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)
        return out


class Layer(nn.Module):
    def __init__(self, cfg, index):
        super().__init__()
        eps = cfg["rms_norm_eps"]
        self.input_layernorm = RMSNorm(cfg["hidden_size"], eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], eps)
        moe = "n_routed_experts" in cfg and index >= cfg.get("first_k_dense_replace", 0)
        self.mlp = MoE(cfg) if moe else MLP(cfg)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([Layer(cfg, l) for l in range(cfg["num_hidden_layers"])])
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Model(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        if cfg.get("tie_word_embeddings"):
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, ids):  # ids [T] -> logits [T, V]
        cfg, T = self.cfg, ids.shape[0]
        HD = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        theta = cfg.get("rope_theta", 10000.0)
        inv_freq = 1.0 / (theta ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
        freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
        angles = torch.cat([freqs, freqs], -1)  # [T, HD]
        cos, sin = angles.cos(), angles.sin()
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.model.norm(x))


def main():
    d, ids = sys.argv[1], [int(a) for a in sys.argv[2:]]
    with open(d + "/config.json") as f:
        cfg = json.load(f)
    if cfg.get("rope_scaling"):
        raise SystemExit("%s/config.json: rope_scaling is not supported by this reference" % d)
    model = LlamaForCausalLM(cfg)
    weights = load_safetensors(d + "/model.safetensors")
    if cfg.get("tie_word_embeddings"):
        weights.setdefault("lm_head.weight", weights["model.embed_tokens.weight"])
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise SystemExit("tensor names: missing %s, unexpected %s" % (missing, unexpected))
    with torch.no_grad():
        logits = model(torch.tensor(ids, dtype=torch.long))
    print(json.dumps(logits.tolist()))


if __name__ == "__main__":
    main()
