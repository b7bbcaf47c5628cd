// See hf_llama.h.
#include "interop/hf_llama.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/dtype.h"
#include "core/error.h"
#include "data/file_io.h"
#include "interop/hf_deepseek.h"
#include "interop/hf_tokenizer.h"
#include "interop/safetensors.h"
#include "model/transformer.h"
#include "train/checkpoint/checkpoint.h"
#include "train/run_config.h"

namespace trillion::interop {

namespace {

constexpr const char* kMoeArchitecture = "TrillionMoeForCausalLM";
constexpr const char* kMoeModelType = "trillion_moe";

// trillion name suffix of a layer tensor -> HF suffix.
constexpr std::pair<const char*, const char*> kLayerNames[] = {
    {"attn_norm", "input_layernorm.weight"}, {"attn.wq", "self_attn.q_proj.weight"},
    {"attn.wk", "self_attn.k_proj.weight"},  {"attn.wv", "self_attn.v_proj.weight"},
    {"attn.wo", "self_attn.o_proj.weight"},  {"mlp_norm", "post_attention_layernorm.weight"},
    {"mlp.w_gate", "mlp.gate_proj.weight"},  {"mlp.w_up", "mlp.up_proj.weight"},
    {"mlp.w_down", "mlp.down_proj.weight"},
};
// MoE layer tensors with one DeepSeek-V3 name each (routed experts are split by hf_tensors).
constexpr std::pair<const char*, const char*> kMoeNames[] = {
    {"moe.router", "mlp.gate.weight"},
    {"moe.router_bias", "mlp.gate.e_score_correction_bias"},
    {"moe.shared.w_gate", "mlp.shared_experts.gate_proj.weight"},
    {"moe.shared.w_up", "mlp.shared_experts.up_proj.weight"},
    {"moe.shared.w_down", "mlp.shared_experts.down_proj.weight"},
};

// Element bytes of `src` (count elements of checkpoint dtype `from`) in dtype code `to`.
std::string convert(const char* src, int64_t count, int from_bytes, const std::string& to) {
  auto value = [&](int64_t i) {
    if (from_bytes == 8) {
      double d;
      std::memcpy(&d, src + i * 8, 8);
      return d;
    }
    float f;
    std::memcpy(&f, src + i * 4, 4);
    return static_cast<double>(f);
  };
  std::string out;
  if (to == "F64" || (to == "F32" && from_bytes == 4)) {
    if ((to == "F64") == (from_bytes == 8)) return std::string(src, count * from_bytes);
  }
  const int size = safetensors_dtype_size(to);
  out.resize(count * size);
  for (int64_t i = 0; i < count; ++i) {
    const double v = value(i);
    if (to == "F64") {
      std::memcpy(&out[i * 8], &v, 8);
    } else if (to == "F32") {
      const float f = static_cast<float>(v);
      std::memcpy(&out[i * 4], &f, 4);
    } else {
      const bf16 b = float_to_bf16(static_cast<float>(v));
      std::memcpy(&out[i * 2], &b, 2);
    }
  }
  return out;
}

// Element bytes of HF tensor `t` in its stored row order, from the parameter table `base`.
std::string stored_order(const char* base, const HfTensor& t, int elem) {
  const char* first = base + t.offset * elem;
  if (t.rows.empty()) return std::string(first, t.numel() * elem);
  const int64_t width = t.numel() / t.shape[0] * elem;
  std::string out;
  out.reserve(t.numel() * elem);
  for (int64_t r : t.rows) out.append(first + r * width, width);
  return out;
}

const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& origin) {
  if (!j.contains(key) || j[key].is_null())
    throw Error(fmt::format("{}: field '{}' is missing", origin, key));
  return j[key];
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return "[" + s + "]";
}

int64_t int_field(const nlohmann::json& j, const char* key, const std::string& origin) {
  const auto& v = field(j, key, origin);
  if (!v.is_number_integer() || v.get<int64_t>() <= 0)
    throw Error(fmt::format("{}: field '{}' must be a positive integer", origin, key));
  return v.get<int64_t>();
}

double real_field(const nlohmann::json& j, const char* key, const std::string& origin) {
  const auto& v = field(j, key, origin);
  if (!v.is_number()) throw Error(fmt::format("{}: field '{}' must be a number", origin, key));
  return v.get<double>();
}

}  // namespace

