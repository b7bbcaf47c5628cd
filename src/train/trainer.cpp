// See trainer.h.
#include "train/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "comm/device_mesh.h"
#include "comm/mpi_communicator.h"
#include "core/timer.h"
#include "data/file_io.h"
#include "data/loader.h"
#include "plan/transformer_cost.h"
#include "train/checkpoint.h"
#include "train/datasets.h"
#include "train/gemm_peak.h"
#include "train/step_runner.h"

namespace fs = std::filesystem;

namespace trillion {

std::atomic<bool> g_stop_requested{false};

namespace {

// Only rank 0 writes run files and prints; the other ranks' logs go nowhere.
class EventLog {
 public:
  EventLog(const std::string& path, bool echo, bool enabled)
      : echo_(echo && enabled), enabled_(enabled) {
    if (enabled) out_.open(path, std::ios::app);
  }
  void operator()(const std::string& line) {
    if (!enabled_) return;
    const std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    out_ << stamp << " " << line << "\n";
    out_.flush();
    if (echo_) std::fprintf(stderr, "%s\n", line.c_str());
  }

 private:
  std::ofstream out_;
  bool echo_, enabled_;
};

nlohmann::json memory_json(const MemoryTracker& t) {
  nlohmann::json j;
  for (int c = 0; c < kMemoryCategories; ++c) {
    const auto cat = static_cast<MemoryCategory>(c);
    j[std::string(memory_category_name(cat))] = t.peak(cat);
  }
  return j;
}

// Bytes sent per collective kind, under the group's name (kinds with traffic only).
nlohmann::json comm_json(const std::string& group, const comm::CommCounters& c) {
  nlohmann::json kinds = nlohmann::json::object();
  for (int k = 0; k < comm::kCollectiveKinds; ++k) {
    const auto kind = static_cast<comm::Collective>(k);
    if (c.sent(kind) > 0) kinds[std::string(comm::collective_name(kind))] = c.sent(kind);
  }
  return {{group, kinds}};
}

// Every rank's current and peak bytes per category, gathered over the world (collective).
nlohmann::json memory_per_rank(comm::Communicator& world, const MemoryTracker& t) {
  constexpr int K = kMemoryCategories;
  std::vector<double> mine(2 * K), all(2 * K * world.size());
  for (int c = 0; c < K; ++c) {
    mine[c] = static_cast<double>(t.current(static_cast<MemoryCategory>(c)));
    mine[K + c] = static_cast<double>(t.peak(static_cast<MemoryCategory>(c)));
  }
  world.all_gather(Tensor(mine.data(), DType::f64, {2 * K}),
                   Tensor(all.data(), DType::f64, {2 * K * world.size()}));
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < world.size(); ++r) {
    nlohmann::json current, peak;
    for (int c = 0; c < K; ++c) {
      const std::string name(memory_category_name(static_cast<MemoryCategory>(c)));
      current[name] = static_cast<uint64_t>(all[2 * K * r + c]);
      peak[name] = static_cast<uint64_t>(all[2 * K * r + K + c]);
    }
    ranks.push_back({{"rank", r}, {"current", current}, {"peak", peak}});
  }
  return ranks;
}

// Keeps the metrics of steps <= last_step (a resumed run rewrites what came after).
void truncate_metrics(const std::string& path, int64_t last_step) {
  if (!fs::exists(path)) return;
  std::ifstream in(path);
  std::string kept, line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      if (nlohmann::json::parse(line).value("step", int64_t{0}) <= last_step) kept += line + "\n";
    } catch (const nlohmann::json::exception&) {
      // A torn last line from a killed run: drop it.
    }
  }
  data::write_file_atomic(path, {kept});
}

std::string format_duration(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds);
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

