// The commands of README.md and docs/*.md run as written: every command of a ```sh block (or,
// in a block that shows a session, every `$ ` line) and every `$ ` line of a plain ``` block,
// continuation lines joined, is run with /bin/sh in document order, one scratch directory per
// page (configs/, data/, scripts/ linked from the source tree, build/trillion and `trillion` on
// PATH being the built binary). A command must exit 0, unless the page shows it failing (its
// output has "error:"), then it must fail with that message. For a few deterministic commands
// the documented output must be the actual output (whitespace-normalised). Synopses (with
// [--option], ..., or UPPER_CASE placeholders) are not commands; the slow or unrunnable ones are
// in kExcluded, each with its reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "../train/cli_util.h"

namespace trillion {
namespace {

namespace fs = std::filesystem;

struct Command {
  std::string text, output;  // output: the lines the page shows after a `$ ` command
  int line;
};

struct Exclusion {
  const char* contains;
  const char* reason;
};
const Exclusion kExcluded[] = {
    {"scripts/demo.sh", "trains for 10 minutes"},
    {"scripts/test.sh", "runs the whole test suite"},
    {"scripts/fuzz.sh", "fuzzes for minutes"},
    {"scripts/chaos.sh", "drills a job under random kills and hangs for minutes"},
    {"scripts/speed.sh", "benchmarks two configs and two recipes for minutes"},
    {"scripts/pipeline_bubble.sh", "trains 4-rank pipelines of bench-d512 for minutes"},
    {"bench gemm", "a measurement of seconds, machine-dependent"},
    {"bench step", "a measurement on bench-d512, tens of seconds"},
    {"bench attention", "a measurement on 4096-token sequences"},
    {"bench_kernels", "Google Benchmark, minutes (and not built by every build)"},
    {"runs/markov", "trains configs/markov.toml for ~20 s (tests/train checks that run)"},
    {"runs/brown-demo", "needs the demo's 10-minute trained model"},
    {"runs/brown-hf", "needs the demo's 10-minute trained model"},
    {"runs/brown-data", "needs the demo's prepared Brown shards"},
    {"runs/demo-lc", "trains the demo model for up to 16 minutes (the llama.cpp check's run)"},
    {"--checkpoint brown ", "needs the demo's 10-minute trained model"},
    {"moe-brown.toml", "needs the demo's prepared Brown shards, and trains 2 ranks"},
    {"deepseek-brown.toml", "needs the demo's prepared Brown shards, and trains 600 steps"},
    {"/tmp/moe_ref /tmp/moe_ep2", "compares the two moe-brown runs above"},
    {"bench-d512.toml --quiet", "trains a 4-rank pipeline of bench-d512"},
    {"runs/pipeline-bubble", "reads the traces of scripts/pipeline_bubble.sh"},
    {"--hostfile hosts", "needs a cluster"},
    {"srun ", "needs a Slurm cluster"},
    {"data inspect mk/train.bin", "needs the crafted header the page describes in prose"},
    {"model.d_model=256 --set model.n_layers=8", "a 2-rank timing experiment"},
    {"runs/ov_", "reads the 2-rank timing experiment's runs"},
    {"runs/tp_ref8", "documents a 20-step fp32 drift (compare exits 1, DIFFER, by design)"},
    {"runs/tp_8", "the 8-rank half of that drift experiment"},
    {"model.seq_len=16384", "trains 16K-token sequences (20 s per run, 4 ranks)"},
    {"runs/one_16k", "compares the 16K-token runs above"},
};

const char* excluded(const std::string& cmd) {
  for (const Exclusion& e : kExcluded) {
    if (cmd.find(e.contains) != std::string::npos) return e.reason;
  }
  return nullptr;
}

// Commands whose documented output is deterministic and compared.
const char* const kExactOutput[] = {"tokenizer encode", "tokenizer decode", "&& echo identical",
                                    "od -An -tu8", "od -An -c", "plan --goodput-at"};

bool is_synopsis(const std::string& cmd) {
  static const std::regex placeholder(R"((^|\s)[A-Z][A-Z_]+[A-Z](\.[a-z]+)?(\s|$))");
  return cmd.find("[-") != std::string::npos || cmd.find("...") != std::string::npos ||
         std::regex_search(cmd, placeholder);
}

std::vector<Command> extract_commands(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::vector<Command> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("```", 0) != 0) continue;
    const std::string lang = lines[i].substr(3);
    size_t end = i + 1;
    while (end < lines.size() && lines[end].rfind("```", 0) != 0) ++end;
    bool session = lang.empty() || lang == "console";
    for (size_t j = i + 1; j < end; ++j) session = session || lines[j].rfind("$ ", 0) == 0;
    if (lang == "sh" || lang == "console" || lang.empty()) {
      for (size_t j = i + 1; j < end; ++j) {
        std::string l = lines[j];
        if (session) {
          if (l.rfind("$ ", 0) != 0) continue;
          l = l.substr(2);
        }
        if (l.empty() || l[0] == '#' || std::isspace(static_cast<unsigned char>(l[0]))) continue;
        Command c{l, "", static_cast<int>(j + 1)};
        while (!c.text.empty() && c.text.back() == '\\' && j + 1 < end) c.text += "\n" + lines[++j];
        if (session) {
          while (j + 1 < end && lines[j + 1].rfind("$ ", 0) != 0) c.output += lines[++j] + "\n";
        }
        out.push_back(c);
      }
    }
    i = end;
  }
  return out;
}