std::string hf_llama_name(const std::string& name) {
  if (name == "embed") return "model.embed_tokens.weight";
  if (name == "final_norm") return "model.norm.weight";
  if (name == "lm_head") return "lm_head.weight";
  if (name.rfind("layers.", 0) == 0) {
    const size_t dot = name.find('.', 7);
    if (dot != std::string::npos) {
      const std::string layer = name.substr(7, dot - 7), rest = name.substr(dot + 1);
      for (const auto& [ours, theirs] : kLayerNames) {
        if (rest == ours) return fmt::format("model.layers.{}.{}", layer, theirs);
      }
      for (const auto& [ours, theirs] : kMoeNames) {
        if (rest == ours) return fmt::format("model.layers.{}.{}", layer, theirs);
      }
    }
  }
  throw Error(fmt::format(
      "tensor '{}' has no Hugging Face name (bias tensors and stacked routed experts have none; "
      "the experts are exported one per expert by hf_tensors); export a bias-free checkpoint",
      name));
}

std::vector<HfTensor> hf_tensors(const TensorSpec& s) {
  const std::string experts = ".moe.experts.w_";
  const size_t at = s.name.find(experts);
  if (at == std::string::npos || s.name.rfind("layers.", 0) != 0)
    return {HfTensor(hf_llama_name(s.name), s.shape, s.offset)};
  // layers.{l}.moe.experts.w_{gate,up,down} [E, r, c] -> one [r, c] tensor per expert.
  const std::string layer = s.name.substr(7, at - 7), which = s.name.substr(at + experts.size());
  if (s.shape.size() != 3 || (which != "gate" && which != "up" && which != "down"))
    throw Error(fmt::format("tensor '{}' has no Hugging Face name", s.name));
  std::vector<HfTensor> out;
  const int64_t per_expert = s.shape[1] * s.shape[2];
  for (int64_t e = 0; e < s.shape[0]; ++e) {
    out.emplace_back(fmt::format("model.layers.{}.mlp.experts.{}.{}_proj.weight", layer, e, which),
                     std::vector<int64_t>{s.shape[1], s.shape[2]}, s.offset + e * per_expert);
  }
  return out;
}

int64_t HfTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<HfTensor> model_hf_tensors(const TensorSpec& spec, const ModelConfig& m,
                                       bool skip_rope_permutation) {
  if (exports_as_deepseek_v3(m)) return deepseek_v3_tensors(spec, m, skip_rope_permutation);
  // Llama has no place for multi-token-prediction modules (generation never uses them).
  if (spec.name.starts_with("mtp.")) return {};
  return hf_tensors(spec);
}

