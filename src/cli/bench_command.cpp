// `trillion bench`: measured performance, always as a ratio against a reference measured in the
// same run (never against a datasheet number).
//   bench gemm  — fp32 GEMM peak of this machine with the engine's BLAS and thread count;
//                 --dtype bf16 (oneDNN) or fp8/mxfp4/nvfp4 (emulated): error and speed vs fp32
//                 (bench_precision.h);
//   bench step  — forward + backward + optimizer of a config: tokens/s and MFU against that peak;
//   bench allreduce — all-reduce algorithms under emulated slow links against the alpha-beta
//                 model (the reference is the model; see bench_allreduce.h).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "backend/cpu/onednn_bf16.h"
#include "backend/profiling_backend.h"
#include "cli/bench_allreduce.h"
#include "cli/bench_attention_buffers.h"
#include "cli/bench_context.h"
#include "cli/bench_machine.h"
#include "cli/bench_precision.h"
#include "cli/commands.h"
#include "cli/parse_arguments.h"
#include "comm/device_mesh.h"
#include "comm/mpi_communicator.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/timer.h"
#include "plan/activation_memory.h"
#include "plan/model_spec.h"
#include "precision/recipe.h"
#include "train/gemm_peak.h"
#include "train/mesh_options.h"
#include "train/metrics.h"
#include "train/mfu_peak.h"
#include "train/step_layout.h"
#include "train/step_runner.h"

