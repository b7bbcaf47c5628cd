// Hugging Face DeepSeek-V3 interop: an MLA model (model.attention = "mla", dense or MoE) as a
// DeepseekV3ForCausalLM directory (model_type "deepseek_v3"), with the tensor names and layouts of
// the released DeepSeek-V3 checkpoint, and back.
//   layers.{l}.attn.wq_a, q_norm, wq_b -> model.layers.{l}.self_attn.q_a_proj, q_a_layernorm,
//   q_b_proj (q_lora_rank 0: attn.wq -> self_attn.q_proj); attn.wkv_a, kv_norm, wkv_b, wo ->
//   kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj; norms, MLPs and MoE tensors keep the
//   names of hf_llama.h (DeepSeek-V3's own).
// RoPE layout: trillion rotates halves (element i with i + DR/2) while the released checkpoint,
// and HF with rope_interleave = true (its default), rotates interleaved pairs (2i, 2i + 1). The
// export therefore reorders the rope rows of the query projection (each head's last DR rows) and
// of kv_a_proj_with_mqa (its last DR rows): exported row 2i = our row i, row 2i + 1 = our row
// i + DR/2. Import applies the inverse, so export then import is bitwise.
// Multi-token prediction: module k is the checkpoint's layer L + k (enorm, hnorm, eh_proj, the
// block, shared_head.norm, plus copies of embed_tokens and shared_head.head, as released). HF
// transformers ignores only layer 61 when loading (a name pattern), so for any other L the
// modules go to a second file, mtp.safetensors, which DeepseekV3ForCausalLM never reads
// (config.json's num_nextn_predict_layers says how many there are).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor_table.h"
#include "interop/hf_llama.h"
#include "model/config.h"

namespace trillion::interop {

// Whether a model exports as deepseek_v3 (it has MLA attention).
inline bool exports_as_deepseek_v3(const ModelConfig& m) {
  return m.mla;
}

// The HF tensors a trillion parameter of an MLA model is stored as (row_order set where the RoPE
// rows are reordered). `skip_rope_permutation` writes the rope rows in trillion's order: a wrong
// layout, for the test that shows a wrong layout is caught (TRILLION_EXPORT_WRONG_ROPE_LAYOUT).
std::vector<HfTensor> deepseek_v3_tensors(const TensorSpec& spec, const ModelConfig& m,
                                          bool skip_rope_permutation = false);

// Throws Error (naming `checkpoint`) when the model computes something DeepseekV3ForCausalLM does
// not: a MoE router other than sigmoid_bias.
void check_deepseek_v3_exportable(const ModelConfig& m, const std::string& checkpoint);

// config.json text of DeepseekV3ForCausalLM for an MLA model.
std::string deepseek_v3_config_json(const ModelConfig& m, const std::string& torch_dtype,
                                    std::optional<int> bos_id, std::optional<int> eos_id);
// Reads a deepseek_v3 config.json (parsed) into `m` and returns its rope_interleave (true: the
// rope rows are stored in interleaved pairs); throws Error naming `origin` and the field trillion
// cannot represent (group-limited routing, a routed scaling factor, rope scaling, ...).
bool parse_deepseek_v3_config(const nlohmann::json& j, const std::string& origin, ModelConfig& m);

}  // namespace trillion::interop
