// See context_comm.h.
#include "parallel/context_comm.h"

#include "core/error.h"
#include "core/timer.h"

namespace trillion::parallel {

void CpRing::start(const Tensor& send, const Tensor& recv, RingStream stream) {
  TRILLION_CHECK(send.numel() == recv.numel() && send.dtype() == recv.dtype(),
                 "CpRing::start: send and receive blocks differ");
  const int tag = static_cast<int>(stream);
  in_flight_.push_back(cp_.start_recv(recv, prev(), tag));
  in_flight_.push_back(cp_.start_send(send, next(), tag));
}

void CpRing::progress() {
  for (comm::Handle& h : in_flight_) h->test();
}

double CpRing::wait() {
  Timer t;
  comm::wait_all(in_flight_);
  return t.seconds();
}

}  // namespace trillion::parallel
