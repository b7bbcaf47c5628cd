// See run_config_checks.h. One function per rule; kChecks below is the list, in the order a
// broken config is reported.
#include "train/run_config_checks.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "model/sequence_split.h"
#include "optim/streaming_schedule.h"
#include "precision/recipe.h"
#include "schedule/action.h"

namespace trillion {

namespace {

// Tensor parallelism splits heads, kv heads, the MLP's hidden width and the vocabulary over tp
// (model/local_shape.h); sequence parallelism splits each rank's B*T token rows. Each value tp
// must divide is named with the fix.
void check_tensor_parallel(const RunConfig& rc, const std::string& source) {
  const int64_t tp = rc.parallel.tp;
  if (tp == 1) return;
  const ModelConfig& m = rc.model;
  auto divides = [&](const char* key, int64_t v, const char* fix) {
    if (v % tp != 0) {
      throw Error(
          fmt::format("{}: parallel.tp = {} does not divide {} = {}; {}", source, tp, key, v, fix));
    }
  };
  divides("model.n_heads", m.n_heads, "choose a tp that divides the attention heads");
  divides("model.n_kv_heads", m.n_kv_heads,
          "choose a tp that divides the key/value heads (kv heads are not replicated over tp)");
  divides("model.ffn_hidden", m.ffn_hidden, "choose a tp that divides the MLP width");
  divides("model.vocab_size", m.vocab_size,
          "pad the vocabulary to a multiple of tp (the embedding and head are split by "
          "vocabulary rows; the vocabulary is not padded for you)");
  if (rc.parallel.sp && m.recompute_norm_up) {
    throw Error(fmt::format(
        "{}: model.recompute = \"norm-up\" with parallel.sp = true: recomputing the norms would "
        "repeat SP's all-gathers in backward, which this build does not do; set parallel.sp = "
        "false or another recompute policy",
        source));
  }
  const int64_t dp = std::max<int64_t>(1, rc.parallel.dp);
  const int64_t cp = std::max<int64_t>(1, rc.parallel.cp);
  const int64_t tokens = rc.train.micro_batch / dp * m.seq_len / cp;
  if (rc.parallel.sp && tokens % tp != 0) {
    throw Error(fmt::format(
        "{}: parallel.sp = true with parallel.tp = {}: sequence parallelism splits each rank's "
        "train.micro_batch / dp x model.seq_len / cp = {} token rows over tp, which {} does not "
        "divide; change seq_len or micro_batch, or set parallel.sp = false",
        source, tp, tokens, tp));
  }
}

// Context parallelism: the split must cut every sequence into equal chunks, and the attention
// core must be the tiled one (ring attention merges (out, lse) blocks; the materialised core keeps
// a T x T matrix a rank never has).
void check_context_parallel(const RunConfig& rc, const std::string& source) {
  const ParallelConfig& p = rc.parallel;
  if (p.cp == 1) return;
  const SequenceSplit split{static_cast<int>(p.cp),
                            parse_cp_split(p.cp_split, "parallel.cp_split")};
  if (rc.model.seq_len % split.chunks() != 0) {
    throw Error(fmt::format(
        "{}: parallel.cp = {} with parallel.cp_split = \"{}\" cuts each sequence into {} equal "
        "chunks, but model.seq_len = {} is not a multiple of {}; choose a seq_len divisible by "
        "{} (or another cp)",
        source, p.cp, p.cp_split, split.chunks(), rc.model.seq_len, split.chunks(),
        split.chunks()));
  }
  if (!rc.model.tiled_attention) {
    throw Error(fmt::format(
        "{}: parallel.cp = {} needs model.attention_kernel = \"tiled\" (ring attention merges "
        "FlashAttention blocks; the materialised attention keeps the whole T x T matrix)",
        source, p.cp));
  }
}

void check_dp_divides_micro_batch(const RunConfig& rc, const std::string& source) {
  if (rc.train.micro_batch % rc.parallel.dp != 0) {
    throw Error(
        fmt::format("{}: parallel.dp = {} does not divide train.micro_batch = {} (the "
                    "global micro-batch is split over the dp ranks); choose a dp that "
                    "divides it",
                    source, rc.parallel.dp, rc.train.micro_batch));
  }
}

void check_sites_divide_dp(const RunConfig& rc, const std::string& source) {
  if (rc.parallel.dp % rc.emulate.sites != 0) {
    throw Error(fmt::format(
        "{}: emulate.sites = {} does not divide parallel.dp = {} (sites split the data-parallel "
        "replicas into equal blocks)",
        source, rc.emulate.sites, rc.parallel.dp));
  }
}

void check_replica_check_zero(const RunConfig& rc, const std::string& source) {
  if (rc.guard.replica_check_every > 0 && rc.parallel.zero >= 3) {
    throw Error(fmt::format(
        "{}: guard.replica_check_every needs replicated parameters, but parallel.zero = 3 shards "
        "them (each dp rank holds a different part); use zero <= 2 or set it to 0",
        source));
  }
}

void check_bf16_blocks_layers(const RunConfig& rc, const std::string& source) {
  if (rc.precision.bf16_blocks.empty()) return;
  try {
    precision::resolve_bf16_blocks(precision::recipe_named(rc.precision.recipe), rc.model.n_layers,
                                   rc.precision.bf16_blocks);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: precision.{}", source, e.what()));
  }
}

void check_recipe_dtype(const RunConfig& rc, const std::string& source) {
  if (rc.precision.recipe != "fp32" && rc.model.dtype != DType::f32) {
    throw Error(fmt::format(
        "{}: precision.recipe = '{}' rounds fp32 GEMM inputs, but model.dtype = '{}'; use "
        "model.dtype = \"f32\" (f64 is for gradient checks, with recipe fp32)",
        source, rc.precision.recipe, dtype_name(rc.model.dtype)));
  }
}

// The layouts DiLoCo's islands are planned for (train/diloco.h).
void check_diloco_layout(const RunConfig& rc, const std::string& source) {
  const DilocoConfig& di = rc.diloco;
  const ParallelConfig& pc = rc.parallel;
  if (!di.enabled()) return;
  try {
    if (pc.dp % di.islands != 0) {
      throw Error(fmt::format(
          "diloco.islands = {} does not divide parallel.dp = {} (each island holds dp / "
          "islands data-parallel replicas)",
          di.islands, pc.dp));
    }
    if (rc.model.dtype != DType::f32) {
      throw Error(
          fmt::format("diloco needs model.dtype = \"f32\" (got \"{}\"): the outer "
                      "optimizer and the quantised exchange are fp32",
                      dtype_name(rc.model.dtype)));
    }
    if (schedule::parse_schedule_kind(pc.schedule) == schedule::ScheduleKind::kDualPipe) {
      throw Error(
          "diloco with parallel.schedule = \"dualpipe\" is not supported (its two model copies "
          "would need one outer state); use another schedule");
    }
    if (pc.ep > 1) {
      throw Error(fmt::format(
          "diloco with parallel.ep = {} is not supported (the outer optimizer covers the dense "
          "replicas' state only); use parallel.ep = 1",
          pc.ep));
    }
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  }
}

// Streaming DiLoCo's fragments are groups of the model's layers.
void check_diloco_fragments(const RunConfig& rc, const std::string& source) {
  if (!rc.diloco.enabled()) return;
  try {
    FragmentSchedule(streaming_config(rc.diloco), static_cast<int>(rc.model.n_layers));
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  }
}

void check_recipe_master_zero(const RunConfig& rc, const std::string& source) {
  const bool moe = rc.model.moe.enabled();
  if (rc.precision.recipe != "fp32" && !recipe_weights_in_store(rc) && rc.parallel.zero >= 3) {
    // The recipe's store (parallel/mixed_weights.h) shards the master with the bf16 copy over one
    // dp group, unit by unit; a MoE unit is split between two groups, and DiLoCo's outer step
    // rewrites the master between steps.
    throw Error(fmt::format(
        "{}: precision.recipe = '{}' with {} keeps the fp32 master weights whole in the model, "
        "which parallel.zero = 3 does not hold on any rank ({}); use parallel.zero <= 2, or recipe "
        "fp32",
        source, rc.precision.recipe, moe ? "MoE layers" : "diloco",
        moe ? "the recipe's store shards whole units over one dp group, and a MoE layer's unit "
              "splits between its dense tensors over dp and its routed experts over edp"
            : "DiLoCo's outer step writes the master between steps"));
  }
}

void check_bf16_gradients(const RunConfig& rc, const std::string& source) {
  if (rc.precision.grad_dtype != "bf16") return;
  std::string why;
  if (!recipe_weights_in_store(rc)) {
    why = rc.precision.recipe == "fp32" ? "recipe fp32 (set precision.recipe = \"bf16\")"
                                        : (rc.model.moe.enabled() ? "MoE layers" : "diloco");
  } else if (rc.optim.name != "adamw") {
    why = fmt::format("optim.name = '{}' (use adamw)", rc.optim.name);
  }
  if (!why.empty()) {
    throw Error(fmt::format(
        "{}: precision.grad_dtype = 'bf16' is not supported with {}; or use grad_dtype fp32",
        source, why));
  }
}

void check_replica_check_recipe(const RunConfig& rc, const std::string& source) {
  if (recipe_weights_in_store(rc) && rc.guard.replica_check_every > 0) {
    throw Error(fmt::format(
        "{}: guard.replica_check_every compares the model's fp32 parameters, but precision.recipe "
        "= '{}' keeps them as a bf16 compute copy and an fp32 master among the optimizer state; "
        "set guard.replica_check_every = 0 or use recipe fp32",
        source, rc.precision.recipe));
  }
}

void check_async_checkpoint_diloco(const RunConfig& rc, const std::string& source) {
  if (rc.checkpoint.async && rc.diloco.enabled()) {
    throw Error(fmt::format(
        "{}: checkpoint.async = true is not supported with [diloco] (its checkpoints gather the "
        "islands' state in one process); set checkpoint.async = false",
        source));
  }
}

void check_data_vocab(const RunConfig& rc, const std::string& source) {
  if (rc.data.vocab > rc.model.vocab_size) {  // 0 (model.vocab_size) always fits
    throw Error(fmt::format("{}: data.vocab = {} exceeds model.vocab_size = {}", source,
                            rc.data.vocab, rc.model.vocab_size));
  }
}

}  // namespace

const std::vector<CrossSectionCheck>& cross_section_checks() {
  // A rule that calls recipe_weights_in_store names the keys it reads: precision.recipe,
  // model.n_routed_experts (MoE) and diloco.islands.
  static const std::vector<CrossSectionCheck> kChecks = {
      {{"parallel.tp", "model.n_heads", "model.n_kv_heads", "model.ffn_hidden", "model.vocab_size",
        "parallel.sp", "train.micro_batch", "parallel.dp", "parallel.cp", "model.seq_len",
        "model.recompute"},
       check_tensor_parallel},
      {{"parallel.cp", "parallel.cp_split", "model.seq_len", "model.attention",
        "model.attention_kernel"},
       check_context_parallel},
      {{"parallel.dp", "train.micro_batch"}, check_dp_divides_micro_batch},
      {{"emulate.sites", "parallel.dp"}, check_sites_divide_dp},
      {{"guard.replica_check_every", "parallel.zero"}, check_replica_check_zero},
      {{"precision.bf16_blocks", "precision.recipe", "model.n_layers"}, check_bf16_blocks_layers},
      {{"precision.recipe", "model.dtype"}, check_recipe_dtype},
      {{"diloco.islands", "parallel.cp", "parallel.dp", "model.dtype", "parallel.schedule",
        "parallel.ep"},
       check_diloco_layout},
      {{"diloco.islands", "diloco.inner_steps", "diloco.fragments", "diloco.overlap_steps",
        "diloco.mixing", "diloco.fragment_pattern", "model.n_layers"},
       check_diloco_fragments},
      {{"precision.recipe", "model.n_routed_experts", "diloco.islands", "parallel.zero"},
       check_recipe_master_zero},
      {{"precision.grad_dtype", "precision.recipe", "model.n_routed_experts", "diloco.islands",
        "optim.name"},
       check_bf16_gradients},
      {{"guard.replica_check_every", "precision.recipe", "model.n_routed_experts",
        "diloco.islands"},
       check_replica_check_recipe},
      {{"checkpoint.async", "diloco.islands"}, check_async_checkpoint_diloco},
      {{"data.vocab", "model.vocab_size"}, check_data_vocab},
  };
  return kChecks;
}

void check_across_sections(const RunConfig& config, const std::string& source) {
  for (const CrossSectionCheck& rule : cross_section_checks()) rule.check(config, source);
}

void resolve_across_sections(RunConfig& config) {
  if (config.data.vocab == 0) config.data.vocab = config.model.vocab_size;
  PrecisionConfig& p = config.precision;
  if (!p.bf16_blocks.empty()) {
    p.bf16_blocks = precision::bf16_blocks_text(precision::resolve_bf16_blocks(
        precision::recipe_named(p.recipe), config.model.n_layers, p.bf16_blocks));
  }
}

}  // namespace trillion
