// `trillion report RUN_DIR [RUN_DIR...] [--out report.html]`: the runs' metrics as one
// self-contained HTML page (interop/run_report.h).
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/output_guard.h"
#include "cli/parse_arguments.h"
#include "data/file_io.h"
#include "interop/run_report.h"

namespace trillion::cli {

int report_command(int argc, char** argv) {
  CLI::App app{"Plot the metrics of one or more runs as an HTML page"};
  std::vector<std::string> runs;
  std::string out = "report.html";
  app.add_option("RUN_DIR", runs, "run directories (overlaid)")->required();
  bool overwrite = false;
  app.add_option("--out", out, "HTML file to write");
  app.add_flag("--overwrite", overwrite, "replace the --out file if it exists");
  if (const int rc = parse_arguments(app, argc, argv); rc >= 0) return rc;
  refuse_to_replace({out}, overwrite);
  const std::string html = interop::run_report_html(runs);
  data::write_file_atomic(out, {html});
  std::printf("wrote %s (%zu bytes, %zu runs)\n", out.c_str(), html.size(), runs.size());
  return 0;
}

}  // namespace trillion::cli
