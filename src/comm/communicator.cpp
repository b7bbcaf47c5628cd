// See communicator.h. The public calls check arguments and count bytes; the do_* calls move data.
#include "comm/communicator.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <numeric>

#include "core/error.h"

namespace trillion::comm {

std::string_view collective_name(Collective c) {
  switch (c) {
    case Collective::all_reduce:
      return "all_reduce";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::all_gather:
      return "all_gather";
    case Collective::broadcast:
      return "broadcast";
    case Collective::all_to_all:
      return "all_to_all";
    case Collective::send:
      return "send";
    case Collective::recv:
      return "recv";
    case Collective::barrier:
      return "barrier";
  }
  return "?";
}

uint64_t CommCounters::total_sent() const {
  return std::accumulate(bytes_sent.begin(), bytes_sent.end(), uint64_t{0});
}

uint64_t CommCounters::total_received() const {
  return std::accumulate(bytes_received.begin(), bytes_received.end(), uint64_t{0});
}

void CommCounters::add(Collective c, uint64_t sent, uint64_t received) {
  const int i = static_cast<int>(c);
  bytes_sent[i] += sent;
  bytes_received[i] += received;
  calls[i] += 1;
}

CommCounters& CommCounters::operator+=(const CommCounters& o) {
  for (int i = 0; i < kCollectiveKinds; ++i) {
    bytes_sent[i] += o.bytes_sent[i];
    bytes_received[i] += o.bytes_received[i];
    calls[i] += o.calls[i];
  }
  blocking_seconds += o.blocking_seconds;
  return *this;
}

CommCounters operator-(const CommCounters& now, const CommCounters& earlier) {
  CommCounters d;
  for (int i = 0; i < kCollectiveKinds; ++i) {
    d.bytes_sent[i] = now.bytes_sent[i] - earlier.bytes_sent[i];
    d.bytes_received[i] = now.bytes_received[i] - earlier.bytes_received[i];
    d.calls[i] = now.calls[i] - earlier.calls[i];
  }
  d.blocking_seconds = now.blocking_seconds - earlier.blocking_seconds;
  return d;
}

void wait_all(std::vector<Handle>& handles) {
  for (Handle& h : handles) {
    if (h) h->wait();
  }
  handles.clear();
}

namespace {

// A finished operation (what a blocking transport or a group of one returns).
class DoneOp : public PendingOp {
 public:
  void wait() override {}
  bool test() override { return true; }
};

void require(bool ok, const Communicator& c, std::string_view call, const std::string& detail) {
  if (!ok) {
    throw Error(fmt::format("{} on group '{}' (rank {} of {}): {}", call, c.name(), c.rank(),
                            c.size(), detail));
  }
}

void require_contiguous(const Communicator& c, std::string_view call, const Tensor& t) {
  require(t.is_contiguous(), c, call, "tensor " + t.shape_string() + " is not contiguous");
}

uint64_t ring_share(uint64_t bytes, int n) {
  return bytes * static_cast<uint64_t>(n - 1) / static_cast<uint64_t>(n);
}

}  // namespace

void Communicator::check_peer(int peer, const char* what) const {
  require(peer >= 0 && peer < size() && peer != rank(), *this, what,
          fmt::format("peer rank {} is not another member of a group of {}", peer, size()));
}

Communicator::Traffic Communicator::all_reduce_traffic(const Tensor& data) const {
  const uint64_t bytes = 2 * ring_share(data.bytes(), size());
  return {bytes, bytes};
}

Handle Communicator::start_all_reduce(const Tensor& data, ReduceOp op) {
  require_contiguous(*this, "all_reduce", data);
  const Traffic traffic = all_reduce_traffic(data);
  counters_.add(Collective::all_reduce, traffic.sent, traffic.received);
  return do_all_reduce(data, op);
}

Handle Communicator::start_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  require_contiguous(*this, "reduce_scatter", input);
  require_contiguous(*this, "reduce_scatter", output);
  require(input.dtype() == output.dtype() && input.numel() == output.numel() * size(), *this,
          "reduce_scatter",
          fmt::format("input {} must hold {} chunks of the output {} (same dtype)",
                      input.shape_string(), size(), output.shape_string()));
  const uint64_t traffic = ring_share(input.bytes(), size());
  counters_.add(Collective::reduce_scatter, traffic, traffic);
  return do_reduce_scatter(input, output, op);
}

Handle Communicator::start_all_gather(const Tensor& input, const Tensor& output) {
  require_contiguous(*this, "all_gather", input);
  require_contiguous(*this, "all_gather", output);
  require(input.dtype() == output.dtype() && output.numel() == input.numel() * size(), *this,
          "all_gather",
          fmt::format("output {} must hold {} chunks of the input {} (same dtype)",
                      output.shape_string(), size(), input.shape_string()));
  const uint64_t traffic = ring_share(output.bytes(), size());
  counters_.add(Collective::all_gather, traffic, traffic);
  return do_all_gather(input, output);
}

Handle Communicator::start_broadcast(const Tensor& data, int root) {
  require_contiguous(*this, "broadcast", data);
  require(root >= 0 && root < size(), *this, "broadcast",
          fmt::format("root {} is outside the group of {}", root, size()));
  const bool is_root = rank() == root;
  const uint64_t bytes = size() > 1 ? data.bytes() : 0;
  counters_.add(Collective::broadcast, is_root ? bytes : 0, is_root ? 0 : bytes);
  return do_broadcast(data, root);
}

