// The planner's description of a model: a decoder-only transformer whose block parts are data
// (MLP SwiGLU or GELU, norm RMSNorm or LayerNorm with bias, attention MHA / GQA / MLA computed by
// FlashAttention or materialised, RoPE or learned positions, linear biases, dropout) with
// optional DeepSeek-style Mixture of Experts, plus the named catalog (Llama 3 8B/70B/405B, GPT-3
// 175B, DeepSeek-V3, our moe-2t, Narayanan et al.'s GPT family), whose entries are the TOML files
// of configs/models/ compiled into the binary (plan/model_file.h reads them).
// From a spec come the counts the planner needs: parameters by kind (so they can be sharded by
// TP, PP, EP and ZeRO), activated parameters and model FLOPs per token.
//
// Invariants: every count is a sum over the spec's parameter table (plan/parameter_table.h), the
// table the engine allocates, so planner and engine cannot disagree; FLOPs count matrix
// multiplies only (norms, embedding lookups and softmax excluded).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trillion::plan {

enum class MlpKind { kSwiGlu, kGelu };                      // gate+up+down, or up+down (GPT)
enum class NormKind { kRmsNorm, kLayerNorm };               // weight, or weight + bias
enum class PositionKind { kRope, kLearned };                // rotary, or a learned [P, C] table
enum class AttentionKernel { kFlash, kMaterialised };       // tiled (no s^2 tensor) or softmax kept
std::string_view mlp_kind_name(MlpKind k);                  // "swiglu", "gelu"
std::string_view norm_kind_name(NormKind k);                // "rmsnorm", "layernorm"
std::string_view position_kind_name(PositionKind k);        // "rope", "learned"
std::string_view attention_kernel_name(AttentionKernel k);  // "flash", "materialised"

struct ModelSpec {
  std::string name;
  std::string source;  // where the dimensions come from
  int64_t vocab = 0, d_model = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t ffn_hidden = 0;  // dense layers' MLP width
  // The block's parts. Defaults are the engine's block (model/block.h).
  MlpKind mlp = MlpKind::kSwiGlu;
  NormKind norm = NormKind::kRmsNorm;
  PositionKind position = PositionKind::kRope;
  AttentionKernel attention_kernel = AttentionKernel::kFlash;
  bool linear_biases = false;  // every projection has a bias (GPT-2/3, Megatron's GPT)
  double dropout = 0;          // > 0: attention-probability and residual dropout masks stored
  bool tied_embeddings = false;
  // Mixture of Experts (DeepSeek-V3 2412.19437 §2.1.2): the first n_dense_layers are dense,
  // the rest have n_shared always-on experts and top_k of n_routed routed experts.
  int64_t n_dense_layers = -1;  // -1: all layers dense
  int64_t n_routed_experts = 0, n_shared_experts = 0, top_k = 0, expert_ffn = 0;
  // DeepSeek-V3's per-expert routing bias (aux-loss-free balancing): E values per MoE layer,
  // updated by a rule, not by gradients. False for softmax routing with an auxiliary loss.
  bool router_bias = true;
  // Node-limited routing (DeepSeek-V3 §3.2.2): each token's experts span at most this many
  // nodes, so it crosses the scale-out network at most this many times (0: no limit).
  int64_t moe_max_nodes = 0;
  // Group-limited routing (DeepSeek-V3's n_group / topk_group): experts in n_group contiguous
  // groups by index, a token's top_k chosen among its topk_group best groups (1 / 1: no limit).
  // Routing only: the planner's traffic bound is moe_max_nodes.
  int64_t n_group = 1, topk_group = 1;
  // Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank == 0 means ordinary GQA.
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = 0, v_head_dim = 0;
  // Multi-token prediction (DeepSeek-V3 §2.2): this many MTP modules after the main model, each
  // two norms, a [C, 2C] projection, one block like the last layer and its own final norm; they
  // share the embedding and the output head (plan/parameter_table.h).
  int64_t mtp_depth = 0;
  int64_t default_seq = 4096;
  double default_batch_tokens = 0;  // tokens per step the model was trained with (0: unknown)
  double init_std = 0.02;           // std of the normal init of matrices (the engine's init)

  bool is_moe() const { return n_routed_experts > 0; }
  bool is_mla() const { return kv_lora_rank > 0; }
  // The head's stage reads the embedding table (a tied head, or MTP modules looking up tokens):
  // a pipeline whose two ends sit on different ranks keeps a copy of it on the head's rank.
  bool head_reads_embedding() const { return tied_embeddings || mtp_depth > 0; }
  int64_t dense_layers() const { return is_moe() ? n_dense_layers : n_layers; }
  int64_t moe_layers() const { return n_layers - dense_layers(); }
  int64_t qk_dim() const { return is_mla() ? qk_nope_dim + qk_rope_dim : head_dim; }
  // "mla", "mha" (one K/V head per query head) or "gqa".
  std::string_view attention_kind() const {
    return is_mla() ? "mla" : n_kv_heads == n_heads ? "mha" : "gqa";
  }
  int mlp_matrices() const { return mlp == MlpKind::kSwiGlu ? 3 : 2; }
  int64_t v_dim() const { return is_mla() ? v_head_dim : head_dim; }
  bool operator==(const ModelSpec&) const = default;
};

