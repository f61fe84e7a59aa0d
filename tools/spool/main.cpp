// spool command-line entry point: subcommands run, tokenize, logits,
// perplexity, bench, inspect, synth, plan, serve, agents, convert, checksum. Errors from any layer arrive here as
// spool::Error and become one line on stderr and exit code 1.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cli_common.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"spool: LLM inference engine for machines smaller than the model"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "spool 0.1.0");
  spool::cli::add_run_command(app);
  spool::cli::add_tokenize_command(app);
  spool::cli::add_logits_command(app);
  spool::cli::add_perplexity_command(app);
  spool::cli::add_bench_command(app);
  spool::cli::add_inspect_command(app);
  spool::cli::add_synth_command(app);
  spool::cli::add_plan_command(app);
  spool::cli::add_serve_command(app);
  spool::cli::add_agents_command(app);
  spool::cli::add_checksum_command(app);
  spool::cli::add_convert_command(app);
  // llama.cpp's two-letter spelling of the draft model flag (CLI11 takes one-letter short options only).
  std::vector<char*> args(argv, argv + argc);
  static char model_draft[] = "--model-draft";
  for (char*& a : args)
    if (std::strcmp(a, "-md") == 0) a = model_draft;
  try {
    app.parse((int)args.size(), args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const spool::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
