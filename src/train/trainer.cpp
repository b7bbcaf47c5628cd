// See trainer.h. train() wires the pieces: processes and mesh, the run directory
// (run_directory.h), this rank's data (data_shard.h), the step runner, checkpoints and resume
// (resume.h) and what is reported (metrics.h).
#include "train/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "comm/device_mesh.h"
#include "comm/mpi_communicator.h"
#include "core/timer.h"
#include "data/file_io.h"
#include "parallel/context.h"
#include "plan/activation_memory.h"
#include "plan/context_ring.h"
#include "plan/stage_partition.h"
#include "plan/units.h"
#include "precision/recipe.h"
#include "train/checkpoint/resume.h"
#include "train/checkpoint/writer.h"
#include "train/config_diff.h"
#include "train/data_shard.h"
#include "train/datasets.h"
#include "train/diloco.h"
#include "train/fault_drill.h"
#include "train/gemm_peak.h"
#include "train/guard.h"
#include "train/memory_check.h"
#include "train/mesh_options.h"
#include "train/metrics.h"
#include "train/noise_scale_log.h"
#include "train/pipeline_trace.h"
#include "train/replica_check.h"
#include "train/run_directory.h"
#include "train/step_runner.h"

namespace trillion {

std::atomic<bool> g_stop_requested{false};

namespace {

// Mean validation loss over `batches` global micro-batches; this rank reads its part of each.
double evaluate(StepRunner& runner, const DataShard& shard, int64_t batches) {
  const int64_t n = shard.local_batch() * runner.context().shape.seq;
  std::vector<int32_t> tokens(n), targets(n);
  double total = 0;
  for (int64_t i = 0; i < batches; ++i) {
    shard.validation_batch(i, tokens.data(), targets.data());
    total += runner.evaluate(tokens.data(), targets.data());
  }
  return runner.data_parallel().mean_across_ranks(total / static_cast<double>(batches));
}

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

// "pipeline: 1f1b, 2 rank(s) x 1 chunk(s); stage 0 (rank 0 chunk 0): embedding + layers 0-3; ..."
// Uneven splits show here: the first L mod S stages hold one layer more.
std::string describe_stages(const schedule::Schedule& s, const ModelConfig& mc) {
  const auto partition = plan::partition_stages(mc.n_layers, s.num_stages(0));
  std::string text = fmt::format("pipeline: {}, {} rank(s) x {} chunk(s)",
                                 schedule::schedule_kind_name(s.kind), s.num_ranks, s.num_chunks);
  for (size_t st = 0; st < partition.size(); ++st) {
    const plan::StageUnits& u = partition[st];
    const int first = std::max(u.first_unit, 1) - 1;
    const int last = std::min<int>(u.last_unit, static_cast<int>(mc.n_layers)) - 1;
    text += fmt::format("; stage {} (rank {} chunk {}): {}layers {}-{}{}", st, s.paths[0][st].rank,
                        s.paths[0][st].chunk, u.first_unit == 0 ? "embedding + " : "", first, last,
                        u.last_unit == mc.n_layers + 1 ? " + head" : "");
  }
  if (s.paths.size() > 1)
    text += " (DualPipe: the second copy runs the stages in reverse rank order)";
  return text;
}

// The largest of `mine` over the ranks: all ranks stop together, when any one was asked to.
int max_over_ranks(comm::Communicator& world, int mine) {
  if (world.size() == 1) return mine;
  double most = mine;
  world.all_reduce(Tensor(&most, DType::f64, {1}), comm::ReduceOp::max);
  return static_cast<int>(most);
}

}  // namespace

std::string train(const RunConfig& config, const TrainOptions& opt) {
  // Everything that can fail on user input is checked before the directory is touched, and
  // the run's plan of bytes before anything large is allocated.
  const MemoryPlan memory_plan = check_memory(config, opt.allow_oversubscribe_memory);
  const std::string config_toml = to_toml(config);
  // --resume with a changed config: say what changed; refuse what no checkpoint survives.
  std::vector<ConfigChange> changes;
  if (opt.resume && std::filesystem::exists(opt.run_dir + "/config.toml")) {
    std::ifstream in(opt.run_dir + "/config.toml");
    const std::string before((std::istreambuf_iterator<char>(in)), {});
    changes = diff_configs(before, config_toml);
    std::vector<ConfigChange> fatal;
    for (const ConfigChange& c : changes) {
      if (breaks_checkpoint(c.key)) fatal.push_back(c);
    }
    if (!fatal.empty()) {
      throw Error(fmt::format(
          "cannot resume '{}' with this config: {} (its checkpoints hold tensors of the old "
          "shape or kind); resume with the old values or start a new --run-dir",
          opt.run_dir, describe(fatal)));
    }
  }
  const RunDatasets datasets = open_run_datasets(config);
  // Processes: MPI when a launcher started this one (trillion launch, mpirun, srun), else a
  // group of one. The mesh checks the world size against the layout before any allocation.
  std::unique_ptr<comm::MpiRuntime> mpi;
  comm::LocalCommunicator local_world("world");
  if (comm::launch_environment().found) mpi = std::make_unique<comm::MpiRuntime>();
  comm::Communicator& world = mpi ? static_cast<comm::Communicator&>(mpi->world()) : local_world;
  // Step -1 until training begins: the supervisor's watchdog gives start-up (data, model,
  // checkpoint load) its own timeout, and knows this rank's pid from now on.
  Heartbeat heartbeat(world.rank());
  heartbeat.beat(-1);
  // Every rank checks the directory before the mesh (a collective) lets any rank write to it.
  RunDirectory dir(opt.run_dir, opt.resume, world.rank() == 0, !opt.quiet);
  const ModelConfig& mc = config.model;
  const ParallelConfig& pc = config.parallel;
  comm::DeviceMesh mesh(world,
                        {.pp = static_cast<int>(pc.pp),
                         .dp = static_cast<int>(pc.dp),
                         .cp = static_cast<int>(pc.cp),
                         .tp = static_cast<int>(pc.tp),
                         .ep = static_cast<int>(pc.ep)},
                        {.n_heads = mc.n_heads,
                         .n_kv_heads = mc.n_kv_heads,
                         .n_layers = mc.n_layers,
                         .micro_batch = config.train.micro_batch,
                         .seq_len = mc.seq_len,
                         .n_experts = mc.moe.n_routed_experts},
                        mesh_options(config, world.size()));
  MemoryTracker tracker;
  auto backend = make_cpu_backend(tracker);
  // With [diloco] the runner trains one island (train/diloco.h); the data shard stays global.
  Islands islands(mesh, config);
  StepRunner runner(
      islands.runner_config(), *backend, tracker,
      RankGroups{&islands.dp(), &mesh.group(comm::MeshGroup::pp), &mesh.group(comm::MeshGroup::ep),
                 &mesh.group(comm::MeshGroup::edp), &mesh.group(comm::MeshGroup::tp),
                 &mesh.group(comm::MeshGroup::cp), &mesh.group(comm::MeshGroup::dp_cp)});
  DataShard shard(config, datasets, mesh.coord().dp, static_cast<int>(pc.dp),
                  runner.context().sequence, mesh.coord().cp);
  const int64_t tokens_per_step = runner.tokens_per_step() * islands.count();  // global
  std::unique_ptr<Diloco> diloco;
  if (islands.enabled()) {
    diloco = std::make_unique<Diloco>(config, runner, islands, tracker,
                                      [&](const std::string& e) { dir.event(e); });
  }
  NoiseScaleLog noise(config.train.noise_scale_decay);
  std::vector<CheckpointPart*> parts{&noise};
  if (diloco) parts.push_back(diloco.get());

  const CheckpointState resumed =
      opt.resume ? resume_from_checkpoint(dir, runner, tracker, config, parts) : CheckpointState{};
  const int64_t start_step = resumed.step;
  // The data goes on at the checkpoint's next sample, whatever the global batch is now.
  shard.resume_at(resumed.step, resumed.next_sample);
  if (opt.stop_after_step > 0 && start_step >= opt.stop_after_step) {
    throw Error(
        fmt::format("--stop-after {}: the run resumes after step {}, so that step is "
                    "already done; pass a later step (nothing was trained)",
                    opt.stop_after_step, start_step));
  }
  if (start_step == 0) runner.init_parameters(config.train.seed);
  if (start_step == 0 && diloco) diloco->start();
  dir.start(config_toml, start_step);
  if (!changes.empty()) dir.event("resumed with a changed config: " + describe(changes));
  const uint64_t at_this_batch = static_cast<uint64_t>(start_step * shard.global_batch());
  if (start_step > 0 && resumed.next_sample != at_this_batch) {
    dir.event(
        fmt::format("the data goes on at global sample {}, the checkpoint's next sample "
                    "(step {} at this run's {} samples per step would be sample {})",
                    resumed.next_sample, start_step, shard.global_batch(), at_this_batch));
  }

  // One rank measures the GEMM peak with its threads (every rank has as many) and tells the
  // others; the job's peak, MFU's denominator, is that times the number of processes.
  GemmPeak peak;
  if (dir.lead()) peak = measure_gemm_peak(2048, 2);
  world.broadcast(Tensor(&peak.gflops, DType::f64, {1}), 0);
  const MfuConvention mfu_flops = mfu_convention(mc.spec(), mc.seq_len);
  const plan::ModelCounts counts = plan::count_model(mc.spec());
  const int64_t params = counts.total;
  std::string model_parallel =
      pc.ep > 1 ? fmt::format(" (experts over ep {})", pc.ep) : std::string();
  if (pc.tp > 1) {
    model_parallel += fmt::format(", tp {} (sequence parallelism {})", pc.tp, pc.sp ? "on" : "off");
  }
  if (pc.cp > 1) {
    model_parallel += fmt::format(", cp {} ({} split, ring attention)", pc.cp, pc.cp_split);
  }
  dir.event(fmt::format(
      "training {} parameters on {} for steps {}..{} ({} tokens/step, {} threads and a GEMM "
      "peak of {:.1f} GFLOP/s per process, {} process(es), dp {}{}, ZeRO {}, {}, {} schedule "
      "over pp {} ({} stage(s) on this rank); MFU counts {})",
      params, datasets.train->describe(), start_step + 1, config.train.steps, tokens_per_step,
      backend->threads(), peak.gflops, world.size(), pc.dp, model_parallel, pc.zero,
      config.optim.name, pc.schedule, pc.pp, runner.num_stages(), mfu_flops.describe()));

  dir.event(fmt::format(
      "memory plan per process: at least {}; {} available on this machine for "
      "{} process(es)",
      memory_plan.describe(), plan::format_bytes(available_memory_bytes()), local_process_count()));
  if (runner.schedule().num_stages(0) > 1) dir.event(describe_stages(runner.schedule(), mc));
  if (pc.allreduce != "mpi" || config.emulate.sites > 1) {
    dir.event(describe_mesh_options(mesh_options(config, world.size())));
  }
  if (diloco) dir.event(diloco->describe());
  // Validation loss; under DiLoCo of the outer (global) model, averaged over the islands.
  auto validate = [&] {
    auto island = [&] { return evaluate(runner, shard, config.train.eval_batches); };
    return diloco ? diloco->evaluate_global(island) : island();
  };

  auto batches = [&](int64_t step, int64_t micro, int32_t* tokens, int32_t* targets) {
    shard.train_batch(step, micro, tokens, targets);
  };
  FaultDrill drill(dir.path(), world.rank());
  // Sync or async checkpoints (train/checkpoint/writer.h); the drill acts once one exists.
  CheckpointWriter checkpoints(
      dir, runner, tracker, config, config_toml, world,
      [&](int64_t s, const std::string& where) { drill.after_checkpoint(s, where); });
  auto checkpoint = [&](int64_t step) { checkpoints.save(step, shard.first_sample(step), parts); };

  const bool tty = dir.lead() && !opt.quiet && ::isatty(STDERR_FILENO);
  Timer wall;
  double train_seconds = 0;
  int64_t steps_run = 0, step = start_step;
  double last_loss = std::nan(""), val_loss = std::nan("");
  bool stopped_early = false;
  const int kill_at = kill_step_for(world.rank());
  StepGuard guard(config.guard);
  int64_t rollbacks = 0;
  drill.at_start();  // --fail-at 0:R / --hang-at 0:R: a failure during start-up
  heartbeat.beat(step);
  while (step < config.train.steps) {
    if (step + 1 == kill_at) std::raise(SIGKILL);  // fault injection (see kill_step_for)
    StepVerdict verdict = StepVerdict::kAccept;
    StepStats st = runner.step(step, batches, [&](double loss, double grad_norm) {
      verdict = guard.judge(loss, grad_norm);
      return verdict == StepVerdict::kAccept;
    });
    const std::string why = guard.explain(verdict, st.loss, st.grad_norm);
    guard.record(verdict, st.loss);
    const DilocoStep outer = diloco ? diloco->after_step(step + 1, st) : DilocoStep{};
    ++step;
    ++steps_run;
    train_seconds += st.seconds;
    last_loss = st.loss;
    const double tokens_per_s = static_cast<double>(st.tokens) / st.seconds;
    const double mfu =
        mfu_flops.flops_per_token * tokens_per_s / (peak.gflops * 1e9 * world.size());
    nlohmann::json line{{"step", step},
                        {"time", unix_seconds()},
                        {"loss", st.loss},
                        {"lr", st.lr},
                        {"grad_norm", st.grad_norm},
                        {"tokens", shard.first_sample(step) * mc.seq_len},
                        {"sample", shard.first_sample(step - 1)},  // the step's first
                        {"tokens_per_s", tokens_per_s},
                        {"mfu", mfu},
                        {"seconds", st.seconds},
                        {"comm_bytes", st.comm_bytes},
                        {"comm", comm_groups_json(st, outer)},
                        {"comm_wait_s", st.comm_wait_seconds},
                        {"memory", memory_json(tracker)}};
    if (pc.tp > 1) line["comm_tp_s"] = st.comm_tp.blocking_seconds;  // inside tp collectives
    if (mc.moe.enabled()) {
      line["moe_max_load_ratio"] = st.moe_max_load_ratio;
      line["moe_layer_load_ratio"] = st.moe_layer_load_ratio;
      line["moe_dropped_tokens"] = st.moe_dropped_tokens;
      if (pc.ep > 1) {
        line["moe_rows"] = {{"out", st.moe_rows_out},
                            {"in", st.moe_rows_in},
                            {"local", st.moe_rows_local},
                            {"exchanges", st.moe_exchanges}};
      }
      line["moe_balance_loss"] = st.moe_balance_loss;
      line["moe_bias_norm"] = st.moe_bias_norm;
    }
    if (st.update_skipped) {
      line["update_skipped"] = verdict_name(verdict);
      dir.event(fmt::format("step {}: update skipped ({} in a row, guard.max_skips = {}): {}", step,
                            guard.consecutive_skips(), config.guard.max_skips, why));
    } else if (const auto b = noise.update(st)) {
      line["gradient_noise_scale"] = *b;
    }
    if (diloco) line["diloco"] = outer.json();
    const bool eval_now = config.train.eval_every > 0 && step % config.train.eval_every == 0;
    if (eval_now) line["val_loss"] = val_loss = validate();
    dir.metrics(line.dump());

    const double eta = train_seconds / steps_run * static_cast<double>(config.train.steps - step);
    const std::string progress = fmt::format(
        "step {}/{} | loss {:.4f}{}{} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | "
        "MFU {} | elapsed {} | ETA {}",
        step, config.train.steps, st.loss,
        eval_now ? fmt::format(" | val {:.4f}", val_loss) : std::string(),
        st.update_skipped ? " (update skipped)" : "", st.lr, st.grad_norm, tokens_per_s,
        format_percent(mfu), format_duration(wall.seconds()), format_duration(eta));
    if (tty) {
      std::fprintf(stderr, "\r%-100s", progress.c_str());
      if (eval_now || step == config.train.steps) std::fprintf(stderr, "\n");
    } else if (dir.lead() && !opt.quiet &&
               (step % config.train.log_every == 0 || step == config.train.steps)) {
      std::fprintf(stderr, "%s\n", progress.c_str());
    } else if (dir.lead() && !opt.quiet && eval_now) {  // every evaluation, in plain logs too
      std::fprintf(stderr, "step %lld: val loss %.4f\n", static_cast<long long>(step), val_loss);
    }

    // Silent data corruption: replicas compare parameter checksums (train/replica_check.h).
    if (flip_requested(world.rank(), step)) flip_one_bit(runner.parameters());
    std::string fault;
    if (config.guard.replica_check_every > 0 && step % config.guard.replica_check_every == 0) {
      fault =
          compare_replicas(runner.parameters(), runner.data_group(), runner.expert_data_group());
      if (!fault.empty()) {
        fault = fmt::format("replica check after step {} (pipeline rank {}): {}", step,
                            runner.pipeline_rank(), fault);
      }
    }
    // Divergence or a fault: every rank decides together (islands judge their own losses).
    double alarms[2] = {guard.diverged() ? 1.0 : 0.0, fault.empty() ? 0.0 : 1.0};
    if (world.size() > 1) world.all_reduce(Tensor(alarms, DType::f64, {2}), comm::ReduceOp::max);
    const bool diverged = alarms[0] > 0;
    if (diverged || alarms[1] > 0) {
      const std::string reason =
          !fault.empty() ? fault
          : guard.diverged()
              ? fmt::format(
                    "training diverged: {} consecutive steps up to step {} skipped their "
                    "update (last: {})",
                    guard.consecutive_skips(), step, why)
              : std::string("another rank found a fault or diverged (see its message)");
      // A checkpoint the run may go back to: after a divergence, one whose next step was
      // accepted (a checkpoint right before the streak may hold the update that caused it);
      // after a fault, one no later than the last replica check that passed.
      const int64_t newest_trusted =
          diverged ? step - guard.consecutive_skips() - 1
                   : step - std::max<int64_t>(config.guard.replica_check_every, 1);
      CheckpointState back;
      if (config.guard.on_divergence == "rollback" && rollbacks < config.guard.max_rollbacks) {
        checkpoints.drain();  // the newest checkpoint may be the one to go back to
        back = resume_from_checkpoint(dir, runner, tracker, config, parts, newest_trusted);
      }
      if (back.step == 0) {
        dir.event(reason);
        throw Error(fmt::format(
            "{}; {}. No checkpoint was written from a skipped step; the newest is in "
            "{}/checkpoints; {}",
            reason,
            config.guard.on_divergence == "rollback"
                ? fmt::format("{} rollback(s) of guard.max_rollbacks = {} were used or no "
                              "checkpoint was left to roll back to",
                              rollbacks, config.guard.max_rollbacks)
                : std::string("guard.on_divergence = \"stop\""),
            dir.path(),
            fault.empty() && diverged
                ? "lower optim.lr, raise optim.warmup_steps or set optim.grad_clip, then --resume"
                : "check the machine of that rank, then --resume"));
      }
      ++rollbacks;
      guard.clear_streak();
      if (diverged) {
        // The batches that led there are skipped (PaLM 2204.02311 §5.1 does the same).
        dir.event(
            fmt::format("rolled back to the checkpoint of step {} ({} of {}): {}; training "
                        "goes on at step {}, so the batches of steps {}..{} are skipped",
                        back.step, rollbacks, config.guard.max_rollbacks, reason, step + 1,
                        back.step + 1, step));
      } else {
        // A hardware fault: the same batches again give the run the fault interrupted.
        dir.event(fmt::format(
            "rolled back to the checkpoint of step {} ({} of {}): {}; steps "
            "{}..{} run again",
            back.step, rollbacks, config.guard.max_rollbacks, reason, back.step + 1, step));
        step = back.step;
        shard.resume_at(back.step, back.next_sample);
      }
      continue;
    }

    const bool budget_spent =
        opt.max_minutes > 0 && wall.seconds() + train_seconds / steps_run > opt.max_minutes * 60;
    // Why the job stops after this step, the same on every rank: the most urgent reason any
    // rank has (a signal reaches the ranks at different steps, and the lead rank must name the
    // other rank's signal, not guess its own reason).
    enum : int { kGoOn, kStopAfter, kBudgetSpent, kSignal };
    const int stop_reason =
        max_over_ranks(world, g_stop_requested.load() ? kSignal
                              : budget_spent          ? kBudgetSpent
                              : opt.stop_after_step > 0 && step >= opt.stop_after_step ? kStopAfter
                                                                                       : kGoOn);
    if (stop_reason != kGoOn && step < config.train.steps) {
      if (tty) std::fprintf(stderr, "\n");
      dir.event(fmt::format("stopping after step {} ({})", step,
                            stop_reason == kSignal        ? "signal"
                            : stop_reason == kBudgetSpent ? "time budget spent"
                                                          : "--stop-after"));
      stopped_early = true;
      break;
    }
    checkpoints.poll(step);  // commits an async checkpoint once every rank's files are durable
    if (config.checkpoint.interval > 0 && step % config.checkpoint.interval == 0 &&
        step < config.train.steps) {
      if (guard.consecutive_skips() == 0) {
        checkpoint(step);
      } else {  // never from a skip streak: the state may be what produces the non-finite steps
        dir.event(
            fmt::format("checkpoint of step {} not written: the last {} step(s) skipped "
                        "their update",
                        step, guard.consecutive_skips()));
      }
    }
    heartbeat.beat(step);
    drill.after_step(step);
  }
  if ((steps_run > 0 || start_step == 0) && guard.consecutive_skips() == 0) {
    checkpoint(step);
  } else if (guard.consecutive_skips() > 0) {
    dir.event(
        fmt::format("final checkpoint of step {} not written: the last {} step(s) skipped "
                    "their update",
                    step, guard.consecutive_skips()));
  }
  checkpoints.drain();  // nothing in flight outlives the run
  if (!(config.train.eval_every > 0 && step % config.train.eval_every == 0 && steps_run > 0)) {
    val_loss = validate();
  }
  // plan/'s activation bytes for this rank's stages (dense models: the engine block's formula),
  // beside the measured ones; every buffer of the engine is in the model's dtype.
  double predicted_activations = -1;
  if (!mc.moe.enabled()) {
    const int64_t elem = static_cast<int64_t>(dtype_size(mc.dtype));
    predicted_activations = 0;
    for (int c = 0; c < runner.num_stages(); ++c) {
      const StageModel& stage = runner.stage(c);
      predicted_activations += static_cast<double>(
          plan::engine_activation_bytes(mc.spec(), runner.local_micro_batch(), mc.seq_len,
                                        mc.activation_policy(), elem, elem, stage.extent(),
                                        stage.slots(), {pc.tp, pc.sp, pc.cp})
              .total());
    }
  }
  // Ring attention's K/V and dK/dV buffers (workspace), one set per rank for all its stages.
  const double predicted_ring =
      pc.cp > 1 ? static_cast<double>(plan::context_ring_buffer_bytes(
                      mc.spec(), runner.local_micro_batch(), mc.seq_len,
                      static_cast<int64_t>(dtype_size(mc.dtype)), {pc.tp, pc.sp, pc.cp}))
                : -1.0;
  const nlohmann::json per_rank =
      memory_per_rank(world, tracker, predicted_activations, predicted_ring);
  const nlohmann::json checkpoint_costs =
      checkpoints.summary(steps_run > 0 ? train_seconds / steps_run : 0.0, memory_plan.checkpoint);
  // Context parallelism: each rank's counted causal attention FLOPs and the cp groups' balance.
  nlohmann::json context_balance;
  if (pc.cp > 1) {
    const parallel::RingAttention* ring = runner.ring_attention();
    context_balance = ring_balance_json(world, mesh.group(comm::MeshGroup::cp),
                                        ring != nullptr ? ring->forward_flops() : 0.0);
    context_balance["cp"] = pc.cp;
    context_balance["split"] = pc.cp_split;
  }
  // Multi-stage runs: the last step's measured timeline (trace.json) and its summary.
  nlohmann::json pipeline;
  if (runner.schedule().num_stages(0) > 1 && steps_run > 0) {
    const PipelineTrace trace = gather_pipeline_trace(runner);
    pipeline = pipeline_summary(trace, runner.schedule());
    if (dir.lead()) {
      data::write_file_atomic(dir.path() + "/trace.json", {chrome_trace(trace).dump() + "\n"});
    }
  }

  nlohmann::json summary{
      {"steps", step},
      {"completed", !stopped_early},
      {"skipped_updates", guard.total_skips()},
      {"rollbacks", rollbacks},
      {"final_train_loss", last_loss},
      {"final_val_loss", val_loss},
      {"tokens_per_s",
       steps_run > 0 ? static_cast<double>(steps_run) * tokens_per_step / train_seconds : 0.0},
      {"train_seconds", train_seconds},
      {"checkpoints", checkpoint_costs},
      {"params", params},
      {"activated_params", counts.activated},
      {"model_flops_per_token", mfu_flops.flops_per_token},
      {"mfu_attention_flops", plan::attention_flops_name(mfu_flops.attention)},
      {"world_size", world.size()},
      {"parallel",
       {{"dp", pc.dp},
        {"tp", pc.tp},
        {"sp", pc.tp > 1 && pc.sp},
        {"zero", pc.zero},
        {"pp", pc.pp},
        {"schedule", pc.schedule},
        {"chunks", runner.schedule().num_chunks},
        {"stages_per_rank", runner.num_stages()},
        {"split_backward", pc.split_backward},
        {"allreduce", pc.allreduce}}},
      {"memory_per_rank", per_rank},
      {"gemm_peak_gflops", peak.gflops},
      {"memory", memory_json(tracker)}};
  if (!pipeline.is_null()) summary["pipeline"] = pipeline;
  if (!context_balance.is_null()) summary["context"] = context_balance;
  if (diloco) summary["diloco"] = diloco->summary();
  if (config.precision.recipe != "fp32") {  // the blocks whose linear layers ran in bf16
    const precision::Bf16Blocks kept =
        precision::resolve_bf16_blocks(precision::recipe_named(config.precision.recipe),
                                       mc.n_layers, config.precision.bf16_blocks);
    summary["precision"] = {
        {"recipe", config.precision.recipe},
        {"bf16_blocks", precision::bf16_blocks_text(kept)},
        {"bf16_blocks_described", precision::describe_bf16_blocks(kept, mc.n_layers)}};
  }
  if (const auto b = noise.last()) summary["gradient_noise_scale"] = *b;
  if (auto h = datasets.train->entropy_rate()) summary["entropy_rate"] = *h;
  if (auto bpt = datasets.validation->bytes_per_token()) {
    summary["val_bits_per_byte"] = val_loss / std::log(2.0) / *bpt;
  }
  if (std::isnan(last_loss)) summary["final_train_loss"] = nullptr;
  const std::string text = summary.dump(2) + "\n";
  dir.summary(text);
  dir.event(fmt::format("{} at step {}: val loss {:.4f}", stopped_early ? "stopped" : "finished",
                        step, val_loss));
  return text;
}

}  // namespace trillion
