// ProfilingBackend: wraps any Backend and accumulates wall time and call counts per operation,
// so `trillion bench step --profile` can say where a step's time goes (what limits MFU).
// It adds one clock read per call and changes no result.
#pragma once

#include <map>
#include <string>

#include "backend/backend.h"

namespace trillion {

struct OpProfile {
  double seconds = 0;
  int64_t calls = 0;
  double flops = 0;  // counted for GEMMs only
};

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(Backend& inner) : in_(inner) {}
  const std::map<std::string, OpProfile>& profile() const { return ops_; }
  void reset() { ops_.clear(); }

  const char* name() const override { return in_.name(); }
  int threads() const override { return in_.threads(); }
  void gemm(Tensor C, bool ta, bool tb, const Tensor& A, const Tensor& B, double alpha,
            double beta) override;
  void gemm_batched(Tensor C, bool ta, bool tb, const Tensor& A, const Tensor& B, double alpha,
                    double beta) override;
  void embedding_forward(Tensor out, const int32_t* tokens, const Tensor& table) override;
  void embedding_backward_weight(Tensor dtable, const int32_t* tokens, const Tensor& dout) override;
  void rmsnorm_forward(Tensor out, Tensor rstd, const Tensor& x, const Tensor& w,
                       double eps) override;
  void rmsnorm_backward_input(Tensor dx, const Tensor& dout, const Tensor& x, const Tensor& w,
                              const Tensor& rstd) override;
  void rmsnorm_backward_weight(Tensor dw, const Tensor& dout, const Tensor& x,
                               const Tensor& rstd) override;
  void rope_forward(Tensor qkv, const Tensor& cos_sin, const AttentionShape& s) override;
  void rope_backward(Tensor dqkv, const Tensor& cos_sin, const AttentionShape& s) override;
  void attention_forward(Tensor out, Tensor probs, const Tensor& qkv,
                         const AttentionShape& s) override;
  void attention_backward(Tensor dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& probs,
                          const AttentionShape& s) override;
  void flash_attention_forward(Tensor out, Tensor lse, const Tensor& qkv, const AttentionShape& s,
                               AttentionBlocks blocks) override;
  void flash_attention_backward(Tensor dqkv, const Tensor& dout, const Tensor& out,
                                const Tensor& qkv, const Tensor& lse, const AttentionShape& s,
                                AttentionBlocks blocks) override;
  void swiglu_forward(Tensor out, const Tensor& gate_up) override;
  void swiglu_backward(Tensor dgate_up, const Tensor& dout, const Tensor& gate_up) override;
  void cross_entropy_forward(Tensor losses, Tensor lse, const Tensor& logits,
                             const int32_t* targets) override;
  void cross_entropy_backward(Tensor logits, const Tensor& lse, const int32_t* targets,
                              double scale) override;
  void adamw_update(Tensor param, const Tensor& grad, Tensor m, Tensor v,
                    const AdamWParams& p) override;
  void fill(Tensor x, double value) override;
  void copy(Tensor dst, const Tensor& src) override;
  void add(Tensor y, const Tensor& x) override;
  void scale(Tensor x, double alpha) override;
  double sum_squares(const Tensor& x) override;

 private:
  template <typename F>
  auto timed(const char* op, double flops, F&& f);
  Backend& in_;
  std::map<std::string, OpProfile> ops_;
};

}  // namespace trillion
