// See mpi_communicator.h. Element types map to MPI types (bf16 moves as 16-bit words and is
// reduced by our own MPI_Op, since MPI has no bfloat16); counts are checked to fit MPI's int.
#include "comm/mpi_communicator.h"

#include <fmt/format.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "core/error.h"

namespace trillion::comm {

void mpi_check_failed(int code, const char* call, const char* file, int line,
                      const std::string& context) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) {
    std::snprintf(text, sizeof(text), "MPI error code %d", code);
  }
  throw Error(fmt::format("{} failed at {}:{}: {} ({})", call, file, line, text, context));
}

LaunchEnvironment launch_environment() {
  struct Vars {
    const char* rank;
    const char* size;
  };
  // Most specific first: Open MPI's own, then PMIx/PMI (MPICH, srun --mpi=pmi*), then Slurm.
  constexpr Vars kVars[] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                            {"PMIX_RANK", "PMIX_SIZE"},
                            {"PMI_RANK", "PMI_SIZE"},
                            {"SLURM_PROCID", "SLURM_NTASKS"}};
  LaunchEnvironment env;
  for (const Vars& v : kVars) {
    const char* r = std::getenv(v.rank);
    if (r == nullptr) continue;
    const char* s = std::getenv(v.size);
    env.found = true;
    env.rank = std::atoi(r);
    // PMIx does not export a size variable; MPI_Comm_size gives the truth after init anyway.
    env.size = s != nullptr ? std::atoi(s) : 0;
    env.source = v.rank;
    return env;
  }
  return env;
}

namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::bf16:
      return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

template <typename Reduce>
void reduce_bf16(void* in, void* inout, int* len, Reduce reduce) {
  const auto* a = static_cast<const bf16*>(in);
  auto* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) {
    b[i] = float_to_bf16(reduce(bf16_to_float(a[i]), bf16_to_float(b[i])));
  }
}

extern "C" void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_bf16(in, inout, len, [](float x, float y) { return x + y; });
}
extern "C" void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_bf16(in, inout, len, [](float x, float y) { return x > y ? x : y; });
}

// User ops are process-wide MPI objects; they are created once, after MPI_Init, and released by
// MPI_Finalize.
MPI_Op mpi_op(ReduceOp op, DType t) {
  if (t != DType::bf16) return op == ReduceOp::sum ? MPI_SUM : MPI_MAX;
  static MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL;
  if (sum == MPI_OP_NULL) {
    TRILLION_MPI_CHECK(MPI_Op_create(bf16_sum, 1, &sum), "bf16 sum");
    TRILLION_MPI_CHECK(MPI_Op_create(bf16_max, 1, &max), "bf16 max");
  }
  return op == ReduceOp::sum ? sum : max;
}

int mpi_count(int64_t n, const std::string& context) {
  if (n > INT_MAX) {
    throw Error(
        fmt::format("{}: {} elements exceed MPI's int count limit {}; use smaller buckets "
                    "(parallel.bucket_mb)",
                    context, n, INT_MAX));
  }
  return static_cast<int>(n);
}

class MpiOp : public PendingOp {
 public:
  explicit MpiOp(std::string what) : what_(std::move(what)) {}
  ~MpiOp() override {
    if (done_) return;
    // Never leave MPI writing into memory the caller is about to free; cannot throw here.
    const int rc = MPI_Wait(&request_, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) std::fprintf(stderr, "MPI_Wait failed for %s\n", what_.c_str());
  }
  MPI_Request* request() { return &request_; }
  void wait() override {
    if (done_) return;
    done_ = true;
    TRILLION_MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE), what_);
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    TRILLION_MPI_CHECK(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), what_);
    done_ = flag != 0;
    return done_;
  }

 private:
  std::string what_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool done_ = false;
};

}  // namespace

MpiRuntime::MpiRuntime() {
  int initialized = 0;
  TRILLION_MPI_CHECK(MPI_Initialized(&initialized), "startup");
  TRILLION_CHECK(!initialized, "MPI initialised twice: create one MpiRuntime per process");
  int provided = 0;
  TRILLION_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "startup");
  TRILLION_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "startup");
  world_ = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world", false);
}

MpiRuntime::~MpiRuntime() {
  const bool unwinding = std::uncaught_exceptions() > 0;
  const bool multi = world_ && world_->size() > 1;
  world_.reset();
  if (unwinding && multi) return;
  MPI_Finalize();
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, bool owned)
    : Communicator(std::move(name)), comm_(comm), owned_(owned) {
  TRILLION_MPI_CHECK(MPI_Comm_rank(comm_, &rank_), "group " + this->name());
  TRILLION_MPI_CHECK(MPI_Comm_size(comm_, &size_), "group " + this->name());
}

MpiCommunicator::~MpiCommunicator() {
  if (owned_) MPI_Comm_free(&comm_);
}

