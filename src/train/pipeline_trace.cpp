// See pipeline_trace.h.
#include "train/pipeline_trace.h"

#include <array>

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "schedule/generators.h"

namespace trillion {

namespace {
using schedule::ActionKind;
constexpr int kFields = 6;  // kind, micro-batch, chunk, stage, start, end
}  // namespace

PipelineTrace gather_pipeline_trace(StepRunner& runner) {
  const schedule::Schedule& s = runner.schedule();
  comm::Communicator& pp = runner.pipeline_group();
  PipelineTrace t;
  t.kind = s.kind;
  t.ranks = s.num_ranks;
  t.chunks = s.num_chunks;
  t.microbatches = s.num_microbatches;
  const auto& mine = runner.executor().timeline();
  // Every rank sends [count, pp bytes sent, peak slots per chunk, actions...] padded to the
  // longest list.
  double count = static_cast<double>(mine.size());
  std::vector<double> counts(pp.size());
  pp.all_gather(Tensor(&count, DType::f64, {1}),
                Tensor(counts.data(), DType::f64, {static_cast<int64_t>(pp.size())}));
  const int64_t longest = static_cast<int64_t>(*std::max_element(counts.begin(), counts.end()));
  const int64_t head = 2 + t.chunks;
  const int64_t width = head + kFields * longest;
  std::vector<double> row(width, 0.0), all(width * pp.size());
  row[0] = count;
  row[1] = static_cast<double>(runner.executor().sent_bytes());
  for (int c = 0; c < t.chunks; ++c) row[2 + c] = runner.executor().peak_slots(c);
  for (size_t i = 0; i < mine.size(); ++i) {
    const schedule::TimedAction& a = mine[i];
    double* f = &row[head + kFields * i];
    f[0] = static_cast<double>(a.action.kind);
    f[1] = a.action.microbatch;
    f[2] = a.action.chunk;
    f[3] = a.action.stage;
    f[4] = a.start;
    f[5] = a.end;
  }
  pp.all_gather(Tensor(row.data(), DType::f64, {width}),
                Tensor(all.data(), DType::f64, {static_cast<int64_t>(width * pp.size())}));
  double t0 = std::numeric_limits<double>::infinity();
  for (int r = 0; r < pp.size(); ++r) {
    const double* base = &all[width * r];
    for (int64_t i = 0; i < static_cast<int64_t>(base[0]); ++i) {
      t0 = std::min(t0, base[head + kFields * i + 4]);
    }
  }
  t.timeline.resize(pp.size());
  t.peak_slots.resize(pp.size());
  t.pp_sent_bytes.resize(pp.size());
  for (int r = 0; r < pp.size(); ++r) {
    const double* base = &all[width * r];
    t.pp_sent_bytes[r] = static_cast<int64_t>(base[1]);
    for (int c = 0; c < t.chunks; ++c) t.peak_slots[r].push_back(static_cast<int>(base[2 + c]));
    for (int64_t i = 0; i < static_cast<int64_t>(base[0]); ++i) {
      const double* f = &base[head + kFields * i];
      schedule::Action a{r, static_cast<ActionKind>(static_cast<int>(f[0])), static_cast<int>(f[1]),
                         static_cast<int>(f[2]), static_cast<int>(f[3])};
      t.timeline[r].push_back({a, f[4] - t0, f[5] - t0});
    }
    t.schedule_slots.push_back(schedule::inflight_slots(s, r));
  }
  return t;
}

schedule::Simulation measured_simulation(const PipelineTrace& t) {
  schedule::Simulation sim;
  sim.timeline = t.timeline;
  sim.busy.assign(t.ranks, 0.0);
  for (int r = 0; r < t.ranks; ++r) {
    for (const schedule::TimedAction& a : t.timeline[r]) {
      sim.makespan = std::max(sim.makespan, a.end);
      sim.busy[r] += a.end - a.start;
    }
  }
  double idle = 0;
  for (double b : sim.busy) idle += sim.makespan - b;
  sim.bubble_fraction = sim.makespan > 0 ? idle / (t.ranks * sim.makespan) : 0.0;
  for (const auto& slots : t.peak_slots) {
    double sum = 0;
    for (int v : slots) sum += v;
    sim.peak_inflight.push_back(sum);
  }
  return sim;
}

schedule::OpCosts measured_costs(const PipelineTrace& t, double chunk_fraction) {
  double sum[3] = {0, 0, 0};
  int n[3] = {0, 0, 0};
  for (const auto& rank : t.timeline) {
    for (const schedule::TimedAction& a : rank) {
      const int k = a.action.kind == ActionKind::kForward         ? 0
                    : a.action.kind == ActionKind::kBackwardInput ? 1
                                                                  : 2;
      sum[k] += a.end - a.start;
      ++n[k];
    }
  }
  auto mean = [&](int k) { return n[k] > 0 ? sum[k] / n[k] / chunk_fraction : 0.0; };
  return {std::max(mean(0), 1e-12), std::max(mean(1), 1e-12), mean(2), 0.0};
}

schedule::ChunkCosts measured_chunk_costs(const PipelineTrace& t) {
  schedule::ChunkCosts costs(t.ranks, std::vector<schedule::OpCosts>(t.chunks));
  for (int r = 0; r < t.ranks; ++r) {
    std::vector<std::array<double, 3>> sum(t.chunks, {0, 0, 0});
    std::vector<std::array<int, 3>> n(t.chunks, {0, 0, 0});
    for (const schedule::TimedAction& a : t.timeline[r]) {
      const int k = a.action.kind == ActionKind::kForward         ? 0
                    : a.action.kind == ActionKind::kBackwardInput ? 1
                                                                  : 2;
      sum[a.action.chunk][k] += a.end - a.start;
      ++n[a.action.chunk][k];
    }
    for (int c = 0; c < t.chunks; ++c) {
      auto mean = [&](int k) { return n[c][k] > 0 ? sum[c][k] / n[c][k] : 0.0; };
      costs[r][c] = {mean(0), mean(1), mean(2), 0.0};
    }
  }
  return costs;
}

nlohmann::json chrome_trace(const PipelineTrace& t) {
  nlohmann::json events = nlohmann::json::array();
  for (int r = 0; r < t.ranks; ++r) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", r},
                      {"args", {{"name", fmt::format("pipeline rank {}", r)}}}});
    for (const schedule::TimedAction& a : t.timeline[r]) {
      events.push_back({{"name", std::string(schedule::kind_name(a.action.kind)) +
                                     std::to_string(a.action.microbatch)},
                        {"cat", std::string(schedule::kind_name(a.action.kind))},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", r},
                        {"ts", a.start * 1e6},
                        {"dur", (a.end - a.start) * 1e6},
                        {"args",
                         {{"microbatch", a.action.microbatch},
                          {"chunk", a.action.chunk},
                          {"stage", a.action.stage}}}});
    }
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"schedule", std::string(schedule::schedule_kind_name(t.kind))},
            {"pp", t.ranks},
            {"chunks", t.chunks},
            {"microbatches", t.microbatches},
            {"peak_slots", t.peak_slots},
            {"schedule_slots", t.schedule_slots},
            {"pp_sent_bytes", t.pp_sent_bytes}}}};
}

