// See layout.h.
#include "plan/layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "plan/stage_partition.h"

namespace trillion::plan {

std::string recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::kNone;
  if (name == "selective") return Recompute::kSelective;
  if (name == "full") return Recompute::kFull;
  throw Error(
      fmt::format("unknown recompute policy '{}': use none, norm-up (DeepSeek-V3's RMSNorm and MLA "
                  "up-projections), selective or full",
                  name));
}

std::string partition_name(Partition p) {
  return p == Partition::kEven ? "even" : p == Partition::kBalanced ? "balanced" : "explicit";
}

std::string Layout::partition_text() const {
  if (partition != Partition::kExplicit) return partition_name(partition);
  std::string out;
  for (int n : stage_layers) {
    if (!out.empty()) out.push_back('/');
    out.append(std::to_string(n));
  }
  return out;
}

RecomputePolicy policy_of(Recompute r, bool norm_up) {
  switch (r) {
    case Recompute::kNone:
      return norm_up ? RecomputePolicy::kNormUp : RecomputePolicy::kNone;
    case Recompute::kSelective:
      return RecomputePolicy::kSelective;
    case Recompute::kFull:
      return RecomputePolicy::kFull;
  }
  return RecomputePolicy::kNone;
}

std::string Layout::recompute_text() const {
  return norm_up && recompute == Recompute::kNone ? "norm-up" : recompute_name(recompute);
}

std::string ema_name(Ema e) {
  return e == Ema::kNone ? "none" : e == Ema::kGpu ? "gpu" : "host";
}

std::string allocation_name(Allocation a) {
  return a == Allocation::kSlots ? "slots" : "live";
}

std::string Layout::to_string() const {
  return fmt::format(
      "tp={},sp={},pp={},cp={},ep={},dp={},zero={},schedule={},chunks={},partition={},"
      "recompute={},micro_batch={},precision={},grad={},moments={},alloc={},act={},ema={},"
      "cp_comm={},p2p={}",
      tp, sp ? 1 : 0, pp, cp, ep, dp, zero,
      pp > 1 ? schedule::schedule_kind_name(schedule) : "none", chunks, partition_text(),
      recompute_text(), micro_batch, precision_name(precision), grad_bytes == 4 ? "fp32" : "bf16",
      moment_bytes == 4 ? "fp32" : "bf16", allocation_name(allocation),
      fp8_activations() ? "fp8" : "bf16", ema_name(ema), cp_all_gather ? "allgather" : "ring",
      blocking_p2p ? "blocking" : "async");
}

std::string fixed_layout_text(const Layout& l, const LayoutFields& f) {
  std::string out;
  auto add = [&](bool fixed, const std::string& item) {
    if (fixed) out += (out.empty() ? "" : ",") + item;
  };
  add(f.tp, fmt::format("tp={}", l.tp));
  add(f.sp, fmt::format("sp={}", l.sp ? 1 : 0));
  add(f.pp, fmt::format("pp={}", l.pp));
  add(f.cp, fmt::format("cp={}", l.cp));
  add(f.ep, fmt::format("ep={}", l.ep));
  add(f.dp, fmt::format("dp={}", l.dp));
  add(f.zero, fmt::format("zero={}", l.zero));
  add(f.schedule, fmt::format("schedule={}", schedule::schedule_kind_name(l.schedule)));
  add(f.chunks, fmt::format("chunks={}", l.chunks));
  add(f.partition, "partition=" + l.partition_text());
  add(f.recompute, "recompute=" + l.recompute_text());
  add(f.micro_batch, fmt::format("micro_batch={}", l.micro_batch));
  add(f.precision, "precision=" + precision_name(l.precision));
  add(f.grad, l.grad_bytes == 4 ? "grad=fp32" : "grad=bf16");
  add(f.moments, l.moment_bytes == 4 ? "moments=fp32" : "moments=bf16");
  add(f.allocation, "alloc=" + allocation_name(l.allocation));
  add(f.act, l.fp8_activations() ? "act=fp8" : "act=bf16");
  add(f.ema, "ema=" + ema_name(l.ema));
  add(f.cp_comm, l.cp_all_gather ? "cp_comm=allgather" : "cp_comm=ring");
  add(f.p2p, l.blocking_p2p ? "p2p=blocking" : "p2p=async");
  return out;
}

