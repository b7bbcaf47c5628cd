// See link_emulator.h.
#include "comm/link_emulator.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "core/error.h"
#include "core/philox.h"

namespace trillion::comm {

namespace {

using Clock = LinkEmulator::Clock;

Clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Polls instead of blocking inside MPI (which spins without yielding): each test lets MPI move
// the next fragment of a large message, and the yield between tests leaves the core to a rank
// that has work (emulated waits are long, and tests and benchmarks oversubscribe cores).
void poll_until_done(PendingOp& op) {
  while (!op.test()) std::this_thread::yield();
}

// A send held back until its delivery time, then handed to the wrapped communicator.
class HeldSend : public PendingOp {
 public:
  HeldSend(Communicator& inner, const Tensor& data, int dest, int tag, Clock::time_point at)
      : inner_(inner), data_(data), dest_(dest), tag_(tag), deliver_at_(at) {}
  ~HeldSend() override {
    if (done_) return;
    try {  // the peer waits for this message: it must go out even if nobody waits for it
      wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "emulated send on group '%s' failed while its handle was dropped: %s\n",
                   inner_.name().c_str(), e.what());
    }
  }
  bool test() override {
    if (done_) return true;
    if (!posted_) {
      if (Clock::now() < deliver_at_) return false;
      post();
    }
    done_ = inner_handle_->test();
    return done_;
  }
  void wait() override {
    if (done_) return;
    if (!posted_) {
      std::this_thread::sleep_until(deliver_at_);
      post();
    }
    poll_until_done(*inner_handle_);
    done_ = true;
  }