PipelineTrace read_chrome_trace(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("traceEvents") || !j.contains("otherData")) {
    throw Error(
        "not a trillion pipeline trace: expected traceEvents and otherData (written by "
        "`trillion train` as RUN_DIR/trace.json for runs with parallel.pp > 1)");
  }
  const nlohmann::json& o = j["otherData"];
  PipelineTrace t;
  try {
    t.kind = schedule::parse_schedule_kind(o.at("schedule").get<std::string>());
    t.ranks = o.at("pp").get<int>();
    t.chunks = o.at("chunks").get<int>();
    t.microbatches = o.at("microbatches").get<int>();
    t.peak_slots = o.at("peak_slots").get<std::vector<std::vector<int>>>();
    t.schedule_slots = o.at("schedule_slots").get<std::vector<std::vector<int>>>();
    if (o.contains("pp_sent_bytes")) t.pp_sent_bytes = o["pp_sent_bytes"].get<std::vector<int64_t>>();
    if (t.ranks < 1 || t.chunks < 1) throw Error("pp and chunks must be >= 1");
    t.timeline.assign(t.ranks, {});
    for (const nlohmann::json& e : j["traceEvents"]) {
      if (e.at("ph").get<std::string>() != "X") continue;
      const int r = e.at("tid").get<int>();
      if (r < 0 || r >= t.ranks) throw Error(fmt::format("event on rank {} of {}", r, t.ranks));
      const std::string cat = e.at("cat").get<std::string>();
      const ActionKind kind = cat == "F"   ? ActionKind::kForward
                              : cat == "B" ? ActionKind::kBackwardInput
                                           : ActionKind::kBackwardWeight;
      const nlohmann::json& a = e.at("args");
      schedule::Action act{r, kind, a.at("microbatch").get<int>(), a.at("chunk").get<int>(),
                           a.at("stage").get<int>()};
      const double start = e.at("ts").get<double>() / 1e6;
      t.timeline[r].push_back({act, start, start + e.at("dur").get<double>() / 1e6});
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("pipeline trace: {}", e.what()));
  }
  return t;
}

nlohmann::json pipeline_summary(const PipelineTrace& t, const schedule::Schedule& s) {
  const schedule::Simulation measured = measured_simulation(t);
  const schedule::Simulation unit = schedule::simulate(s, {}, false);
  const schedule::OpCosts costs = measured_costs(t, s.chunk_fraction);
  const schedule::Simulation predicted = schedule::simulate(s, costs, false);
  const schedule::Simulation per_chunk =
      schedule::simulate(s, measured_chunk_costs(t), 0.0, false);
  return {{"schedule", std::string(schedule::schedule_kind_name(t.kind))},
          {"pp", t.ranks},
          {"chunks", t.chunks},
          {"microbatches", t.microbatches},
          {"bubble_measured", measured.bubble_fraction},
          {"bubble_simulated_unit_costs", unit.bubble_fraction},
          {"bubble_simulated_measured_costs", predicted.bubble_fraction},
          {"step_seconds_measured", measured.makespan},
          {"step_seconds_simulated", predicted.makespan},
          {"bubble_simulated_per_chunk_costs", per_chunk.bubble_fraction},
          {"step_seconds_simulated_per_chunk_costs", per_chunk.makespan},
          {"measured_costs_seconds",
           {{"forward", costs.forward},
            {"backward_input", costs.backward_input},
            {"backward_weight", costs.backward_weight}}},
          {"peak_slots", t.peak_slots},
          {"schedule_slots", t.schedule_slots},
          {"pp_sent_bytes", t.pp_sent_bytes}};
}

}  // namespace trillion
