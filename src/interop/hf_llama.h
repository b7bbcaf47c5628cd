// Hugging Face Llama interop: a trillion checkpoint as a LlamaForCausalLM directory
// (model.safetensors with HF tensor names, config.json, generation_config.json, tokenizer.json when
// the run has a tokenizer) and back. Names: embed -> model.embed_tokens.weight,
// layers.{l}.attn_norm -> model.layers.{l}.input_layernorm.weight, attn.w{q,k,v,o} ->
// self_attn.{q,k,v,o}_proj.weight, mlp_norm -> post_attention_layernorm.weight,
// mlp.w_{gate,up,down} -> mlp.{gate,up,down}_proj.weight, final_norm -> model.norm.weight,
// lm_head -> lm_head.weight. MoE layers take DeepSeek-V3's names: moe.router -> mlp.gate.weight,
// moe.router_bias -> mlp.gate.e_score_correction_bias, moe.shared.w_* ->
// mlp.shared_experts.*_proj.weight, and the stacked moe.experts.w_* [E, r, c] become one
// mlp.experts.{e}.*_proj.weight [r, c] per expert; config.json is then model_type "trillion_moe"
// (Llama attention + DeepSeek-V3's MoE fields: HF's DeepseekV3 itself expects MLA attention).
// Our weights are [out, in] like torch.nn.Linear's, and our RoPE already
// rotates halves (x[i] with x[i + HD/2], HF's rotate_half; the frequencies theta^(-2i/HD) are HF's
// inv_freq) with query head h reading kv head h / (NH/KV) (HF's repeat_kv), so q/k rows need no
// permutation. Invariant: export then import of an f32 checkpoint gives bitwise its parameters.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/tensor_table.h"
#include "model/config.h"

namespace trillion::interop {

// The HF name of a trillion parameter; throws Error naming the tensor when it has no single HF
// equivalent (biases, the stacked routed experts: see hf_tensors).
std::string hf_llama_name(const std::string& trillion_name);

// The HF tensors a trillion parameter is stored as: itself, or one per routed expert.
struct HfTensor {
  HfTensor(std::string name_, std::vector<int64_t> shape_, int64_t offset_,
           std::string file_ = "model.safetensors", bool copy_ = false)
      : name(std::move(name_)),
        shape(std::move(shape_)),
        offset(offset_),
        file(std::move(file_)),
        copy(copy_) {}
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // first element in the parameter table
  // Stored row r is the parameter's row rows[r] (rows of shape[0]); empty: the same order.
  std::vector<int64_t> rows;
  std::string file = "model.safetensors";  // the file of the exported directory it goes to
  bool copy = false;  // a second copy of a tensor stored elsewhere too (import checks it equal)
  int64_t numel() const;
};
std::vector<HfTensor> hf_tensors(const TensorSpec& spec);
// The HF tensors of a parameter of model `m`: DeepSeek-V3's (hf_deepseek.h) for an MLA model,
// else hf_tensors; none for the MTP modules of a Llama-attention model (Llama has no place for
// them). skip_rope_permutation: see deepseek_v3_tensors.
std::vector<HfTensor> model_hf_tensors(const TensorSpec& spec, const ModelConfig& m,
                                       bool skip_rope_permutation = false);

// config.json text of LlamaForCausalLM for a model (DeepseekV3ForCausalLM for an MLA model);
// bos/eos ids when a tokenizer is known.
std::string hf_llama_config_json(const ModelConfig& m, const std::string& torch_dtype,
                                 std::optional<int> bos_id, std::optional<int> eos_id);
// Reads the fields trillion needs from config.json text into `m` (other fields untouched);
// throws Error naming `origin` and the missing, mistyped or unsupported field. model_type
// "deepseek_v3" reads as an MLA model (hf_deepseek.h). Returns whether the RoPE rows are stored
// in interleaved pairs (deepseek_v3's rope_interleave; false for Llama).
bool parse_hf_llama_config(const std::string& text, const std::string& origin, ModelConfig& m);

struct ExportOptions {
  std::string checkpoint_dir;  // a verified checkpoint directory
  std::string out_dir;
  std::string dtype = "f32";   // "f32" or "bf16"
  std::string tokenizer_path;  // "" : none
};
// Writes model.safetensors, config.json, generation_config.json (and tokenizer.json) into
// out_dir. Returns the number of bytes of model.safetensors.
uint64_t export_hf_llama(const ExportOptions& o);

// Reads out_dir-style files (config.json, model.safetensors) and writes RUN_DIR/checkpoints/
// step_00000000 with zero optimizer moments; the run config is `base_toml` (a [train]/[data]
// setup) with its [model] replaced by config.json's. Returns the checkpoint directory. Refused
// (Error, nothing written): a missing or misshapen tensor, a NaN or infinite weight (named with
// its tensor and element), and tensors the model has no place for unless `allow_unknown`; their
// names are then put in `unknown` (when given) and they are left out.
std::string import_hf_llama(const std::string& in_dir, const std::string& run_dir,
                            const std::string& base_toml, const std::string& base_origin,
                            bool allow_unknown = false,
                            std::vector<std::string>* unknown = nullptr);

}  // namespace trillion::interop
