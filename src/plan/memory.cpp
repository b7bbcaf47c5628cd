// See memory.h.
#include "plan/memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "core/error.h"
#include "plan/context_ring.h"
#include "plan/parameter_table.h"
#include "schedule/generators.h"
#include "schedule/simulator.h"

namespace trillion::plan {

ModelStates zero_model_states(double params, int stage, int n_d, double param_bytes,
                              double grad_bytes, double optimizer_bytes) {
  TRILLION_CHECK(stage >= 0 && stage <= 3 && n_d >= 1, "ZeRO stage 0..3 over n_d >= 1 ranks");
  const double n = n_d;
  return {params * param_bytes / (stage >= 3 ? n : 1.0),
          params * grad_bytes / (stage >= 2 ? n : 1.0),
          params * optimizer_bytes / (stage >= 1 ? n : 1.0)};
}

double korthikanti_layer_bytes(double s, double b, double h, double a, int t, bool sp,
                               Recompute recompute) {
  const double sbh = s * b * h;
  switch (recompute) {
    case Recompute::kFull:
      return 2 * sbh;
    case Recompute::kSelective:
      return sp ? 34 * sbh / t : sbh * (10 + 24.0 / t);
    case Recompute::kNone:
      return sp ? sbh * (34.0 / t + 5 * a * s / (h * t))
                : sbh * (10 + 24.0 / t + 5 * a * s / (h * t));
  }
  return 0;
}

std::vector<ActivationTerm> gpt_block_terms(double s, double h, double a) {
  // Korthikanti §4.1, per token (sb) of one layer: 2-byte tensors, 1-byte dropout masks; the
  // softmax terms are a*s per token (2as^2b per sequence).
  return {
      {"layernorm 1 input", 2 * h, false, true},
      {"QKV input", 2 * h, false, true},
      {"Q and K (for QK^T)", 4 * h, true, true},
      {"softmax output", 2 * a * s, true, false},
      {"softmax dropout mask", a * s, true, false},
      {"dropout output (for xV)", 2 * a * s, true, false},
      {"V", 2 * h, true, true},
      {"output projection input", 2 * h, true, true},
      {"attention dropout mask", h, false, true},
      {"layernorm 2 input", 2 * h, false, true},
      {"MLP input", 2 * h, false, true},
      {"GeLU input", 8 * h, true, true},
      {"GeLU output", 8 * h, true, true},
      {"MLP dropout mask", h, false, true},
  };
}

ActivationOptions fp8_activation_cache(ActivationOptions base) {
  base.gemm_input_bytes = kFp8CachedBytes;
  base.attention_output_bytes = kE5m6CachedBytes;
  base.moe_swiglu_recomputed = true;
  return base;
}

std::vector<ActivationTerm> block_terms(const ModelSpec& m, bool moe, double s,
                                        const ActivationOptions& o) {
  const double e = o.elem_bytes, h = m.d_model, nh = m.n_heads;
  const double gi = o.gemm_input_bytes > 0 ? o.gemm_input_bytes : e;  // a stored GEMM input
  const double oi = o.attention_output_bytes > 0 ? o.attention_output_bytes : gi;
  const double kv = m.is_mla() ? nh : m.n_kv_heads;  // MLA expands K and V per head
  const double stats = (m.norm == NormKind::kLayerNorm ? 2 : 1) * o.stat_bytes;
  const bool flash = m.attention_kernel == AttentionKernel::kFlash, dropout = m.dropout > 0;
  // Aggregate fields: name, bytes, tp_sharded, kept_selective, sp_gathered, kept_norm_up.
  std::vector<ActivationTerm> t = {
      {"norm 1 input (the residual)", e * h, false, true},
      {"norm 1 output (QKV input)", gi * h, false, true, false, false},
  };
  if (stats > 0) t.push_back({"norm 1 statistics (fp32)", stats, false, true});
  const bool mla = m.is_mla();  // per-head Q, K, V come from kept latents
  t.push_back({"Q (after RoPE)", e * nh * m.qk_dim(), true, !mla, false, !mla});
  t.push_back({"K (after RoPE) and V", e * kv * (m.qk_dim() + m.v_dim()), true, !mla, false, !mla});
  if (flash) {
    t.push_back({"FlashAttention logsumexp (fp32)", 4 * nh, true, false});
  } else {
    t.push_back({"softmax output", e * nh * s, true, false});
    if (dropout) {
      t.push_back({"softmax dropout mask", nh * s, true, false});
      t.push_back({"dropout output (PV input)", e * nh * s, true, false});
    }
  }
  t.push_back({"attention output O (output projection input)", oi * nh * m.v_dim(), true, !flash});
  if (dropout) t.push_back({"attention dropout mask", h, false, true});
  t.push_back({"norm 2 input (residual after attention)", e * h, false, true});
  t.push_back({"norm 2 output (MLP input)", gi * h, false, true, false, false});
  if (stats > 0) t.push_back({"norm 2 statistics (fp32)", stats, false, true});
  if (m.is_mla()) {
    const double latents = (m.q_lora_rank > 0 ? m.q_lora_rank : 0) + m.kv_lora_rank;
    t.push_back(
        {"MLA latents (before their norms) and k_R", e * latents + e * m.qk_rope_dim, false, true});
    t.push_back({"MLA latent norm outputs (up-projection inputs)", gi * latents, false, true, false,
                 false});
  }
  if (!moe) {
    const double f = m.ffn_hidden;
    if (m.mlp == MlpKind::kSwiGlu) {
      t.push_back({"SwiGLU gate and up outputs", 2 * e * f, true, true});
      t.push_back({"SwiGLU product (down projection input)", gi * f, true, false});
    } else {
      t.push_back({"GeLU input", e * f, true, true});
      t.push_back({"GeLU output (down projection input)", gi * f, true, true});
    }
  } else {
    const double k = m.top_k, fe = m.expert_ffn, shared = m.n_shared_experts;
    t.push_back({"router scores (fp32)", 4.0 * m.n_routed_experts, true, true});
    t.push_back({"dispatched tokens (expert inputs)", gi * k * h, true, true});
    // DeepSeek-V3 §3.3.3: the SwiGLU's inputs cached (FP8) and its output recomputed. With the
    // routing weight g applied inside that recomputed SwiGLU (g SwiGLU(x) before the down
    // projection, the same product), dL/dg = <down projection's dgrad, SwiGLU(x)> needs no
    // expert output kept for the combine's backward (our reading; the paper does not say how
    // the gate's gradient is formed).
    if (!o.moe_swiglu_recomputed)
      t.push_back({"expert outputs (the combine's backward)", e * k * h, true, true});
    const double swiglu_in = o.moe_swiglu_recomputed ? gi : e;
    t.push_back({"expert gate and up outputs", 2 * swiglu_in * (k + shared) * fe, true, true});
    if (!o.moe_swiglu_recomputed)
      t.push_back({"expert SwiGLU products", gi * (k + shared) * fe, true, false});
  }
  if (dropout) t.push_back({"MLP dropout mask", h, false, true});
  if (o.keeps_sp_gathered_norms) {
    t.push_back({"gathered norm 1 and 2 outputs (SP, kept)", 2 * gi * h, false, true, true, false});
  }
  return t;
}

double layer_bytes_per_token(const std::vector<ActivationTerm>& terms, int t, bool sp,
                             Recompute recompute, double input_bytes_per_token) {
  return layer_bytes_per_token(terms, t, sp, policy_of(recompute), input_bytes_per_token);
}

double layer_bytes_per_token(const std::vector<ActivationTerm>& terms, int t, bool sp,
                             RecomputePolicy recompute, double input_bytes_per_token) {
  if (recompute == RecomputePolicy::kFull) return input_bytes_per_token / (sp ? t : 1);
  double sum = 0;
  for (const ActivationTerm& term : terms) {
    if (recompute == RecomputePolicy::kSelective && !term.kept_selective) continue;
    if (recompute == RecomputePolicy::kNormUp && !term.kept_norm_up) continue;
    if (term.sp_gathered) {
      if (sp) sum += term.bytes_per_token;
      continue;
    }
    sum += term.bytes_per_token / (term.tp_sharded || sp ? t : 1);
  }
  return sum;
}

int PipelineShape::max_rank_layers() const {
  int most = 0;
  for (const auto& chunks : rank_stages) {
    int n = 0;
    for (int s : chunks) n += stage_layers[s];
    most = std::max(most, n);
  }
  return most;
}

StageWeights balanced_stage_weights(const ModelSpec& m) {
  ModelSpec main = m;
  main.mtp_depth = 0;
  const ModelCounts c = count_model(main);
  const double vc = static_cast<double>(m.vocab * m.d_model);
  const double layer =
      (static_cast<double>(c.matmul_active) - vc) / static_cast<double>(m.n_layers);
  // The head costs its logits GEMMs (in layers of matmul work), and each MTP module one more
  // layer, its [C, 2C] projection and the logits again; the embedding costs almost no time but
  // its stage holds the most in-flight micro-batches (p under 1F1B) and the embedding's weights,
  // so it counts one layer, as Llama 3's balanced pipeline gives the first stage one layer less
  // (2407.21783 §3.3.2).
  const double module = layer + 2.0 * static_cast<double>(m.d_model * m.d_model) + vc;
  return {1.0, (vc + static_cast<double>(m.mtp_depth) * module) / layer};
}

namespace {

int chunks_of(const Layout& l) {
  if (l.pp == 1) return 1;
  if (l.schedule == schedule::ScheduleKind::kInterleaved) return l.chunks;
  if (l.schedule == schedule::ScheduleKind::kDualPipe) return 2;
  return 1;
}

int min_microbatches(const Layout& l) {
  if (l.schedule == schedule::ScheduleKind::kDualPipe) return 2 * l.pp;
  if (l.schedule == schedule::ScheduleKind::kInterleaved) return l.pp;
  return 1;
}

// [rank][chunk] -> stage, read off the generator's placement of stages on ranks.
const std::vector<std::vector<int>>& placement(const Layout& l) {
  using Key = std::tuple<int, int, int>;
  static std::map<Key, std::vector<std::vector<int>>> cache;
  const Key key{static_cast<int>(l.schedule), l.pp, chunks_of(l)};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  std::vector<std::vector<int>> out(l.pp, std::vector<int>(chunks_of(l), -1));
  if (l.pp == 1) {
    out[0][0] = 0;
  } else {
    const schedule::Schedule s =
        schedule::generate_schedule(l.schedule, l.pp, min_microbatches(l), chunks_of(l));
    for (const auto& path : s.paths)
      for (size_t stage = 0; stage < path.size(); ++stage)
        out[path[stage].rank][path[stage].chunk] = static_cast<int>(stage);
  }
  return cache.emplace(key, std::move(out)).first->second;
}

// Local parameters of every unit (embedding, layers, head) under (tp, ep): a tensor split over
// tp is divided when its split dimension divides (else replicated, as Megatron replicates K/V
// heads when tp exceeds them); routed experts divide by ep and by tp (whole experts over tp x ep,
// or their width over tp).
struct UnitParams {
  std::vector<double> dense, expert, routing_bias;  // routing_bias: part of dense
};
const UnitParams& unit_params(const ModelSpec& m, int tp, int ep) {
  thread_local ModelSpec last;
  thread_local std::map<std::pair<int, int>, UnitParams> cache;
  if (!(last == m)) {
    cache.clear();
    last = m;
  }
  auto it = cache.find({tp, ep});
  if (it != cache.end()) return it->second;
  UnitParams u;
  u.dense.assign(m.n_layers + 2, 0.0);
  u.expert.assign(m.n_layers + 2, 0.0);
  u.routing_bias.assign(m.n_layers + 2, 0.0);
  const TensorTable table = parameter_table(m);
  for (const TensorSpec& s : table.specs()) {
    double n = static_cast<double>(s.global_numel());
    if (s.shard.group == ShardGroup::tp && s.global_shape[s.shard.dim] % tp == 0) n /= tp;
    if (s.shard.group == ShardGroup::ep) {
      n /= ep;
      // The tp ranks split the experts too: whole experts over tp x ep (the engine's
      // parallel.expert_tp = 1) or each expert's width over tp (expert_tp = tp): the same count.
      if (m.n_routed_experts % (static_cast<int64_t>(ep) * tp) == 0 || m.expert_ffn % tp == 0) {
        n /= tp;
      }
      u.expert[s.unit] += n;
    } else {
      u.dense[s.unit] += n;
      if (is_routing_bias(s)) u.routing_bias[s.unit] += n;
    }
  }
  return cache.emplace(std::pair{tp, ep}, std::move(u)).first->second;
}

}  // namespace

int64_t max_pipeline_stages(const ModelSpec& m, Partition partition) {
  if (partition == Partition::kExplicit) return m.n_layers + 2;  // the ends may hold no layer
  return partition == Partition::kEven ? m.n_layers
                                       : max_stages(m.n_layers, balanced_stage_weights(m));
}

PipelineShape pipeline_shape(const ModelSpec& m, const Layout& l) {
  PipelineShape p;
  p.chunks = chunks_of(l);
  const int n_stages =
      l.pp > 1 && l.schedule == schedule::ScheduleKind::kInterleaved ? l.pp * l.chunks : l.pp;
  const int64_t most = max_pipeline_stages(m, l.partition);
  if (n_stages > most)
    throw Error(fmt::format(
        "pp={} x chunks={} = {} stages for {} layers: every stage needs a whole layer{}; use "
        "fewer chunks (at most {} per rank) or a smaller pp",
        l.pp, p.chunks, n_stages, m.n_layers,
        l.partition != Partition::kEven ? " (or the embedding or head alone)" : "",
        std::max<int64_t>(1, most / l.pp)));
  if (l.partition == Partition::kExplicit) {
    if (static_cast<int>(l.stage_layers.size()) != n_stages)
      throw Error(fmt::format("partition={} names {} stages; pp={} x chunks={} has {}",
                              l.partition_text(), l.stage_layers.size(), l.pp, p.chunks, n_stages));
    p.stages = partition_from_counts(m.n_layers, l.stage_layers);
    p.stage_layers = l.stage_layers;
    p.rank_stages = placement(l);
    return p;
  }
  // The search asks for the same few splits thousands of times: keep them.
  const StageWeights w =
      l.partition == Partition::kEven ? StageWeights{} : balanced_stage_weights(m);
  using Key = std::tuple<int64_t, int, int, double, double>;
  static std::map<Key, std::vector<StageUnits>> splits;
  const Key key{m.n_layers, n_stages, static_cast<int>(l.partition), w.embedding, w.head};
  auto it = splits.find(key);
  if (it == splits.end())
    it = splits
             .emplace(key, l.partition == Partition::kEven
                               ? partition_stages(m.n_layers, n_stages)
                               : partition_stages(m.n_layers, n_stages, w))
             .first;
  p.stages = it->second;
  p.stage_layers = stage_layer_counts(p.stages);
  p.rank_stages = placement(l);
  return p;
}

double inflight_microbatches(const Layout& l, int m) {
  const double p = l.pp;
  if (l.pp == 1) return 1;
  switch (l.schedule) {
    case schedule::ScheduleKind::kGPipe:
      return m;
    case schedule::ScheduleKind::k1F1B:
    case schedule::ScheduleKind::kZbH1:
      return std::min<double>(p, m);
    case schedule::ScheduleKind::kZbH2:
      return std::min<double>(2 * p - 1, m);
    case schedule::ScheduleKind::kInterleaved:
      return p * (1 + (p - 1) / (p * l.chunks));
    case schedule::ScheduleKind::kDualPipe:
      return p + 1;
  }
  return p;
}

namespace {

// The schedule of a layout with m micro-batches (unit costs; its steady state stands for more),
// cached; nullptr for pp = 1.
const schedule::Schedule* layout_schedule(const Layout& l, int microbatches) {
  if (l.pp == 1) return nullptr;
  microbatches = std::min(microbatches, steady_state_microbatches(l.pp));
  using Key = std::tuple<int, int, int, int>;
  static std::map<Key, schedule::Schedule> cache;
  const Key key{static_cast<int>(l.schedule), l.pp, microbatches, chunks_of(l)};
  auto it = cache.find(key);
  if (it == cache.end())
    it =
        cache
            .emplace(key, schedule::generate_schedule(l.schedule, l.pp, microbatches, chunks_of(l)))
            .first;
  return &it->second;
}

}  // namespace

double live_peak_bytes(const Layout& l, int microbatches, int rank,
                       const std::vector<double>& chunk_bytes) {
  // GPipe runs every forward before any backward: it holds all m (and has one chunk).
  if (l.pp > 1 && l.schedule == schedule::ScheduleKind::kGPipe)
    return microbatches * chunk_bytes.at(0);
  const schedule::Schedule* s = layout_schedule(l, microbatches);
  if (s == nullptr) return chunk_bytes.at(0);
  // A micro-batch's activations of a chunk live from its F to its W (the B + W of an unsplit
  // backward), as inflight_slots counts them; walk the rank's list in execution order.
  double now = 0, peak = 0;
  for (const schedule::Action& a : s->actions.at(rank)) {
    if (a.kind == schedule::ActionKind::kForward)
      peak = std::max(peak, now += chunk_bytes.at(a.chunk));
    if (a.kind == schedule::ActionKind::kBackwardWeight) now -= chunk_bytes.at(a.chunk);
  }
  return peak;
}

int steady_state_microbatches(int p) {
  const int step = 2 * p;  // a multiple of p (interleaved) and even, >= 2p (DualPipe)
  const int m1 = (std::max(step, 16) + step - 1) / step * step;
  return 2 * m1;
}

const std::vector<std::vector<int>>& schedule_slots(const Layout& l, int microbatches) {
  // Past the steady state every chunk holds as many micro-batches as it did there (GPipe
  // excepted: it holds all of them).
  if (l.schedule != schedule::ScheduleKind::kGPipe)
    microbatches = std::min(microbatches, steady_state_microbatches(l.pp));
  using Key = std::tuple<int, int, int, int>;
  static std::map<Key, std::vector<std::vector<int>>> cache;
  const int v = chunks_of(l);
  const Key key{static_cast<int>(l.pp == 1 ? schedule::ScheduleKind::k1F1B : l.schedule), l.pp,
                microbatches, v};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  std::vector<std::vector<int>> slots;
  if (l.pp == 1) {
    slots = {{1}};  // gradient accumulation frees each micro-batch's activations
  } else if (l.schedule == schedule::ScheduleKind::kGPipe) {
    slots.assign(l.pp, {microbatches});  // every forward before any backward: all m held
  } else {
    const schedule::Schedule s = schedule::generate_schedule(l.schedule, l.pp, microbatches, v);
    for (int r = 0; r < l.pp; ++r) slots.push_back(schedule::inflight_slots(s, r));
  }
  return cache.emplace(key, std::move(slots)).first->second;
}

LocalParams params_of_rank(const ModelSpec& m, const Layout& l, const PipelineShape& shape,
                           int rank) {
  const UnitParams& u = unit_params(m, l.tp, l.ep);
  LocalParams p;
  bool embedding = false, head = false;
  for (int stage : shape.rank_stages[rank]) {
    const StageUnits& su = shape.stages[stage];
    for (int unit = su.first_unit; unit <= su.last_unit; ++unit) {
      p.dense += u.dense[unit];
      p.expert += u.expert[unit];
      p.routing_bias += u.routing_bias[unit];
      embedding = embedding || unit == embedding_unit();
      head = head || unit == head_unit(m);
    }
  }
  // A tied head (or MTP modules) on a rank without the embedding keeps a copy of the table
  // (Megatron's; the engine's parallel/pipeline/tied_embedding.h), with its gradient and
  // optimizer state.
  if (m.head_reads_embedding() && head && !embedding) p.dense += u.dense[embedding_unit()];
  return p;
}

ModelStates rank_model_states(const LocalParams& p, int stage, int n_d, int n_e, double param_bytes,
                              double grad_bytes, double optimizer_bytes) {
  const double whole = stage >= 3 ? p.routing_bias : 0.0;
  const ModelStates d =
      zero_model_states(p.dense - whole, stage, n_d, param_bytes, grad_bytes, optimizer_bytes);
  const ModelStates x =
      zero_model_states(p.expert, stage, n_e, param_bytes, grad_bytes, optimizer_bytes);
  return {d.parameters + x.parameters + whole * param_bytes, d.gradients + x.gradients,
          d.optimizer + x.optimizer};
}

LocalParams params_per_gpu(const ModelSpec& m, const Layout& l) {
  const PipelineShape shape = pipeline_shape(m, l);
  LocalParams most;
  for (int r = 0; r < l.pp; ++r) {
    const LocalParams p = params_of_rank(m, l, shape, r);
    most.dense = std::max(most.dense, p.dense);
    most.expert = std::max(most.expert, p.expert);
  }
  return most;
}

std::vector<MemoryBreakdown> memory_per_rank(const ModelSpec& m, const Layout& l, int64_t seq,
                                             int microbatches, double overhead_bytes,
                                             const ActivationOptions& storage) {
  const PipelineShape shape = pipeline_shape(m, l);
  ActivationOptions opt = storage;
  if (opt.gemm_input_bytes == 0 && l.fp8_activations()) opt = fp8_activation_cache(opt);
  const std::vector<std::vector<int>>& slots = schedule_slots(l, microbatches);
  const int t = l.tp;
  const bool sp = l.sequence_parallel();
  // Activations are stored in 16 bits (statistics in fp32), except what act=fp8 caches in FP8.
  const double e = opt.elem_bytes, h = static_cast<double>(m.d_model);
  const double tokens = static_cast<double>(l.micro_batch) * static_cast<double>(seq) / l.cp;
  auto per_token = [&](bool moe, RecomputePolicy r) {
    return layer_bytes_per_token(block_terms(m, moe, static_cast<double>(seq), opt), t, sp, r,
                                 e * h);
  };
  const RecomputePolicy policy = l.recompute_policy();
  const double dense_kept = per_token(false, policy);
  const double moe_kept = m.is_moe() ? per_token(true, policy) : dense_kept;
  const bool any_moe = m.moe_layers() > 0;
  const double full_layer = std::max(per_token(false, RecomputePolicy::kNone),
                                     any_moe ? per_token(true, RecomputePolicy::kNone) : 0.0);
  // What one layer recomputes in backward is held once, in a shared buffer (temporary).
  const double partial_layer =
      policy == RecomputePolicy::kFull
          ? 0.0
          : std::max(per_token(false, policy), any_moe ? per_token(true, policy) : 0.0);
  const UnitParams& units = unit_params(m, t, l.ep);
  const int n_d = l.dp * l.cp, n_e = std::max(1, l.dp * l.cp / l.ep);
  std::vector<MemoryBreakdown> out;
  for (int r = 0; r < l.pp; ++r) {
    MemoryBreakdown mem;
    mem.rank = r;
    const LocalParams local = params_of_rank(m, l, shape, r);
    const double g = l.grad_bytes, opt_bytes = l.optimizer_bytes();
    const ModelStates states = rank_model_states(local, l.zero, n_d, n_e, 2, g, opt_bytes);
    mem.weights = states.parameters;
    mem.gradients = states.gradients;
    mem.optimizer = states.optimizer;
    // An fp32 EMA of the parameters, sliced as the optimizer states (DeepSeek-V3 §3.2.3 keeps
    // it in host memory instead, updated asynchronously after each step).
    const double ema = zero_model_states(local.dense, l.zero, n_d, 0, 0, 4).optimizer +
                       zero_model_states(local.expert, l.zero, n_e, 0, 0, 4).optimizer;
    if (l.ema == Ema::kGpu) mem.optimizer += ema;
    if (l.ema == Ema::kHost) mem.host_ema = ema;
    bool has_head = false;
    double largest_layer_params = 0;
    std::vector<double> chunk_bytes;  // one micro-batch's stored activations per chunk
    for (size_t c = 0; c < shape.rank_stages[r].size(); ++c) {
      const int stage = shape.rank_stages[r][c];
      const StageUnits& su = shape.stages[stage];
      // A layer's first term is its input, i.e. the stage's input for the first layer (the
      // received or embedded activation); a stage's last output is sent on and freed (Megatron's
      // deallocate_output_tensor), except on the head's stage where the final norm keeps it.
      double bytes = 0;
      for (int unit = su.first_unit; unit <= su.last_unit; ++unit) {
        if (unit == embedding_unit()) continue;
        if (unit == head_unit(m)) {
          has_head = true;
          // Final norm input and output; its statistic, the loss's logsumexp and loss. Each MTP
          // module keeps one layer like the last, and its embedding lookup, two norm outputs,
          // block input and head norm output, with five statistics (activation_memory.h).
          bytes += 2 * e * h / (sp ? t : 1) + 3 * opt.stat_bytes;
          bytes +=
              static_cast<double>(m.mtp_depth) * ((m.is_moe() ? moe_kept : dense_kept) +
                                                  5 * e * h / (sp ? t : 1) + 5 * opt.stat_bytes);
          continue;
        }
        const int64_t layer = unit - 1;
        bytes += layer >= m.dense_layers() ? moe_kept : dense_kept;
        largest_layer_params =
            std::max(largest_layer_params, units.dense[unit] + units.expert[unit]);
      }
      chunk_bytes.push_back(tokens * bytes);
      mem.activations += tokens * bytes * slots[r][c];
    }
    if (l.allocation == Allocation::kLive)
      mem.activations = live_peak_bytes(l, microbatches, r, chunk_bytes);
    // Temporaries: fp32 logits and their gradient on the head's rank (vocab-parallel over TP);
    // the recompute working set of one layer; under ZeRO-3 two layers' gathered bf16 weights
    // (prefetch); MoE dispatch send + receive buffers; ring attention's K/V and dK/dV blocks
    // (plan/context_ring.h, 16-bit).
    if (has_head) mem.temporary += tokens * static_cast<double>(m.vocab) / t * 8.0;
    if (l.recompute == Recompute::kFull) mem.temporary += tokens * full_layer;
    if (policy == RecomputePolicy::kSelective || policy == RecomputePolicy::kNormUp)
      mem.temporary += tokens * (full_layer - partial_layer);
    if (l.zero == 3) mem.temporary += 2 * 2.0 * largest_layer_params;
    if (any_moe) mem.temporary += 2 * tokens / t * m.top_k * h * e;
    mem.temporary += static_cast<double>(
        context_ring_buffer_bytes(m, l.micro_batch, seq, 2, {l.tp, l.sequence_parallel(), l.cp}));
    // Fixed reservation (CUDA context, NCCL, workspaces; the cluster file's overhead_gb) plus 5%
    // allocator fragmentation of the dynamic part.
    mem.overhead = overhead_bytes + 0.05 * (mem.activations + mem.temporary);
    out.push_back(mem);
  }
  return out;
}

std::vector<int> fitting_stage_layers(const ModelSpec& m, const Layout& l, int64_t seq,
                                      int microbatches, double overhead_bytes, double hbm_bytes) {
  Layout x = l;
  x.stage_layers = pipeline_shape(m, l).stage_layers;
  x.partition = Partition::kExplicit;
  const int S = static_cast<int>(x.stage_layers.size());
  auto fullest = [&](const std::vector<int>& counts, int* rank) {
    x.stage_layers = counts;
    double most = 0;
    for (const MemoryBreakdown& b : memory_per_rank(m, x, seq, microbatches, overhead_bytes))
      if (b.total() > most) most = b.total(), *rank = b.rank;
    return most;
  };
  std::vector<int> counts = x.stage_layers;
  // No stage grows past the longest of the starting split, so no stage's time grows past the
  // busiest stage's that the step model charges every rank.
  const int longest = *std::max_element(counts.begin(), counts.end());
  int rank = 0;
  double most = fullest(counts, &rank);
  // Each move lowers the fullest rank's bytes, so the loop ends; L moves bound it besides.
  for (int64_t moves = 0; most > hbm_bytes && moves < m.n_layers; ++moves) {
    const std::vector<int> held = placement(x)[rank];
    std::vector<int> best;
    double best_most = most;
    int best_rank = rank;
    for (int from : held)
      for (int to = 0; to < S; ++to) {
        const bool end = S > 1 && (from == 0 || from == S - 1);
        if (to == from || counts[from] <= (end ? 0 : 1) || counts[to] >= longest) continue;
        std::vector<int> c = counts;
        --c[from], ++c[to];
        int r = 0;
        const double t = fullest(c, &r);
        if (t < best_most) best_most = t, best = std::move(c), best_rank = r;
      }
    if (best.empty()) return {};
    counts = std::move(best), most = best_most, rank = best_rank;
  }
  return most <= hbm_bytes ? counts : std::vector<int>{};
}

MemoryBreakdown memory_per_gpu(const ModelSpec& m, const Layout& l, int64_t seq, int microbatches,
                               double overhead_bytes, const ActivationOptions& storage) {
  const std::vector<MemoryBreakdown> all =
      memory_per_rank(m, l, seq, microbatches, overhead_bytes, storage);
  return *std::max_element(all.begin(), all.end(),
                           [](const auto& a, const auto& b) { return a.total() < b.total(); });
}

}  // namespace trillion::plan
