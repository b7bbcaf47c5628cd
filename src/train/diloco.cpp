// See diloco.h.
#include "train/diloco.h"

#include <fmt/format.h>

#include <cstring>
#include <span>

#include "core/error.h"
#include "core/timer.h"

namespace trillion {

namespace {

// Tags of the checkpoint's island transfers on the across group.
constexpr int kCheckpointTag = 7100;

// The fragment of table unit `unit` (0 embedding, 1 + l layer l, L + 1 head): the embedding goes
// with the first layer, the head with the last.
int fragment_of_unit(const FragmentSchedule& s, int unit, int n_layers) {
  const int layer = std::clamp(unit - 1, 0, n_layers - 1);
  return s.fragment_of_layer(layer);
}

}  // namespace

// --- Islands ---------------------------------------------------------------------------------

Islands::Islands(comm::DeviceMesh& mesh, const RunConfig& config)
    : mesh_dp_(mesh.group(comm::MeshGroup::dp)),
      mesh_dp_cp_(mesh.group(comm::MeshGroup::dp_cp)),
      runner_config_(config) {
  if (!config.diloco.enabled()) return;
  count_ = static_cast<int>(config.diloco.islands);
  const int per_island = static_cast<int>(config.parallel.dp) / count_;
  const comm::MeshCoord c = mesh.coord();
  index_ = c.dp / per_island;
  const int position = c.dp % per_island;
  // Colors name a group by a member's world rank: the island's first replica, or position
  // `position` of island 0.
  comm::MeshCoord first = c, same = c;
  first.dp = index_ * per_island;
  same.dp = position;
  island_dp_ = mesh.split(mesh.layout().rank_of(first), position, "island_dp");
  across_ = mesh.split(mesh.layout().rank_of(same), index_, "islands");
  if (config.parallel.cp > 1) {
    // The island's dp x cp plane, keyed as the mesh keys dp_cp (dp-major, then cp): ZeRO shards
    // and gradients reduce over it, and `across` links the same (dp position, cp) of every island.
    comm::MeshCoord plane = c;
    plane.dp = index_ * per_island;
    plane.cp = 0;
    island_dp_cp_ = mesh.split(mesh.layout().rank_of(plane),
                               position * static_cast<int>(config.parallel.cp) + c.cp,
                               "island_dp_cp");
  }
  with_lead_ = c.pp == 0 && c.cp == 0 && c.tp == 0 && position == 0;
  runner_config_.parallel.dp = per_island;
  runner_config_.train.micro_batch = config.train.micro_batch / count_;
}

// --- DilocoStep --------------------------------------------------------------------------------

nlohmann::json DilocoStep::json() const {
  nlohmann::json j{{"bytes", across.total_sent()}, {"seconds", seconds}};
  if (!sent.empty()) j["sent"] = sent;
  if (!merged.empty()) {
    j["merged"] = merged;
    j["wait_s"] = wait_seconds;
  }
  return j;
}

// --- Diloco ------------------------------------------------------------------------------------

Diloco::Diloco(const RunConfig& config, StepRunner& runner, Islands& islands,
               MemoryTracker& tracker, EventLog event)
    : config_(config),
      runner_(runner),
      islands_(islands),
      tracker_(tracker),
      event_(std::move(event)),
      schedule_(streaming_config(config.diloco), static_cast<int>(config.model.n_layers)),
      precision_(parse_outer_precision(config.diloco.outer_precision, "diloco.outer_precision")),
      state_elements_(runner.data_parallel().state_elements()),
      theta_global_(tracker, MemoryCategory::optimizer, DType::f32, state_elements_),
      momentum_(tracker, MemoryCategory::optimizer, DType::f32, state_elements_),
      outer_(std::span<float>(static_cast<float*>(momentum_.raw()),
                              static_cast<size_t>(state_elements_)),
             {config.diloco.outer_lr, config.diloco.outer_momentum, config.diloco.nesterov}) {
  TRILLION_CHECK(islands.enabled(), "DiLoCo needs its island groups");
  TRILLION_CHECK(runner.parameters().dtype() == DType::f32, "DiLoCo runs on f32 parameters");
  // The optimizer's segments, grouped by fragment, adjacent pieces merged.
  fragments_.resize(static_cast<size_t>(config.diloco.fragments));
  const TensorTable& table = runner.table();
  for (const OptimSegment& seg : runner.data_parallel().segments()) {
    const int f = fragment_of_unit(schedule_, table.spec(seg.spec).unit,
                                   static_cast<int>(config.model.n_layers));
    Fragment& fr = fragments_[static_cast<size_t>(f)];
    if (!fr.runs.empty() && fr.runs.back().param + fr.runs.back().length == seg.param_offset &&
        fr.runs.back().state + fr.runs.back().length == seg.state_offset) {
      fr.runs.back().length += seg.length;
    } else {
      fr.runs.push_back({seg.param_offset, seg.state_offset, seg.length});
    }
    fr.elements += seg.length;
  }
  runner.parameters().hooks().add(this);
}

Diloco::~Diloco() {
  runner_.parameters().hooks().remove(this);
  // An exchange still in flight completes before its buffers go (Handle's destructor waits).
}

float* Diloco::local_params() const {
  return static_cast<float*>(runner_.data_parallel().optimizer_params().raw());
}

void Diloco::copy_pieces(bool to_local, const Buffer& state_buffer) {
  float* local = local_params();
  float* st = state(state_buffer);
  for (const Fragment& fr : fragments_) {
    for (const Run& r : fr.runs) {
      float* a = local + r.param;
      float* b = st + r.state;
      if (to_local) {
        std::memcpy(a, b, static_cast<size_t>(r.length) * sizeof(float));
      } else {
        std::memcpy(b, a, static_cast<size_t>(r.length) * sizeof(float));
      }
    }
  }
}

void Diloco::start() {
  copy_pieces(false, theta_global_);
  std::memset(momentum_.raw(), 0, momentum_.bytes());
  pending_.clear();
}

int64_t Diloco::wire_words(int fragment) const {
  const int64_t n = fragments_[static_cast<size_t>(fragment)].elements;
  const int64_t bytes = (n + 1) / 2 + (n + kFp4Block - 1) / kFp4Block * 4;
  return (bytes + 3) / 4;
}

uint64_t Diloco::exchange_bytes(int fragment) const {
  const auto k = static_cast<uint64_t>(islands_.count());
  const auto n = static_cast<uint64_t>(fragments_[static_cast<size_t>(fragment)].elements);
  switch (precision_) {
    case OuterPrecision::fp32:  // the ring's all-reduce volume (comm/communicator.h)
      return 2 * (k - 1) * n * 4 / k;
    case OuterPrecision::bf16:  // an all-gather of k parts: (k - 1) of them leave this rank
      return (k - 1) * n * 2;
    case OuterPrecision::fp4:
      return (k - 1) * static_cast<uint64_t>(wire_words(fragment)) * 4;
  }
  return 0;
}

void Diloco::start_exchange(int f, int64_t step) {
  const Fragment& fr = fragments_[static_cast<size_t>(f)];
  auto x = std::make_unique<Exchange>();
  x->fragment = f;
  x->send_step = step;
  x->merge_step = step + config_.diloco.overlap_steps;
  x->delta = Buffer(tracker_, MemoryCategory::workspace, DType::f32, fr.elements);
  float* d = state(x->delta);
  const float* local = local_params();
  const float* g = state(theta_global_);
  int64_t k = 0;
  for (const Run& r : fr.runs) {
    OuterNesterov::pseudo_gradient({g + r.state, static_cast<size_t>(r.length)},
                                   {local + r.param, static_cast<size_t>(r.length)},
                                   {d + k, static_cast<size_t>(r.length)});
    k += r.length;
  }
  comm::Communicator& across = islands_.across();
  const int64_t n = fr.elements, islands = islands_.count();
  switch (precision_) {
    case OuterPrecision::fp32:
      x->handle = across.start_all_reduce(x->delta.flat());
      break;
    case OuterPrecision::bf16: {
      x->wire = Buffer(tracker_, MemoryCategory::workspace, DType::bf16, n);
      auto* w = static_cast<bf16*>(x->wire.raw());
      for (int64_t i = 0; i < n; ++i) w[i] = float_to_bf16(d[i]);
      x->gathered = Buffer(tracker_, MemoryCategory::workspace, DType::bf16, n * islands);
      x->handle = across.start_all_gather(x->wire.flat(), x->gathered.flat());
      break;
    }
    case OuterPrecision::fp4: {
      const int64_t words = wire_words(f);
      const Fp4Packed p = pack_fp4({d, static_cast<size_t>(n)});
      x->wire = Buffer(tracker_, MemoryCategory::workspace, DType::f32, words);
      auto* bytes = static_cast<char*>(x->wire.raw());
      std::memcpy(bytes, p.codes.data(), p.codes.size());
      std::memcpy(bytes + p.codes.size(), p.scales.data(), p.scales.size() * sizeof(float));
      x->gathered = Buffer(tracker_, MemoryCategory::workspace, DType::f32, words * islands);
      x->handle = across.start_all_gather(x->wire.flat(), x->gathered.flat());
      break;
    }
  }
  ++exchanges_;
  pending_.push_back(std::move(x));
}

void Diloco::land(Exchange& x) {
  if (!x.handle) return;
  Timer timer;
  x.handle->wait();
  x.handle.reset();
  const double waited = timer.seconds();
  wait_seconds_ += waited;
  const int64_t n = x.delta.count(), islands = islands_.count();
  float* d = state(x.delta);
  const float inv = 1.0f / static_cast<float>(islands);
  if (precision_ == OuterPrecision::fp32) {
    for (int64_t i = 0; i < n; ++i) d[i] *= inv;
    return;
  }
  // Every island decodes every island's part and sums them in island order: the same mean
  // everywhere, accumulated in fp32.
  std::fill(d, d + n, 0.0f);
  if (precision_ == OuterPrecision::bf16) {
    const auto* all = static_cast<const bf16*>(x.gathered.raw());
    for (int64_t k = 0; k < islands; ++k) {
      for (int64_t i = 0; i < n; ++i) d[i] += bf16_to_float(all[k * n + i]);
    }
  } else {
    const int64_t words = wire_words(x.fragment);
    Fp4Packed p;
    p.elements = n;
    p.codes.resize(static_cast<size_t>((n + 1) / 2));
    p.scales.resize(static_cast<size_t>((n + kFp4Block - 1) / kFp4Block));
    std::vector<float> part(static_cast<size_t>(n));
    for (int64_t k = 0; k < islands; ++k) {
      const char* bytes = static_cast<const char*>(x.gathered.raw()) + k * words * 4;
      std::memcpy(p.codes.data(), bytes, p.codes.size());
      std::memcpy(p.scales.data(), bytes + p.codes.size(), p.scales.size() * sizeof(float));
      unpack_fp4(p, part);
      for (int64_t i = 0; i < n; ++i) d[i] += part[static_cast<size_t>(i)];
    }
  }
  for (int64_t i = 0; i < n; ++i) d[i] *= inv;
  x.wire = Buffer();
  x.gathered = Buffer();
}

void Diloco::apply(Exchange& x) {
  land(x);
  const Fragment& fr = fragments_[static_cast<size_t>(x.fragment)];
  float* local = local_params();
  float* g = state(theta_global_);
  const float* d = state(x.delta);
  int64_t k = 0;
  for (const Run& r : fr.runs) {
    const auto len = static_cast<size_t>(r.length);
    outer_.step({g + r.state, len}, {d + k, len}, r.state);
    merge_fragment(local + r.param, g + r.state, r.length, config_.diloco.mixing);
    k += r.length;
  }
}

void Diloco::refresh() {
  runner_.data_parallel().finish_step();
}

DilocoStep Diloco::after_step(int64_t step, StepStats& st) {
  Timer timer;
  DilocoStep r;
  comm::Communicator& across = islands_.across();
  const comm::CommCounters before = across.counters(), dp_before = islands_.dp().counters();
  const double waited_before = wait_seconds_;
  for (int f : schedule_.sends_after(step)) {
    start_exchange(f, step);
    r.sent.push_back(f);
  }
  for (int f : schedule_.merges_after(step)) {
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if ((*it)->fragment != f || (*it)->merge_step != step) continue;
      apply(**it);
      pending_.erase(it);
      r.merged.push_back(f);
      break;
    }
  }
  if (!r.merged.empty()) refresh();
  r.across = across.counters() - before;
  r.wait_seconds = wait_seconds_ - waited_before;
  r.seconds = timer.seconds();
  bytes_between_islands_ += r.across.total_sent();
  // ZeRO-1/2's all-gather of the merged parameters is the island's dp traffic of the step.
  const comm::CommCounters dp_traffic = islands_.dp().counters() - dp_before;
  st.comm += dp_traffic;
  st.seconds += r.seconds;
  st.tokens *= islands_.count();
  st.comm_bytes += r.across.total_sent() + dp_traffic.total_sent();
  return r;
}

