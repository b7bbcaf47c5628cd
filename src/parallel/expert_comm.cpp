// See expert_comm.h.
#include "parallel/expert_comm.h"

#include <fmt/format.h>

#include <numeric>
#include <utility>

#include "core/error.h"

namespace trillion::parallel {

AllToAllExchange::AllToAllExchange(comm::Communicator& ep, Backend& backend,
                                   MemoryTracker& tracker, int64_t experts)
    : ep_(ep), be_(backend), tracker_(tracker), local_(experts / ep.size()) {
  TRILLION_CHECK(experts % ep.size() == 0,
                 fmt::format("{} experts do not split over {} ranks", experts, ep.size()));
}

AllToAllExchange::RowCounts AllToAllExchange::take_row_counts() {
  return std::exchange(rows_, RowCounts{});
}

ExchangePlan AllToAllExchange::plan(const std::vector<int64_t>& rows_per_expert) {
  const int n = ep_.size();
  ExchangePlan p;
  p.send_rows.assign(n, 0);
  for (int64_t e = 0; e < static_cast<int64_t>(rows_per_expert.size()); ++e) {
    p.send_rows[e / local_] += rows_per_expert[e];
  }
  // Peer r gets the counts of its experts: a block of local_ counts per peer, in rank order.
  std::vector<double> out(rows_per_expert.begin(), rows_per_expert.end()), in(n * local_);
  const std::vector<int64_t> block(n, local_);
  ep_.all_to_all(Tensor(out.data(), DType::f64, {static_cast<int64_t>(out.size())}), block,
                 Tensor(in.data(), DType::f64, {static_cast<int64_t>(in.size())}), block);
  p.recv_counts.resize(n * local_);
  p.recv_rows.assign(n, 0);
  p.local_rows.assign(local_, 0);
  for (int src = 0; src < n; ++src) {
    for (int64_t le = 0; le < local_; ++le) {
      const int64_t c = static_cast<int64_t>(in[src * local_ + le]);
      p.recv_counts[src * local_ + le] = c;
      p.recv_rows[src] += c;
      p.local_rows[le] += c;
    }
  }
  const int me = ep_.rank();
  rows_.out += std::accumulate(p.send_rows.begin(), p.send_rows.end(), int64_t{0}) - p.send_rows[me];
  rows_.in += std::accumulate(p.recv_rows.begin(), p.recv_rows.end(), int64_t{0}) - p.recv_rows[me];
  rows_.local += p.send_rows[me];
  rows_.plans += 1;
  return p;
}

void AllToAllExchange::reorder(const ExchangePlan& p, const Tensor& from, const Tensor& to,
                               bool to_expert_major) {
  const int n = ep_.size();
  // Row offsets of block (src, le) in the source-major and the expert-major layouts.
  std::vector<int64_t> source_major(n * local_), expert_major(n * local_);
  int64_t at = 0;
  for (int src = 0; src < n; ++src) {
    for (int64_t le = 0; le < local_; ++le) {
      source_major[src * local_ + le] = at;
      at += p.recv_counts[src * local_ + le];
    }
  }
  at = 0;
  for (int64_t le = 0; le < local_; ++le) {
    for (int src = 0; src < n; ++src) {
      expert_major[src * local_ + le] = at;
      at += p.recv_counts[src * local_ + le];
    }
  }
  for (int i = 0; i < n * local_; ++i) {
    const int64_t rows = p.recv_counts[i];
    if (rows == 0) continue;
    const int64_t a = to_expert_major ? source_major[i] : expert_major[i];
    const int64_t b = to_expert_major ? expert_major[i] : source_major[i];
    be_.copy(to.rows(b, b + rows), from.rows(a, a + rows));
  }
}

void AllToAllExchange::dispatch(const ExchangePlan& p, const Tensor& send, const Tensor& recv) {
  const int n = ep_.size();
  const int64_t C = send.size(1), R = p.received();
  std::vector<int64_t> sc(n), rc(n);
  for (int r = 0; r < n; ++r) sc[r] = p.send_rows[r] * C, rc[r] = p.recv_rows[r] * C;
  Buffer staged(tracker_, MemoryCategory::workspace, send.dtype(), std::max<int64_t>(R, 1) * C);
  Buffer out(tracker_, MemoryCategory::workspace, send.dtype(),
             std::max<int64_t>(send.size(0), 1) * C);
  if (send.size(0) > 0) be_.copy(out.view(0, {send.size(0), C}), send);
  ep_.all_to_all(out.flat(), sc, staged.flat(), rc);
  if (R > 0) reorder(p, staged.view(0, {R, C}), recv, true);
}

void AllToAllExchange::combine(const ExchangePlan& p, const Tensor& back, const Tensor& out) {
  const int n = ep_.size();
  const int64_t C = back.size(1), R = p.received(), S = out.size(0);
  std::vector<int64_t> sc(n), rc(n);
  for (int r = 0; r < n; ++r) sc[r] = p.recv_rows[r] * C, rc[r] = p.send_rows[r] * C;
  Buffer staged(tracker_, MemoryCategory::workspace, back.dtype(), std::max<int64_t>(R, 1) * C);
  if (R > 0) reorder(p, back, staged.view(0, {R, C}), false);
  Buffer in(tracker_, MemoryCategory::workspace, back.dtype(), std::max<int64_t>(S, 1) * C);
  ep_.all_to_all(staged.flat(), sc, in.flat(), rc);
  if (S > 0) be_.copy(out, in.view(0, {S, C}));
}

}  // namespace trillion::parallel