std::string hf_llama_config_json(const ModelConfig& m, const std::string& torch_dtype,
                                 std::optional<int> bos_id, std::optional<int> eos_id) {
  if (exports_as_deepseek_v3(m)) return deepseek_v3_config_json(m, torch_dtype, bos_id, eos_id);
  nlohmann::ordered_json j;
  j["architectures"] = {m.moe.enabled() ? kMoeArchitecture : "LlamaForCausalLM"};
  j["model_type"] = m.moe.enabled() ? kMoeModelType : "llama";
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.d_model;
  j["intermediate_size"] = m.ffn_hidden;
  j["num_hidden_layers"] = m.n_layers;
  j["num_attention_heads"] = m.n_heads;
  j["num_key_value_heads"] = m.n_kv_heads;
  j["head_dim"] = m.head_dim;
  j["max_position_embeddings"] = m.seq_len;
  j["rope_theta"] = m.rope_theta;
  j["rope_scaling"] = nullptr;
  j["rms_norm_eps"] = m.norm_eps;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["tie_word_embeddings"] = m.tied_embeddings;
  j["initializer_range"] = m.init_std;
  j["torch_dtype"] = torch_dtype;
  if (m.moe.enabled()) {
    // DeepSeek-V3's MoE fields (HF DeepseekV3Config): layers from first_k_dense_replace on are
    // MoE (moe_layer_freq 1); gates are the chosen affinities normalised (norm_topk_prob) and
    // not rescaled (routed_scaling_factor 1); n_group / topk_group: the model's group-limited
    // routing (HF's DeepseekV3TopkRouter rule).
    const MoeConfig& e = m.moe;
    const bool sigmoid = e.router == "sigmoid_bias";
    j["n_routed_experts"] = e.n_routed_experts;
    j["n_shared_experts"] = e.n_shared_experts;
    j["num_experts_per_tok"] = e.top_k;
    j["moe_intermediate_size"] = e.expert_ffn;
    j["first_k_dense_replace"] = e.n_dense_layers;
    j["moe_layer_freq"] = 1;
    j["routed_scaling_factor"] = 1.0;
    j["norm_topk_prob"] = true;
    j["scoring_func"] = sigmoid ? "sigmoid" : "softmax";
    j["topk_method"] = sigmoid ? "noaux_tc" : "greedy";
    j["n_group"] = e.n_group;
    j["topk_group"] = e.topk_group;
    j["aux_loss_alpha"] = e.balance_loss_alpha;
    j["seq_aux"] = true;
    // trillion's own training settings, so an import resumes the same router.
    j["bias_update_speed"] = e.bias_update_rate;
    j["capacity_factor"] = e.capacity_factor;
  }
  if (bos_id) j["bos_token_id"] = *bos_id;
  if (eos_id) j["eos_token_id"] = *eos_id;
  return j.dump(2) + "\n";
}

