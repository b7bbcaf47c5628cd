// `trillion inspect CONFIG.toml [--set section.key=value ...] [--json]`: what a run config
// builds, without allocating it — the parameter table (name, global shape, dtype, shard, unit,
// role, init), totals, and for the layout in [parallel] (any tp/pp/cp/ep/dp, e.g. --set
// parallel.tp=2) this rank's local shapes, the pipeline stages with their units, parameters per
// rank and activation slots (from the schedule). Every number comes from the same functions the
// engine allocates with (plan::parameter_table, TensorTable::local, local_shape,
// plan::partition_stages, schedule::inflight_slots), so inspect == train == plan.
// With --hostfile F: each rank's host and site (Open MPI's by-slot mapping, comm/hosts.h) and
// which group kinds cross hosts; a layout with tp across hosts is refused as train refuses it.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/parse_arguments.h"
#include "comm/device_mesh.h"
#include "comm/hosts.h"
#include "model/local_shape.h"
#include "model/transformer.h"
#include "plan/activation_memory.h"
#include "plan/parameter_table.h"
#include "plan/stage_partition.h"
#include "schedule/generators.h"
#include "schedule/simulator.h"
#include "train/run_config.h"

namespace trillion::cli {

namespace {

using nlohmann::json;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return "[" + s + "]";
}

std::string shard_text(const TensorShard& s) {
  return s.sharded() ? fmt::format("{}:{}", shard_group_name(s.group), s.dim) : "-";
}

struct StageInfo {
  int stage = 0, pp_rank = 0, chunk = 0;
  plan::StageUnits units;
  int64_t parameters = 0;  // this rank's share (tp/ep shards)
  int slots = 0;
};

// The hosts section: per rank its host, site and coordinates; per group kind whether it crosses
// hosts (and the link class of rank 0's group).
json hosts_json(const ParallelConfig& pc, const std::string& hostfile) {
  const comm::MeshLayout layout({.pp = static_cast<int>(pc.pp),
                                 .dp = static_cast<int>(pc.dp),
                                 .cp = static_cast<int>(pc.cp),
                                 .tp = static_cast<int>(pc.tp),
                                 .ep = static_cast<int>(pc.ep)});
  const int world = layout.shape().world_size();
  const comm::JobHosts hosts =
      comm::map_ranks_by_slot(comm::read_hostfile(hostfile), world, hostfile);
  comm::check_tp_inside_hosts(layout, hosts);
  json ranks = json::array();
  for (int r = 0; r < world; ++r) {
    const comm::MeshCoord c = layout.coord_of(r);
    ranks.push_back({{"rank", r},
                     {"host", hosts.names[hosts.host_of_rank[r]]},
                     {"site", hosts.site_of_rank(r)},
                     {"pp", c.pp},
                     {"dp", c.dp},
                     {"cp", c.cp},
                     {"tp", c.tp}});
  }
  json groups = json::object();
  for (int g = 0; g < comm::kMeshGroups; ++g) {
    const auto kind = static_cast<comm::MeshGroup>(g);
    if (layout.group_ranks(kind, 0).size() < 2) continue;
    groups[comm::group_name(kind)] = {
        {"crosses_hosts", comm::groups_cross_hosts(layout, hosts, kind)},
        {"link", comm::link_class_name(comm::group_link_class(layout, hosts, kind, 0))}};
  }
  return {{"hostfile", hostfile},
          {"hosts", hosts.hosts()},
          {"sites", hosts.sites()},
          {"ranks", ranks},
          {"groups", groups}};
}

void print_hosts(const json& h) {
  std::printf("\nhosts (%s, Open MPI's by-slot mapping): %d host(s), %d site(s)\n",
              h["hostfile"].get<std::string>().c_str(), h["hosts"].get<int>(),
              h["sites"].get<int>());
  std::printf("%-6s %-20s %-5s %4s %4s %4s %4s\n", "rank", "host", "site", "pp", "dp", "cp", "tp");
  for (const json& r : h["ranks"]) {
    std::printf("%-6d %-20s %-5d %4d %4d %4d %4d\n", r["rank"].get<int>(),
                r["host"].get<std::string>().c_str(), r["site"].get<int>(), r["pp"].get<int>(),
                r["dp"].get<int>(), r["cp"].get<int>(), r["tp"].get<int>());
  }
  for (const auto& [name, g] : h["groups"].items()) {
    std::printf("group %-6s %s (rank 0's group: %s)\n", name.c_str(),
                g["crosses_hosts"].get<bool>() ? "crosses hosts" : "inside hosts",
                g["link"].get<std::string>().c_str());
  }
}

}  // namespace