std::string MpiCommunicator::where(const char* call, const Tensor& t) const {
  return fmt::format("{} of {} {} on group '{}', rank {} of {}", call, dtype_name(t.dtype()),
                     t.shape_string(), name(), rank_, size_);
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, std::string name) {
  MPI_Comm sub = MPI_COMM_NULL;
  TRILLION_MPI_CHECK(
      MPI_Comm_split(comm_, color, key, &sub),
      fmt::format("split of '{}' into '{}' (color {}, key {})", this->name(), name, color, key));
  TRILLION_MPI_CHECK(MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN), name);
  return std::make_unique<MpiCommunicator>(sub, std::move(name), true);
}

Handle MpiCommunicator::do_all_reduce(const Tensor& data, ReduceOp op) {
  const std::string ctx = where("all_reduce", data);
  auto h = std::make_unique<MpiOp>(ctx);
  TRILLION_MPI_CHECK(
      MPI_Iallreduce(MPI_IN_PLACE, data.raw(), mpi_count(data.numel(), ctx), mpi_type(data.dtype()),
                     mpi_op(op, data.dtype()), comm_, h->request()),
      ctx);
  return h;
}

Handle MpiCommunicator::do_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  const std::string ctx = where("reduce_scatter", input);
  auto h = std::make_unique<MpiOp>(ctx);
  TRILLION_MPI_CHECK(MPI_Ireduce_scatter_block(
                         input.raw(), output.raw(), mpi_count(output.numel(), ctx),
                         mpi_type(input.dtype()), mpi_op(op, input.dtype()), comm_, h->request()),
                     ctx);
  return h;
}

Handle MpiCommunicator::do_all_gather(const Tensor& input, const Tensor& output) {
  const std::string ctx = where("all_gather", input);
  auto h = std::make_unique<MpiOp>(ctx);
  const int n = mpi_count(input.numel(), ctx);
  const MPI_Datatype t = mpi_type(input.dtype());
  TRILLION_MPI_CHECK(MPI_Iallgather(input.raw(), n, t, output.raw(), n, t, comm_, h->request()),
                     ctx);
  return h;
}

Handle MpiCommunicator::do_broadcast(const Tensor& data, int root) {
  const std::string ctx = where("broadcast", data) + fmt::format(", root {}", root);
  auto h = std::make_unique<MpiOp>(ctx);
  TRILLION_MPI_CHECK(MPI_Ibcast(data.raw(), mpi_count(data.numel(), ctx), mpi_type(data.dtype()),
                                root, comm_, h->request()),
                     ctx);
  return h;
}

Handle MpiCommunicator::do_all_to_all(const Tensor& input, const std::vector<int64_t>& send_counts,
                                      const Tensor& output,
                                      const std::vector<int64_t>& recv_counts) {
  const std::string ctx = where("all_to_all", input);
  // MPI reads the count and displacement arrays when the operation runs, so they live in the op.
  struct AllToAllOp : MpiOp {
    using MpiOp::MpiOp;
    std::vector<int> sc, sd, rc, rd;
  };
  auto h = std::make_unique<AllToAllOp>(ctx);
  int64_t s_off = 0, r_off = 0;
  for (size_t p = 0; p < send_counts.size(); ++p) {
    h->sc.push_back(mpi_count(send_counts[p], ctx));
    h->sd.push_back(mpi_count(s_off, ctx));
    h->rc.push_back(mpi_count(recv_counts[p], ctx));
    h->rd.push_back(mpi_count(r_off, ctx));
    s_off += send_counts[p];
    r_off += recv_counts[p];
  }
  const MPI_Datatype t = mpi_type(input.dtype());
  TRILLION_MPI_CHECK(MPI_Ialltoallv(input.raw(), h->sc.data(), h->sd.data(), t, output.raw(),
                                    h->rc.data(), h->rd.data(), t, comm_, h->request()),
                     ctx);
  return h;
}

Handle MpiCommunicator::do_send(const Tensor& data, int dest, int tag) {
  const std::string ctx = where("send", data) + fmt::format(" to rank {} tag {}", dest, tag);
  auto h = std::make_unique<MpiOp>(ctx);
  TRILLION_MPI_CHECK(MPI_Isend(data.raw(), mpi_count(data.numel(), ctx), mpi_type(data.dtype()),
                               dest, tag, comm_, h->request()),
                     ctx);
  return h;
}

Handle MpiCommunicator::do_recv(const Tensor& data, int source, int tag) {
  const std::string ctx = where("recv", data) + fmt::format(" from rank {} tag {}", source, tag);
  auto h = std::make_unique<MpiOp>(ctx);
  TRILLION_MPI_CHECK(MPI_Irecv(data.raw(), mpi_count(data.numel(), ctx), mpi_type(data.dtype()),
                               source, tag, comm_, h->request()),
                     ctx);
  return h;
}

void MpiCommunicator::do_barrier() {
  TRILLION_MPI_CHECK(MPI_Barrier(comm_),
                     fmt::format("barrier on group '{}', rank {} of {}", name(), rank_, size_));
}

}  // namespace trillion::comm
