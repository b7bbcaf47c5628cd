// See profiling_backend.h. Every op is generated from the op list (backend_ops.h): it times the
// inner backend's call under the op's profile group and adds the op's FLOPs where OpFlops below
// defines them (GEMMs and attention, in the full-square convention of the kernels' work).
#include "backend/profiling_backend.h"

#include "core/timer.h"

namespace trillion {

template <typename F>
auto ProfilingBackend::timed(const char* op, double flops, F&& f) {
  Timer t;
  auto account = [&] {
    OpProfile& p = ops_[op];
    p.seconds += t.seconds();
    ++p.calls;
    p.flops += flops;
  };
  if constexpr (std::is_void_v<decltype(f())>) {
    f();
    account();
  } else {
    auto r = f();
    account();
    return r;
  }
}

namespace {

// 2 * (every element of C, batch included) * K.
double gemm_flops(const Tensor& C, bool ta, const Tensor& A) {
  const double K = static_cast<double>(ta ? A.size(A.rank() - 2) : A.size(A.rank() - 1));
  return 2.0 * static_cast<double>(C.numel()) * K;
}
double attention_flops(const AttentionShape& s, double passes) {  // 2 GEMMs of 2 B NH T^2 HD
  return passes * 2.0 * s.B * s.NH * static_cast<double>(s.T) * s.T * s.HD;
}

// FLOPs of the ops that count them; ops without an entry count none.
struct OpFlops {
  double gemm(Tensor C, bool ta, bool, const Tensor& A, const Tensor&, double, double) const {
    return gemm_flops(C, ta, A);
  }
  double gemm_batched(Tensor C, bool ta, bool, const Tensor& A, const Tensor&, double,
                      double) const {
    return gemm_flops(C, ta, A);
  }
  double attention_forward(Tensor, Tensor, const Tensor&, const AttentionShape& s) const {
    return attention_flops(s, 2);
  }
  double attention_backward(Tensor, const Tensor&, const Tensor&, const Tensor&,
                            const AttentionShape& s) const {
    return attention_flops(s, 4);
  }
  double flash_attention_forward(Tensor, Tensor, const Tensor&, const AttentionShape& s,
                                 AttentionBlocks) const {
    return attention_flops(s, 2);
  }
  double flash_attention_backward(Tensor, const Tensor&, const Tensor&, const Tensor&,
                                  const Tensor&, const AttentionShape& s, AttentionBlocks) const {
    return attention_flops(s, 4);
  }
  double flash_attention_block_forward(Tensor, Tensor, const Tensor&, const Tensor&,
                                       const AttentionShape& s, AttentionSpan q, AttentionSpan k,
                                       AttentionBlocks) const {
    return 2.0 * 2.0 * s.B * s.NH * static_cast<double>(q.len) * k.len * s.HD;
  }
  double flash_attention_block_backward(Tensor, Tensor, const Tensor&, const Tensor&,
                                        const Tensor&, const Tensor&, const Tensor&,
                                        const AttentionShape& s, AttentionSpan q, AttentionSpan k,
                                        AttentionBlocks) const {
    return 4.0 * 2.0 * s.B * s.NH * static_cast<double>(q.len) * k.len * s.HD;
  }
};

}  // namespace

#define TRILLION_PROFILE_OP(ret, name, group, params, args)    \
  ret ProfilingBackend::name params {                          \
    const double flops = [&](const auto& table) -> double {    \
      if constexpr (requires { table.name args; }) {           \
        return table.name args;                                \
      } else {                                                 \
        return 0.0;                                            \
      }                                                        \
    }(OpFlops{});                                              \
    return timed(group, flops, [&] { return in_.name args; }); \
  }
TRILLION_BACKEND_OPS(TRILLION_PROFILE_OP)
#undef TRILLION_PROFILE_OP

}  // namespace trillion