namespace trillion::cli {

namespace {

nlohmann::json memory_json(const MemoryTracker& t, bool peak) {
  nlohmann::json j;
  for (int c = 0; c < kMemoryCategories; ++c) {
    const auto cat = static_cast<MemoryCategory>(c);
    j[std::string(memory_category_name(cat))] = peak ? t.peak(cat) : t.current(cat);
  }
  return j;
}

int bench_gemm(int64_t size, int reps, bool json) {
  const GemmPeak p = measure_gemm_peak(size, reps);
  if (json) {
    std::printf(
        "%s\n",
        nlohmann::json{
            {"gflops", p.gflops}, {"threads", p.threads}, {"size", p.size}, {"dtype", "f32"}}
            .dump()
            .c_str());
  } else {
    std::printf("fp32 GEMM %lld^3 on %d threads: %.1f GFLOP/s (best of %d)\n",
                static_cast<long long>(size), p.threads, p.gflops, reps);
  }
  return 0;
}

// Per op group of the profiled steps: time, share of the step, and how near the machine's limit
// it runs: GEMMs and attention against the fp32 GEMM peak (they run fp32 BLAS or fp32 tiles; an
// emulated recipe's linear GEMMs also go through the `gemm` op after rounding), the bf16
// recipe's oneDNN GEMMs ("linear bf16 (oneDNN)", reported by model/linear_gemm.cpp) against
// the bf16 GEMM peak measured in the same run, the memory-bound ops (the recipe's "bf16
// rounding" of GEMM operands included) against the memory bandwidth measured here. Time outside
// all of these (fp8/fp4 quantisation, communication, bookkeeping) is "other".
constexpr const char* kOnednnLinear = "linear bf16 (oneDNN)";
nlohmann::json profile_json(const ProfilingBackend& profiler, int steps, double seconds,
                            double fp32_peak_gflops, double bf16_peak_gflops, bool quiet) {
  const double bandwidth = measure_memory_bandwidth();
  nlohmann::json ops;
  double inside = 0;
  for (const auto& [op, p] : profiler.profile()) {
    inside += p.seconds;
    nlohmann::json o{{"seconds_per_step", p.seconds / steps},
                     {"fraction", p.seconds / seconds},
                     {"calls_per_step", p.calls / steps}};
    if (p.flops > 0) o["flops_per_step"] = p.flops / steps;
    if (p.bytes > 0) o["bytes_per_step"] = p.bytes / steps;
    std::string limit;
    if (p.flops > 0) {
      const bool bf16 = op == kOnednnLinear && bf16_peak_gflops > 0;
      const double gflops = p.flops / p.seconds / 1e9;
      const double peak = bf16 ? bf16_peak_gflops : fp32_peak_gflops;
      o["gflops"] = gflops;
      o[bf16 ? "fraction_of_bf16_gemm_peak" : "fraction_of_fp32_gemm_peak"] = gflops / peak;
      limit = fmt::format("  {:7.1f} GFLOP/s  {:5.1f}% of the {} GEMM peak", gflops,
                          100 * gflops / peak, bf16 ? "bf16" : "fp32");
    } else if (p.bytes > 0) {
      const double gbs = p.bytes / p.seconds / 1e9;
      o["gbytes_per_s"] = gbs;
      o["fraction_of_memory_bandwidth"] = gbs / bandwidth;
      limit = fmt::format("  {:7.1f} GB/s     {:5.1f}% of memory bandwidth", gbs,
                          100 * gbs / bandwidth);
    }
    ops[op] = o;
    if (!quiet) {
      std::printf("  %-20s %7.3f s/step %5.1f%%%s\n", op.c_str(), p.seconds / steps,
                  100 * p.seconds / seconds, limit.c_str());
    }
  }
  const double other = std::max(0.0, seconds - inside);
  ops["other"] = {{"seconds_per_step", other / steps}, {"fraction", other / seconds}};
  if (!quiet) {
    const std::string bf16_peak =
        bf16_peak_gflops > 0 ? fmt::format(", bf16 GEMM {:.1f} GFLOP/s", bf16_peak_gflops) : "";
    std::printf(
        "  %-20s %7.3f s/step %5.1f%%  (quantisation, communication, bookkeeping)\n"
        "  peaks: fp32 GEMM %.1f GFLOP/s%s, memory bandwidth %.1f GB/s (y += x, "
        "measured now)\n",
        "other", other / steps, 100 * other / seconds, fp32_peak_gflops, bf16_peak.c_str(),
        bandwidth);
  }
  ops["memory_bandwidth_gbs"] = bandwidth;  // the reference of fraction_of_memory_bandwidth
  return ops;
}

int bench_step(const std::string& config_path, const std::vector<std::string>& overrides, int steps,
               int64_t gemm_size, bool json, bool profile) {
  const RunConfig cfg = load_run_config(config_path, overrides);
  // The peaks of the GEMMs the recipe runs (train/mfu_peak.h) are measured before and after the
  // timed steps and the higher taken: a busy machine can only lower a measurement, and a lowered
  // peak would inflate MFU.
  const precision::Recipe& recipe = precision::recipe_named(cfg.precision.recipe);
  const precision::Bf16Blocks bf16_blocks = precision::resolve_bf16_blocks(
      recipe, cfg.model.n_layers, cfg.precision.bf16_blocks);
  MfuPeak peak(gemm_mix(cfg.model.spec(), cfg.model.seq_len, recipe, bf16_blocks,
                        cfg.precision.head == "bf16"),
               recipe);
  peak.measure(gemm_size, 3);

  // Under `trillion launch` the ranks form the config's mesh (dp, pp, cp, tp, ep) and step
  // together; rank 0 reports. Every rank draws the same tokens (tp ranks must; dp ranks may; a
  // cp rank draws its T/cp rows of each sequence).
  std::unique_ptr<comm::MpiRuntime> mpi;
  std::unique_ptr<comm::DeviceMesh> mesh;
  RankGroups groups;
  if (comm::launch_environment().found) {
    mpi = std::make_unique<comm::MpiRuntime>();
    const ModelConfig& mc = cfg.model;
    const ParallelConfig& pc = cfg.parallel;
    mesh =
        std::make_unique<comm::DeviceMesh>(mpi->world(),
                                           comm::MeshShape{.pp = static_cast<int>(pc.pp),
                                                           .dp = static_cast<int>(pc.dp),
                                                           .cp = static_cast<int>(pc.cp),
                                                           .tp = static_cast<int>(pc.tp),
                                                           .ep = static_cast<int>(pc.ep),
                                                           .experts_over_tp = experts_over_tp(cfg)},
                                           comm::MeshLimits{.n_heads = mc.n_heads,
                                                            .n_kv_heads = mc.n_kv_heads,
                                                            .n_layers = mc.n_layers,
                                                            .micro_batch = cfg.train.micro_batch,
                                                            .seq_len = mc.seq_len,
                                                            .n_experts = mc.moe.n_routed_experts},
                                           mesh_options(cfg, mpi->world().size()));
    groups = {&mesh->group(comm::MeshGroup::dp),   &mesh->group(comm::MeshGroup::pp),
              &mesh->group(comm::MeshGroup::ep),   &mesh->group(comm::MeshGroup::edp),
              &mesh->group(comm::MeshGroup::tp),   &mesh->group(comm::MeshGroup::cp),
              &mesh->group(comm::MeshGroup::dp_cp)};
  }
  const bool lead = !mpi || mpi->world().rank() == 0;
  json = json || !lead;  // only rank 0 prints; the others compute silently
  MemoryTracker tracker;
  auto cpu = make_cpu_backend(tracker);
  ProfilingBackend profiler(*cpu);
  Backend* be = profile ? static_cast<Backend*>(&profiler) : cpu.get();
  StepRunner runner(cfg, *be, tracker, groups);
  runner.init_parameters(cfg.train.seed);
  const int64_t vocab = cfg.data.vocab;
  const Philox rng(cfg.train.seed, "bench:tokens");
  int64_t counter = 0;
  auto random_batch = [&](int64_t, int64_t, int32_t* tokens, int32_t* targets) {
    const int64_t n = runner.local_micro_batch() * cfg.model.seq_len / cfg.parallel.cp;
    for (int64_t i = 0; i < n; ++i) {
      tokens[i] = static_cast<int32_t>(rng.below(counter++, vocab));
      targets[i] = static_cast<int32_t>(rng.below(counter++, vocab));
    }
  };
  runner.step(0, random_batch);  // warm-up: first touches, thread pools
  tracker.reset_peaks();
  profiler.reset();
  double seconds = 0, loss = 0, best_step = 1e30, tp_seconds = 0;
  for (int s = 1; s <= steps; ++s) {
    const StepStats st = runner.step(s, random_batch);
    seconds += st.seconds;
    tp_seconds += st.comm_tp.blocking_seconds;
    best_step = std::min(best_step, st.seconds);
    loss = st.loss;
    if (!json) {
      std::fprintf(stderr, "step %d/%d: %.3f s, loss %.4f\n", s, steps, st.seconds, st.loss);
    }
  }
  peak.measure(gemm_size, 3);
  // Under launch the job's peak is one process's times the processes (as `train` counts it).
  const int processes = mpi ? mpi->world().size() : 1;
  const double tokens_per_s = static_cast<double>(runner.tokens_per_step()) * steps / seconds;
  const plan::ModelSpec spec = cfg.model.spec();
  const MfuConvention convention = mfu_convention(spec, cfg.model.seq_len);
  const double flops_per_token = convention.flops_per_token;
  const int64_t params = plan::count_model(spec).total;
  // The engine block's formulas (dense layers); MoE models report measured bytes only.
  const bool dense = !cfg.model.moe.enabled();
  const double recompute_flops =
      dense ? plan::recompute_flops_per_token(spec, cfg.model.seq_len,
                                              cfg.model.activation_policy(), convention.attention)
            : 0.0;
  const double hardware_flops_per_token = flops_per_token + recompute_flops;
  // The fastest step's hardware FLOP rate first: if it beats the measured peaks, the peak rises to
  // it, so neither HFU nor MFU can exceed 1.
  const double step_tokens = static_cast<double>(runner.tokens_per_step());
  peak.mfu(hardware_flops_per_token * step_tokens / best_step / 1e9, processes, steps);
  const double mfu_best_step =
      peak.mfu_of_rate(flops_per_token * step_tokens / best_step / 1e9, processes);
  const double mfu = peak.mfu_of_rate(flops_per_token * tokens_per_s / 1e9, processes);
  const double hfu = peak.mfu_of_rate(hardware_flops_per_token * tokens_per_s / 1e9, processes);
  const double peak_gflops = peak.gflops(processes);
  const int64_t elem = static_cast<int64_t>(dtype_size(cfg.model.dtype));
  const int64_t predicted_activations =
      dense && runner.num_stages() == 1
          ? plan::engine_activation_bytes(spec, runner.local_micro_batch(), cfg.model.seq_len,
                                          cfg.model.activation_policy(), elem, elem,
                                          runner.stage(0).extent(), runner.stage(0).slots(),
                                          {cfg.parallel.tp, cfg.parallel.sp, cfg.parallel.cp})
                .total()
          : 0;
  nlohmann::json j{{"config", config_path},
                   {"steps", steps},
                   {"tokens_per_step", runner.tokens_per_step()},
                   {"seconds_per_step", seconds / steps},
                   {"tokens_per_s", tokens_per_s},
                   {"model_flops_per_token", flops_per_token},
                   {"mfu_attention_flops", plan::attention_flops_name(convention.attention)},
                   {"achieved_gflops", flops_per_token * tokens_per_s / 1e9},
                   {"peak_gflops", peak_gflops},
                   {"peak", peak.describe()},
                   {"fp32_gemm_peak_gflops", peak.fp32_gflops() * processes},
                   // 0 where the run executes no oneDNN bf16 GEMM.
                   {"bf16_gemm_peak_gflops", peak.onednn_bf16_gflops() * processes},
                   {"recipe_gemm", peak.recipe_kind()},
                   {"mfu", mfu},
                   // On a shared machine the fastest step is the least disturbed one.
                   {"mfu_best_step", mfu_best_step},
                   {"hardware_flops_per_token", hardware_flops_per_token},
                   {"hfu", hfu},
                   {"recompute", cfg.model.recompute_string()},
                   {"attention", cfg.model.tiled_attention ? "tiled" : "materialized"},
                   {"peak_activation_bytes", tracker.peak(MemoryCategory::activations)},
                   {"predicted_activation_bytes", predicted_activations},
                   {"threads", be->threads()},
                   {"params", params},
                   {"final_loss", loss},
                   {"memory", memory_json(tracker, true)}};
  if (cfg.parallel.tp > 1) {
    // Rank 0's seconds inside the tp group's collectives (transfer and waiting for its peers).
    j["parallel"] = {{"tp", cfg.parallel.tp}, {"sp", cfg.parallel.sp}};
    j["tp_comm_seconds_per_step"] = tp_seconds / steps;
    j["tp_comm_fraction"] = tp_seconds / seconds;
  }
  if (!lead) return 0;
  if (profile) {
    j["profile"] =
        profile_json(profiler, steps, seconds, peak.fp32_gflops(), peak.onednn_bf16_gflops(), json);
  }
  // The recipe of the linear layers and its GEMM error on the w_gate_up forward shape.
  j["precision_recipe"] = cfg.precision.recipe;
  RecipeGemmError gemm_error;
  const int64_t gemm_rows = runner.local_micro_batch() * cfg.model.seq_len;
  if (cfg.precision.recipe != "fp32") {
    gemm_error = recipe_gemm_error(cfg.precision.recipe, gemm_rows, 2 * cfg.model.ffn_hidden,
                                   cfg.model.d_model);
    j["recipe_gemm_rms_rel_error"] = gemm_error.rms_rel;
    j["recipe_gemm_max_error_rel_to_max"] = gemm_error.max_rel_to_max;
  }
  j["precision_bf16_blocks"] = precision::bf16_blocks_text(bf16_blocks);
  if (json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "%s: %lld params, %.0f tokens/s, %.2f s/step, %.1f GFLOP/s of %.1f peak: MFU %.1f%%, "
        "HFU %.1f%% (recompute %s, %s attention); fastest step MFU %.1f%%\n"
        "  MFU counts %s\n  against the %s\n",
        config_path.c_str(), static_cast<long long>(params), tokens_per_s, seconds / steps,
        flops_per_token * tokens_per_s / 1e9, peak_gflops, 100 * mfu, 100 * hfu,
        cfg.model.recompute_string().c_str(), cfg.model.tiled_attention ? "tiled" : "materialized",
        100 * mfu_best_step, convention.describe().c_str(), peak.describe().c_str());
    if (cfg.precision.recipe != "fp32") {
      std::printf(
          "  precision recipe %s (linear layers: %s): GEMM error vs fp32 on "
          "[%lld, %lld] x [%lld, %lld]^T (x ~ N(0,1), W ~ N(0,0.02^2)): RMS relative %.4f, max "
          "%.4f of the largest output\n",
          cfg.precision.recipe.c_str(),
          cfg.precision.recipe == "bf16" ? onednn_bf16_status().c_str() : "emulated on the CPU",
          static_cast<long long>(gemm_rows), static_cast<long long>(cfg.model.d_model),
          static_cast<long long>(2 * cfg.model.ffn_hidden),
          static_cast<long long>(cfg.model.d_model), gemm_error.rms_rel, gemm_error.max_rel_to_max);
      if (!bf16_blocks.none()) {
        std::printf("  linear layers of %s in bf16 (precision.bf16_blocks)\n",
                    precision::describe_bf16_blocks(bf16_blocks, cfg.model.n_layers).c_str());
      }
    }
    if (cfg.parallel.tp > 1) {
      std::printf(
          "  tensor parallelism tp %lld (sp %s): %.3f s/step inside tp collectives, "
          "%.1f%% of the step (rank 0)\n",
          static_cast<long long>(cfg.parallel.tp), cfg.parallel.sp ? "on" : "off",
          tp_seconds / steps, 100 * tp_seconds / seconds);
    }
    std::printf("  activations: %.2f MiB measured peak, %.2f MiB predicted by plan/\n",
                tracker.peak(MemoryCategory::activations) / 1048576.0,
                predicted_activations / 1048576.0);
    for (auto& [k, v] : j["memory"].items()) {
      std::printf("  memory %-12s %10.2f MiB\n", k.c_str(), v.get<double>() / (1 << 20));
    }
  }
  return 0;
}

struct AttentionBenchOptions {
  int64_t seq = 2048, batch = 1, heads = 8, kv_heads = 0, head_dim = 64, block = 0;
  int64_t v_head_dim = 0;  // 0: head_dim (MLA sets it apart)
  std::string impl = "tiled";
  int reps = 3;
};

// Forward + backward of one attention call on random q, k, v: best time of `reps`, and the peak
// memory the call needs beyond its inputs and outputs (probabilities or lse, and kernel scratch).
int bench_attention(const AttentionBenchOptions& o, bool json) {
  const bool tiled = o.impl == "tiled";
  if (!tiled && o.impl != "materialized") {
    throw Error("--impl must be tiled or materialized, got '" + o.impl + "'");
  }
  AttentionShape s{o.batch,    o.seq,       o.heads, o.kv_heads > 0 ? o.kv_heads : o.heads,
                   o.head_dim, o.v_head_dim};
  if (s.NH % s.KV != 0) throw Error("--kv-heads must divide --heads");
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const AttentionBenchBuffers buffers(*be, tracker, s, 1, "bench:attention");
  const Tensor qkv = buffers.qkv(), out = buffers.out(), dout = buffers.dout(),
               dqkv = buffers.dqkv();
  const size_t base = tracker.current_total();
  tracker.reset_peaks();
  const AttentionBlocks blocks{o.block, o.block};
  double best = 1e30;
  for (int r = 0; r < o.reps; ++r) {
    Timer t;
    if (tiled) {
      Buffer lse(tracker, MemoryCategory::workspace, DType::f32, s.B * s.NH * s.T);
      const Tensor l = lse.view(0, {s.B, s.NH, s.T});
      be->flash_attention_forward(out, l, qkv, s, blocks);
      be->flash_attention_backward(dqkv, dout, out, qkv, l, s, blocks);
    } else {
      Buffer probs(tracker, MemoryCategory::workspace, DType::f32, s.B * s.NH * s.T * s.T);
      const Tensor p = probs.view(0, {s.B, s.NH, s.T, s.T});
      be->attention_forward(out, p, qkv, s);
      be->attention_backward(dqkv, dout, qkv, p, s);
    }
    best = std::min(best, t.seconds());
  }
  const size_t workspace = tracker.peak_total() - base;
  // Model FLOPs of causal attention forward + backward, full-square convention:
  // 6 B NH T^2 (HD + VD) (12 B NH T^2 HD when VD = HD).
  const double flops = 6.0 * s.B * s.NH * static_cast<double>(s.T) * s.T * (s.HD + s.v_dim());
  if (json) {
    std::printf("%s\n", nlohmann::json{{"impl", o.impl},
                                       {"seq", s.T},
                                       {"batch", s.B},
                                       {"heads", s.NH},
                                       {"kv_heads", s.KV},
                                       {"head_dim", s.HD},
                                       {"v_head_dim", s.v_dim()},
                                       {"seconds_fwd_bwd", best},
                                       {"gflops", flops / best / 1e9},
                                       {"peak_workspace_bytes", workspace}}
                            .dump()
                            .c_str());
  } else {
    std::printf(
        "%s attention, B %lld T %lld heads %lld/%lld dim %lld%s: %.4f s fwd+bwd, %.1f "
        "GFLOP/s, peak workspace %.2f MiB\n",
        o.impl.c_str(), static_cast<long long>(s.B), static_cast<long long>(s.T),
        static_cast<long long>(s.NH), static_cast<long long>(s.KV), static_cast<long long>(s.HD),
        s.v_dim() == s.HD ? "" : fmt::format(" (v {})", s.v_dim()).c_str(), best,
        flops / best / 1e9, workspace / 1048576.0);
  }
  return 0;
}

}  // namespace

