// See profiling_backend.h. Every op is generated from the op list (backend_ops.h): it times the
// inner backend's call under the op's profile group and adds the op's FLOPs where OpFlops below
// defines them (GEMMs and attention, in the full-square convention of the kernels' work), and
// the op's bytes where OpBytes does (the memory-bound ops).
#include "backend/profiling_backend.h"

#include "core/timer.h"

namespace trillion {

template <typename F>
auto ProfilingBackend::timed(const char* op, double flops, double bytes, F&& f) {
  Timer t;
  auto account = [&] {
    OpProfile& p = ops_[op];
    p.seconds += t.seconds();
    ++p.calls;
    p.flops += flops;
    p.bytes += bytes;
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

void ProfilingBackend::record_external(const char* group, double seconds, double flops,
                                       double bytes) {
  OpProfile& p = ops_[group];
  p.seconds += seconds;
  ++p.calls;
  p.flops += flops;
  p.bytes += bytes;
}

namespace {

// 2 * (every element of C, batch included) * K.
double gemm_flops(const Tensor& C, bool ta, const Tensor& A) {
  const double K = static_cast<double>(ta ? A.size(A.rank() - 2) : A.size(A.rank() - 1));
  return 2.0 * static_cast<double>(C.numel()) * K;
}
// Causal attention core over a (query rows x key rows) square, full-square convention: forward
// Q K^T (2 B NH Tq Tk HD) and P V (2 B NH Tq Tk VD); backward twice that (dV = P^T dO and
// dP = dO V^T over VD, dQ and dK over HD). passes: 1 forward, 2 backward.
double attention_flops(const AttentionShape& s, double query_rows, double key_rows, double passes) {
  return passes * 2.0 * s.B * s.NH * query_rows * key_rows * static_cast<double>(s.HD + s.v_dim());
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
    return attention_flops(s, s.T, s.T, 1);
  }
  double attention_backward(Tensor, const Tensor&, const Tensor&, const Tensor&,
                            const AttentionShape& s) const {
    return attention_flops(s, s.T, s.T, 2);
  }
  double flash_attention_forward(Tensor, Tensor, const Tensor&, const AttentionShape& s,
                                 AttentionBlocks) const {
    return attention_flops(s, s.T, s.T, 1);
  }
  double flash_attention_backward(Tensor, const Tensor&, const Tensor&, const Tensor&,
                                  const Tensor&, const AttentionShape& s, AttentionBlocks) const {
    return attention_flops(s, s.T, s.T, 2);
  }
  double flash_attention_block_forward(Tensor, Tensor, const Tensor&, const Tensor&,
                                       const AttentionShape& s, AttentionSpan q, AttentionSpan k,
                                       AttentionBlocks) const {
    return attention_flops(s, q.len, k.len, 1);
  }
  double flash_attention_block_backward(Tensor, Tensor, const Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, const Tensor&, const AttentionShape& s,
                                        AttentionSpan q, AttentionSpan k, AttentionBlocks) const {
    return attention_flops(s, q.len, k.len, 2);
  }
};

double bytes_of(const Tensor& t) { return static_cast<double>(t.numel() * dtype_size(t.dtype())); }

// Bytes of the memory-bound ops (each operand once); ops without an entry count none.
struct OpBytes {
  double embedding_forward(Tensor out, const int32_t*, const Tensor&) const {
    return 2 * bytes_of(out);  // the rows read, the output written
  }
  double embedding_backward_weight(Tensor, const int32_t*, const Tensor& dout) const {
    return 3 * bytes_of(dout);  // dout read, the rows read and written
  }
  double vocab_embedding_forward(Tensor out, const int32_t*, const Tensor&, int64_t) const {
    return 2 * bytes_of(out);
  }
  double vocab_embedding_backward_weight(Tensor, const int32_t*, const Tensor& dout,
                                         int64_t) const {
    return 3 * bytes_of(dout);
  }
  double rmsnorm_forward(Tensor out, Tensor, const Tensor& x, const Tensor&, double) const {
    return bytes_of(x) + bytes_of(out);
  }
  double rmsnorm_backward_input(Tensor dx, const Tensor& dout, const Tensor& x, const Tensor&,
                                const Tensor&) const {
    return bytes_of(dx) + bytes_of(dout) + bytes_of(x);
  }
  double rmsnorm_backward_weight(Tensor, const Tensor& dout, const Tensor& x, const Tensor&) const {
    return bytes_of(dout) + bytes_of(x);
  }
  double rope_forward(Tensor qkv, const Tensor&, const AttentionShape& s) const {
    // q and k columns read and written; v untouched.
    return 2 * bytes_of(qkv) * static_cast<double>((s.NH + s.KV) * s.HD) / s.qkv_width();
  }
  double rope_backward(Tensor dqkv, const Tensor&, const AttentionShape& s) const {
    return 2 * bytes_of(dqkv) * static_cast<double>((s.NH + s.KV) * s.HD) / s.qkv_width();
  }
  double swiglu_forward(Tensor out, const Tensor& gate_up) const {
    return bytes_of(out) + bytes_of(gate_up);
  }
  double swiglu_backward(Tensor dgate_up, const Tensor& dout, const Tensor& gate_up) const {
    return bytes_of(dgate_up) + bytes_of(dout) + bytes_of(gate_up);
  }
  double cross_entropy_forward(Tensor, Tensor, const Tensor& logits, const int32_t*) const {
    return bytes_of(logits);
  }
  double cross_entropy_backward(Tensor logits, const Tensor&, const int32_t*, double) const {
    return 2 * bytes_of(logits);
  }
  double vocab_cross_entropy_forward(Tensor, const Tensor& logits, const int32_t*, int64_t) const {
    return bytes_of(logits);
  }
  double vocab_cross_entropy_backward(Tensor logits, const Tensor&, const int32_t*, int64_t,
                                      double) const {
    return 2 * bytes_of(logits);
  }
  double adamw_update(Tensor param, const Tensor& grad, Tensor m, Tensor v,
                      const AdamWParams&) const {
    return 2 * bytes_of(param) + bytes_of(grad) + 2 * bytes_of(m) + 2 * bytes_of(v);
  }
  double fill(Tensor x, double) const { return bytes_of(x); }
  double copy(Tensor dst, const Tensor& src) const { return bytes_of(dst) + bytes_of(src); }
  double add(Tensor y, const Tensor& x) const { return 2 * bytes_of(y) + bytes_of(x); }
  double scale(Tensor x, double) const { return 2 * bytes_of(x); }
  double sum_squares(const Tensor& x) const { return bytes_of(x); }
};

// table.name(args) where the table defines it, else 0.
#define TRILLION_OP_COUNT(table, name, args)           \
  [&](const auto& t) -> double {                       \
    if constexpr (requires { t.name args; }) {         \
      return t.name args;                              \
    } else {                                           \
      return 0.0;                                      \
    }                                                  \
  }(table)

}  // namespace

#define TRILLION_PROFILE_OP(ret, name, group, params, args)                        \
  ret ProfilingBackend::name params {                                              \
    const double flops = TRILLION_OP_COUNT(OpFlops{}, name, args);                 \
    const double bytes = TRILLION_OP_COUNT(OpBytes{}, name, args);                 \
    return timed(group, flops, bytes, [&] { return in_.name args; });              \
  }
TRILLION_BACKEND_OPS(TRILLION_PROFILE_OP)
#undef TRILLION_PROFILE_OP

}  // namespace trillion
