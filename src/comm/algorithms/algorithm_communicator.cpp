// See algorithm_communicator.h. An AlgorithmOp is one collective in flight: its program (the
// transfers of program.h), the buffer it works on and the step it is at.
#include "comm/algorithms/algorithm_communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "core/error.h"

namespace trillion::comm {

namespace algo {

namespace {

// Every algorithm message carries its operation's tag; MPI guarantees tags up to 32767.
constexpr uint64_t kTagSpace = 32768;

Tensor span_view(void* base, DType dtype, Span s) {
  auto* p = static_cast<std::byte*>(base) + static_cast<size_t>(s.begin) * dtype_size(dtype);
  return Tensor(p, dtype, {s.count});
}

template <typename T, typename Combine>
void combine_into(T* inout, const T* in, int64_t n, Combine f) {
  for (int64_t i = 0; i < n; ++i) inout[i] = f(inout[i], in[i]);
}

// inout[i] = inout[i] (op) in[i]. bf16 is combined in fp32 and rounded, as the MPI bf16 op does.
void reduce_into(void* inout, const void* in, DType dtype, int64_t n, ReduceOp op) {
  const bool sum = op == ReduceOp::sum;
  switch (dtype) {
    case DType::f32:
      combine_into(static_cast<float*>(inout), static_cast<const float*>(in), n,
                   [sum](float a, float b) { return sum ? a + b : std::max(a, b); });
      return;
    case DType::f64:
      combine_into(static_cast<double*>(inout), static_cast<const double*>(in), n,
                   [sum](double a, double b) { return sum ? a + b : std::max(a, b); });
      return;
    case DType::bf16:
      combine_into(static_cast<bf16*>(inout), static_cast<const bf16*>(in), n,
                   [sum](bf16 a, bf16 b) {
                     const float x = bf16_to_float(a), y = bf16_to_float(b);
                     return float_to_bf16(sum ? x + y : std::max(x, y));
                   });
      return;
  }
  TRILLION_CHECK(false, "unknown dtype");
}

}  // namespace

class AlgorithmOp : public PendingOp {
 public:
  // Runs `program` over `data` (which it owns as `staging` when staging is not empty).
  AlgorithmOp(AlgorithmCommunicator& owner, Program program, Tensor data, ReduceOp op, int tag,
              std::vector<std::byte> staging = {})
      : owner_(owner),
        program_(std::move(program)),
        data_(data),
        op_(op),
        tag_(tag),
        staging_(std::move(staging)) {
    int64_t largest = 0;
    for (const Transfer& t : program_) {
      if (t.reduce && t.recv_peer >= 0) largest = std::max(largest, t.recv.count);
    }
    scratch_.resize(static_cast<size_t>(largest) * dtype_size(data_.dtype()));
  }
  // After the program: copy part `part` of the working buffer to `output` (reduce_scatter).
  void copy_out_at_end(Tensor output, Span part) {
    output_ = output;
    output_part_ = part;
  }
  ~AlgorithmOp() override {
    if (done_) return;
    // Never leave a receive writing into memory the caller is about to free; cannot throw here.
    try {
      wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "collective on group '%s' failed while its handle was dropped: %s\n",
                   owner_.name().c_str(), e.what());
      owner_.in_flight_.erase(std::remove(owner_.in_flight_.begin(), owner_.in_flight_.end(), this),
                              owner_.in_flight_.end());
    }
  }
  void wait() override { owner_.progress(this, true); }
  bool test() override { return owner_.progress(this, false); }
  bool done() const { return done_; }

  // Runs this operation's own steps: all of them (block), or as many as complete without waiting.
  // Returns whether the operation is done.
  bool advance(bool block) {
    while (!done_ && next_ < program_.size()) {
      const Transfer& t = program_[next_];
      if (!posted_) post(t);
      if (block) {
        // The send first: a delayed send (LinkEmulator) is only put on the wire while waited on
        // or tested, and the peer's step needs it; the receive was posted before it.
        if (send_) send_->wait();
        if (recv_) recv_->wait();
      } else {
        const bool sent = !send_ || send_->test();
        const bool received = !recv_ || recv_->test();
        if (!sent || !received) return false;
      }
      if (t.reduce && recv_) {
        reduce_into(span_view(data_.raw(), data_.dtype(), t.recv).raw(), scratch_.data(),
                    data_.dtype(), t.recv.count, op_);
      }
      send_.reset();
      recv_.reset();
      posted_ = false;
      ++next_;
    }
    if (!done_) finish();
    return true;
  }