bool parse_hf_llama_config(const std::string& text, const std::string& origin, ModelConfig& m) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{} is not JSON: {}", origin, e.what()));
  }
  if (!j.is_object()) throw Error(fmt::format("{} is not a JSON object", origin));
  if (j.contains("model_type") && j["model_type"] == "deepseek_v3")
    return parse_deepseek_v3_config(j, origin, m);
  m.mla = false;
  m.mla_dims = {};
  const bool moe = j.contains("model_type") && j["model_type"] == kMoeModelType;
  if (j.contains("model_type") && j["model_type"] != "llama" && !moe)
    throw Error(
        fmt::format("{}: model_type {} is not supported: \"llama\", \"deepseek_v3\" and "
                    "\"{}\" (trillion's MoE export) checkpoints import",
                    origin, j["model_type"].dump(), kMoeModelType));
  for (const char* flag : {"attention_bias", "mlp_bias"}) {
    if (j.contains(flag) && j[flag].is_boolean() && j[flag].get<bool>())
      throw Error(fmt::format("{}: {} = true is not supported (trillion's Llama has no biases)",
                              origin, flag));
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    throw Error(fmt::format("{}: rope_scaling is not supported; only plain RoPE imports", origin));
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    throw Error(fmt::format("{}: hidden_act {} is not supported (silu only)", origin,
                            j["hidden_act"].dump()));
  m.vocab_size = int_field(j, "vocab_size", origin);
  m.d_model = int_field(j, "hidden_size", origin);
  m.ffn_hidden = int_field(j, "intermediate_size", origin);
  m.n_layers = int_field(j, "num_hidden_layers", origin);
  m.n_heads = int_field(j, "num_attention_heads", origin);
  m.n_kv_heads =
      j.contains("num_key_value_heads") ? int_field(j, "num_key_value_heads", origin) : m.n_heads;
  m.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? int_field(j, "head_dim", origin)
                                                                  : m.d_model / m.n_heads;
  m.seq_len = int_field(j, "max_position_embeddings", origin);
  m.rope_theta = j.contains("rope_theta") ? real_field(j, "rope_theta", origin) : 10000.0;
  m.norm_eps = j.contains("rms_norm_eps") ? real_field(j, "rms_norm_eps", origin) : 1e-6;
  if (j.contains("initializer_range")) m.init_std = real_field(j, "initializer_range", origin);
  m.tied_embeddings = j.contains("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean() &&
                      j["tie_word_embeddings"].get<bool>();
  m.moe = {};
  if (!moe) return false;
  MoeConfig& e = m.moe;
  e.n_routed_experts = int_field(j, "n_routed_experts", origin);
  e.n_shared_experts = j.contains("n_shared_experts") ? j["n_shared_experts"].get<int64_t>() : 0;
  e.top_k = int_field(j, "num_experts_per_tok", origin);
  e.expert_ffn = int_field(j, "moe_intermediate_size", origin);
  e.n_dense_layers =
      j.contains("first_k_dense_replace") ? j["first_k_dense_replace"].get<int64_t>() : 0;
  const std::string scoring =
      j.contains("scoring_func") ? j["scoring_func"].get<std::string>() : "sigmoid";
  if (scoring != "sigmoid" && scoring != "softmax")
    throw Error(fmt::format("{}: scoring_func \"{}\" is not supported (sigmoid or softmax)", origin,
                            scoring));
  e.router = scoring == "sigmoid" ? "sigmoid_bias" : "softmax_aux";
  if (j.contains("n_group")) e.n_group = int_field(j, "n_group", origin);
  e.topk_group = j.contains("topk_group") ? int_field(j, "topk_group", origin) : e.n_group;
  for (const char* key : {"moe_layer_freq"}) {
    if (j.contains(key) && j[key] != 1)
      throw Error(fmt::format("{}: {} = {} is not supported (trillion reads 1)", origin, key,
                              j[key].dump()));
  }
  if (j.contains("routed_scaling_factor") && real_field(j, "routed_scaling_factor", origin) != 1.0)
    throw Error(
        fmt::format("{}: routed_scaling_factor must be 1.0 (trillion does not rescale "
                    "the gates)",
                    origin));
  if (j.contains("norm_topk_prob") && j["norm_topk_prob"] != true)
    throw Error(
        fmt::format("{}: norm_topk_prob must be true (trillion normalises the gates)", origin));
  if (j.contains("aux_loss_alpha")) e.balance_loss_alpha = real_field(j, "aux_loss_alpha", origin);
  if (j.contains("bias_update_speed"))
    e.bias_update_rate = real_field(j, "bias_update_speed", origin);
  if (j.contains("capacity_factor")) e.capacity_factor = real_field(j, "capacity_factor", origin);
  return false;
}

uint64_t export_hf_llama(const ExportOptions& o) {
  if (o.dtype != "f32" && o.dtype != "bf16")
    throw Error(fmt::format("--dtype {}: expected f32 or bf16", o.dtype));
  const RunConfig cfg = parse_run_config(read_checkpoint_config(o.checkpoint_dir),
                                         o.checkpoint_dir + "/config.toml", {});
  if (exports_as_deepseek_v3(cfg.model)) check_deepseek_v3_exportable(cfg.model, o.checkpoint_dir);
  const TensorTable table = build_parameter_table(cfg.model);
  const CheckpointWeights w = read_checkpoint_weights(o.checkpoint_dir);
  TRILLION_CHECK(static_cast<int64_t>(w.bytes.size()) == table.total_elements() * w.dtype_bytes,
                 "checkpoint size against its parameter table");
  const std::string code = o.dtype == "bf16" ? "BF16" : "F32";
  // A deliberately wrong RoPE layout (deepseek_v3 only), so a test can show it is caught.
  const bool wrong_rope = exports_as_deepseek_v3(cfg.model) &&
                          std::getenv("TRILLION_EXPORT_WRONG_ROPE_LAYOUT") != nullptr;
  if (wrong_rope)
    std::fprintf(stderr,
                 "trillion export: TRILLION_EXPORT_WRONG_ROPE_LAYOUT is set: the rope rows are "
                 "written unpermuted, a layout Hugging Face reads wrongly (for tests only)\n");
  std::map<std::string, std::vector<StoredTensor>> files;  // file name -> its tensors
  for (const TensorSpec& s : table.specs()) {
    for (const HfTensor& t : model_hf_tensors(s, cfg.model, wrong_rope)) {
      const std::string bytes = stored_order(w.bytes.data(), t, w.dtype_bytes);
      files[t.file].push_back(
          {t.name, code, t.shape, convert(bytes.data(), t.numel(), w.dtype_bytes, code)});
    }
  }
  std::filesystem::create_directories(o.out_dir);
  const std::string torch_dtype = o.dtype == "bf16" ? "bfloat16" : "float32";
  for (const auto& [file, tensors] : files)
    write_safetensors(o.out_dir + "/" + file, tensors,
                      {{"format", "pt"}, {"source", "trillion " + o.checkpoint_dir}});
  std::optional<int> bos, eos;
  if (!o.tokenizer_path.empty()) {
    const ExportedTokenizer tok = export_tokenizer_json(o.tokenizer_path);
    if (tok.vocab_size > cfg.model.vocab_size)
      throw Error(
          fmt::format("tokenizer '{}' has {} tokens but the model's vocabulary is {}; "
                      "pass the tokenizer the run was trained with",
                      o.tokenizer_path, tok.vocab_size, cfg.model.vocab_size));
    bos = tok.bos;
    eos = tok.eos;
    data::write_file_atomic(o.out_dir + "/tokenizer.json", {tok.json});
  }
  data::write_file_atomic(o.out_dir + "/config.json",
                          {hf_llama_config_json(cfg.model, torch_dtype, bos, eos)});
  nlohmann::ordered_json g;
  if (bos) g["bos_token_id"] = *bos;
  if (eos) g["eos_token_id"] = *eos;
  g["max_length"] = cfg.model.seq_len;
  const std::string gen = g.dump(2) + "\n";
  data::write_file_atomic(o.out_dir + "/generation_config.json", {gen});
  uint64_t bytes = 0;
  for (const auto& [file, tensors] : files)
    bytes += std::filesystem::file_size(o.out_dir + "/" + file);
  return bytes;
}

namespace {

// Element i of stored tensor `t` as a double.
double stored_value(const StoredTensor& t, int64_t i) {
  if (t.dtype == "F32") {
    float f;
    std::memcpy(&f, t.bytes.data() + i * 4, 4);
    return f;
  }
  if (t.dtype == "F64") {
    double v;
    std::memcpy(&v, t.bytes.data() + i * 8, 8);
    return v;
  }
  bf16 b;
  std::memcpy(&b, t.bytes.data() + i * 2, 2);
  return bf16_to_float(b);
}

// Copies stored tensor `t` (HF tensor `s` of the model) into the parameter table `base` (elements
// of esize bytes), undoing s.rows; a copy (s.copy) is compared with what is there instead.
void read_tensor(const StoredTensor& t, const HfTensor& s, char* base, int esize,
                 const std::string& path) {
  const std::string& name = s.name;
  if (t.shape != s.shape)
    throw Error(fmt::format("{}: tensor '{}' has shape {}, config.json implies {}", path, name,
                            shape_text(t.shape), shape_text(s.shape)));
  if (t.dtype != "F32" && t.dtype != "F64" && t.dtype != "BF16")
    throw Error(fmt::format("{}: tensor '{}' has dtype {}; import reads F32, F64 and BF16", path,
                            name, t.dtype));
  const int64_t width = s.numel() / s.shape[0];
  for (int64_t i = 0; i < s.numel(); ++i) {
    const double v = stored_value(t, i);
    // A NaN or infinite weight would train, export and generate as NaN: refused by name.
    if (!std::isfinite(v))
      throw Error(
          fmt::format("{}: tensor '{}' element {} is {} (weights must be finite); "
                      "the file is damaged or came from a diverged run",
                      path, name, i, v));
    const int64_t row = s.rows.empty() ? i / width : s.rows[i / width];
    char* dst = base + (s.offset + row * width + i % width) * esize;
    if (esize == 8) {
      if (s.copy && std::memcmp(dst, &v, 8) != 0)
        throw Error(
            fmt::format("{}: tensor '{}' element {} differs from the main model's copy "
                        "of that tensor",
                        path, name, i));
      std::memcpy(dst, &v, 8);
      continue;
    }
    const float f = static_cast<float>(v);
    if (!std::isfinite(f))
      throw Error(
          fmt::format("{}: tensor '{}' element {} = {} overflows f32; import "
                      "into model.dtype = \"f64\" (--config) or rescale it",
                      path, name, i, v));
    if (s.copy && std::memcmp(dst, &f, 4) != 0)
      throw Error(fmt::format(
          "{}: tensor '{}' element {} differs from the main model's copy of that tensor", path,
          name, i));
    std::memcpy(dst, &f, 4);
  }
}

}  // namespace

std::string import_hf_llama(const std::string& in_dir, const std::string& run_dir,
                            const std::string& base_toml, const std::string& base_origin,
                            bool allow_unknown, std::vector<std::string>* unknown) {
  RunConfig cfg = parse_run_config(base_toml, base_origin, {});
  const std::string config_path = in_dir + "/config.json";
  const bool interleaved =
      parse_hf_llama_config(data::read_file_raw(config_path), config_path, cfg.model);
  cfg.model.validate();
  // Re-parse the resolved text so the [model] table goes through the run config's own checks.
  const std::string toml_text = to_toml(cfg);
  cfg = parse_run_config(toml_text, config_path, {});
  const TensorTable table = build_parameter_table(cfg.model);
  std::map<std::string, SafetensorsFile> files;  // read when first needed
  auto file = [&](const std::string& name) -> const SafetensorsFile& {
    if (!files.count(name)) {
      const std::string path = in_dir + "/" + name;
      if (!std::filesystem::exists(path))
        throw Error(
            fmt::format("{} is missing (config.json describes a model with tensors in it{})", path,
                        name == "model.safetensors" ? ""
                                                    : ": the multi-token-prediction modules of "
                                                      "num_nextn_predict_layers"));
      files[name] = read_safetensors(path);
    }
    return files.at(name);
  };
  MemoryTracker tracker;
  Buffer params(tracker, MemoryCategory::parameters, cfg.model.dtype, table.total_elements());
  const int esize = static_cast<int>(dtype_size(cfg.model.dtype));
  std::set<std::string> used;  // "file/name"
  for (const TensorSpec& spec : table.specs()) {
    for (const HfTensor& s : model_hf_tensors(spec, cfg.model, !interleaved)) {
      const std::string path = in_dir + "/" + s.file;
      const StoredTensor* t = file(s.file).find(s.name);
      if (t == nullptr)
        throw Error(
            fmt::format("{}: tensor '{}' is missing (config.json describes a model that "
                        "has it)",
                        path, s.name));
      used.insert(s.file + "/" + s.name);
      read_tensor(*t, s, static_cast<char*>(params.raw()), esize, path);
    }
  }
  // Tensors the model has no place for (biases, buffers, another architecture's weights) are
  // not dropped silently: refused with their names, or left out on request.
  std::vector<std::string> extra;
  for (const auto& [name, st] : files) {
    for (const StoredTensor& t : st.tensors)
      if (!used.count(name + "/" + t.name)) extra.push_back(t.name);
  }
  const std::string st_path = in_dir + "/model.safetensors";
  if (!extra.empty() && !allow_unknown) {
    std::string list;
    for (size_t i = 0; i < extra.size() && i < 8; ++i) list += (i ? ", '" : "'") + extra[i] + "'";
    if (extra.size() > 8) list += fmt::format(" and {} more", extra.size() - 8);
    throw Error(
        fmt::format("{}: {} tensor(s) that config.json's model has no place for: {}; "
                    "pass --allow-unknown to import without them (nothing was written)",
                    st_path, extra.size(), list));
  }
  if (unknown != nullptr) *unknown = extra;
  Buffer m1(tracker, MemoryCategory::optimizer, cfg.model.dtype, table.total_elements());
  Buffer m2(tracker, MemoryCategory::optimizer, cfg.model.dtype, table.total_elements());
  std::memset(m1.raw(), 0, m1.bytes());
  std::memset(m2.raw(), 0, m2.bytes());
  CheckpointContents c;
  c.params = &params;
  c.first_moment = &m1;
  c.second_moment = &m2;
  c.state.seed = cfg.train.seed;
  c.config_toml = toml_text;
  return write_checkpoint(run_dir, c, 1000);
}

}  // namespace trillion::interop
