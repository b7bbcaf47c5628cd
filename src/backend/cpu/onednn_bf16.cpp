// See onednn_bf16.h. The transposes are expressed as strides of oneDNN memory descriptors (no
// copies); alpha is the matmul's output scale and beta a sum post-op, so C is written once.
// oneDNN caches primitives by descriptor, so building the primitive per call is cheap after the
// first call of a shape.
#include "backend/cpu/onednn_bf16.h"

#include <fmt/format.h>

#include <cstdlib>

#include "core/error.h"

#ifdef TRILLION_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace trillion {

#ifdef TRILLION_HAVE_ONEDNN

namespace {

bool cpu_has_native_bf16() {
  const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  const unsigned bf16_isa = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
  return (isa & bf16_isa) == bf16_isa;
}

bool forced_off() {
  const char* v = std::getenv("TRILLION_ONEDNN");
  return v != nullptr && std::string(v) == "0";
}

struct Dnnl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};
Dnnl& dnnl_state() {
  static Dnnl state;
  return state;
}

}  // namespace

bool onednn_bf16_available() {
  static const bool native = cpu_has_native_bf16();
  return native && !forced_off();
}

std::string onednn_bf16_status() {
  const dnnl_version_t* v = dnnl_version();
  const std::string version = fmt::format("oneDNN {}.{}.{}", v->major, v->minor, v->patch);
  if (!cpu_has_native_bf16()) return version + ", CPU without AVX512-BF16/AMX: emulation";
  if (forced_off()) return version + ", TRILLION_ONEDNN=0: emulation";
  return version + ", native bf16 matmul";
}

void onednn_bf16_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda,
                      const bf16* B, int64_t ldb, float alpha, float beta, float* C, int64_t ldc) {
  TRILLION_CHECK(onednn_bf16_available(), "onednn_bf16_gemm: " + onednn_bf16_status());
  using dnnl::memory;
  Dnnl& d = dnnl_state();
  const memory::dims a_strides = ta ? memory::dims{1, lda} : memory::dims{lda, 1};
  const memory::dims b_strides = tb ? memory::dims{1, ldb} : memory::dims{ldb, 1};
  const memory::desc a_md({M, K}, memory::data_type::bf16, a_strides);
  const memory::desc b_md({K, N}, memory::data_type::bf16, b_strides);
  const memory::desc c_md({M, N}, memory::data_type::f32, memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, d.engine);
  memory a_mem(a_md, d.engine, const_cast<bf16*>(A));
  memory b_mem(b_md, d.engine, const_cast<bf16*>(B));
  memory c_mem(c_md, d.engine, C);
  dnnl::matmul(pd).execute(
      d.stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
  d.stream.wait();
}

#else  // built without oneDNN

bool onednn_bf16_available() {
  return false;
}
std::string onednn_bf16_status() {
  return "built without oneDNN (TRILLION_ONEDNN off or libdnnl-dev missing): emulation";
}
void onednn_bf16_gemm(bool, bool, int64_t, int64_t, int64_t, const bf16*, int64_t, const bf16*,
                      int64_t, float, float, float*, int64_t) {
  TRILLION_CHECK(false, "onednn_bf16_gemm: " + onednn_bf16_status());
}

#endif

}  // namespace trillion
