// The safetensors file format (huggingface/safetensors): an 8-byte little-endian header length N,
// N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
// {string: string}}, then the raw little-endian tensor bytes, offsets relative to the end of the
// header. Invariants of what write_safetensors produces: tensors are stored in the order given,
// back to back with no gaps, the header is padded with spaces to a multiple of 8 bytes (so every
// f32 tensor is aligned), and the file appears only complete (written atomically). The reader
// checks every field and range before use: a truncated or crafted file is an Error naming the file
// and the field, never a crash; a tensor named twice in the header is an Error naming it (JSON
// parsers keep one copy silently).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trillion::interop {

struct StoredTensor {
  std::string name;
  std::string dtype;  // safetensors dtype code: "F32", "F64", "BF16", "F16"
  std::vector<int64_t> shape;
  std::string bytes;  // raw little-endian elements, row-major
};

// Size in bytes of one element of a safetensors dtype code; throws Error for codes we do not use.
int safetensors_dtype_size(const std::string& dtype);

void write_safetensors(const std::string& path, const std::vector<StoredTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);

struct SafetensorsFile {
  std::vector<StoredTensor> tensors;  // sorted by name
  std::map<std::string, std::string> metadata;
  const StoredTensor* find(const std::string& name) const;
};
SafetensorsFile read_safetensors(const std::string& path);

}  // namespace trillion::interop
