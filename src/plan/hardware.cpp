// See hardware.h. The catalog's figures live in configs/clusters/*.toml with their sources.
#include "plan/hardware.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/toml_depth.h"
#include "plan/catalog_files.h"

namespace trillion::plan {

std::string precision_name(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
    case Precision::kFp8:
      return "fp8";
    case Precision::kFp4:
      return "fp4";
  }
  return "?";
}

Precision parse_precision(const std::string& name) {
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  if (name == "fp8") return Precision::kFp8;
  if (name == "fp4") return Precision::kFp4;
  throw Error(fmt::format("unknown precision '{}': use bf16, fp16, fp8 or fp4", name));
}

double Gpu::peak(Precision p) const {
  switch (p) {
    case Precision::kBf16:
      return bf16_flops;
    case Precision::kFp16:
      return fp16_flops;
    case Precision::kFp8:
      return fp8_flops;
    case Precision::kFp4:
      return fp4_flops;
  }
  return 0;
}

std::string Gpu::source_of(std::string_view key) const {
  for (const auto& [k, v] : sources)
    if (k == key) return v;
  return "";
}

std::string Gpu::precisions() const {
  std::string out;
  for (Precision p : {Precision::kBf16, Precision::kFp16, Precision::kFp8, Precision::kFp4})
    if (peak(p) > 0) out += (out.empty() ? "" : ", ") + precision_name(p);
  return out;
}

namespace {

// Reads one table of a cluster file: numbers with a range check, strings, and `<key>_source`
// strings collected into Gpu::sources; unknown keys are refused.
class Table {
 public:
  Table(const toml::table* t, std::string section, std::string_view file)
      : t_(t), section_(std::move(section)), file_(file) {
    if (!t_)
      throw Error(
          fmt::format("{}: no [{}] table; see configs/clusters/h100.toml", file_, section_));
  }
  double number(const char* key, double min, bool required = true, double fallback = 0) {
    known_.push_back(key);
    const toml::node* node = t_->get(key);
    if (!node) {
      if (required)
        throw Error(fmt::format("{}: [{}] lacks {} (see configs/clusters/h100.toml)", file_,
                                section_, key));
      return fallback;
    }
    auto v = node->value<double>();
    if (!v || !(*v >= min))
      throw Error(fmt::format("{}: {}.{} must be a number >= {}", file_, section_, key, min));
    return *v;
  }
  std::string text(const char* key, bool required = true) {
    known_.push_back(key);
    const toml::node* node = t_->get(key);
    if (!node) {
      if (required) throw Error(fmt::format("{}: [{}] lacks {}", file_, section_, key));
      return "";
    }
    auto v = node->value<std::string>();
    if (!v) throw Error(fmt::format("{}: {}.{} must be a string", file_, section_, key));
    return *v;
  }
  // Every remaining key must be "<known>_source" (a string): collected into sources.
  void finish(Gpu& g) const {
    for (const auto& [key, node] : *t_) {
      const std::string k(key.str());
      bool ok = false;
      for (const std::string& known : known_) ok |= k == known;
      if (ok) continue;
      if (k.ends_with("_source")) {
        auto v = node.value<std::string>();
        if (!v) throw Error(fmt::format("{}: {}.{} must be a string", file_, section_, k));
        g.sources.emplace_back(k.substr(0, k.size() - 7), *v);
        continue;
      }
      std::string names;
      for (const std::string& known : known_) names += (names.empty() ? "" : ", ") + known;
      throw Error(fmt::format("{}: unknown key {}.{} (known: {}, and <key>_source strings)", file_,
                              section_, k, names));
    }
  }

 private:
  const toml::table* t_;
  std::string section_, file_;
  std::vector<std::string> known_;
};

constexpr double kT = 1e12, kG = 1e9, kMicro = 1e-6;

}  // namespace