void Diloco::before(int, Pass, Use, int) {
  for (auto& x : pending_) {
    if (x->handle && !x->done) x->done = x->handle->test();
  }
}

double Diloco::evaluate_global(const std::function<double()>& evaluate_island) {
  Buffer local(tracker_, MemoryCategory::workspace, DType::f32, state_elements_);
  copy_pieces(false, local);
  copy_pieces(true, theta_global_);
  refresh();
  double loss = evaluate_island();
  copy_pieces(true, local);
  refresh();
  islands_.across().all_reduce(Tensor(&loss, DType::f64, {1}));
  return loss / islands_.count();
}

std::string Diloco::describe() const {
  const DilocoConfig& d = config_.diloco;
  std::string text = fmt::format(
      "DiLoCo: {} islands x {} data-parallel rank(s), {} inner steps per round, outer {} lr {:g} "
      "momentum {:g}, exchange in {}",
      islands_.count(), config_.parallel.dp / islands_.count(), d.inner_steps,
      d.nesterov ? "Nesterov" : "momentum SGD", d.outer_lr, d.outer_momentum,
      outer_precision_name(precision_));
  if (d.fragments > 1 || d.overlap_steps > 0) {
    text += fmt::format(
        "; Streaming: {} {} fragments, one sent every {} steps, overlapped with {} "
        "inner step(s), mixing {:g}",
        d.fragments, d.fragment_pattern, d.inner_steps / d.fragments, d.overlap_steps, d.mixing);
  }
  uint64_t bytes = 0;
  for (int f = 0; f < static_cast<int>(fragments_.size()); ++f) bytes += exchange_bytes(f);
  return text + fmt::format("; {} bytes per round leave this rank", bytes);
}

