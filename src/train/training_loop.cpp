// See training_loop.h.
#include "train/training_loop.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "train/checkpoint/checkpoint.h"
#include "train/replica_check.h"
#include "train/run_summary.h"
#include "train/step_layout.h"

namespace trillion {

namespace {

// Bytes sent per group and collective kind (groups with traffic only).
nlohmann::json comm_groups_json(const StepStats& st, const DilocoStep& outer) {
  nlohmann::json j = comm_json("dp", st.comm);
  if (outer.across.total_sent() > 0) j.update(comm_json("islands", outer.across));
  if (st.comm_pp.total_sent() > 0) j.update(comm_json("pp", st.comm_pp));
  if (st.comm_mirror.total_sent() > 0) j.update(comm_json("pp_mirror", st.comm_mirror));
  if (st.comm_ep.total_sent() > 0) j.update(comm_json("ep", st.comm_ep));
  if (st.comm_edp.total_sent() > 0) j.update(comm_json("edp", st.comm_edp));
  if (st.comm_tp.total_sent() > 0) j.update(comm_json("tp", st.comm_tp));
  if (st.comm_cp.total_sent() > 0) j.update(comm_json("cp", st.comm_cp));
  return j;
}

// Fault injection for tests of failure handling: TRILLION_KILL_RANK_AT_STEP=R:S makes world rank
// R kill itself (SIGKILL, no cleanup) as step S starts. Returns S for this rank, or 0.
int kill_step_for(int rank) {
  const char* spec = std::getenv("TRILLION_KILL_RANK_AT_STEP");
  int r = -1, s = 0;
  if (spec == nullptr || std::sscanf(spec, "%d:%d", &r, &s) != 2) return 0;
  return r == rank ? s : 0;
}

// The largest of `mine` over the ranks: all ranks stop together, when any one was asked to.
int max_over_ranks(comm::Communicator& world, int mine) {
  if (world.size() == 1) return mine;
  double most = mine;
  world.all_reduce(Tensor(&most, DType::f64, {1}), comm::ReduceOp::max);
  return static_cast<int>(most);
}

// What to change after a divergence: the settings far outside their usual range, by name (a
// huge init_std, weight_decay or lr, a vanishing eps), else the usual levers.
std::string divergence_advice(const RunConfig& c) {
  std::string named;
  const auto add = [&](const std::string& item) { named += (named.empty() ? "" : "; ") + item; };
  if (c.model.init_std > 1) {
    add(fmt::format("model.init_std = {:g} (usual 0.02: initial weights this large overflow the "
                    "activations)",
                    c.model.init_std));
  }
  if (c.optim.lr > 1) add(fmt::format("optim.lr = {:g} (usual 1e-4 to 1e-2)", c.optim.lr));
  if (c.optim.weight_decay * c.optim.lr >= 1 || c.optim.weight_decay > 10) {
    add(fmt::format("optim.weight_decay = {:g} (usual 0.1: lr x weight_decay = {:g}, where 1 or "
                    "more flips or zeroes every weight each step)",
                    c.optim.weight_decay, c.optim.weight_decay * c.optim.lr));
  }
  if (c.optim.eps < 1e-30) {
    add(fmt::format("optim.eps = {:g} (usual 1e-8: the update divides by sqrt(v) + eps)",
                    c.optim.eps));
  }
  if (named.empty()) {
    return "lower optim.lr, raise optim.warmup_steps or set optim.grad_clip";
  }
  return "the likely cause: " + named + "; set it back to a usual value";
}

}  // namespace

TrainingLoop::TrainingLoop(TrainingJob& job)
    : job_(job),
      drill_(job.dir.path(), job.world.rank()),
      checkpoints_(
          job.dir, job.runner, job.tracker, job.config, job.config_toml, job.world,
          [this](int64_t s, const std::string& where) { drill_.after_checkpoint(s, where); }),
      tty_(job.dir.lead() && !job.options.quiet && ::isatty(STDERR_FILENO)),
      step_(job.start_step),
      last_loss_(std::nan("")),
      val_loss_(std::nan("")),
      kill_at_(kill_step_for(job.world.rank())),
      guard_(job.config.guard) {}

void TrainingLoop::run() {
  drill_.at_start();  // --fail-at 0:R / --hang-at 0:R: a failure during start-up
  job_.heartbeat.beat(step_);
  while (step_ < job_.config.train.steps) {
    if (data_runs_out()) break;
    if (step_ + 1 == kill_at_) std::raise(SIGKILL);  // fault injection (see kill_step_for)
    const std::string why = run_step();
    const std::string fault = check_replicas();
    if (rolled_back(fault, why)) continue;
    if (stops_early()) break;
    checkpoint_on_interval();
    job_.heartbeat.beat(step_);
    drill_.after_step(step_);
  }
}

std::string TrainingLoop::run_step() {
  const RunConfig& config = job_.config;
  StepVerdict verdict = StepVerdict::kAccept;
  StepStats st = job_.runner.step(
      step_,
      [&](int64_t step, int64_t micro, int32_t* tokens, int32_t* targets) {
        job_.shard.train_batch(step, micro, tokens, targets);
      },
      [&](double loss, double grad_norm) {
        verdict = guard_.judge(loss, grad_norm);
        return verdict == StepVerdict::kAccept;
      });
  const std::string why = guard_.explain(verdict, st.loss, st.grad_norm);
  guard_.record(verdict, st.loss);
  const DilocoStep outer = job_.diloco ? job_.diloco->after_step(step_ + 1, st) : DilocoStep{};
  ++step_;
  ++steps_run_;
  train_seconds_ += st.seconds;
  last_loss_ = st.loss;
  const double tokens_per_s = static_cast<double>(st.tokens) / st.seconds;
  // The lead's peak tracker may raise itself when a step beats it (train/mfu_peak.h).
  const double mfu = job_.dir.lead() ? job_.peak.mfu(job_.mfu_flops.flops_per_token *
                                                         tokens_per_s / 1e9,
                                                     job_.world.size(), step_)
                                     : 0.0;
  nlohmann::json line = metrics_line(st, outer, tokens_per_s, mfu);
  if (st.update_skipped) {
    line["update_skipped"] = verdict_name(verdict);
    job_.dir.event(fmt::format("step {}: update skipped ({} in a row, guard.max_skips = {}): {}",
                               step_, guard_.consecutive_skips(), config.guard.max_skips, why));
  } else if (const auto b = job_.noise.update(st)) {
    line["gradient_noise_scale"] = *b;
  }
  if (job_.diloco) line["diloco"] = outer.json();
  const bool eval_now = config.train.eval_every > 0 && step_ % config.train.eval_every == 0;
  if (eval_now) line["val_loss"] = val_loss_ = job_.validate();
  job_.dir.metrics(line.dump());
  print_progress(st, tokens_per_s, mfu, eval_now);
  return why;
}

// metrics.jsonl's line of the step just done (step_), before the guard's and DiLoCo's fields.
nlohmann::json TrainingLoop::metrics_line(const StepStats& st, const DilocoStep& outer,
                                          double tokens_per_s, double mfu) {
  const ModelConfig& mc = job_.config.model;
  const ParallelConfig& pc = job_.config.parallel;
  nlohmann::json line{{"step", step_},
                      {"time", unix_seconds()},
                      {"loss", st.loss},
                      {"lr", st.lr},
                      {"grad_norm", st.grad_norm},
                      {"tokens", job_.shard.first_sample(step_) * mc.seq_len},
                      {"sample", job_.shard.first_sample(step_ - 1)},  // the step's first
                      {"tokens_per_s", tokens_per_s},
                      {"mfu", mfu},
                      {"seconds", st.seconds},
                      {"comm_bytes", st.comm_bytes},
                      {"comm", comm_groups_json(st, outer)},
                      {"comm_wait_s", st.comm_wait_seconds},
                      {"memory", memory_json(job_.tracker)}};
  if (pc.tp > 1) line["comm_tp_s"] = st.comm_tp.blocking_seconds;  // inside tp collectives
  if (!job_.config.data.sources.empty()) line["data_sources"] = data_sources_json(job_, step_);
  if (mc.moe.enabled()) {
    line["moe_max_load_ratio"] = st.moe_max_load_ratio;
    line["moe_layer_load_ratio"] = st.moe_layer_load_ratio;
    line["moe_dropped_tokens"] = st.moe_dropped_tokens;
    if (pc.ep > 1 || experts_over_tp(job_.config)) {  // an all-to-all ran
      line["moe_rows"] = {{"out", st.moe_rows_out},
                          {"in", st.moe_rows_in},
                          {"local", st.moe_rows_local},
                          {"exchanges", st.moe_exchanges}};
    }
    line["moe_balance_loss"] = st.moe_balance_loss;
    line["moe_bias_norm"] = st.moe_bias_norm;
  }
  for (size_t k = 0; k < st.mtp_losses.size(); ++k) {
    line[fmt::format("mtp_loss_{}", k + 1)] = st.mtp_losses[k];
  }
  if (mc.mtp.enabled()) line["mtp_loss_weight"] = st.mtp_loss_weight;
  return line;
}

// The lead rank's progress line: rewritten in place on a terminal, every log_every steps (and
// every evaluation) in a plain log.
void TrainingLoop::print_progress(const StepStats& st, double tokens_per_s, double mfu,
                                  bool eval_now) {
  const int64_t steps = job_.config.train.steps;
  const bool lead = job_.dir.lead() && !job_.options.quiet;
  const double eta = train_seconds_ / steps_run_ * static_cast<double>(steps - step_);
  const std::string progress = fmt::format(
      "step {}/{} | loss {:.4f}{}{} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | "
      "MFU {} of {} | elapsed {} | ETA {}",
      step_, steps, st.loss, eval_now ? fmt::format(" | val {:.4f}", val_loss_) : std::string(),
      st.update_skipped ? " (update skipped)" : "", st.lr, st.grad_norm, tokens_per_s,
      format_percent(mfu), job_.peak.label(job_.world.size()), format_duration(wall_.seconds()),
      format_duration(eta));
  RunDirectory& out = job_.dir;
  if (tty_) {
    out.console(fmt::format("\r{:<100}{}", progress, eval_now || step_ == steps ? "\n" : ""));
  } else if (lead && (step_ % job_.config.train.log_every == 0 || step_ == steps)) {
    out.console(progress + "\n");
  } else if (lead && eval_now) {  // every evaluation, in plain logs too
    out.console(fmt::format("step {}: val loss {:.4f}\n", step_, val_loss_));
  }
}

// Replicas compare parameter checksums (train/replica_check.h).
std::string TrainingLoop::check_replicas() {
  StepRunner& runner = job_.runner;
  if (flip_requested(job_.world.rank(), step_)) flip_one_bit(runner.parameters());
  const int64_t every = job_.config.guard.replica_check_every;
  if (!(every > 0 && step_ % every == 0)) return "";
  const std::string fault =
      compare_replicas(runner.parameters(), runner.data_group(), runner.expert_data_group());
  if (fault.empty()) return fault;
  return fmt::format("replica check after step {} (pipeline rank {}): {}", step_,
                     runner.pipeline_rank(), fault);
}

bool TrainingLoop::rolled_back(const std::string& fault, const std::string& why) {
  const GuardConfig& gc = job_.config.guard;
  RunDirectory& dir = job_.dir;
  // Divergence or a fault: every rank decides together (islands judge their own losses).
  double alarms[2] = {guard_.diverged() ? 1.0 : 0.0, fault.empty() ? 0.0 : 1.0};
  if (job_.world.size() > 1) {
    job_.world.all_reduce(Tensor(alarms, DType::f64, {2}), comm::ReduceOp::max);
  }
  const bool diverged = alarms[0] > 0;
  if (!diverged && !(alarms[1] > 0)) return false;
  const std::string reason =
      !fault.empty() ? fault
      : guard_.diverged()
          ? fmt::format(
                "training diverged: {} consecutive steps up to step {} skipped their "
                "update (last: {})",
                guard_.consecutive_skips(), step_, why)
          : std::string("another rank found a fault or diverged (see its message)");
  // A checkpoint the run may go back to: after a divergence, one whose next step was
  // accepted (a checkpoint right before the streak may hold the update that caused it);
  // after a fault, one no later than the last replica check that passed.
  const int64_t newest_trusted = diverged ? step_ - guard_.consecutive_skips() - 1
                                          : step_ - std::max<int64_t>(gc.replica_check_every, 1);
  CheckpointState back;
  if (gc.on_divergence == "rollback" && rollbacks_ < gc.max_rollbacks) {
    checkpoints_.drain();  // the newest checkpoint may be the one to go back to
    back = resume_from_checkpoint(dir, job_.runner, job_.tracker, job_.config, job_.parts,
                                  newest_trusted);
  }
  if (back.step == 0) stop_after_alarm(reason, fault.empty() && diverged);
  ++rollbacks_;
  guard_.clear_streak();
  if (diverged) {
    // The batches that led there are skipped (PaLM 2204.02311 §5.1 does the same).
    dir.event(fmt::format(
        "rolled back to the checkpoint of step {} ({} of {}): {}; training "
        "goes on at step {}, so the batches of steps {}..{} are skipped",
        back.step, rollbacks_, gc.max_rollbacks, reason, step_ + 1, back.step + 1, step_));
  } else {
    // A hardware fault: the same batches again give the run the fault interrupted.
    dir.event(
        fmt::format("rolled back to the checkpoint of step {} ({} of {}): {}; steps "
                    "{}..{} run again",
                    back.step, rollbacks_, gc.max_rollbacks, reason, back.step + 1, step_));
    step_ = back.step;
    job_.shard.resume_at(back.step, back.next_sample);
  }
  return true;
}

// No rollback left (or guard.on_divergence = "stop"): the reason, where the checkpoints are and
// what to change before --resume (`diverged`: this rank's divergence, not a fault).
void TrainingLoop::stop_after_alarm(const std::string& reason, bool diverged) {
  const GuardConfig& gc = job_.config.guard;
  job_.dir.event(reason);
  throw Error(fmt::format(
      "{}; {}. {}", reason,
      gc.on_divergence == "rollback"
          ? fmt::format("{} rollback(s) of guard.max_rollbacks = {} were used or no "
                        "checkpoint was left to roll back to",
                        rollbacks_, gc.max_rollbacks)
          : std::string("guard.on_divergence = \"stop\""),
      where_to_go_on(diverged ? divergence_advice(job_.config)
                              : "check the machine of that rank")));
}

// Where a stopped run goes on from, after `change`: its newest checkpoint (never one written from
// a skipped step), or, when it has none yet, a fresh start.
std::string TrainingLoop::where_to_go_on(const std::string& change) const {
  const std::string& dir = job_.dir.path();
  if (list_checkpoints(dir).empty()) {
    return fmt::format("This run has no checkpoint yet ({}/checkpoints holds none): {}, then start "
                       "it again (a new --run-dir, or remove {})",
                       dir, change, dir);
  }
  return fmt::format("No checkpoint was written from a skipped step; the newest is in "
                     "{}/checkpoints; {}, then --resume",
                     dir, change);
}

// data.on_exhausted = "stop": the run ends before the step that would read a mixture source's
// second epoch (every rank decides alike: the stream is a function of the sample index).
bool TrainingLoop::data_runs_out() {
  if (job_.config.data.on_exhausted != "stop") return false;
  const std::optional<int> source = job_.shard.exhausted_at(step_);
  if (!source) return false;
  if (tty_) job_.dir.console("\n");
  job_.dir.event(fmt::format("stopping after step {}: step {} would start a second epoch of data "
                             "source '{}' (data.on_exhausted = \"stop\"; \"wrap\" goes on)",
                             step_, step_ + 1, job_.datasets.source_names.at(*source)));
  stopped_early_ = true;
  return true;
}

bool TrainingLoop::stops_early() {
  const TrainOptions& opt = job_.options;
  const bool budget_spent =
      opt.max_minutes > 0 && wall_.seconds() + train_seconds_ / steps_run_ > opt.max_minutes * 60;
  // Why the job stops after this step, the same on every rank: the most urgent reason any
  // rank has (a signal reaches the ranks at different steps, and the lead rank must name the
  // other rank's signal, not guess its own reason).
  enum : int { kGoOn, kStopAfter, kBudgetSpent, kSignal, kWriteFailed };
  const int stop_reason = max_over_ranks(
      job_.world, !job_.dir.write_failure().empty()                         ? kWriteFailed
                  : g_stop_requested.load()                                 ? kSignal
                  : budget_spent                                            ? kBudgetSpent
                  : opt.stop_after_step > 0 && step_ >= opt.stop_after_step ? kStopAfter
                                                                            : kGoOn);
  // A run whose record cannot be written stops, also at its last step: it ends in an error.
  if (stop_reason == kWriteFailed) write_failed_ = stopped_early_ = true;
  if (stop_reason == kGoOn || step_ >= job_.config.train.steps) return false;
  if (tty_) job_.dir.console("\n");
  job_.dir.event(fmt::format("stopping after step {} ({})", step_,
                             stop_reason == kWriteFailed   ? "the run's logs cannot be written"
                             : stop_reason == kSignal      ? "signal"
                             : stop_reason == kBudgetSpent ? "time budget spent"
                                                           : "--stop-after"));
  stopped_early_ = true;
  return true;
}

void TrainingLoop::checkpoint_on_interval() {
  checkpoints_.poll(step_);  // commits an async checkpoint once every rank's files are durable
  const int64_t interval = job_.config.checkpoint.interval;
  if (!(interval > 0 && step_ % interval == 0 && step_ < job_.config.train.steps)) return;
  if (guard_.consecutive_skips() == 0) {
    checkpoint(step_);
  } else {  // never from a skip streak: the state may be what produces the non-finite steps
    job_.dir.event(
        fmt::format("checkpoint of step {} not written: the last {} step(s) skipped "
                    "their update",
                    step_, guard_.consecutive_skips()));
  }
}

void TrainingLoop::checkpoint(int64_t step) {
  checkpoints_.save(step, job_.shard.first_sample(step), job_.parts);
}

std::string TrainingLoop::finish() {
  // A run stopped because its logs cannot be written is likely on a full disk: a checkpoint that
  // fails too is part of that error (fail_on_write), which also carries the unwritten metrics.
  std::string checkpoint_error;
  try {
    if ((steps_run_ > 0 || job_.start_step == 0) && guard_.consecutive_skips() == 0) {
      checkpoint(step_);
    } else if (guard_.consecutive_skips() > 0) {
      job_.dir.event(
          fmt::format("final checkpoint of step {} not written: the last {} step(s) skipped "
                      "their update",
                      step_, guard_.consecutive_skips()));
    }
    checkpoints_.drain();  // nothing in flight outlives the run
  } catch (const Error& e) {
    if (!write_failed_) throw;
    checkpoint_error = e.what();
  }
  const int64_t eval_every = job_.config.train.eval_every;
  if (!(eval_every > 0 && step_ % eval_every == 0 && steps_run_ > 0)) val_loss_ = job_.validate();
  // Collectives, in this order on every rank.
  const nlohmann::json per_rank = measured_memory_per_rank(job_);
  const nlohmann::json checkpoint_costs = checkpoints_.summary(
      steps_run_ > 0 ? train_seconds_ / steps_run_ : 0.0, job_.memory_plan.checkpoint);
  const nlohmann::json context_balance = context_balance_json(job_);
  const nlohmann::json pipeline = pipeline_timeline_json(job_, steps_run_);
  const RunTotals totals{.steps = step_,
                         .completed = !stopped_early_ && guard_.consecutive_skips() == 0,
                         .skipped_updates = guard_.total_skips(),
                         .rollbacks = rollbacks_,
                         .final_train_loss = last_loss_,
                         .final_val_loss = val_loss_,
                         .steps_run = steps_run_,
                         .train_seconds = train_seconds_};
  nlohmann::json summary =
      summary_json(job_, totals, per_rank, checkpoint_costs, context_balance, pipeline);
  // Bytes per link class, summed over ranks (comm/hosts.h): inside a host, across hosts, sites.
  summary["link_bytes"] = comm::link_bytes_json(job_.mesh.link_bytes_total(), job_.mesh.hosts());
  const std::string text = summary.dump(2) + "\n";
  if (write_failed_) fail_on_write(text, checkpoint_error);
  job_.dir.summary(text);
  if (guard_.consecutive_skips() > 0) {
    // A run whose last steps all skipped their update did not finish training: its state may be
    // what makes the steps non-finite, so nothing of it was saved and it is not a success.
    const std::string reason = fmt::format(
        "the run ended inside a streak of {} skipped update(s) (steps {}..{}; guard.max_skips = "
        "{} was not reached before train.steps): its final state is not trusted and was not "
        "checkpointed",
        guard_.consecutive_skips(), step_ - guard_.consecutive_skips() + 1, step_,
        job_.config.guard.max_skips);
    job_.dir.event(reason);
    throw Error(fmt::format("{}. {}", reason, where_to_go_on(divergence_advice(job_.config))));
  }
  job_.dir.event(fmt::format("{} at step {}: val loss {:.4f}",
                             stopped_early_ ? "stopped" : "finished", step_, val_loss_));
  return text;
}

// The run stopped because metrics.jsonl or events.log could not be appended to: its checkpoint is
// written (finish()); the summary is tried, and the error carries every metrics line that is
// still not in the file, so nothing the run measured is lost without a word.
void TrainingLoop::fail_on_write(const std::string& summary, const std::string& checkpoint_error) {
  RunDirectory& dir = job_.dir;
  std::string summary_note;
  try {
    dir.summary(summary);
  } catch (const Error& e) {
    summary_note = fmt::format("; summary.json not written either ({})", e.what());
  }
  if (!dir.lead()) {
    throw Error(fmt::format("stopped after step {}: the lead rank could not write the run's logs "
                            "(see its message)",
                            step_));
  }
  std::string lost;
  for (const std::string& line : dir.flush_unwritten_metrics()) lost += "\n" + line;
  throw Error(fmt::format(
      "{}: the run stopped after step {} ({}){}; make room or fix the file, then --resume{}",
      dir.write_failure(), step_,
      checkpoint_error.empty()
          ? fmt::format("its checkpoint is in {}/checkpoints", dir.path())
          : fmt::format("and its final checkpoint failed too: {}", checkpoint_error),
      summary_note,
      lost.empty() ? std::string()
                   : "; the metrics lines not in metrics.jsonl, so that nothing is lost:" + lost));
}

}  // namespace trillion