Handle Communicator::start_all_to_all(const Tensor& input, const std::vector<int64_t>& send_counts,
                                      const Tensor& output,
                                      const std::vector<int64_t>& recv_counts) {
  require_contiguous(*this, "all_to_all", input);
  require_contiguous(*this, "all_to_all", output);
  const size_t n = static_cast<size_t>(size());
  require(send_counts.size() == n && recv_counts.size() == n, *this, "all_to_all",
          fmt::format("need one send and one receive count per rank ({}), got {} and {}", n,
                      send_counts.size(), recv_counts.size()));
  int64_t send_total = 0, recv_total = 0, send_others = 0, recv_others = 0;
  for (size_t p = 0; p < n; ++p) {
    require(send_counts[p] >= 0 && recv_counts[p] >= 0, *this, "all_to_all",
            fmt::format("negative count for rank {}", p));
    send_total += send_counts[p];
    recv_total += recv_counts[p];
    if (static_cast<int>(p) != rank()) {
      send_others += send_counts[p];
      recv_others += recv_counts[p];
    }
  }
  require(input.dtype() == output.dtype() && send_total <= input.numel() &&
              recv_total <= output.numel(),
          *this, "all_to_all",
          fmt::format("counts need {} elements in and {} out; tensors hold {} and {}", send_total,
                      recv_total, input.numel(), output.numel()));
  const uint64_t elem = dtype_size(input.dtype());
  counters_.add(Collective::all_to_all, elem * send_others, elem * recv_others);
  return do_all_to_all(input, send_counts, output, recv_counts);
}

Handle Communicator::start_send(const Tensor& data, int dest, int tag) {
  require_contiguous(*this, "send", data);
  check_peer(dest, "send");
  counters_.add(Collective::send, data.bytes(), 0);
  return do_send(data, dest, tag);
}

Handle Communicator::start_recv(const Tensor& data, int source, int tag) {
  require_contiguous(*this, "recv", data);
  check_peer(source, "recv");
  counters_.add(Collective::recv, 0, data.bytes());
  return do_recv(data, source, tag);
}

namespace {
// Adds the seconds since construction to `into` (the blocking collectives' time).
struct BlockingTimer {
  double& into;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ~BlockingTimer() {
    into += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
};
}  // namespace

void Communicator::all_reduce(const Tensor& data, ReduceOp op) {
  BlockingTimer t{counters_.blocking_seconds};
  start_all_reduce(data, op)->wait();
}
void Communicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  BlockingTimer t{counters_.blocking_seconds};
  start_reduce_scatter(input, output, op)->wait();
}
void Communicator::all_gather(const Tensor& input, const Tensor& output) {
  BlockingTimer t{counters_.blocking_seconds};
  start_all_gather(input, output)->wait();
}
void Communicator::broadcast(const Tensor& data, int root) {
  BlockingTimer t{counters_.blocking_seconds};
  start_broadcast(data, root)->wait();
}
void Communicator::all_to_all(const Tensor& input, const std::vector<int64_t>& send_counts,
                              const Tensor& output, const std::vector<int64_t>& recv_counts) {
  start_all_to_all(input, send_counts, output, recv_counts)->wait();
}
void Communicator::send(const Tensor& data, int dest, int tag) {
  start_send(data, dest, tag)->wait();
}
void Communicator::recv(const Tensor& data, int source, int tag) {
  start_recv(data, source, tag)->wait();
}
void Communicator::barrier() {
  counters_.add(Collective::barrier, 0, 0);
  do_barrier();
}

// --- LocalCommunicator ---------------------------------------------------------------------

namespace {
Handle copy_into(const Tensor& dst, const Tensor& src, size_t bytes) {
  if (dst.raw() != src.raw() && bytes > 0) std::memcpy(dst.raw(), src.raw(), bytes);
  return std::make_unique<DoneOp>();
}
}  // namespace

std::unique_ptr<Communicator> LocalCommunicator::split(int, int, std::string name) {
  return std::make_unique<LocalCommunicator>(std::move(name));
}
Handle LocalCommunicator::do_all_reduce(const Tensor&, ReduceOp) {
  return std::make_unique<DoneOp>();
}
Handle LocalCommunicator::do_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp) {
  return copy_into(output, input, output.bytes());
}
Handle LocalCommunicator::do_all_gather(const Tensor& input, const Tensor& output) {
  return copy_into(output, input, input.bytes());
}
Handle LocalCommunicator::do_broadcast(const Tensor&, int) {
  return std::make_unique<DoneOp>();
}
Handle LocalCommunicator::do_all_to_all(const Tensor& input, const std::vector<int64_t>& send,
                                        const Tensor& output, const std::vector<int64_t>&) {
  return copy_into(output, input, static_cast<size_t>(send[0]) * dtype_size(input.dtype()));
}
Handle LocalCommunicator::do_send(const Tensor&, int, int) {
  TRILLION_CHECK(false, "send in a group of one");
}
Handle LocalCommunicator::do_recv(const Tensor&, int, int) {
  TRILLION_CHECK(false, "recv in a group of one");
}

}  // namespace trillion::comm
