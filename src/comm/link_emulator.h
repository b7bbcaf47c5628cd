// LinkEmulator: a Communicator decorator that makes the links between chosen groups of ranks
// ("sites", e.g. two data centres) slow, so slow-link behaviour is measured on one machine instead
// of assumed: a message of b bytes from a rank on one site to a rank on another is delivered
// latency + b / bandwidth after it is sent (the alpha-beta model: 1,000 km of fibre is ~5 ms
// one way), and messages on one link queue behind each other for the b / bandwidth part (a link
// carries one message at a time; latency is propagation and overlaps). Links inside a site get
// their own model (by default: no delay).
//
// How, when every member runs on one host (tests, benchmarks): the message goes out at once,
// preceded by a header holding its delivery time on the host's monotonic clock (shared by its
// processes); the receive completes no earlier than that, the send no earlier than the end of
// its transfer time. The real copy then overlaps the emulated time instead of adding to it.
// Across hosts (no shared clock) the sender instead holds the message back and hands it to the
// wrapped communicator at its delivery time; such a send is put on the wire when its handle is
// tested or waited on at or after that time (as MPI itself only progresses inside MPI calls),
// and the real transfer comes on top. Waiting sleeps and polls instead of spinning, so emulated
// waits leave the cores to the ranks that compute. Each ordered pair of ranks is one link with the
// full bandwidth (a per-GPU NIC, not a shared trunk); the links' queues are shared by every
// communicator split from the same emulator, since they are the same wires.
//
// Collectives are forwarded to the wrapped communicator; one whose group spans sites completes
// no earlier than the alpha-beta time of the bandwidth-optimal ring on the slow link (modelled,
// not measured: wrap the emulator in an AlgorithmCommunicator to run them as delayed messages).
//
// Invariants: the wrapped communicator outlives this one; counters are this group's, as for any
// Communicator (the wrapped communicator's are the transport's view).
#pragma once

#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace trillion::comm {

// A link: a message of b bytes takes latency_s + b / bytes_per_second.
struct LinkModel {
  double latency_s = 0;
  double bytes_per_second = INFINITY;
  bool delays() const { return latency_s > 0 || std::isfinite(bytes_per_second); }
  double seconds(double bytes) const { return latency_s + bytes / bytes_per_second; }
};

class LinkEmulator : public Communicator {
 public:
  using Clock = std::chrono::steady_clock;

  // The queue of each outgoing link: when it is free again, by the peer's identity.
  struct Links {
    std::map<int, Clock::time_point> busy_until;
  };

  // Collective over `inner`: every member says which site it is on and its identity (a rank
  // number that names it across communicators, e.g. its world rank; default: its rank in
  // `inner`). Emulators that share `links` share the wires (default: a fresh set).
  // use_host_clock=false holds sends at the sender even on one host (as across hosts). Throws Error
  // for a negative latency or a bandwidth that is not positive.
  LinkEmulator(std::unique_ptr<Communicator> inner, int site, LinkModel between_sites,
               LinkModel within_site = {}, int identity = -1,
               std::shared_ptr<Links> links = nullptr, bool use_host_clock = true);
  ~LinkEmulator() override;

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::unique_ptr<Communicator> split(int color, int key, std::string name) override;

  int site() const { return site_of_[static_cast<size_t>(rank())]; }
  int site_of(int member) const { return site_of_[static_cast<size_t>(member)]; }
  const LinkModel& link_to(int member) const;
  // Whether messages carry their delivery time on the shared host clock (else the sender holds
  // them back).
  bool stamps_messages() const { return same_host_; }
  // Bytes of the messages (send/recv) this rank sent to members on other sites.
  uint64_t bytes_sent_between_sites() const { return between_sites_sent_; }

 protected:
  Handle do_all_reduce(const Tensor& data, ReduceOp op) override;
  Handle do_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override;
  Handle do_all_gather(const Tensor& input, const Tensor& output) override;
  Handle do_broadcast(const Tensor& data, int root) override;
  Handle do_all_to_all(const Tensor& input, const std::vector<int64_t>& send_counts,
                       const Tensor& output, const std::vector<int64_t>& recv_counts) override;
  Handle do_send(const Tensor& data, int dest, int tag) override;
  Handle do_recv(const Tensor& data, int source, int tag) override;
  void do_barrier() override;

 private:
  bool spans_sites() const;
  // Delays a forwarded collective's completion by `seconds` if the group spans sites.
  Handle delayed(Handle inner, double seconds);

  std::unique_ptr<Communicator> inner_;
  LinkModel between_, within_;
  std::shared_ptr<Links> links_;
  std::vector<int> identity_of_, site_of_;  // by member rank
  uint64_t between_sites_sent_ = 0;
  bool same_host_ = false;  // every member on this host: its monotonic clock is shared
  bool use_host_clock_ = true;
};

}  // namespace trillion::comm