Gpu parse_cluster_toml(std::string_view text, std::string_view source) {
  check_toml_key_depth(text, source);
  toml::table root;
  try {
    root = toml::parse(text, std::string(source));
  } catch (const toml::parse_error& e) {
    throw Error(fmt::format("{}: cannot read the cluster file: {} (line {})", source,
                            e.description(), e.source().begin.line));
  }
  for (const auto& [key, node] : root) {
    const std::string k(key.str());
    if (k != "gpu" && k != "peak_tflops" && k != "efficiency" && k != "network" && k != "cost")
      throw Error(fmt::format(
          "{}: unknown table [{}] (tables: gpu, peak_tflops, efficiency, network, cost)", source,
          k));
  }
  Gpu g;
  g.file = std::string(source);
  Table gpu(root["gpu"].as_table(), "gpu", source);
  g.name = gpu.text("name", false);
  if (g.name.empty()) g.name = std::filesystem::path(std::string(source)).stem().string();
  g.model = gpu.text("model");
  g.generation = gpu.text("generation");
  g.sm_count = static_cast<int>(gpu.number("sm_count", 1));
  g.hbm_bytes = gpu.number("hbm_gb", 1) * kG;
  g.hbm_bandwidth = gpu.number("hbm_tb_per_s", 1e-4) * kT;
  g.overhead_bytes = gpu.number("overhead_gb", 0, false, 3) * kG;
  gpu.finish(g);
  Table peak(root["peak_tflops"].as_table(), "peak_tflops", source);
  g.bf16_flops = peak.number("bf16", 0, false) * kT;
  g.fp16_flops = peak.number("fp16", 0, false) * kT;
  g.fp8_flops = peak.number("fp8", 0, false) * kT;
  g.fp4_flops = peak.number("fp4", 0, false) * kT;
  if (g.bf16_flops <= 0 && g.fp16_flops <= 0)
    throw Error(fmt::format("{}: [peak_tflops] needs bf16 or fp16 > 0", source));
  peak.finish(g);
  Table eff(root["efficiency"].as_table(), "efficiency", source);
  g.gemm_efficiency = eff.number("gemm", 0.01);
  g.attention_efficiency = eff.number("attention", 0.01);
  g.attention_forward_efficiency = eff.number("attention_forward", 0.01, false, 0);
  g.memory_efficiency = eff.number("memory", 0.01);
  g.collective_efficiency = eff.number("collective", 0.01);
  g.fp8_gemm_efficiency = eff.number("fp8_gemm", 0.01, false, 0);
  g.fp8_gemm_k_overhead = eff.number("fp8_gemm_k_overhead", 1, false, 0);
  for (double f : {g.gemm_efficiency, g.attention_efficiency, g.attention_forward_efficiency,
                   g.memory_efficiency, g.collective_efficiency, g.fp8_gemm_efficiency})
    if (f > 1) throw Error(fmt::format("{}: [efficiency] fractions must be <= 1", source));
  eff.finish(g);
  Table net(root["network"].as_table(), "network", source);
  g.nvlink_domain = static_cast<int>(net.number("nvlink_domain", 1));
  g.nvlink_bandwidth = net.number("nvlink_gb_per_s", 0.001) * kG;
  g.nvlink_latency = net.number("nvlink_latency_us", 0) * kMicro;
  g.scaleout_bandwidth = net.number("scaleout_gb_per_s", 0.001) * kG;
  g.scaleout_latency = net.number("scaleout_latency_us", 0) * kMicro;
  net.finish(g);
  Table cost(root["cost"].as_table(), "cost", source);
  g.usd_per_gpu_hour = cost.number("usd_per_gpu_hour", 0);
  g.failures_per_gpu_hour = cost.number("failures_per_1000_gpu_days", 0) / 1000 / 24;
  cost.finish(g);
  return g;
}

Gpu read_cluster_file(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw Error(
        fmt::format("{}: cannot open the cluster file (configs/clusters/ has examples)", path));
  std::stringstream text;
  text << in.rdbuf();
  return parse_cluster_toml(text.str(), path);
}

const std::vector<Gpu>& gpu_catalog() {
  static const std::vector<Gpu> catalog = [] {
    std::vector<Gpu> out;
    for (const CatalogFile& f : catalog_files())
      if (f.path.starts_with("clusters/")) out.push_back(parse_cluster_toml(f.text, f.path));
    return out;
  }();
  return catalog;
}

const Gpu& find_gpu(const std::string& name) {
  std::string names;
  for (const Gpu& g : gpu_catalog()) {
    if (g.name == name) return g;
    names += (names.empty() ? "" : ", ") + g.name;
  }
  throw Error(
      fmt::format("unknown cluster '{}': use one of {} or a cluster TOML file", name, names));
}

Gpu resolve_cluster(const std::string& name) {
  const bool is_file = name.find('/') != std::string::npos || name.ends_with(".toml");
  return is_file ? read_cluster_file(name) : find_gpu(name);
}

}  // namespace trillion::plan