// Parameter counts by where they live (each a count of parameters, not bytes), summed from the
// parameter table.
struct ModelCounts {
  int64_t attention = 0;      // one layer's attention matrices (+ MLA's latent norms)
  int64_t dense_mlp = 0;      // one dense layer's MLP
  int64_t norms = 0;          // one layer's norm weights (and LayerNorm biases)
  int64_t expert = 0;         // one routed or shared expert
  int64_t router = 0;         // one MoE layer's gate (+ its routing bias)
  int64_t embedding = 0;      // V*C (+ the learned position table)
  int64_t head = 0;           // V*C unless tied, + final norm
  int64_t dense_total = 0;    // everything that is not a routed expert
  int64_t routed_total = 0;   // all routed experts of all layers
  int64_t total = 0;          // everything allocated, the MTP modules included
  int64_t mtp = 0;            // the MTP modules (DeepSeek-V3 reports them apart: 671B + 14B)
  int64_t activated = 0;      // per token: dense_total + top_k routed experts per MoE layer
  int64_t matmul_active = 0;  // weights that multiply per token (activated minus embedding, norms)
};

ModelCounts count_model(const ModelSpec& m);

// How the attention-score FLOPs of model FLOPs are counted. PaLM (2204.02311 App. B) counts the
// full T x T score matrix: 6N + 12 L h T per token (kFullSquare). With a causal mask only half of
// it is computed, and FlashAttention skips the masked half: 6N + 6 L h T (kCausal). MFU numbers
// say which one they use; the engine, `bench step` and `plan` default to kCausal.
enum class AttentionFlops { kCausal, kFullSquare };
std::string_view attention_flops_name(AttentionFlops a);  // "causal", "full_square"
AttentionFlops parse_attention_flops(std::string_view name);

// Training model FLOPs per token (forward + backward, no recompute): 6 * matmul_active plus
// attention scores 6 * L * NH * (d_qk + d_v) * T * f, f = 1/2 for kCausal, 1 for kFullSquare.
// The one definition of model FLOPs in the system (MFU everywhere comes from it).
double model_flops_per_token(const ModelSpec& m, int64_t seq_len, AttentionFlops attention);
// Attention-score FLOPs alone per token and layer (same conventions).
double attention_flops_per_token_layer(const ModelSpec& m, int64_t seq_len,
                                       AttentionFlops attention);

// Throws Error unless the spec is the engine's block (dense SwiGLU MLP, GQA or MLA attention,
// RMSNorm, RoPE, no biases, no dropout): what the engine's activation formulas
// (plan/activation_memory.h) describe.
void require_engine_block(const ModelSpec& m);

// The engine's bounds on a model's dimensions, shared by ModelConfig::validate (a run config's
// [model]) and the planner's model files: far above any published model (the largest use
// C = 18432, L = 126, F = 53248, 256 experts), so that every parameter, FLOP and byte count fits
// int64 and a plan's layout search stays bounded. Throws Error naming the first key over its
// bound ("model.n_layers = 100000 exceeds 2^14, ...").
void check_dimension_bounds(const ModelSpec& m);
// The group-limited routing keys of a MoE model, shared the same way: n_group divides
// n_routed_experts into groups of >= 2 experts (a group's score is the sum of its top 2, so
// n_group = 1 when E = 1), 1 <= topk_group <= n_group, the kept groups hold >= top_k experts, and
// groups need the sigmoid router (router_bias). Throws Error naming the key ("model.n_group = 3
// must divide ...").
void check_group_routing(const ModelSpec& m);
// The longest sequence the engine trains (its data loader indexes windows with int) and so the
// longest the planner plans: 2^24 tokens.
constexpr int64_t kMaxSeqLen = int64_t{1} << 24;

// Catalog: the model files of configs/models/ (llama3-8b, llama3-70b, llama3-405b, gpt3-175b,
// deepseek-v3, moe-2t, megatron-gpt-*). Unknown names throw listing the catalog.
const ModelSpec& find_model(const std::string& name);
const std::vector<ModelSpec>& model_catalog();

// Chinchilla compute-optimal tokens (Hoffmann et al. 2203.15556, Table 3): 20.2 tokens per
// parameter at 1B rising to 21.2 at 1T, i.e. D = 20.2e9 * (N / 1e9)^1.00706.
double chinchilla_tokens(double params);

}  // namespace trillion::plan