int inspect_command(int argc, char** argv) {
  CLI::App app{"Show the parameter table, shards and local shapes a run config builds"};
  std::string config_path;
  std::vector<std::string> overrides;
  bool as_json = false;
  app.add_option("config", config_path, "run config (TOML)")->required()->check(CLI::ExistingFile);
  app.add_option("--set", overrides,
                 "override a config key: section.key=value (repeatable), e.g. parallel.tp=2");
  app.add_flag("--json", as_json, "print JSON");
  std::string hostfile;
  app.add_option("--hostfile", hostfile,
                 "an Open MPI hostfile: show each rank's host and which groups cross hosts");
  if (const int rc = parse_arguments(app, argc, argv); rc >= 0) return rc;
  const RunConfig cfg = load_run_config(config_path, overrides);
  const ModelConfig& mc = cfg.model;
  const ParallelConfig& pc = cfg.parallel;
  const json hosts = hostfile.empty() ? json() : hosts_json(pc, hostfile);

  const TensorTable global = build_parameter_table(mc);
  const ShardDegrees degrees{static_cast<int>(pc.tp), static_cast<int>(pc.cp),
                             static_cast<int>(pc.ep)};
  const LocalShape local = local_shape(mc, cfg.train.micro_batch / pc.dp, mc.seq_len, degrees);
  const ShardCoord coord{static_cast<int>(pc.tp), 0, static_cast<int>(pc.ep), 0};
  const TensorTable rank_table = global.local([](int) { return true; }, coord);

  // Pipeline: pp ranks x chunks stages, placed by the schedule's path.
  const schedule::Schedule sched = schedule::generate_schedule(
      schedule::parse_schedule_kind(pc.schedule), static_cast<int>(pc.pp),
      static_cast<int>(cfg.train.grad_accum), static_cast<int>(pc.chunks));
  const int n_stages = sched.num_stages(0);
  const std::vector<plan::StageUnits> partition =
      plan::engine_partition(mc.n_layers, n_stages, pc.stage_layers());
  std::vector<StageInfo> stages;
  for (int s = 0; s < n_stages; ++s) {
    const schedule::Placement& where = sched.path(0)[s];
    StageInfo info{s, where.rank, where.chunk, partition[s]};
    for (const TensorSpec& spec : rank_table.specs()) {
      if (spec.unit >= info.units.first_unit && spec.unit <= info.units.last_unit) {
        info.parameters += spec.numel();
      }
    }
    info.slots = schedule::inflight_slots(sched, where.rank)[where.chunk];
    stages.push_back(info);
  }
  std::vector<int64_t> rank_params(pc.pp, 0);
  for (const StageInfo& s : stages) rank_params[s.pp_rank] += s.parameters;

  // Activation bytes per stage: the engine's formula, for the layouts whose layers it describes.
  const bool activation_formula = !mc.moe.enabled();  // tp, sp and cp are in the formula
  const int64_t elem = static_cast<int64_t>(dtype_size(mc.dtype));
  auto activation_bytes = [&](const StageInfo& s) -> int64_t {
    const int64_t first = s.units.first_unit == 0 ? 0 : s.units.first_unit - 1;
    const int64_t last_layer = std::min<int64_t>(s.units.last_unit, mc.n_layers);  // exclusive
    const plan::StageExtent extent{first, last_layer - first, s.units.last_unit == mc.n_layers + 1};
    return plan::engine_activation_bytes(mc.spec(), local.batch, local.seq, mc.activation_policy(),
                                         elem, elem, extent, s.slots, {pc.tp, pc.sp, pc.cp})
        .total();
  };

  const int64_t total = global.total_elements();
  if (as_json) {
    json tensors = json::array();
    for (size_t i = 0; i < global.specs().size(); ++i) {
      const TensorSpec& g = global.spec(static_cast<int>(i));
      const TensorSpec& l = rank_table.spec(static_cast<int>(i));
      tensors.push_back({{"name", g.name},
                         {"shape", g.global_shape},
                         {"local_shape", l.shape},
                         {"dtype", dtype_name(g.dtype)},
                         {"shard",
                          {{"group", shard_group_name(g.shard.group)},
                           {"dim", g.shard.sharded() ? g.shard.dim : -1}}},
                         {"unit", g.unit},
                         {"role", tensor_role_name(g.role)},
                         {"init", init_kind_name(g.init.kind)},
                         {"init_std", g.init.std},
                         {"weight_decay", g.weight_decay}});
    }
    json stage_list = json::array();
    for (const StageInfo& s : stages) {
      json j{{"stage", s.stage},           {"pp_rank", s.pp_rank},
             {"chunk", s.chunk},           {"units", {s.units.first_unit, s.units.last_unit}},
             {"parameters", s.parameters}, {"slots", s.slots}};
      if (activation_formula) j["activation_bytes"] = activation_bytes(s);
      stage_list.push_back(j);
    }
    const json out{{"config", config_path},
                   {"parameters", total},
                   {"tensors", tensors},
                   {"layout",
                    {{"dp", pc.dp},
                     {"tp", pc.tp},
                     {"pp", pc.pp},
                     {"cp", pc.cp},
                     {"ep", pc.ep},
                     {"zero", pc.zero},
                     {"schedule", pc.schedule},
                     {"chunks", pc.chunks},
                     {"world_size", pc.world_size()}}},
                   {"local_shape",
                    {{"batch", local.batch},
                     {"seq", local.seq},
                     {"tokens", local.tokens()},
                     {"d_model", local.d_model},
                     {"heads", local.heads},
                     {"kv_heads", local.kv_heads},
                     {"head_dim", local.head_dim},
                     {"value_dim", local.value_dim},
                     {"rope_dim", local.rope_dim},
                     {"ffn", local.ffn},
                     {"vocab_rows", local.vocab_rows},
                     {"experts", local.experts}}},
                   {"stages", stage_list},
                   {"parameters_per_pp_rank", rank_params}};
    json printed = out;
    if (!hosts.is_null()) printed["hosts"] = hosts;
    std::printf("%s\n", printed.dump(2).c_str());
    return 0;
  }

  std::printf("%s: %lld parameters in %zu tensors (%s)", config_path.c_str(),
              static_cast<long long>(total), global.specs().size(),
              std::string(dtype_name(mc.dtype)).c_str());
  if (mc.moe.enabled()) {
    std::printf(", %lld activated per token (top %lld of %lld routed experts)",
                static_cast<long long>(plan::count_model(mc.spec()).activated),
                static_cast<long long>(mc.moe.top_k),
                static_cast<long long>(mc.moe.n_routed_experts));
  }
  if (mc.mtp.enabled()) {  // DeepSeek-V3 reports its main model and MTP modules apart
    const int64_t mtp = plan::count_model(mc.spec()).mtp;
    std::printf("; main model %lld + MTP modules (depth %lld) %lld",
                static_cast<long long>(total - mtp), static_cast<long long>(mc.mtp.depth),
                static_cast<long long>(mtp));
  }
  std::printf("\n");
  std::printf("\n%-28s %-16s %-7s %-16s %4s  %-13s %s\n", "tensor", "global shape", "shard",
              "local shape", "unit", "role", "init");
  for (size_t i = 0; i < global.specs().size(); ++i) {
    const TensorSpec& g = global.spec(static_cast<int>(i));
    const TensorSpec& l = rank_table.spec(static_cast<int>(i));
    const std::string init = g.init.kind == InitKind::normal
                                 ? fmt::format("normal({:.4g})", g.init.std)
                                 : std::string(init_kind_name(g.init.kind));
    std::printf("%-28s %-16s %-7s %-16s %4d  %-13s %s%s\n", g.name.c_str(),
                shape_text(g.global_shape).c_str(), shard_text(g.shard).c_str(),
                shape_text(l.shape).c_str(), g.unit, std::string(tensor_role_name(g.role)).c_str(),
                init.c_str(), g.weight_decay ? "" : ", no decay");
  }
  std::printf(
      "\nlayout: dp %lld, tp %lld, pp %lld, cp %lld, ep %lld (%lld ranks), ZeRO %lld, %s "
      "schedule, %lld chunk(s) per rank\n",
      static_cast<long long>(pc.dp), static_cast<long long>(pc.tp), static_cast<long long>(pc.pp),
      static_cast<long long>(pc.cp), static_cast<long long>(pc.ep),
      static_cast<long long>(pc.world_size()), static_cast<long long>(pc.zero), pc.schedule.c_str(),
      static_cast<long long>(pc.chunks));
  std::printf(
      "local shape per rank: B %lld, T %lld (N %lld tokens), C %lld, heads %lld, kv heads %lld, "
      "head dim %lld, ffn %lld, vocab rows %lld\n",
      static_cast<long long>(local.batch), static_cast<long long>(local.seq),
      static_cast<long long>(local.tokens()), static_cast<long long>(local.d_model),
      static_cast<long long>(local.heads), static_cast<long long>(local.kv_heads),
      static_cast<long long>(local.head_dim), static_cast<long long>(local.ffn),
      static_cast<long long>(local.vocab_rows));
  if (mc.mla) {
    const MlaConfig& d = mc.mla_dims;
    std::printf(
        "attention: mla, %s core: q_lora_rank %lld%s, kv_lora_rank %lld, qk head %lld (nope %lld "
        "+ rope %lld, one rope key shared by all heads), v_head_dim %lld\n",
        mc.tiled_attention ? "tiled" : "materialized", static_cast<long long>(d.q_lora_rank),
        d.q_lora_rank == 0 ? " (no query compression)" : "", static_cast<long long>(d.kv_lora_rank),
        static_cast<long long>(mc.head_dim), static_cast<long long>(d.qk_nope_head_dim),
        static_cast<long long>(d.qk_rope_head_dim), static_cast<long long>(d.v_head_dim));
  } else {
    std::printf("attention: gqa, %s core\n", mc.tiled_attention ? "tiled" : "materialized");
  }
  std::printf("\n%-6s %-8s %-6s %-14s %14s %6s %18s\n", "stage", "pp rank", "chunk", "units",
              "parameters", "slots", "activation bytes");
  for (const StageInfo& s : stages) {
    const std::string act =
        activation_formula ? fmt::format("{}", activation_bytes(s)) : std::string("-");
    std::printf("%-6d %-8d %-6d %-14s %14lld %6d %18s\n", s.stage, s.pp_rank, s.chunk,
                fmt::format("{}..{}", s.units.first_unit, s.units.last_unit).c_str(),
                static_cast<long long>(s.parameters), s.slots, act.c_str());
  }
  std::printf(
      "units: 0 embedding, 1..%lld layers, %lld head; parameters per rank are its "
      "tp/ep shard%s\n",
      static_cast<long long>(mc.n_layers), static_cast<long long>(mc.n_layers + 1),
      activation_formula ? ""
                         : "; activation bytes for MoE layers (whose expert buffers follow the "
                           "routing): not modelled");
  if (!hosts.is_null()) print_hosts(hosts);
  return 0;
}

}  // namespace trillion::cli
