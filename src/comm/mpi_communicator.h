// The MPI (Open MPI) transport: MpiRuntime owns MPI_Init/MPI_Finalize for a process, and
// MpiCommunicator is a Communicator over one MPI communicator. Every MPI call goes through
// TRILLION_MPI_CHECK, which turns a failure into trillion::Error with the call, file, line, the
// MPI error text and the values involved (communicators use MPI_ERRORS_RETURN, so MPI reports
// errors to us instead of aborting the job with a stack dump).
//
// Rank and size come from MPI itself; whether a process was started by a launcher (mpirun,
// srun, `trillion launch`) is read from the environment before MPI is touched, so a plain
// one-process run never initialises MPI.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace trillion::comm {

// Throws Error("<call> failed at <file>:<line>: <MPI error text> (<context>)").
void mpi_check_failed(int code, const char* call, const char* file, int line,
                      const std::string& context);

#define TRILLION_MPI_CHECK(call, context)                                                         \
  do {                                                                                            \
    const int trillion_mpi_rc_ = (call);                                                          \
    if (trillion_mpi_rc_ != MPI_SUCCESS) {                                                        \
      ::trillion::comm::mpi_check_failed(trillion_mpi_rc_, #call, __FILE__, __LINE__, (context)); \
    }                                                                                             \
  } while (0)

// Where the launcher says this process sits, read from the environment without initialising MPI
// (Open MPI: OMPI_COMM_WORLD_*, PMIx: PMIX_RANK, MPICH/Hydra: PMI_*, Slurm: SLURM_PROCID and
// SLURM_NTASKS). found is false in a process started without a launcher.
struct LaunchEnvironment {
  bool found = false;
  int rank = 0;
  int size = 1;
  std::string source;  // which variables said so, for messages
};
LaunchEnvironment launch_environment();

class MpiCommunicator;

// Initialises MPI (thread level FUNNELED: only the main thread calls MPI) for the lifetime of
// the object and owns the world communicator. One per process. The destructor finalises MPI,
// except while an exception is unwinding in a multi-rank job: then the other ranks may be blocked
// in a collective that will never complete, so the process leaves without MPI_Finalize and the
// launcher tears the job down (and `trillion launch` reports this rank's error line).
class MpiRuntime {
 public:
  MpiRuntime();
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  MpiCommunicator& world() { return *world_; }

 private:
  std::unique_ptr<MpiCommunicator> world_;
};

class MpiCommunicator : public Communicator {
 public:
  // Wraps `comm`; frees it on destruction when `owned` (communicators made by split).
  MpiCommunicator(MPI_Comm comm, std::string name, bool owned);
  ~MpiCommunicator() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm handle() const { return comm_; }
  std::unique_ptr<Communicator> split(int color, int key, std::string name) override;

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
  std::string where(const char* call, const Tensor& t) const;
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

}  // namespace trillion::comm
