// See training_job.h.
#include "train/training_job.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "plan/context_ring.h"
#include "plan/stage_partition.h"
#include "plan/units.h"
#include "train/mesh_options.h"
#include "train/step_layout.h"

namespace trillion {

namespace {

// --resume with a changed config: say what changed; refuse what no checkpoint survives.
std::vector<ConfigChange> changes_since_last_start(const TrainOptions& opt,
                                                   const std::string& config_toml) {
  std::vector<ConfigChange> changes;
  if (!opt.resume || !std::filesystem::exists(opt.run_dir + "/config.toml")) return changes;
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
  return changes;
}

// Step -1 until training begins: the supervisor's watchdog gives start-up (data, model,
// checkpoint load) its own timeout, and knows this rank's pid from now on.
Heartbeat started_heartbeat(int rank) {
  Heartbeat heartbeat(rank);
  heartbeat.beat(-1);
  return heartbeat;
}

comm::DeviceMesh mesh_of(comm::Communicator& world, const RunConfig& config) {
  const ModelConfig& mc = config.model;
  const ParallelConfig& pc = config.parallel;
  return comm::DeviceMesh(world,
                          {.pp = static_cast<int>(pc.pp),
                           .dp = static_cast<int>(pc.dp),
                           .cp = static_cast<int>(pc.cp),
                           .tp = static_cast<int>(pc.tp),
                           .ep = static_cast<int>(pc.ep),
                           .experts_over_tp = experts_over_tp(config)},
                          {.n_heads = mc.n_heads,
                           .n_kv_heads = mc.n_kv_heads,
                           .n_layers = mc.n_layers,
                           .micro_batch = config.train.micro_batch,
                           .seq_len = mc.seq_len,
                           .n_experts = mc.moe.n_routed_experts},
                          mesh_options(config, world.size()));
}

// Mean validation loss over `batches` global micro-batches; this rank reads its part of each.
double evaluate(StepRunner& runner, const DataShard& shard, int64_t batches, bool documents) {
  const int64_t n = shard.local_batch() * runner.context().shape.seq;
  std::vector<int32_t> tokens(n), targets(n), starts;
  double total = 0;
  for (int64_t i = 0; i < batches; ++i) {
    shard.validation_batch(i, tokens.data(), targets.data());
    if (documents) shard.validation_documents(i, starts);
    total += runner.evaluate(tokens.data(), targets.data(), documents ? &starts : nullptr);
  }
  return runner.data_parallel().mean_across_ranks(total / static_cast<double>(batches));
}

// "pipeline: 1f1b, 2 rank(s) x 1 chunk(s); stage 0 (rank 0 chunk 0): embedding + layers 0-3; ..."
// Uneven splits show here: the first L mod S stages hold one layer more, or parallel.partition's.
std::string describe_stages(const schedule::Schedule& s, const ModelConfig& mc,
                            const std::vector<int>& stage_layers) {
  const auto partition = plan::engine_partition(mc.n_layers, s.num_stages(0), stage_layers);
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

}  // namespace

TrainingJob::TrainingJob(const RunConfig& config, const TrainOptions& options)
    : config(config),
      options(options),
      memory_plan(check_memory(config, options.allow_oversubscribe_memory)),
      config_toml(to_toml(config)),
      changes(changes_since_last_start(options, config_toml)),
      datasets(open_run_datasets(config)),
      mpi(comm::launch_environment().found ? std::make_unique<comm::MpiRuntime>() : nullptr),
      local_world("world"),
      world(mpi ? static_cast<comm::Communicator&>(mpi->world()) : local_world),
      heartbeat(started_heartbeat(world.rank())),
      // Every rank checks the directory before the mesh (a collective) lets any rank write to it.
      dir(options.run_dir, options.resume, world.rank() == 0, !options.quiet),
      // The mesh checks the world size against the layout before any allocation.
      mesh(mesh_of(world, config)),
      backend(make_cpu_backend(tracker)),
      islands(mesh, config),
      runner(islands.runner_config(), *backend, tracker,
             RankGroups{&islands.dp(), &mesh.group(comm::MeshGroup::pp),
                        &mesh.group(comm::MeshGroup::ep), &mesh.group(comm::MeshGroup::edp),
                        &mesh.group(comm::MeshGroup::tp), &mesh.group(comm::MeshGroup::cp),
                        &islands.dp_cp()}),
      shard(config, datasets, mesh.coord().dp, static_cast<int>(config.parallel.dp),
            runner.context().sequence, mesh.coord().cp),
      tokens_per_step(runner.tokens_per_step() * islands.count()),
      diloco(islands.enabled()
                 ? std::make_unique<Diloco>(config, runner, islands, tracker,
                                            [this](const std::string& e) { dir.event(e); })
                 : nullptr),
      noise(config.train.noise_scale_decay),
      parts(diloco ? std::vector<CheckpointPart*>{&noise, diloco.get()}
                   : std::vector<CheckpointPart*>{&noise}),
      resumed(options.resume ? resume_run(dir, runner, tracker, config, parts) : CheckpointState{}),
      start_step(resumed.step),
      mfu_flops(mfu_convention(config.model.spec(), config.model.seq_len)),
      counts(plan::count_model(config.model.spec())),
      peak(gemm_mix(
               config.model.spec(), config.model.seq_len,
               precision::recipe_named(config.precision.recipe),
               precision::resolve_bf16_blocks(precision::recipe_named(config.precision.recipe),
                                              config.model.n_layers, config.precision.bf16_blocks),
               config.precision.head == "bf16"),
           precision::recipe_named(config.precision.recipe)) {
  start_at_resumed_step();
}

void TrainingJob::start_at_resumed_step() {
  if (config.data.document_mask) {
    runner.set_document_source([this](int64_t step, int64_t micro, std::vector<int32_t>& starts) {
      shard.train_documents(step, micro, starts);
    });
  }
  // The data goes on at the checkpoint's next sample, whatever the global batch is now.
  shard.resume_at(resumed.step, resumed.next_sample);
  if (options.stop_after_step > 0 && start_step >= options.stop_after_step) {
    throw Error(
        fmt::format("--stop-after {}: the run resumes after step {}, so that step is "
                    "already done; pass a later step (nothing was trained)",
                    options.stop_after_step, start_step));
  }
  if (start_step > config.train.steps) {
    throw Error(fmt::format(
        "train.steps = {} is below step {} of the checkpoint this run resumes from: the run is "
        "already past it; raise train.steps to go on (nothing was changed)",
        config.train.steps, start_step));
  }
  // A new run draws its weights; a resumed one has them, also from a step-0 checkpoint (an
  // imported model, or a run of train.steps = 0).
  if (!resumed.loaded) runner.init_parameters(config.train.seed);
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
}

void TrainingJob::report_start() {
  const ModelConfig& mc = config.model;
  const ParallelConfig& pc = config.parallel;
  // The lead rank measures the peaks of the GEMMs the run executes with its threads (every rank
  // has as many); the job's peak, MFU's denominator, is that times the number of processes. Only
  // the lead reports MFU.
  if (dir.lead()) peak.measure();
  std::string model_parallel =
      pc.ep > 1 ? fmt::format(" (experts over ep {})", pc.ep) : std::string();
  if (pc.tp > 1) {
    model_parallel += fmt::format(", tp {} (sequence parallelism {})", pc.tp, pc.sp ? "on" : "off");
  }
  if (pc.cp > 1) {
    const bool latent = plan::context_ring_latent(config.model.spec(), {pc.tp, pc.sp, pc.cp},
                                                  plan::parse_cp_mla(pc.cp_mla, "parallel.cp_mla"));
    model_parallel += fmt::format(", cp {} ({} split, ring attention{})", pc.cp, pc.cp_split,
                                  !config.model.spec().is_mla() ? ""
                                  : latent ? " over MLA's latent rmsnorm(c_kv) | k_rope"
                                           : " over MLA's per-head K/V");
  }
  const int64_t steps = config.train.steps;
  const std::string what = steps > start_step
                               ? fmt::format("for steps {}..{}", start_step + 1, steps)
                               : fmt::format("for no step (train.steps = {}: the model as "
                                             "initialised is written as checkpoint step {})",
                                             steps, start_step);
  dir.event(fmt::format(
      "training {} parameters on {} {} ({} tokens/step, {} threads, {} process(es), dp {}{}, "
      "ZeRO {}, {}, {} schedule over pp {} ({} stage(s) on this rank); MFU counts {} against "
      "a {})",
      counts.total, datasets.train->describe(), what, tokens_per_step, backend->threads(),
      world.size(), pc.dp, model_parallel, pc.zero,
      config.optim.name, pc.schedule, pc.pp, runner.num_stages(), mfu_flops.describe(),
      peak.describe()));

  dir.event(fmt::format(
      "memory plan per process: at least {}; {} available on this machine for "
      "{} process(es)",
      memory_plan.describe(), plan::format_bytes(available_memory_bytes()), local_process_count()));
  if (runner.schedule().num_stages(0) > 1)
    dir.event(describe_stages(runner.schedule(), mc, config.parallel.stage_layers()));
  if (pc.allreduce != "mpi" || config.emulate.sites > 1) {
    dir.event(describe_mesh_options(mesh_options(config, world.size())));
  }
  if (diloco) dir.event(diloco->describe());
  // Accepted (a schedule may be cut short on purpose) but said: the run never reaches optim.lr.
  if (config.optim.warmup_steps > steps && steps > 0) {
    dir.event(fmt::format(
        "warning: optim.warmup_steps = {} is beyond train.steps = {}: the learning rate never "
        "reaches optim.lr = {:g} (it ends at {:.3g} of it); lower optim.warmup_steps unless "
        "this run is the start of a longer one",
        config.optim.warmup_steps, steps, config.optim.lr,
        static_cast<double>(steps) / static_cast<double>(config.optim.warmup_steps)));
  }
}

double TrainingJob::validate() {
  auto island = [&] {
    return evaluate(runner, shard, config.train.eval_batches, config.data.document_mask);
  };
  return diloco ? diloco->evaluate_global(island) : island();
}

}  // namespace trillion