Layout parse_layout(const std::string& text, LayoutFields* fields, const std::string& what) {
  Layout l;
  LayoutFields f;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw Error(fmt::format("{} item '{}' is not key=value (e.g. tp=8)", what, item));
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    auto number = [&](int min) {
      int v = 0;
      try {
        size_t used = 0;
        v = std::stoi(value, &used);
        if (used != value.size()) throw std::invalid_argument(value);
      } catch (const std::exception&) {
        throw Error(fmt::format("{} {}={}: expected an integer", what, key, value));
      }
      if (v < min) throw Error(fmt::format("{} {}={}: must be >= {}", what, key, value, min));
      return v;
    };
    auto dtype_bytes = [&]() {
      if (value == "fp32") return 4;
      if (value == "bf16") return 2;
      throw Error(fmt::format("{} {}={}: use fp32 or bf16", what, key, value));
    };
    if (key == "tp")
      l.tp = number(1), f.tp = true;
    else if (key == "pp")
      l.pp = number(1), f.pp = true;
    else if (key == "cp")
      l.cp = number(1), f.cp = true;
    else if (key == "ep")
      l.ep = number(1), f.ep = true;
    else if (key == "dp")
      l.dp = number(1), f.dp = true;
    else if (key == "zero") {
      l.zero = number(0), f.zero = true;
      if (l.zero > 3) throw Error(fmt::format("{} zero={}: ZeRO stages are 0..3", what, value));
    } else if (key == "schedule") {
      if (value != "none") l.schedule = schedule::parse_schedule_kind(value);
      f.schedule = true;
    } else if (key == "chunks")
      l.chunks = number(1), f.chunks = true;
    else if (key == "recompute") {
      l.norm_up = value == "norm-up";
      l.recompute = l.norm_up ? Recompute::kNone : parse_recompute(value);
      f.recompute = true;
    } else if (key == "micro_batch" || key == "mb")
      l.micro_batch = number(1), f.micro_batch = true;
    else if (key == "precision")
      l.precision = parse_precision(value), f.precision = true;
    else if (key == "sp") {
      if (value != "0" && value != "1" && value != "on" && value != "off")
        throw Error(fmt::format("{} sp={}: use sp=1 (sequence parallel) or sp=0", what, value));
      l.sp = value == "1" || value == "on", f.sp = true;
    } else if (key == "partition") {
      l.stage_layers.clear();
      if (value == "even" || value == "balanced") {
        l.partition = value == "even" ? Partition::kEven : Partition::kBalanced;
      } else {
        // Layers per stage, "3/4/4/2": stage_partition checks them against the model.
        l.partition = Partition::kExplicit;
        if (!parse_stage_layer_counts(value, &l.stage_layers))
          throw Error(fmt::format(
              "{} partition={}: use even, balanced, or the layers of each stage separated by "
              "'/' (e.g. partition=3/4/4/2)",
              what, value));
      }
      f.partition = true;
    } else if (key == "alloc") {
      if (value != "slots" && value != "live")
        throw Error(
            fmt::format("{} alloc={}: use slots (the engine's per-chunk slots) or live (a caching "
                        "allocator's peak, as Megatron and PyTorch)",
                        what, value));
      l.allocation = value == "slots" ? Allocation::kSlots : Allocation::kLive;
      f.allocation = true;
    } else if (key == "grad")
      l.grad_bytes = dtype_bytes(), f.grad = true;
    else if (key == "moments")
      l.moment_bytes = dtype_bytes(), f.moments = true;
    else if (key == "act") {
      if (value != "fp8" && value != "bf16")
        throw Error(fmt::format(
            "{} act={}: use bf16 (16-bit stored activations) or fp8 (DeepSeek-V3 §3.3.3's FP8 "
            "cache of the FP8 linears' inputs)",
            what, value));
      l.activation_cache = value == "fp8" ? ActivationCache::kFp8 : ActivationCache::kBf16;
      f.act = true;
    } else if (key == "ema") {
      if (value != "none" && value != "gpu" && value != "host")
        throw Error(fmt::format(
            "{} ema={}: use none, gpu (an fp32 copy sharded as the optimizer) or host (in CPU "
            "memory, DeepSeek-V3 §3.2.3)",
            what, value));
      l.ema = value == "none" ? Ema::kNone : value == "gpu" ? Ema::kGpu : Ema::kHost;
      f.ema = true;
    } else if (key == "cp_comm") {
      if (value != "ring" && value != "allgather")
        throw Error(fmt::format(
            "{} cp_comm={}: use ring (K/V blocks passed around the cp ring behind the attention "
            "blocks) or allgather (K and V all-gathered before attention, Llama 3 §3.3.2)",
            what, value));
      l.cp_all_gather = value == "allgather", f.cp_comm = true;
    } else if (key == "p2p") {
      if (value != "async" && value != "blocking")
        throw Error(fmt::format(
            "{} p2p={}: use async (Megatron, the engine) or blocking (DeepSpeed's pipeline)", what,
            value));
      l.blocking_p2p = value == "blocking", f.p2p = true;
    } else
      throw Error(fmt::format(
          "{} key '{}' is unknown: use tp, sp, pp, cp, ep, dp, zero, schedule, chunks, "
          "partition, recompute, micro_batch, precision, grad, moments, alloc, act, ema, cp_comm, "
          "p2p",
          what, key));
  }
  if (fields) *fields = f;
  return l;
}

}  // namespace trillion::plan