// Mean validation loss over `batches` global micro-batches; this rank reads its part of each.
double evaluate(StepRunner& runner, const data::DataLoader& loader, int64_t batches, int rank) {
  Transformer& model = runner.model();
  const int64_t B = model.batch().batch, T = model.batch().seq_len;
  const int64_t global_b = B * runner.data_parallel().group().size();
  std::vector<int32_t> tokens(B * T), targets(B * T);
  double total = 0;
  for (int64_t i = 0; i < batches; ++i) {
    loader.batch(static_cast<uint64_t>(i * global_b + rank * B), static_cast<int>(B), tokens.data(),
                 targets.data());
    total += model.forward(tokens.data(), targets.data());
  }
  return runner.data_parallel().mean_across_ranks(total / static_cast<double>(batches));
}

}  // namespace

std::string train(const RunConfig& config, const TrainOptions& opt) {
  const fs::path dir = opt.run_dir;
  const std::string metrics_path = (dir / "metrics.jsonl").string();
  if (!opt.resume && (fs::exists(metrics_path) || !list_checkpoints(opt.run_dir).empty())) {
    throw Error(
        fmt::format("run directory '{}' already holds a run; pass --resume to continue it "
                    "or choose a new --run-dir (nothing was changed)",
                    opt.run_dir));
  }
  // Everything that can fail on user input is checked before the directory is touched.
  const RunDatasets datasets = open_run_datasets(config);
  // Processes: MPI when a launcher started this one (trillion launch, mpirun, srun), else a
  // group of one. The mesh checks the world size against parallel.dp before any allocation.
  std::unique_ptr<comm::MpiRuntime> mpi;
  comm::LocalCommunicator local_world("world");
  if (comm::launch_environment().found) mpi = std::make_unique<comm::MpiRuntime>();
  comm::Communicator& world = mpi ? static_cast<comm::Communicator&>(mpi->world()) : local_world;
  const ModelConfig& mc = config.model;
  comm::DeviceMesh mesh(world, {.dp = static_cast<int>(config.parallel.dp)},
                        {.n_heads = mc.n_heads,
                         .n_kv_heads = mc.n_kv_heads,
                         .n_layers = mc.n_layers,
                         .micro_batch = config.train.micro_batch,
                         .seq_len = mc.seq_len});
  const int rank = world.rank();
  const bool lead = rank == 0;  // writes the run directory and prints
  const int64_t B = config.train.micro_batch, T = config.model.seq_len;
  const int64_t accum = config.train.grad_accum;
  data::DataLoader train_loader(datasets.train, static_cast<int>(T), config.train.seed);
  data::DataLoader val_loader(datasets.validation, static_cast<int>(T), config.train.seed,
                              data::SampleOrder::kSequential);

  if (lead) fs::create_directories(dir);
  EventLog event((dir / "events.log").string(), !opt.quiet, lead);
  MemoryTracker tracker;
  auto backend = make_cpu_backend(tracker);
  StepRunner runner(config, *backend, tracker, &mesh.group(comm::MeshGroup::dp));
  parallel::DataParallel& dp = runner.data_parallel();
  const int64_t B_local = runner.local_micro_batch();
  // Full table-layout buffers for checkpoints, alive only while one is read or written.
  auto full_buffer = [&] {
    return Buffer(tracker, MemoryCategory::workspace, config.model.dtype,
                  runner.model().table().total_elements());
  };
  const std::string config_toml = to_toml(config);

  int64_t start_step = 0;
  if (opt.resume) {
    for (const std::string& ckpt : list_checkpoints(opt.run_dir)) {
      if (auto problem = verify_checkpoint(ckpt)) {
        event(
            fmt::format("checkpoint {} is corrupt ({}); trying the previous one", ckpt, *problem));
        continue;
      }
      Buffer params = full_buffer(), m = full_buffer(), v = full_buffer();
      const CheckpointState st = load_checkpoint(ckpt, params, &m, &v);
      dp.load_parameters(params);
      dp.load_state(m, runner.optimizer().first_moment());
      dp.load_state(v, runner.optimizer().second_moment());
      runner.optimizer().set_steps_taken(st.optimizer_steps);
      start_step = st.step;
      event(fmt::format("resumed from {} at step {}", ckpt, st.step));
      break;
    }
    if (start_step == 0) {
      if (!list_checkpoints(opt.run_dir).empty()) {
        throw Error(
            fmt::format("no valid checkpoint in '{}/checkpoints' (all are corrupt; see "
                        "events.log)",
                        opt.run_dir));
      }
      event("no checkpoint to resume from; starting at step 0");
    }
  }
  if (start_step == 0) runner.init_parameters(config.train.seed);
  if (lead) {
    truncate_metrics(metrics_path, start_step);
    data::write_file_atomic((dir / "config.toml").string(), {config_toml});
  }

  // One rank measures the GEMM peak (ranks share the machine's cores) and tells the others.
  GemmPeak peak;
  if (lead) peak = measure_gemm_peak(2048, 2);
  world.broadcast(Tensor(&peak.gflops, DType::f64, {1}), 0);
  const double flops_per_token =
      plan::training_flops_per_token(config.model.shape(), config.model.seq_len);
  const int64_t params = plan::count_parameters(config.model.shape()).total;
  event(
      fmt::format("training {} parameters on {} for steps {}..{} ({} tokens/step, {} threads, "
                  "GEMM peak {:.1f} GFLOP/s, {} process(es), dp {}, ZeRO {}, {})",
                  params, datasets.train->describe(), start_step + 1, config.train.steps,
                  runner.tokens_per_step(), backend->threads(), peak.gflops, world.size(),
                  config.parallel.dp, config.parallel.zero, config.optim.name));

  // Rank r reads samples [first + r * B_local, first + (r + 1) * B_local) of each global
  // micro-batch: the global sample order never depends on dp.
  auto batches = [&](int64_t step, int64_t micro, int32_t* tokens, int32_t* targets) {
    const uint64_t first = static_cast<uint64_t>((step * accum + micro) * B + rank * B_local);
    train_loader.batch(first, static_cast<int>(B_local), tokens, targets);
  };
  // Sharded state is gathered into the one-process layout, so any layout resumes any checkpoint.
  auto checkpoint = [&](int64_t step) {
    Buffer params = full_buffer(), m = full_buffer(), v = full_buffer();
    dp.gather_parameters(params);
    dp.gather_state(runner.optimizer().first_moment(), m);
    dp.gather_state(runner.optimizer().second_moment(), v);
    if (!lead) return;
    CheckpointContents c{&params,
                         &m,
                         &v,
                         {step, runner.optimizer().steps_taken(),
                          static_cast<uint64_t>(step * accum * B), config.train.seed},
                         config_toml};
    const std::string where = write_checkpoint(opt.run_dir, c, config.train.keep_checkpoints);
    event(fmt::format("checkpoint {} written", where));
  };

  std::ofstream metrics;
  if (lead) metrics.open(metrics_path, std::ios::app);
  const bool tty = lead && !opt.quiet && ::isatty(STDERR_FILENO);
  Timer wall;
  double train_seconds = 0;
  int64_t steps_run = 0, step = start_step;
  double last_loss = std::nan(""), val_loss = std::nan("");
  bool stopped_early = false;
  while (step < config.train.steps) {
    const StepStats st = runner.step(step, batches);
    ++step;
    ++steps_run;
    train_seconds += st.seconds;
    last_loss = st.loss;
    const double tokens_per_s = static_cast<double>(st.tokens) / st.seconds;
    const double mfu = flops_per_token * tokens_per_s / (peak.gflops * 1e9);
    nlohmann::json line{{"step", step},
                        {"loss", st.loss},
                        {"lr", st.lr},
                        {"grad_norm", st.grad_norm},
                        {"tokens", step * runner.tokens_per_step()},
                        {"tokens_per_s", tokens_per_s},
                        {"mfu", mfu},
                        {"seconds", st.seconds},
                        {"comm_bytes", st.comm_bytes},
                        {"comm", comm_json(runner.data_parallel().group().name(), st.comm)},
                        {"comm_wait_s", st.comm_wait_seconds},
                        {"memory", memory_json(tracker)}};
    const bool eval_now = config.train.eval_every > 0 && step % config.train.eval_every == 0;
    if (eval_now) {
      line["val_loss"] = val_loss = evaluate(runner, val_loader, config.train.eval_batches, rank);
    }
    if (lead) {
      metrics << line.dump() << "\n";
      metrics.flush();
    }

    const double eta = train_seconds / steps_run * static_cast<double>(config.train.steps - step);
    const std::string progress =
        fmt::format("step {}/{} | loss {:.4f}{} | {:.0f} tok/s | MFU {:.1f}% | ETA {}", step,
                    config.train.steps, st.loss,
                    eval_now ? fmt::format(" | val {:.4f}", val_loss) : std::string(), tokens_per_s,
                    100 * mfu, format_duration(eta));
    if (tty) {
      std::fprintf(stderr, "\r%-100s", progress.c_str());
      if (eval_now || step == config.train.steps) std::fprintf(stderr, "\n");
    } else if (lead && !opt.quiet &&
               (step % config.train.log_every == 0 || step == config.train.steps)) {
      std::fprintf(stderr, "%s\n", progress.c_str());
    }

    const bool budget_spent =
        opt.max_minutes > 0 && wall.seconds() + train_seconds / steps_run > opt.max_minutes * 60;
    bool stop = g_stop_requested.load() || budget_spent ||
                (opt.stop_after_step > 0 && step >= opt.stop_after_step);
    if (world.size() > 1) {  // all ranks stop together, when any rank was asked to
      double any = stop ? 1.0 : 0.0;
      world.all_reduce(Tensor(&any, DType::f64, {1}), comm::ReduceOp::max);
      stop = any > 0;
    }
    if (stop && step < config.train.steps) {
      if (tty) std::fprintf(stderr, "\n");
      event(fmt::format("stopping after step {} ({})", step,
                        g_stop_requested ? "signal"
                        : budget_spent   ? "time budget spent"
                                         : "--stop-after"));
      stopped_early = true;
      break;
    }
    if (config.train.checkpoint_every > 0 && step % config.train.checkpoint_every == 0 &&
        step < config.train.steps) {
      checkpoint(step);
    }
  }
  if (steps_run > 0 || start_step == 0) checkpoint(step);
  if (!(config.train.eval_every > 0 && step % config.train.eval_every == 0 && steps_run > 0)) {
    val_loss = evaluate(runner, val_loader, config.train.eval_batches, rank);
  }
  const nlohmann::json per_rank = memory_per_rank(world, tracker);

  nlohmann::json summary{
      {"steps", step},
      {"completed", !stopped_early},
      {"final_train_loss", last_loss},
      {"final_val_loss", val_loss},
      {"tokens_per_s",
       steps_run > 0 ? static_cast<double>(steps_run) * runner.tokens_per_step() / train_seconds
                     : 0.0},
      {"params", params},
      {"world_size", world.size()},
      {"parallel", {{"dp", config.parallel.dp}, {"zero", config.parallel.zero}}},
      {"memory_per_rank", per_rank},
      {"gemm_peak_gflops", peak.gflops},
      {"memory", memory_json(tracker)}};
  if (auto h = datasets.train->entropy_rate()) summary["entropy_rate"] = *h;
  if (auto bpt = datasets.validation->bytes_per_token()) {
    summary["val_bits_per_byte"] = val_loss / std::log(2.0) / *bpt;
  }
  if (std::isnan(last_loss)) summary["final_train_loss"] = nullptr;
  const std::string text = summary.dump(2) + "\n";
  if (lead) data::write_file_atomic((dir / "summary.json").string(), {text});
  event(fmt::format("{} at step {}: val loss {:.4f}", stopped_early ? "stopped" : "finished", step,
                    val_loss));
  return text;
}

}  // namespace trillion