 private:
  void post(const Transfer& t) {
    Communicator& c = owner_.level_comm(t.level);
    const DType dt = data_.dtype();
    const uint64_t elem = dtype_size(dt);
    if (t.recv_peer >= 0) {
      const Tensor into = t.reduce ? Tensor(scratch_.data(), dt, {t.recv.count})
                                   : span_view(data_.raw(), dt, t.recv);
      recv_ = c.start_recv(into, t.recv_peer, tag_);
      const uint64_t bytes = elem * static_cast<uint64_t>(t.recv.count);
      (owner_.crosses_nodes(t.level, t.recv_peer) ? owner_.link_traffic_.inter_node_received
                                                  : owner_.link_traffic_.intra_node_received) +=
          bytes;
    }
    if (t.send_peer >= 0) {
      send_ = c.start_send(span_view(data_.raw(), dt, t.send), t.send_peer, tag_);
      const uint64_t bytes = elem * static_cast<uint64_t>(t.send.count);
      (owner_.crosses_nodes(t.level, t.send_peer) ? owner_.link_traffic_.inter_node_sent
                                                  : owner_.link_traffic_.intra_node_sent) += bytes;
    }
    posted_ = true;
  }

  void finish() {
    if (!output_.empty()) {
      std::memcpy(output_.raw(), span_view(data_.raw(), data_.dtype(), output_part_).raw(),
                  output_.bytes());
    }
    done_ = true;
    auto& q = owner_.in_flight_;
    q.erase(std::remove(q.begin(), q.end(), this), q.end());
  }

  AlgorithmCommunicator& owner_;
  Program program_;
  Tensor data_;
  ReduceOp op_;
  int tag_;
  std::vector<std::byte> staging_, scratch_;
  Tensor output_;
  Span output_part_;
  size_t next_ = 0;
  bool posted_ = false, done_ = false;
  Handle send_, recv_;
};

}  // namespace algo

using algo::AlgorithmOp;
using algo::Level;
using algo::Program;

AlgorithmCommunicator::AlgorithmCommunicator(std::unique_ptr<Communicator> inner,
                                             AllReduceAlgorithm algorithm, int node)
    : Communicator(inner->name()), inner_(std::move(inner)), algorithm_(algorithm), node_(node) {
  const int n = inner_->size(), r = inner_->rank();
  // Every member's node, so that every rank sees the same layout and makes the same decisions
  // (a layout error is thrown by all ranks, none is left waiting in a collective).
  std::vector<double> mine = {static_cast<double>(node)}, all(static_cast<size_t>(n));
  inner_->all_gather(Tensor(mine.data(), DType::f64, {1}), Tensor(all.data(), DType::f64, {n}));
  std::map<int, int> members_per_node;
  for (double x : all) {
    member_nodes_.push_back(static_cast<int>(x));
    members_per_node[member_nodes_.back()] += 1;
  }
  nodes_count_ = static_cast<int>(members_per_node.size());
  ranks_per_node_ = members_per_node.begin()->second;
  for (int q = 0; q < r; ++q) index_in_node_ += member_nodes_[q] == node ? 1 : 0;
  if (algorithm_ == AllReduceAlgorithm::hierarchical) {
    for (const auto& [id, count] : members_per_node) {
      if (count != ranks_per_node_) {
        std::string layout;
        for (const auto& [i, c] : members_per_node) layout += fmt::format(" {}:{}", i, c);
        throw Error(fmt::format(
            "hierarchical all-reduce on group '{}' needs the same number of members on every "
            "node, but nodes hold (node:members){}; choose parallel.ranks_per_node so that each "
            "node holds an equal share of the group, or use parallel.allreduce = \"ring\"",
            name(), layout));
      }
    }
  }
  if (algorithm_ != AllReduceAlgorithm::mpi) ring_ = inner_->split(0, r, name() + ".ring");
  if (algorithm_ == AllReduceAlgorithm::hierarchical) {
    node_group_ = inner_->split(node, r, name() + ".node");
    cross_group_ = inner_->split(index_in_node_, r, name() + ".cross");
    node_index_ = cross_group_->rank();
  }
}

AlgorithmCommunicator::~AlgorithmCommunicator() = default;

std::unique_ptr<Communicator> AlgorithmCommunicator::split(int color, int key, std::string name) {
  return std::make_unique<AlgorithmCommunicator>(inner_->split(color, key, std::move(name)),
                                                 algorithm_, node_);
}

Program AlgorithmCommunicator::all_reduce_program(int64_t count) const {
  switch (algorithm_) {
    case AllReduceAlgorithm::ring:
      return algo::ring_all_reduce(count, size(), rank());
    case AllReduceAlgorithm::hierarchical:
      return algo::hierarchical_all_reduce(count, ranks_per_node_, index_in_node_, nodes_count_,
                                           node_index_);
    case AllReduceAlgorithm::mpi:
      break;
  }
  return {};
}

