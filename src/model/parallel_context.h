// ParallelContext: what a layer module needs to know about the layout — this rank's LocalShape,
// its shard coordinates (which slice of each sharded tensor it holds) and the communicators of
// the groups a layer talks over (tensor, context, expert). Built once per rank from the mesh
// and passed explicitly to every module (no globals). With every degree 1 the groups are absent
// and every module computes exactly the one-process math.
#pragma once

#include "comm/communicator.h"
#include "core/tensor_table.h"
#include "model/local_shape.h"
#include "model/sequence_split.h"

namespace trillion {

class ContextAttention;  // model/attention.h
class ExpertExchange;    // model/moe.h
class LinearPrecision;   // model/linear_gemm.h

struct ParallelContext {
  LocalShape shape;
  ShardDegrees degrees;
  ShardCoord shard;  // tp / ep coordinates, for the parameter table's shards
  // nullptr: a group of one.
  comm::Communicator* tp = nullptr;
  // Sequence parallelism (with tp > 1): the residual stream, norms and residual adds hold only
  // this rank's N/tp token rows (parallel/tensor_comm.h).
  bool sp = false;
  comm::Communicator* cp = nullptr;
  // Context parallelism: this rank's rows of each sequence (RoPE angles use their global
  // positions) and the attention core over the whole sequence (nullptr: it is all here).
  SequenceSplit sequence;
  int cp_rank = 0;
  ContextAttention* context_attention = nullptr;
  comm::Communicator* ep = nullptr;
  // MoE layers under tp with parallel.expert_tp = 1 (requires SP): the router and the routed
  // experts take this rank's N/tp residual rows, and the ep group spans tp x ep; the shared
  // experts stay tp-sharded over the gathered rows, like a dense MLP.
  bool moe_slice = false;
  // MoE layers under tp with parallel.expert_tp = tp (requires SP): every routed expert's width
  // FE is split over tp (column-parallel gate/up, row-parallel down) and the MoE layer is a tp
  // region like the dense MLP: it routes all N gathered rows, its output is reduce-scattered.
  bool experts_tp = false;
  // Moves MoE rows to the ranks holding their experts (nullptr: every expert on this rank).
  ExpertExchange* experts = nullptr;
  // The precision recipe of the blocks' linear layers (nullptr: the backend's dtype, exactly).
  LinearPrecision* precision = nullptr;

  int tp_size() const { return tp == nullptr ? 1 : tp->size(); }
  int tp_rank() const { return tp == nullptr ? 0 : tp->rank(); }
  bool sequence_parallel() const { return sp && tp_size() > 1; }
  // Token rows of the residual stream on this rank: N, or N/tp under sequence parallelism.
  int64_t residual_tokens() const {
    return sequence_parallel() ? shape.tokens() / tp_size() : shape.tokens();
  }
  // The token rows a MoE layer routes on this rank and the first one's index in the micro-batch.
  int64_t moe_tokens() const { return moe_slice ? residual_tokens() : shape.tokens(); }
  int64_t moe_first_token() const { return moe_slice ? tp_rank() * residual_tokens() : 0; }

  // The one-process context of a [batch, seq_len] micro-batch.
  static ParallelContext single(const ModelConfig& config, int64_t batch, int64_t seq_len) {
    ParallelContext ctx;
    ctx.shape = local_shape(config, batch, seq_len);
    return ctx;
  }
};

}  // namespace trillion