nlohmann::json Diloco::summary() const {
  const DilocoConfig& d = config_.diloco;
  return {{"islands", islands_.count()},
          {"inner_steps", d.inner_steps},
          {"fragments", d.fragments},
          {"overlap_steps", d.overlap_steps},
          {"outer_precision", outer_precision_name(precision_)},
          {"exchanges", exchanges_},
          {"bytes_between_islands", bytes_between_islands_},
          {"exchange_wait_s", wait_seconds_}};
}

// --- checkpoints -------------------------------------------------------------------------------

void Diloco::save(std::vector<CheckpointFile>& files) {
  // Exchanges in flight land now: their mean is the same whenever it is read, and their merge
  // stays at its step.
  for (auto& x : pending_) land(*x);
  const int64_t n = runner_.global_elements();
  const bool lead = islands_.index() == 0 && islands_.with_lead();  // world rank 0
  std::string bin;
  Buffer global(tracker_, MemoryCategory::workspace, DType::f32, n);
  auto append = [&](const Buffer& b) {
    if (lead) bin.append(static_cast<const char*>(b.raw()), b.bytes());
  };
  runner_.gather_global_state(theta_global_, global);
  append(global);
  runner_.gather_global_state(momentum_, global);
  append(global);
  {
    Buffer waiting(tracker_, MemoryCategory::workspace, DType::f32, state_elements_);
    for (const auto& x : pending_) {
      const float* d = state(x->delta);
      int64_t k = 0;
      for (const Run& r : fragments_[static_cast<size_t>(x->fragment)].runs) {
        std::memcpy(state(waiting) + r.state, d + k, static_cast<size_t>(r.length) * 4);
        k += r.length;
      }
    }
    runner_.gather_global_state(waiting, global);
    append(global);
  }
  // Islands 1..K-1: their parameters and inner moments, gathered inside each island and sent to
  // the lead over the across group that holds it.
  Optimizer& opt = runner_.optimizer();
  auto moment = [&](Buffer& m) {
    if (m.count() > 0) {
      runner_.gather_global_state(m, global);
    } else {
      std::memset(global.raw(), 0, global.bytes());
    }
  };
  comm::Communicator& across = islands_.across();
  if (islands_.index() > 0) {
    runner_.gather_global_parameters(global);
    if (islands_.with_lead()) across.send(global.flat(), 0, kCheckpointTag);
    moment(opt.first_moment());
    if (islands_.with_lead()) across.send(global.flat(), 0, kCheckpointTag + 1);
    moment(opt.second_moment());
    if (islands_.with_lead()) across.send(global.flat(), 0, kCheckpointTag + 2);
  } else if (lead) {
    for (int k = 1; k < islands_.count(); ++k) {
      for (int part = 0; part < 3; ++part) {
        across.recv(global.flat(), k, kCheckpointTag + part);
        append(global);
      }
    }
  }
  if (!lead) return;
  nlohmann::json pending = nlohmann::json::array();
  for (const auto& x : pending_) {
    pending.push_back(
        {{"fragment", x->fragment}, {"send_step", x->send_step}, {"merge_step", x->merge_step}});
  }
  const DilocoConfig& d = config_.diloco;
  const nlohmann::json state_json{
      {"islands", islands_.count()},
      {"inner_steps", d.inner_steps},
      {"fragments", d.fragments},
      {"overlap_steps", d.overlap_steps},
      {"fragment_pattern", d.fragment_pattern},
      {"pending", pending},
      {"exchanges", exchanges_},
      {"bytes_between_islands", bytes_between_islands_},
      {"layout",
       "theta_global, momentum, waiting deltas, then per island 1..K-1: parameters, "
       "first moment, second moment; each the one-process table layout, f32"}};
  files.push_back({"diloco.json", state_json.dump(2)});
  files.push_back({"diloco.bin", std::move(bin)});
}

