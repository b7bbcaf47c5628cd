// See link_emulator.h.
#include "comm/link_emulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "core/error.h"

namespace trillion::comm {

namespace {

using Clock = LinkEmulator::Clock;

Clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Polls instead of blocking inside MPI (which spins): an emulated wait is long, and a spinning
// rank would take a core from the ranks that have work.
void poll_until_done(PendingOp& op) {
  while (!op.test()) std::this_thread::sleep_for(std::chrono::microseconds(20));
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
                           LinkModel within_site, int identity, std::shared_ptr<Links> links)
    : Communicator(inner->name()),
      inner_(std::move(inner)),
      between_(between_sites),
      within_(within_site),
      links_(links ? std::move(links) : std::make_shared<Links>()) {
  validate(between_, "between sites");
  validate(within_, "within a site");
  if (identity < 0) identity = inner_->rank();
  const int n = inner_->size();
  std::vector<double> mine = {static_cast<double>(identity), static_cast<double>(site)};
  std::vector<double> all(2 * static_cast<size_t>(n));
  inner_->all_gather(Tensor(mine.data(), DType::f64, {2}),
                     Tensor(all.data(), DType::f64, {2 * static_cast<int64_t>(n)}));
  for (int q = 0; q < n; ++q) {
    identity_of_.push_back(static_cast<int>(all[2 * q]));
    site_of_.push_back(static_cast<int>(all[2 * q + 1]));
  }
}

LinkEmulator::~LinkEmulator() = default;

std::unique_ptr<Communicator> LinkEmulator::split(int color, int key, std::string name) {
  auto sub = inner_->split(color, key, std::move(name));
  return std::make_unique<LinkEmulator>(std::move(sub), site(), between_, within_,
                                        identity_of_[static_cast<size_t>(rank())], links_);
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
  return std::make_unique<HeldSend>(*inner_, data, dest, tag, busy + to_duration(link.latency_s));
}

Handle LinkEmulator::do_recv(const Tensor& data, int source, int tag) {
  Handle h = inner_->start_recv(data, source, tag);
  if (!link_to(source).delays()) return h;
  return std::make_unique<PolledOp>(std::move(h), Clock::time_point{});
}

void LinkEmulator::do_barrier() {
  inner_->barrier();
  if (spans_sites()) std::this_thread::sleep_for(to_duration(2 * between_.latency_s));
}

}  // namespace trillion::comm