int bench_command(int argc, char** argv) {
  CLI::App app{"Measure this machine and the engine: GEMM peak, training step throughput and MFU"};
  app.require_subcommand(1);
  bool json = false;
  int64_t size = 2048;
  int reps = 5;
  std::string gemm_dtype = "fp32";
  auto* gemm = app.add_subcommand(
      "gemm",
      "GEMM peak with the engine's BLAS and threads; bf16 and emulated FP8/FP4 with --dtype");
  gemm->add_option("--dtype", gemm_dtype,
                   "fp32; bf16 (oneDNN where the CPU has native bf16); or an emulated "
                   "block-scaled GEMM: fp8, fp8-e5m2, mxfp4, nvfp4")
      ->capture_default_str();
  gemm->add_option("--size", size, "matrix size (square)")->check(CLI::Range(64, 16384));
  gemm->add_option("--reps", reps, "timed repetitions (best is reported)")
      ->check(CLI::Range(1, 100));
  gemm->add_flag("--json", json, "print one JSON object");

  std::string config;
  std::vector<std::string> overrides;
  int steps = 3;
  auto* step = app.add_subcommand("step", "forward + backward + optimizer step: tokens/s and MFU");
  step->add_option("config", config, "run config (TOML)")->required()->check(CLI::ExistingFile);
  step->add_option("--steps", steps, "timed steps after one warm-up step")
      ->check(CLI::Range(1, 1000));
  step->add_option("--set", overrides, "override a config key: section.key=value");
  step->add_option("--gemm-size", size, "size of the GEMM that measures the peak")
      ->check(CLI::Range(64, 16384));
  step->add_flag("--json", json, "print one JSON object");
  bool profile = false;
  step->add_flag("--profile", profile, "time every backend operation (where the step goes)");

  AttentionBenchOptions ao;
  auto* attention =
      app.add_subcommand("attention", "tiled vs materialised attention: time, memory");
  attention->add_option("--seq", ao.seq, "sequence length")->check(CLI::Range(1, 1 << 20));
  attention->add_option("--batch", ao.batch, "batch size")->check(CLI::Range(1, 4096));
  attention->add_option("--heads", ao.heads, "query heads")->check(CLI::Range(1, 1024));
  attention->add_option("--kv-heads", ao.kv_heads, "key/value heads (default: --heads)")
      ->check(CLI::Range(1, 1024));
  attention->add_option("--head-dim", ao.head_dim, "head dimension")->check(CLI::Range(2, 1024));
  attention->add_option("--v-head-dim", ao.v_head_dim, "value head dimension (0: --head-dim)")
      ->check(CLI::Range(0, 1024));
  attention->add_option("--impl", ao.impl, "tiled or materialized");
  attention->add_option("--block", ao.block, "tile size (0: from the cache size)")
      ->check(CLI::Range(0, 1 << 20));
  attention->add_option("--reps", ao.reps, "timed repetitions (best is reported)")
      ->check(CLI::Range(1, 100));
  attention->add_flag("--json", json, "print one JSON object");
  int cp = 1;
  std::string cp_split = "zigzag";
  attention
      ->add_option("--cp", cp, "context-parallel ranks: ring attention under trillion launch -n CP")
      ->check(CLI::Range(1, 4096));
  auto* split_option =
      attention->add_option("--split", cp_split, "with --cp: zigzag or contiguous");

  AllReduceBenchOptions aro;
  auto* allreduce =
      app.add_subcommand("allreduce",
                         "all-reduce algorithms under emulated slow links vs the alpha-beta model "
                         "(run under trillion launch -n N)");
  allreduce->add_option("--algorithm", aro.algorithm, "mpi, ring, hierarchical or all")
      ->capture_default_str();
  allreduce->add_option("--mb", aro.megabytes, "fp32 buffer per rank, MB")->capture_default_str();
  allreduce->add_option("--sites", aro.sites, "emulated sites (data centres); 1: no emulation")
      ->capture_default_str();
  allreduce->add_option("--latency-ms", aro.latency_ms, "one-way latency between sites")
      ->capture_default_str();
  allreduce->add_option("--gbps", aro.gbps, "bandwidth between sites per rank pair, Gb/s")
      ->capture_default_str();
  allreduce->add_option("--ranks-per-node", aro.ranks_per_node,
                        "hierarchical's node size (0: one node per site)");
  allreduce->add_option("--host-gbps", aro.host_gbps,
                        "real hosts (scripts/hosts.sh --gbps G): their NICs' Gb/s; no emulation");
  allreduce->add_option("--reps", aro.reps, "timed repetitions (median reported)")
      ->check(CLI::Range(1, 1000));
  allreduce->add_flag("--json", json, "print one JSON object");

  MachineBenchOptions mo;
  auto* machine = app.add_subcommand(
      "machine",
      "measure this machine (GEMM peaks, memory bandwidth, MPI link under trillion launch -n 2) "
      "and write it as a cluster file for trillion plan --cluster");
  machine->add_option("--out", mo.out, "the cluster file to write")->required();
  machine->add_option("--size", mo.gemm_size, "GEMM size of both peaks")
      ->capture_default_str()
      ->check(CLI::Range(64, 8192));
  machine->add_option("--copy-mb", mo.copy_megabytes, "MB per buffer of the copy probe")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 4096.0));
  machine->add_option("--reps", mo.reps, "timed repetitions (best is reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  machine->add_flag("--json", json, "print one JSON object");

  if (const int rc = parse_arguments(app, argc, argv); rc >= 0) return rc;
  if (machine->parsed()) return bench_machine(mo, json);
  if (gemm->parsed()) {
    return gemm_dtype == "fp32" ? bench_gemm(size, reps, json)
                                : bench_precision_gemm(gemm_dtype, size, reps, json);
  }
  if (allreduce->parsed()) return bench_allreduce(aro, json);
  if (attention->parsed() && cp == 1 && split_option->count() > 0) {
    throw Error(fmt::format(
        "bench attention --split {} splits the sequence over context-parallel ranks: give --cp N "
        "(> 1) under trillion launch -n N, or leave --split out",
        cp_split));
  }
  if (attention->parsed() && cp > 1) {
    return bench_ring_attention({cp, ao.seq, ao.batch, ao.heads, ao.kv_heads, ao.head_dim, ao.block,
                                 ao.v_head_dim, cp_split, ao.reps},
                                json);
  }
  if (attention->parsed()) return bench_attention(ao, json);
  return bench_step(config, overrides, steps, size, json, profile);
}

}  // namespace trillion::cli
