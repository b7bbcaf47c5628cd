// See safetensors.h.
#include "interop/safetensors.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "data/file_io.h"

namespace trillion::interop {

int safetensors_dtype_size(const std::string& dtype) {
  if (dtype == "F64") return 8;
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  throw Error(fmt::format("safetensors dtype '{}' is not supported (F64, F32, BF16, F16)", dtype));
}

void write_safetensors(const std::string& path, const std::vector<StoredTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const StoredTensor& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    TRILLION_CHECK(static_cast<uint64_t>(n) * safetensors_dtype_size(t.dtype) == t.bytes.size(),
                   "safetensors tensor size of " + t.name);
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  std::string data;
  data.reserve(offset);
  for (const StoredTensor& t : tensors) data += t.bytes;
  data::write_file_atomic(path, {length, text, data});
}

const StoredTensor* SafetensorsFile::find(const std::string& name) const {
  for (const StoredTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

SafetensorsFile read_safetensors(const std::string& path) {
  const std::string file = data::read_file_raw(path);
  auto bad = [&](const std::string& what) {
    return Error(fmt::format("'{}' is not a valid safetensors file: {}", path, what));
  };
  if (file.size() < 8) throw bad("shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(file[i]);
  if (n > file.size() - 8) throw bad(fmt::format("header length {} runs past the file", n));
  nlohmann::json header;
  // JSON objects keep the last of duplicated keys; a tensor named twice would silently lose one
  // copy, so the parser's key events at the top level are watched for a name seen before.
  std::set<std::string> names;
  std::string duplicate;
  auto watch = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && duplicate.empty() &&
        !names.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  try {
    header = nlohmann::json::parse(file.substr(8, n), watch);
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("header is not JSON: ") + e.what());
  }
  if (!header.is_object()) throw bad("header is not a JSON object");
  if (!duplicate.empty())
    throw bad(
        fmt::format("'{}' appears twice in the header (which copy is meant is unknown); "
                    "re-save the file with each tensor once",
                    duplicate));
  const uint64_t data_size = file.size() - 8 - n;
  SafetensorsFile out;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) throw bad("__metadata__ is not an object");
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) throw bad(fmt::format("__metadata__.{} is not a string", k));
        out.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() ||
        !v.contains("shape") || !v["shape"].is_array() || !v.contains("data_offsets") ||
        !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      throw bad(fmt::format("tensor '{}' needs dtype, shape and data_offsets [begin, end]", name));
    StoredTensor t;
    t.name = name;
    t.dtype = v["dtype"].get<std::string>();
    const int esize = safetensors_dtype_size(t.dtype);
    uint64_t count = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 40))
        throw bad(fmt::format("tensor '{}': shape entries must be non-negative integers", name));
      t.shape.push_back(d.get<int64_t>());
      count *= d.get<uint64_t>();
      if (count > (1ull << 40)) throw bad(fmt::format("tensor '{}' is too large", name));
    }
    const auto& o = v["data_offsets"];
    if (!o[0].is_number_unsigned() || !o[1].is_number_unsigned())
      throw bad(fmt::format("tensor '{}': data_offsets must be non-negative integers", name));
    const uint64_t begin = o[0].get<uint64_t>(), end = o[1].get<uint64_t>();
    if (begin > end || end > data_size || end - begin != count * esize)
      throw bad(fmt::format("tensor '{}': data_offsets [{}, {}] do not fit its shape and the "
                            "{} data bytes",
                            name, begin, end, data_size));
    t.bytes = file.substr(8 + n + begin, end - begin);
    out.tensors.push_back(std::move(t));
  }
  return out;
}

}  // namespace trillion::interop
