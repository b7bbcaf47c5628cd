// See trainer.h.
#include "train/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

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

class EventLog {
 public:
  EventLog(const std::string& path, bool echo) : out_(path, std::ios::app), echo_(echo) {}
  void operator()(const std::string& line) {
    const std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    out_ << stamp << " " << line << "\n";
    out_.flush();
    if (echo_) std::fprintf(stderr, "%s\n", line.c_str());
  }

 private:
  std::ofstream out_;
  bool echo_;
};

nlohmann::json memory_json(const MemoryTracker& t) {
  nlohmann::json j;
  for (int c = 0; c < kMemoryCategories; ++c) {
    const auto cat = static_cast<MemoryCategory>(c);
    j[std::string(memory_category_name(cat))] = t.peak(cat);
  }
  return j;
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

double evaluate(Transformer& model, const data::DataLoader& loader, int64_t batches) {
  const int64_t B = model.batch().batch, T = model.batch().seq_len;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  double total = 0;
  for (int64_t i = 0; i < batches; ++i) {
    loader.batch(static_cast<uint64_t>(i * B), static_cast<int>(B), tokens.data(), targets.data());
    total += model.forward(tokens.data(), targets.data());
  }
  return total / static_cast<double>(batches);
}

}  // namespace

std::string train(const RunConfig& config, const TrainOptions& opt) {
  const fs::path dir = opt.run_dir;
  const std::string metrics_path = (dir / "metrics.jsonl").string();
  if (!opt.resume && (fs::exists(metrics_path) || !list_checkpoints(opt.run_dir).empty())) {
    throw Error(fmt::format("run directory '{}' already holds a run; pass --resume to continue it "
                            "or choose a new --run-dir (nothing was changed)",
                            opt.run_dir));
  }
  // Everything that can fail on user input is checked before the directory is touched.
  const RunDatasets datasets = open_run_datasets(config);
  const int64_t B = config.train.micro_batch, T = config.model.seq_len;
  const int64_t accum = config.train.grad_accum;
  data::DataLoader train_loader(datasets.train, static_cast<int>(T), config.train.seed);
  data::DataLoader val_loader(datasets.validation, static_cast<int>(T), config.train.seed,
                              data::SampleOrder::kSequential);

  fs::create_directories(dir);
  EventLog event((dir / "events.log").string(), !opt.quiet);
  MemoryTracker tracker;
  auto backend = make_cpu_backend(tracker);
  StepRunner runner(config, *backend, tracker);
  Transformer& model = runner.model();
  const std::string config_toml = to_toml(config);

  int64_t start_step = 0;
  if (opt.resume) {
    for (const std::string& ckpt : list_checkpoints(opt.run_dir)) {
      if (auto problem = verify_checkpoint(ckpt)) {
        event(fmt::format("checkpoint {} is corrupt ({}); trying the previous one", ckpt, *problem));
        continue;
      }
      const CheckpointState st =
          load_checkpoint(ckpt, model.parameters(), &runner.optimizer().first_moment(),
                          &runner.optimizer().second_moment());
      runner.optimizer().set_steps_taken(st.optimizer_steps);
      start_step = st.step;
      event(fmt::format("resumed from {} at step {}", ckpt, st.step));
      break;
    }
    if (start_step == 0) {
      if (!list_checkpoints(opt.run_dir).empty()) {
        throw Error(fmt::format("no valid checkpoint in '{}/checkpoints' (all are corrupt; see "
                                "events.log)", opt.run_dir));
      }
      event("no checkpoint to resume from; starting at step 0");
    }
  }
  if (start_step == 0) model.init_parameters(config.train.seed);
  truncate_metrics(metrics_path, start_step);
  data::write_file_atomic((dir / "config.toml").string(), {config_toml});

  const GemmPeak peak = measure_gemm_peak(2048, 2);
  const double flops_per_token =
      plan::training_flops_per_token(config.model.shape(), config.model.seq_len);
  const int64_t params = plan::count_parameters(config.model.shape()).total;
  event(fmt::format("training {} parameters on {} for steps {}..{} ({} tokens/step, {} threads, "
                    "GEMM peak {:.1f} GFLOP/s)",
                    params, datasets.train->describe(), start_step + 1, config.train.steps,
                    runner.tokens_per_step(), backend->threads(), peak.gflops));

  auto batches = [&](int64_t step, int64_t micro, int32_t* tokens, int32_t* targets) {
    const uint64_t first = static_cast<uint64_t>((step * accum + micro) * B);
    train_loader.batch(first, static_cast<int>(B), tokens, targets);
  };
  auto checkpoint = [&](int64_t step) {
    CheckpointContents c{&model.parameters(), &runner.optimizer().first_moment(),
                         &runner.optimizer().second_moment(),
                         {step, runner.optimizer().steps_taken(),
                          static_cast<uint64_t>(step * accum * B), config.train.seed},
                         config_toml};
    const std::string where = write_checkpoint(opt.run_dir, c, config.train.keep_checkpoints);
    event(fmt::format("checkpoint {} written", where));
  };

  std::ofstream metrics(metrics_path, std::ios::app);
  const bool tty = !opt.quiet && ::isatty(STDERR_FILENO);
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
                        {"memory", memory_json(tracker)}};
    const bool eval_now = config.train.eval_every > 0 && step % config.train.eval_every == 0;
    if (eval_now) line["val_loss"] = val_loss = evaluate(model, val_loader, config.train.eval_batches);
    metrics << line.dump() << "\n";
    metrics.flush();

    const double eta = train_seconds / steps_run * static_cast<double>(config.train.steps - step);
    const std::string progress =
        fmt::format("step {}/{} | loss {:.4f}{} | {:.0f} tok/s | MFU {:.1f}% | ETA {}", step,
                    config.train.steps, st.loss,
                    eval_now ? fmt::format(" | val {:.4f}", val_loss) : std::string(),
                    tokens_per_s, 100 * mfu, format_duration(eta));
    if (tty) {
      std::fprintf(stderr, "\r%-100s", progress.c_str());
      if (eval_now || step == config.train.steps) std::fprintf(stderr, "\n");
    } else if (!opt.quiet && (step % config.train.log_every == 0 || step == config.train.steps)) {
      std::fprintf(stderr, "%s\n", progress.c_str());
    }

    const bool budget_spent =
        opt.max_minutes > 0 && wall.seconds() + train_seconds / steps_run > opt.max_minutes * 60;
    const bool stop = g_stop_requested.load() || budget_spent ||
                      (opt.stop_after_step > 0 && step >= opt.stop_after_step);
    if (stop && step < config.train.steps) {
      if (tty) std::fprintf(stderr, "\n");
      event(fmt::format("stopping after step {} ({})", step,
                        g_stop_requested ? "signal" : budget_spent ? "time budget spent"
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
    val_loss = evaluate(model, val_loader, config.train.eval_batches);
  }

  nlohmann::json summary{{"steps", step},
                         {"completed", !stopped_early},
                         {"final_train_loss", last_loss},
                         {"final_val_loss", val_loss},
                         {"tokens_per_s", steps_run > 0 ? static_cast<double>(steps_run) *
                                                              runner.tokens_per_step() /
                                                              train_seconds
                                                        : 0.0},
                         {"params", params},
                         {"world_size", 1},
                         {"gemm_peak_gflops", peak.gflops},
                         {"memory", memory_json(tracker)}};
  if (auto h = datasets.train->entropy_rate()) summary["entropy_rate"] = *h;
  if (auto bpt = datasets.validation->bytes_per_token()) {
    summary["val_bits_per_byte"] = val_loss / std::log(2.0) / *bpt;
  }
  if (std::isnan(last_loss)) summary["final_train_loss"] = nullptr;
  const std::string text = summary.dump(2) + "\n";
  data::write_file_atomic((dir / "summary.json").string(), {text});
  event(fmt::format("{} at step {}: val loss {:.4f}", stopped_early ? "stopped" : "finished", step,
                    val_loss));
  return text;
}

}  // namespace trillion
