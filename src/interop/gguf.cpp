// See gguf.h.
#include "interop/gguf.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/dtype.h"
#include "core/error.h"
#include "data/file_io.h"
#include "data/text_tokenizer.h"
#include "data/tokenizer.h"
#include "interop/hf_tokenizer.h"
#include "model/transformer.h"
#include "train/checkpoint/checkpoint.h"
#include "train/run_config.h"

namespace trillion::interop {

namespace {

constexpr uint64_t kAlignment = 32;
enum GgufType : uint32_t { kU32 = 4, kI32 = 5, kF32 = 6, kString = 8, kArray = 9 };
enum GgmlType : uint32_t { kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ8_0 = 8, kGgmlBf16 = 30 };

struct Writer {
  std::string out;
  template <typename T>
  void pod(T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    out += s;
  }
};

struct Metadata {
  Writer w;
  uint64_t count = 0;
  void key(const std::string& k, uint32_t type) {
    w.str(k);
    w.pod<uint32_t>(type);
    ++count;
  }
  void u32(const std::string& k, uint32_t v) { key(k, kU32), w.pod(v); }
  void f32(const std::string& k, float v) { key(k, kF32), w.pod(v); }
  void string(const std::string& k, const std::string& v) { key(k, kString), w.str(v); }
  void strings(const std::string& k, const std::vector<std::string>& v) {
    key(k, kArray);
    w.pod<uint32_t>(kString);
    w.pod<uint64_t>(v.size());
    for (const auto& s : v) w.str(s);
  }
  void i32s(const std::string& k, const std::vector<int32_t>& v) {
    key(k, kArray);
    w.pod<uint32_t>(kI32);
    w.pod<uint64_t>(v.size());
    for (int32_t x : v) w.pod(x);
  }
};

std::string gguf_name(const std::string& name) {
  if (name == "embed") return "token_embd.weight";
  if (name == "final_norm") return "output_norm.weight";
  if (name == "lm_head") return "output.weight";
  static const std::pair<const char*, const char*> layer[] = {
      {"attn_norm", "attn_norm"}, {"attn.wq", "attn_q"},      {"attn.wk", "attn_k"},
      {"attn.wv", "attn_v"},      {"attn.wo", "attn_output"}, {"mlp_norm", "ffn_norm"},
      {"mlp.w_gate", "ffn_gate"}, {"mlp.w_up", "ffn_up"},     {"mlp.w_down", "ffn_down"}};
  const size_t dot = name.find('.', 7);
  if (name.rfind("layers.", 0) == 0 && dot != std::string::npos) {
    for (const auto& [ours, theirs] : layer)
      if (name.substr(dot + 1) == ours)
        return fmt::format("blk.{}.{}.weight", name.substr(7, dot - 7), theirs);
  }
  throw Error(
      fmt::format("tensor '{}' has no GGUF llama name; export a dense Llama checkpoint", name));
}

}  // namespace

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal half: value * 2^24 rounded to nearest even
    float a;
    std::memcpy(&a, &abs, 4);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  float v;
  if (e == 0) {
    v = std::ldexp(static_cast<float>(m), -24);
  } else if (e == 31) {
    v = m ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(m | 0x400), static_cast<int>(e) - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits |= sign;
  std::memcpy(&v, &bits, 4);
  return v;
}

uint64_t export_gguf(const GgufOptions& o) {
  const std::string& d = o.dtype;
  if (d != "f32" && d != "f16" && d != "bf16" && d != "q8_0")
    throw Error(fmt::format("--dtype {}: GGUF export writes f32, f16, bf16 or q8_0", d));
  const RunConfig cfg = parse_run_config(read_checkpoint_config(o.checkpoint_dir),
                                         o.checkpoint_dir + "/config.toml", {});
  const ModelConfig& m = cfg.model;
  if (m.mla)
    throw Error(
        fmt::format("checkpoint '{}' has MLA attention: GGUF export writes llama.cpp's llama "
                    "architecture, not its deepseek2; export it with --format safetensors "
                    "(a Hugging Face deepseek_v3 directory) instead",
                    o.checkpoint_dir));
  if (m.moe.enabled())
    throw Error(
        fmt::format("checkpoint '{}' is a MoE model: GGUF export is dense only (llama.cpp's "
                    "Mixtral-style MoE has no shared experts or sigmoid router bias, its "
                    "deepseek2 needs MLA attention); "
                    "export it with --format safetensors (DeepSeek-V3 names) instead",
                    o.checkpoint_dir));
  // The main model only: its tensors' offsets come before the multi-token-prediction modules'
  // rows, which llama.cpp has no place for (generation never uses them).
  ModelConfig main_model = m;
  main_model.mtp.depth = 0;
  const TensorTable table = build_parameter_table(main_model);
  const CheckpointWeights w = read_checkpoint_weights(o.checkpoint_dir);
  auto value = [&](int64_t i) {
    if (w.dtype_bytes == 8) {
      double v;
      std::memcpy(&v, w.bytes.data() + i * 8, 8);
      return static_cast<float>(v);
    }
    float v;
    std::memcpy(&v, w.bytes.data() + i * 4, 4);
    return v;
  };

  Metadata md;
  md.string("general.architecture", "llama");
  md.string("general.name",
            "trillion " + std::filesystem::path(o.checkpoint_dir).filename().string());
  md.u32("general.alignment", kAlignment);
  const uint32_t file_type = d == "f32" ? 0 : d == "f16" ? 1 : d == "q8_0" ? 7 : 32;
  md.u32("general.file_type", file_type);
  md.u32("llama.context_length", static_cast<uint32_t>(m.seq_len));
  md.u32("llama.embedding_length", static_cast<uint32_t>(m.d_model));
  md.u32("llama.block_count", static_cast<uint32_t>(m.n_layers));
  md.u32("llama.feed_forward_length", static_cast<uint32_t>(m.ffn_hidden));
  md.u32("llama.attention.head_count", static_cast<uint32_t>(m.n_heads));
  md.u32("llama.attention.head_count_kv", static_cast<uint32_t>(m.n_kv_heads));
  md.u32("llama.attention.key_length", static_cast<uint32_t>(m.head_dim));
  md.u32("llama.attention.value_length", static_cast<uint32_t>(m.head_dim));
  md.u32("llama.rope.dimension_count", static_cast<uint32_t>(m.head_dim));
  md.f32("llama.rope.freq_base", static_cast<float>(m.rope_theta));
  md.f32("llama.attention.layer_norm_rms_epsilon", static_cast<float>(m.norm_eps));
  md.u32("llama.vocab_size", static_cast<uint32_t>(m.vocab_size));
  if (!o.tokenizer_path.empty()) {
    const std::unique_ptr<data::TextTokenizer> loaded = data::load_text_tokenizer(o.tokenizer_path);
    const auto* own = dynamic_cast<const data::Tokenizer*>(loaded.get());
    if (own == nullptr)
      throw Error(fmt::format(
          "tokenizer '{}' is a {} file; GGUF export writes trillion's own BPE tokenizers only, so "
          "export --format safetensors (which writes its tokenizer.json) or leave out --tokenizer",
          o.tokenizer_path, loaded->format()));
    const data::Tokenizer& tok = *own;
    if (tok.vocab_size() > m.vocab_size)
      throw Error(fmt::format("tokenizer '{}' has {} tokens but the model's vocabulary is {}",
                              o.tokenizer_path, tok.vocab_size(), m.vocab_size));
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (int id = 0; id < m.vocab_size; ++id) {
      if (id < tok.vocab_size() && !tok.is_special(id)) {
        tokens.push_back(byte_level_string(tok.token_bytes(id)));
        types.push_back(1);  // normal
      } else if (id < tok.vocab_size()) {
        tokens.push_back(tok.token_bytes(id));
        types.push_back(3);  // control
      } else {
        tokens.push_back(fmt::format("<|unused_{}|>", id));  // model rows past the tokenizer
        types.push_back(5);                                  // unused
      }
    }
    std::vector<std::string> merges;
    for (const auto& [l, r] : tok.merges())
      merges.push_back(byte_level_string(tok.token_bytes(l)) + " " +
                       byte_level_string(tok.token_bytes(r)));
    md.string("tokenizer.ggml.model", "gpt2");
    md.string("tokenizer.ggml.pre", "default");
    md.strings("tokenizer.ggml.tokens", tokens);
    md.i32s("tokenizer.ggml.token_type", types);
    md.strings("tokenizer.ggml.merges", merges);
    md.u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(tok.bos_id()));
    md.u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tok.eos_id()));
    md.u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(tok.pad_id()));
  }

  Writer infos, data;
  const int64_t HD = m.head_dim, half = HD / 2;
  for (const TensorSpec& s : table.specs()) {
    const int64_t rows = s.shape.size() == 2 ? s.shape[0] : 1, cols = s.shape.back();
    const bool rope =
        s.name.size() > 7 && (s.name.ends_with("attn.wq") || s.name.ends_with("attn.wk"));
    // Source row of output row r: q/k rows go from halves to interleaved pairs per head.
    auto source_row = [&](int64_t r) {
      if (!rope) return r;
      const int64_t head = r / HD, k = r % HD;  // k = 2i + j  <-  j*half + i
      return head * HD + (k % 2) * half + k / 2;
    };
    std::string type = s.shape.size() == 1 ? "f32" : d;
    if (type == "q8_0" && cols % 32 != 0) type = "f16";  // Q8_0 blocks run along rows
    while (data.out.size() % kAlignment) data.out += '\0';
    infos.str(gguf_name(s.name));
    infos.pod<uint32_t>(static_cast<uint32_t>(s.shape.size()));
    for (auto it = s.shape.rbegin(); it != s.shape.rend(); ++it) infos.pod<uint64_t>(*it);
    infos.pod<uint32_t>(type == "f32"    ? kGgmlF32
                        : type == "f16"  ? kGgmlF16
                        : type == "bf16" ? kGgmlBf16
                                         : kGgmlQ8_0);
    infos.pod<uint64_t>(data.out.size());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t base = s.offset + source_row(r) * cols;
      if (type == "q8_0") {
        for (int64_t b = 0; b < cols; b += 32) {
          float amax = 0;
          for (int64_t i = 0; i < 32; ++i) amax = std::max(amax, std::abs(value(base + b + i)));
          const float scale = amax / 127.0f, inv = scale > 0 ? 1.0f / scale : 0.0f;
          data.pod<uint16_t>(float_to_half(scale));
          for (int64_t i = 0; i < 32; ++i)
            data.pod<int8_t>(static_cast<int8_t>(std::lround(value(base + b + i) * inv)));
        }
        continue;
      }
      for (int64_t c = 0; c < cols; ++c) {
        const float v = value(base + c);
        if (type == "f32")
          data.pod<float>(v);
        else if (type == "f16")
          data.pod<uint16_t>(float_to_half(v));
        else
          data.pod<uint16_t>(float_to_bf16(v).bits);
      }
    }
  }
  Writer head;
  head.out = "GGUF";
  head.pod<uint32_t>(3);
  head.pod<uint64_t>(table.specs().size());
  head.pod<uint64_t>(md.count);
  std::string file = head.out + md.w.out + infos.out;
  while (file.size() % kAlignment) file += '\0';
  std::filesystem::path parent = std::filesystem::path(o.out_path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  data::write_file_atomic(o.out_path, {file, data.out});
  return file.size() + data.out.size();
}

}  // namespace trillion::interop