void Diloco::load(const std::string& dir) {
  const auto text = read_checkpoint_file(dir, "diloco.json");
  if (!text) {
    start();
    event_(
        fmt::format("checkpoint {} has no DiLoCo state: every island starts from its "
                    "parameters, outer momentum zero",
                    dir));
    return;
  }
  const auto j = nlohmann::json::parse(*text);
  const DilocoConfig& d = config_.diloco;
  if (j.at("islands").get<int64_t>() != islands_.count() ||
      j.at("inner_steps").get<int64_t>() != d.inner_steps ||
      j.at("fragments").get<int64_t>() != d.fragments ||
      j.at("overlap_steps").get<int64_t>() != d.overlap_steps ||
      j.at("fragment_pattern").get<std::string>() != d.fragment_pattern) {
    throw Error(fmt::format(
        "checkpoint {} holds DiLoCo state of islands = {}, inner_steps = {}, fragments = {}, "
        "overlap_steps = {}, fragment_pattern = {}; resume with the same [diloco] keys",
        dir, j.at("islands").get<int64_t>(), j.at("inner_steps").get<int64_t>(),
        j.at("fragments").get<int64_t>(), j.at("overlap_steps").get<int64_t>(),
        j.at("fragment_pattern").get<std::string>()));
  }
  const auto bin = read_checkpoint_file(dir, "diloco.bin");
  const int64_t n = runner_.global_elements();
  const auto block = static_cast<size_t>(n) * sizeof(float);
  const size_t expected = block * static_cast<size_t>(3 + 3 * (islands_.count() - 1));
  if (!bin || bin->size() != expected) {
    throw Error(
        fmt::format("checkpoint {}: diloco.bin holds {} bytes, {} expected for {} "
                    "islands of a {}-parameter model",
                    dir, bin ? bin->size() : 0, expected, islands_.count(), n));
  }
  Buffer global(tracker_, MemoryCategory::workspace, DType::f32, n);
  auto take = [&](size_t index) {
    std::memcpy(global.raw(), bin->data() + index * block, block);
    return &global;
  };
  runner_.load_global_state(*take(0), theta_global_);
  runner_.load_global_state(*take(1), momentum_);
  pending_.clear();
  {
    Buffer waiting(tracker_, MemoryCategory::workspace, DType::f32, state_elements_);
    runner_.load_global_state(*take(2), waiting);
    for (const auto& p : j.at("pending")) {
      auto x = std::make_unique<Exchange>();
      x->fragment = p.at("fragment").get<int>();
      x->send_step = p.at("send_step").get<int64_t>();
      x->merge_step = p.at("merge_step").get<int64_t>();
      const Fragment& fr = fragments_.at(static_cast<size_t>(x->fragment));
      x->delta = Buffer(tracker_, MemoryCategory::workspace, DType::f32, fr.elements);
      int64_t k = 0;
      for (const Run& r : fr.runs) {
        std::memcpy(state(x->delta) + k, state(waiting) + r.state,
                    static_cast<size_t>(r.length) * 4);
        k += r.length;
      }
      pending_.push_back(std::move(x));
    }
  }
  exchanges_ = j.at("exchanges").get<int64_t>();
  bytes_between_islands_ = j.at("bytes_between_islands").get<uint64_t>();
  if (islands_.index() > 0) {
    const size_t first = 3 + 3 * static_cast<size_t>(islands_.index() - 1);
    runner_.load_global_parameters(*take(first));
    Optimizer& opt = runner_.optimizer();
    if (opt.first_moment().count() > 0)
      runner_.load_global_state(*take(first + 1), opt.first_moment());
    if (opt.second_moment().count() > 0)
      runner_.load_global_state(*take(first + 2), opt.second_moment());
  }
}

}  // namespace trillion
