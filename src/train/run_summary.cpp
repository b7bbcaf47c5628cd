// See run_summary.h.
#include "train/run_summary.h"

#include "data/file_io.h"
#include "plan/activation_memory.h"
#include "plan/context_ring.h"
#include "precision/recipe.h"
#include "train/pipeline_trace.h"
#include "train/step_layout.h"

namespace trillion {

nlohmann::json measured_memory_per_rank(TrainingJob& job) {
  const ModelConfig& mc = job.config.model;
  const ParallelConfig& pc = job.config.parallel;
  StepRunner& runner = job.runner;
  // plan/'s activation bytes for this rank's stages (the engine block's formula; MoE layers
  // without their routed rows, freed after each backward and after evaluation), beside the
  // measured ones; every buffer of the engine is in the model's dtype.
  double predicted_activations = -1;
  {
    const int64_t elem = static_cast<int64_t>(dtype_size(mc.dtype));
    predicted_activations = 0;
    for (int c = 0; c < runner.num_stages(); ++c) {
      const StageModel& stage = runner.stage(c);
      predicted_activations +=
          static_cast<double>(plan::engine_activation_bytes(
                                  mc.spec(), runner.local_micro_batch(), mc.seq_len,
                                  mc.activation_policy(), elem, elem, stage.extent(), stage.slots(),
                                  {pc.tp, pc.sp, pc.cp, experts_split_over_tp(job.config)})
                                  .total());
    }
  }
  // Ring attention's K/V and dK/dV buffers (workspace), one set per rank for all its stages.
  const double predicted_ring =
      pc.cp > 1 ? static_cast<double>(plan::context_ring_buffer_bytes(
                      mc.spec(), runner.local_micro_batch(), mc.seq_len,
                      static_cast<int64_t>(dtype_size(mc.dtype)), {pc.tp, pc.sp, pc.cp},
                      plan::parse_cp_mla(pc.cp_mla, "parallel.cp_mla")))
                : -1.0;
  return memory_per_rank(job.world, job.tracker, predicted_activations, predicted_ring);
}

nlohmann::json context_balance_json(TrainingJob& job) {
  const ParallelConfig& pc = job.config.parallel;
  nlohmann::json context_balance;
  if (pc.cp > 1) {
    const parallel::RingAttention* ring = job.runner.ring_attention();
    context_balance = ring_balance_json(job.world, job.mesh.group(comm::MeshGroup::cp),
                                        ring != nullptr ? ring->forward_flops() : 0.0);
    context_balance["cp"] = pc.cp;
    context_balance["split"] = pc.cp_split;
  }
  return context_balance;
}

nlohmann::json pipeline_timeline_json(TrainingJob& job, int64_t steps_run) {
  nlohmann::json pipeline;
  if (job.runner.schedule().num_stages(0) > 1 && steps_run > 0) {
    const PipelineTrace trace = gather_pipeline_trace(job.runner);
    pipeline = pipeline_summary(trace, job.runner.schedule());
    if (job.dir.lead()) {
      data::write_file_atomic(job.dir.path() + "/trace.json", {chrome_trace(trace).dump() + "\n"});
    }
  }
  return pipeline;
}

nlohmann::json data_sources_json(const TrainingJob& job, int64_t steps) {
  const DataConfig& d = job.config.data;
  if (d.sources.empty()) return nullptr;
  const int64_t T = job.config.model.seq_len;
  nlohmann::json list = nlohmann::json::array();
  for (size_t s = 0; s < d.sources.size(); ++s) {
    const uint64_t samples = job.shard.source_samples(steps, static_cast<int>(s));
    const int64_t per_epoch = job.shard.train_stream().source(static_cast<int>(s)).num_samples();
    list.push_back({{"path", d.sources[s].path},
                    {"weight", d.sources[s].weight},
                    {"tokens", samples * static_cast<uint64_t>(T)},
                    {"epochs", static_cast<double>(samples) / static_cast<double>(per_epoch)}});
  }
  return list;
}

nlohmann::json summary_json(const TrainingJob& job, const RunTotals& totals,
                            const nlohmann::json& per_rank, const nlohmann::json& checkpoints,
                            const nlohmann::json& context_balance, const nlohmann::json& pipeline) {
  const RunConfig& config = job.config;
  const ModelConfig& mc = config.model;
  const ParallelConfig& pc = config.parallel;
  const StepRunner& runner = job.runner;
  nlohmann::json summary{
      {"steps", totals.steps},
      {"completed", totals.completed},
      {"skipped_updates", totals.skipped_updates},
      {"rollbacks", totals.rollbacks},
      {"final_train_loss", totals.final_train_loss},
      {"final_val_loss", totals.final_val_loss},
      {"tokens_per_s", totals.steps_run > 0 ? static_cast<double>(totals.steps_run) *
                                                  job.tokens_per_step / totals.train_seconds
                                            : 0.0},
      {"train_seconds", totals.train_seconds},
      {"checkpoints", checkpoints},
      {"params", job.counts.total},
      {"activated_params", job.counts.activated},
      {"model_flops_per_token", job.mfu_flops.flops_per_token},
      {"mfu_attention_flops", plan::attention_flops_name(job.mfu_flops.attention)},
      {"world_size", job.world.size()},
      {"parallel",
       {{"dp", pc.dp},
        {"tp", pc.tp},
        {"sp", pc.tp > 1 && pc.sp},
        {"expert_tp", pc.expert_tp},
        {"zero", pc.zero},
        {"pp", pc.pp},
        {"schedule", pc.schedule},
        {"chunks", runner.schedule().num_chunks},
        {"stages_per_rank", runner.num_stages()},
        {"split_backward", pc.split_backward},
        {"allreduce", pc.allreduce}}},
      {"memory_per_rank", per_rank},
      {"gemm_peak_gflops", job.peak.gflops()},
      {"mfu", totals.train_seconds > 0
                  ? job.peak.mfu_of_rate(job.mfu_flops.flops_per_token * totals.steps_run *
                                             job.tokens_per_step / totals.train_seconds / 1e9,
                                         job.world.size())
                  : 0.0},
      {"mfu_peak", job.peak.describe()},
      {"memory", memory_json(job.tracker)}};
  if (!pipeline.is_null()) summary["pipeline"] = pipeline;
  if (!context_balance.is_null()) summary["context"] = context_balance;
  if (job.diloco) summary["diloco"] = job.diloco->summary();
  if (config.precision.recipe != "fp32") {  // the blocks whose linear layers ran in bf16
    const precision::Bf16Blocks kept =
        precision::resolve_bf16_blocks(precision::recipe_named(config.precision.recipe),
                                       mc.n_layers, config.precision.bf16_blocks);
    summary["precision"] = {
        {"recipe", config.precision.recipe},
        {"bf16_blocks", precision::bf16_blocks_text(kept)},
        {"bf16_blocks_described", precision::describe_bf16_blocks(kept, mc.n_layers)}};
  }
  if (config.data.document_mask) {
    // Rank 0's tiled-attention forward passes (training and validation): the FLOPs of the tiles
    // computed and of those skipped because they lie wholly before their queries' documents.
    const AttentionTileFlops tiles = job.backend->attention_tile_flops();
    summary["documents"] = {{"document_end_id", job.datasets.document_end_id},
                            {"restart_positions", config.data.restart_positions},
                            {"mask_boundary_loss", config.data.mask_boundary_loss},
                            {"attention_computed_flops", tiles.computed_flops},
                            {"attention_skipped_flops", tiles.skipped_flops}};
  }
  if (!config.data.sources.empty()) summary["data_sources"] = data_sources_json(job, totals.steps);
  if (const auto b = job.noise.last()) summary["gradient_noise_scale"] = *b;
  if (auto h = job.datasets.train->entropy_rate()) summary["entropy_rate"] = *h;
  if (auto bpt = job.datasets.validation->bytes_per_token()) {
    summary["val_bits_per_byte"] = totals.final_val_loss / std::log(2.0) / *bpt;
  }
  if (std::isnan(totals.final_train_loss)) summary["final_train_loss"] = nullptr;
  return summary;
}

}  // namespace trillion