 private:
  void post() {
    posted_ = true;
    inner_handle_ = inner_.start_send(data_, dest_, tag_);
  }
  Communicator& inner_;
  Tensor data_;
  int dest_, tag_;
  Clock::time_point deliver_at_;
  Handle inner_handle_;
  bool posted_ = false, done_ = false;
};

// Same host: the message goes out at once, after a one-number header with its delivery time on
// the host's monotonic clock; the send completes when the link is free again (the transfer time
// has passed), the receive no earlier than the delivery time. The real copy overlaps the
// emulated time instead of adding to it.
double clock_seconds(Clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

class StampedSend : public PendingOp {
 public:
  StampedSend(Communicator& inner, const Tensor& data, int dest, int tag, Clock::time_point free_at,
              Clock::time_point deliver_at)
      : free_at_(free_at), stamp_(std::make_unique<double>(clock_seconds(deliver_at))) {
    header_ = inner.start_send(Tensor(stamp_.get(), DType::f64, {1}), dest, tag);
    data_ = inner.start_send(data, dest, tag);
  }
  bool test() override {
    if (done_) return true;
    const bool header = header_->test(), data = data_->test();
    done_ = header && data && Clock::now() >= free_at_;
    return done_;
  }
  void wait() override {
    if (done_) return;
    poll_until_done(*header_);
    poll_until_done(*data_);
    std::this_thread::sleep_until(free_at_);
    done_ = true;
  }

 private:
  Clock::time_point free_at_;
  std::unique_ptr<double> stamp_;
  Handle header_, data_;
  bool done_ = false;
};

class StampedRecv : public PendingOp {
 public:
  StampedRecv(Communicator& inner, const Tensor& data, int source, int tag)
      : stamp_(std::make_unique<double>(0)) {
    header_ = inner.start_recv(Tensor(stamp_.get(), DType::f64, {1}), source, tag);
    data_ = inner.start_recv(data, source, tag);
  }
  bool test() override {
    if (done_) return true;
    const bool header = header_->test(), data = data_->test();
    done_ = header && data && Clock::now() >= deliver_at();
    return done_;
  }
  void wait() override {
    if (done_) return;
    poll_until_done(*header_);
    poll_until_done(*data_);
    std::this_thread::sleep_until(deliver_at());
    done_ = true;
  }

 private:
  Clock::time_point deliver_at() const { return Clock::time_point(to_duration(*stamp_)); }
  std::unique_ptr<double> stamp_;
  Handle header_, data_;
  bool done_ = false;
};

// A wrapped operation that waits by polling and, optionally, completes no earlier than `ready_at`.
class PolledOp : public PendingOp {
 public:
  PolledOp(Handle inner, Clock::time_point ready_at)
      : inner_(std::move(inner)), ready_at_(ready_at) {}
  bool test() override {
    if (done_) return true;
    done_ = inner_->test() && Clock::now() >= ready_at_;
    return done_;
  }
  void wait() override {
    if (done_) return;
    poll_until_done(*inner_);
    std::this_thread::sleep_until(ready_at_);
    done_ = true;
  }

 private:
  Handle inner_;
  Clock::time_point ready_at_;
  bool done_ = false;
};

void validate(const LinkModel& m, const char* which) {
  if (!(m.latency_s >= 0)) {
    throw Error(fmt::format("link emulator: latency {} {} s must be >= 0", which, m.latency_s));
  }
  if (!(m.bytes_per_second > 0)) {
    throw Error(fmt::format("link emulator: bandwidth {} {} bytes/s must be > 0", which,
                            m.bytes_per_second));
  }
}

}  // namespace

LinkEmulator::LinkEmulator(std::unique_ptr<Communicator> inner, int site, LinkModel between_sites,
                           LinkModel within_site, int identity, std::shared_ptr<Links> links,
                           bool use_host_clock)
    : Communicator(inner->name()),
      inner_(std::move(inner)),
      between_(between_sites),
      within_(within_site),
      links_(links ? std::move(links) : std::make_shared<Links>()) {
  validate(between_, "between sites");
  validate(within_, "within a site");
  if (identity < 0) identity = inner_->rank();
  const int n = inner_->size();
  // The host, as 52 bits of a hash of its name (exact in a double).
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown");
  const double host_id = static_cast<double>(fnv1a64(host) >> 12);
  std::vector<double> mine = {static_cast<double>(identity), static_cast<double>(site), host_id};
  std::vector<double> all(3 * static_cast<size_t>(n));
  inner_->all_gather(Tensor(mine.data(), DType::f64, {3}),
                     Tensor(all.data(), DType::f64, {3 * static_cast<int64_t>(n)}));
  use_host_clock_ = use_host_clock;
  same_host_ = use_host_clock;
  for (int q = 0; q < n; ++q) {
    identity_of_.push_back(static_cast<int>(all[3 * q]));
    site_of_.push_back(static_cast<int>(all[3 * q + 1]));
    same_host_ = same_host_ && all[3 * q + 2] == host_id;
  }
}

LinkEmulator::~LinkEmulator() = default;

std::unique_ptr<Communicator> LinkEmulator::split(int color, int key, std::string name) {
  auto sub = inner_->split(color, key, std::move(name));
  return std::make_unique<LinkEmulator>(std::move(sub), site(), between_, within_,
                                        identity_of_[static_cast<size_t>(rank())], links_,
                                        use_host_clock_);
}

const LinkModel& LinkEmulator::link_to(int member) const {
  return site_of(member) == site() ? within_ : between_;
}

bool LinkEmulator::spans_sites() const {
  return std::any_of(site_of_.begin(), site_of_.end(), [&](int s) { return s != site(); });
}

Handle LinkEmulator::delayed(Handle inner, double seconds) {
  if (!spans_sites()) return inner;
  return std::make_unique<PolledOp>(std::move(inner), Clock::now() + to_duration(seconds));
}

// The modelled collectives: the ring over n members, each of its steps gated by the slow link.
Handle LinkEmulator::do_all_reduce(const Tensor& data, ReduceOp op) {
  const double n = size(), part = data.bytes() / n;
  return delayed(inner_->start_all_reduce(data, op), 2 * (n - 1) * between_.seconds(part));
}
Handle LinkEmulator::do_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  const double n = size(), part = static_cast<double>(output.bytes());
  return delayed(inner_->start_reduce_scatter(input, output, op), (n - 1) * between_.seconds(part));
}
Handle LinkEmulator::do_all_gather(const Tensor& input, const Tensor& output) {
  const double n = size(), part = static_cast<double>(input.bytes());
  return delayed(inner_->start_all_gather(input, output), (n - 1) * between_.seconds(part));
}
Handle LinkEmulator::do_broadcast(const Tensor& data, int root) {
  const double bytes = static_cast<double>(data.bytes());
  return delayed(inner_->start_broadcast(data, root), between_.seconds(bytes));
}
Handle LinkEmulator::do_all_to_all(const Tensor& input, const std::vector<int64_t>& send_counts,
                                   const Tensor& output, const std::vector<int64_t>& recv_counts) {
  uint64_t remote = 0;
  for (int q = 0; q < size(); ++q) {
    if (site_of(q) != site()) remote += static_cast<uint64_t>(send_counts[q]);
  }
  remote *= dtype_size(input.dtype());
  return delayed(inner_->start_all_to_all(input, send_counts, output, recv_counts),
                 between_.seconds(static_cast<double>(remote)));
}

Handle LinkEmulator::do_send(const Tensor& data, int dest, int tag) {
  if (site_of(dest) != site()) between_sites_sent_ += data.bytes();
  const LinkModel& link = link_to(dest);
  if (!link.delays()) return inner_->start_send(data, dest, tag);
  // The link is busy for the transfer time of each message in turn; latency overlaps.
  const Clock::time_point now = Clock::now();
  Clock::time_point& busy = links_->busy_until[identity_of_[static_cast<size_t>(dest)]];
  busy =
      std::max(now, busy) + to_duration(static_cast<double>(data.bytes()) / link.bytes_per_second);
  const Clock::time_point deliver_at = busy + to_duration(link.latency_s);
  if (same_host_) return std::make_unique<StampedSend>(*inner_, data, dest, tag, busy, deliver_at);
  return std::make_unique<HeldSend>(*inner_, data, dest, tag, deliver_at);
}

Handle LinkEmulator::do_recv(const Tensor& data, int source, int tag) {
  if (!link_to(source).delays()) return inner_->start_recv(data, source, tag);
  if (same_host_) return std::make_unique<StampedRecv>(*inner_, data, source, tag);
  return std::make_unique<PolledOp>(inner_->start_recv(data, source, tag), Clock::time_point{});
}

void LinkEmulator::do_barrier() {
  inner_->barrier();
  if (spans_sites()) std::this_thread::sleep_for(to_duration(2 * between_.latency_s));
}

}  // namespace trillion::comm