Communicator::Traffic AlgorithmCommunicator::all_reduce_traffic(const Tensor& data) const {
  if (algorithm_ == AllReduceAlgorithm::mpi) return Communicator::all_reduce_traffic(data);
  const algo::ProgramVolume v = algo::program_volume(all_reduce_program(data.numel()));
  const uint64_t elem = dtype_size(data.dtype());
  return {elem * static_cast<uint64_t>(v.sent), elem * static_cast<uint64_t>(v.received)};
}

Communicator& AlgorithmCommunicator::level_comm(Level level) {
  switch (level) {
    case Level::ring:
      return *ring_;
    case Level::node:
      return *node_group_;
    case Level::cross:
      return *cross_group_;
  }
  return *ring_;
}

bool AlgorithmCommunicator::crosses_nodes(Level level, int peer) const {
  switch (level) {
    case Level::ring:
      return member_nodes_[static_cast<size_t>(peer)] != node_;
    case Level::node:
      return false;
    case Level::cross:
      return true;
  }
  return true;
}

int AlgorithmCommunicator::next_tag() {
  return static_cast<int>(started_++ % algo::kTagSpace);
}

bool AlgorithmCommunicator::progress(AlgorithmOp* op, bool block) {
  if (op->done()) return true;
  if (block) {
    while (!op->done()) {
      TRILLION_CHECK(!in_flight_.empty(), "unfinished collective missing from its queue");
      in_flight_.front()->advance(true);  // removes itself from the queue when done
    }
    return true;
  }
  // Non-blocking: give every operation up to and including `op` its chance, oldest first.
  const std::vector<AlgorithmOp*> snapshot(in_flight_.begin(), in_flight_.end());
  for (AlgorithmOp* o : snapshot) {
    o->advance(false);
    if (o == op) break;
  }
  return op->done();
}

namespace {

// Registers a new operation and lets it run as far as it can without blocking: the first step's
// messages go out now.
Handle launch(std::deque<AlgorithmOp*>& in_flight, std::unique_ptr<AlgorithmOp> op) {
  in_flight.push_back(op.get());
  op->advance(false);
  return op;
}

}  // namespace

Handle AlgorithmCommunicator::do_all_reduce(const Tensor& data, ReduceOp op) {
  if (algorithm_ == AllReduceAlgorithm::mpi) return inner_->start_all_reduce(data, op);
  return launch(in_flight_, std::make_unique<AlgorithmOp>(*this, all_reduce_program(data.numel()),
                                                          data, op, next_tag()));
}

Handle AlgorithmCommunicator::do_reduce_scatter(const Tensor& input, const Tensor& output,
                                                ReduceOp op) {
  if (algorithm_ == AllReduceAlgorithm::mpi) return inner_->start_reduce_scatter(input, output, op);
  // The ring reduces in place, and the input must stay untouched: it works on a copy.
  std::vector<std::byte> staging(input.bytes());
  if (!staging.empty()) std::memcpy(staging.data(), input.raw(), staging.size());
  Program p;
  const algo::Span all{0, input.numel()};
  algo::append_ring_reduce_scatter(p, all, size(), rank(), Level::ring);
  const Tensor work(staging.data(), input.dtype(), {input.numel()});
  auto o =
      std::make_unique<AlgorithmOp>(*this, std::move(p), work, op, next_tag(), std::move(staging));
  o->copy_out_at_end(output, algo::ring_part(all, size(), rank()));
  return launch(in_flight_, std::move(o));
}

Handle AlgorithmCommunicator::do_all_gather(const Tensor& input, const Tensor& output) {
  if (algorithm_ == AllReduceAlgorithm::mpi) return inner_->start_all_gather(input, output);
  const algo::Span all{0, output.numel()};
  const algo::Span own = algo::ring_part(all, size(), rank());
  std::memmove(algo::span_view(output.raw(), output.dtype(), own).raw(), input.raw(),
               input.bytes());
  Program p;
  algo::append_ring_all_gather(p, all, size(), rank(), Level::ring);
  return launch(in_flight_, std::make_unique<AlgorithmOp>(*this, std::move(p), output,
                                                          ReduceOp::sum, next_tag()));
}

Handle AlgorithmCommunicator::do_broadcast(const Tensor& data, int root) {
  return inner_->start_broadcast(data, root);
}
Handle AlgorithmCommunicator::do_all_to_all(const Tensor& input,
                                            const std::vector<int64_t>& send_counts,
                                            const Tensor& output,
                                            const std::vector<int64_t>& recv_counts) {
  return inner_->start_all_to_all(input, send_counts, output, recv_counts);
}
Handle AlgorithmCommunicator::do_send(const Tensor& data, int dest, int tag) {
  return inner_->start_send(data, dest, tag);
}
Handle AlgorithmCommunicator::do_recv(const Tensor& data, int source, int tag) {
  return inner_->start_recv(data, source, tag);
}
void AlgorithmCommunicator::do_barrier() {
  inner_->barrier();
}

}  // namespace trillion::comm