std::string normalised(const std::string& s) {
  std::istringstream in(s);
  std::string word, out;
  while (in >> word) out += (out.empty() ? "" : " ") + word;
  return out;
}

// Whether `actual` shows `documented`, where "..." in the documentation elides any text.
bool shows(const std::string& actual, const std::string& documented) {
  const std::string a = normalised(actual), d = normalised(documented);
  size_t at = 0, from = 0;
  while (from <= d.size()) {
    const size_t dots = std::min(d.find("...", from), d.size());
    const std::string piece = normalised(d.substr(from, dots - from));
    if (!piece.empty()) {
      at = a.find(piece, at);
      if (at == std::string::npos) return false;
      at += piece.size();
    }
    from = dots + 3;
  }
  return true;
}

class DocCommands : public ::testing::TestWithParam<std::string> {};

TEST_P(DocCommands, RunAsWritten) {
  const fs::path src = TRILLION_SOURCE_DIR;
  const std::string page = GetParam();
  const auto commands = extract_commands((src / page).string());
  if (commands.empty()) GTEST_SKIP() << page << " shows no command to run (no ```sh or `$ ` lines)";
  std::string name = page;
  for (char& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  const fs::path dir = testing::fresh_dir("docs_" + name);
  fs::create_directories(dir / "build");
  fs::create_directories(dir / "bin");
  for (const char* link : {"configs", "data", "scripts"}) fs::create_directory_symlink(src / link, dir / link);
  fs::create_symlink(TRILLION_BINARY, dir / "build/trillion");
  fs::create_symlink(TRILLION_BINARY, dir / "bin/trillion");
  int ran = 0;
  for (const Command& c : commands) {
    if (is_synopsis(c.text)) continue;
    if (const char* why = excluded(c.text)) {
      std::printf("  %s:%d skipped (%s): %s\n", page.c_str(), c.line, why, c.text.c_str());
      continue;
    }
    const std::string sh = "cd '" + dir.string() + "' && PATH='" + (dir / "bin").string() +
                           "':$PATH OMP_NUM_THREADS=1 sh -c '" +
                           std::regex_replace(c.text, std::regex("'"), "'\\''") + "' 2>&1";
    const auto r = testing::run_shell(sh);
    ++ran;
    const bool fails = c.output.find("error:") != std::string::npos;
    SCOPED_TRACE(page + ":" + std::to_string(c.line) + ": " + c.text + "\n" + r.output);
    if (fails) {
      EXPECT_NE(r.exit_code, 0);
      EXPECT_TRUE(shows(r.output, c.output)) << "documented: " << c.output;
      continue;
    }
    EXPECT_EQ(r.exit_code, 0);
    for (const char* exact : kExactOutput) {
      if (c.text.find(exact) != std::string::npos) {
        EXPECT_EQ(normalised(r.output), normalised(c.output)) << "documented: " << c.output;
      }
    }
  }
  std::printf("  %s: %d commands run\n", page.c_str(), ran);
}

std::vector<std::string> pages() {
  std::vector<std::string> p = {"README.md"};
  for (const auto& e : fs::directory_iterator(fs::path(TRILLION_SOURCE_DIR) / "docs")) {
    if (e.path().extension() == ".md") p.push_back("docs/" + e.path().filename().string());
  }
  std::sort(p.begin(), p.end());
  return p;
}

INSTANTIATE_TEST_SUITE_P(Pages, DocCommands, ::testing::ValuesIn(pages()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

// README lists every docs/ page and names no file outside the repository.
TEST(Readme, ListsEveryDocsPageAndStaysInTheRepository) {
  std::ifstream in(fs::path(TRILLION_SOURCE_DIR) / "README.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string readme = ss.str();
  for (const std::string& p : pages()) {
    if (p == "README.md") continue;
    EXPECT_NE(readme.find(p), std::string::npos) << "README.md does not link " << p;
  }
  EXPECT_EQ(readme.find("../"), std::string::npos) << "README.md points outside the repository";
}

}  // namespace
}  // namespace trillion
