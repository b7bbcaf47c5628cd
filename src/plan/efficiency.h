// The efficiency model: how long one GPU takes for a GEMM of a given shape, for attention, for
// memory-bound elementwise work, and for a collective over a link class.
//
// GEMM (M x K) . (K x N): a roofline per shape. Compute time is 2MNK over the precision's dense
// peak times an achievable fraction = the generation's large-GEMM efficiency (cluster file,
// sourced or "calibrated on X") x wave quantisation (128 x 128 output tiles over the GPU's SMs:
// a last partial wave idles SMs) x K amortisation K / (K + 128) (each tile's prologue and
// epilogue cost about one 128-deep K step); memory time is the operands and result at the
// achievable HBM bandwidth; the GEMM takes the larger. Small or skinny GEMMs (tensor parallelism
// splitting a narrow layer, context parallelism shortening M, attention's head-dim inner
// products) therefore lose efficiency for a physical reason rather than a fitted one.
//
// FlashAttention: attention FLOPs over the 16-bit peak x the generation's attention efficiency x
// Lq / (Lq + 256) for a query block of Lq tokens (short chunks under context parallelism keep the
// tensor cores less busy; FlashAttention-2/3 report lower throughput at short sequences).
//
// Collectives (alpha-beta; Thakur et al. 2005 for the ring costs): a ring step costs alpha; bytes
// move at the link's one-way bandwidth x the NCCL bus efficiency. Ring all-reduce 2(n-1) steps and
// 2(n-1)/n of the bytes; all-gather and reduce-scatter (n-1) steps and (n-1)/n; all-to-all
// (n-1) steps and (n-1)/n; point-to-point one step and all bytes. A group within one NVLink
// domain uses NVLink, else the scale-out link.
//
// Invariants: times are seconds per GPU; every constant comes from the Gpu (its cluster file)
// or is named here with why.
#pragma once

#include "plan/hardware.h"

namespace trillion::plan {

constexpr double kGemmTile = 128;        // output tile edge of a Hopper/Ampere cuBLAS kernel
constexpr double kGemmKOverhead = 128;   // K-depth equivalent of a tile's prologue + epilogue
constexpr double kAttentionBlock = 256;  // query length at which FlashAttention is half as fast

// Achievable fraction of peak for one GEMM shape (batch independent GEMMs of M x N x K) in
// precision p: FP8 and FP4 use the cluster's fp8_gemm efficiency and K overhead where it gives
// them (Hopper's block-scaled FP8 with CUDA-core promotion), else the 16-bit ones.
double gemm_fraction(const Gpu& gpu, double m, double n, double k, double batch = 1,
                     Precision p = Precision::kBf16);
// Seconds for batch GEMMs (M x K)(K x N) with elem_bytes operands.
double gemm_seconds(const Gpu& gpu, Precision p, double m, double n, double k, double batch = 1,
                    double elem_bytes = 2);
// Forward + backward of a layer's matrix: forward (M, N, K), dgrad (M, K, N) and wgrad
// (N, K, M); returned separately.
struct GemmPasses {
  double forward = 0, backward_input = 0, backward_weight = 0;
  GemmPasses& operator+=(const GemmPasses& o) {
    forward += o.forward, backward_input += o.backward_input, backward_weight += o.backward_weight;
    return *this;
  }
};
GemmPasses linear_seconds(const Gpu& gpu, Precision p, double tokens, double out_features,
                          double in_features, double elem_bytes = 2);

// FlashAttention forward of `flops` attention FLOPs with query blocks of query_len tokens;
// the backward is 2.5x the forward (FlashAttention-2 §3.2: 5 matmuls instead of 2).
double flash_attention_forward_seconds(const Gpu& gpu, double flops, double query_len);
constexpr double kFlashBackwardRatio = 2.5;
// The same for inference (prefill): at the part's measured forward-only efficiency where its
// cluster file gives one (Gpu::attention_forward_efficiency), else as in training.
double flash_attention_inference_seconds(const Gpu& gpu, double flops, double query_len);

// Memory-bound work moving `bytes` through HBM.
double memory_seconds(const Gpu& gpu, double bytes);

enum class Link { kNvlink, kScaleOut };
struct LinkCost {
  double alpha = 0;      // seconds per ring step
  double bandwidth = 0;  // achieved bytes/s, one direction
};
LinkCost link_cost(const Gpu& gpu, Link link);
// The link a group of `span` consecutive GPUs (its size times the inner dimensions' sizes) uses.
Link link_of(const Gpu& gpu, long span);

double all_reduce_seconds(const LinkCost& link, double bytes, int n);
double all_gather_seconds(const LinkCost& link, double bytes, int n);  // bytes: the whole result
double reduce_scatter_seconds(const LinkCost& link, double bytes, int n);  // bytes: whole input
double all_to_all_seconds(const LinkCost& link, double bytes, int n);  // bytes: what one rank sends
double p2p_seconds(const LinkCost& link, double bytes);

}  // namespace trillion::plan
