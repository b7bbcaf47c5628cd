// GGUF v3 export (llama.cpp's file format, ggml docs/gguf.md): magic "GGUF", version 3, tensor
// and metadata counts, metadata key/values (llama architecture keys, the tokenizer as
// tokenizer.ggml.*), tensor infos (name, dims fastest-first, ggml type, offset), padding to
// general.alignment = 32, then the tensor data, each tensor at a multiple of 32. Matrices are
// f32, f16, bf16 or Q8_0 (blocks of 32: an f16 scale max|x|/127 then 32 int8), 1-D norms f32.
// llama.cpp's llama architecture rotates interleaved pairs (2i, 2i+1) while trillion rotates
// halves (i, i + HD/2), so q and k rows are permuted per head: row j*HD/2 + i goes to 2i + j
// (what llama.cpp's convert_hf_to_gguf.py does to Hugging Face weights).
#pragma once

#include <cstdint>
#include <string>

namespace trillion::interop {

struct GgufOptions {
  std::string checkpoint_dir;
  std::string out_path;
  std::string dtype = "f32";   // f32, f16, bf16, q8_0 (matrices; norms stay f32)
  std::string tokenizer_path;  // "": no tokenizer metadata
};
// Returns the file size in bytes.
uint64_t export_gguf(const GgufOptions& o);

// IEEE half from float, round to nearest even (ggml's F16).
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);

}  // namespace trillion::interop
