// Helpers shared by the CLI subcommands: default model path, option groups
// that several commands take, id-list parsing, and reading text files.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/speculative.h"

namespace spool::cli {

// The -m value, or the bundled stories260K model when -m was not given.
std::string resolve_model_path(const std::string& given);
std::unique_ptr<Model> open_model(const std::string& given_path, int n_threads);

// Weight-store flags shared by run, bench and perplexity (--mem-budget and friends).
struct ModelFlags {
  std::string mem_budget;           // "" : auto (resident when the model fits the memory available)
  std::string cache_policy = "lru";
  bool no_speculate = false;
  int http_retries = 4;
  bool verbose_load = false;
  std::string convert;              // --convert TYPE: matmul weights converted at load ("" = as stored)
  std::string kv_type = "f32";      // --kv-type: KV cache element type (f32, f16)
  std::string dist;                 // --dist ep: expert parallelism over MPI ranks ("" = one process)
};
void add_model_flags(CLI::App* cmd, ModelFlags& f);

// Speculative decoding flags shared by run, serve and agents (--spec, --spec-max).
struct SpecFlags {
  std::string mode = "auto";
  int max_draft = 8;
  std::string draft_model;  // -md, --model-draft FILE
};
void add_spec_flags(CLI::App* cmd, SpecFlags& f);
SpecOptions spec_options(const SpecFlags& f);  // throws spool::Error on a bad value
// --model-draft: the draft model, resident, on a thread pool of its own that
// the target then shares (open_model's pool); null without the flag. The
// caller checks it against the target (check_draft_model).
std::unique_ptr<Model> open_draft_model(const SpecFlags& s, int n_threads, int n_ctx, int n_batch, int n_seq,
                                        const ModelFlags& f, std::shared_ptr<ThreadPool> pool = nullptr);
// serve and agents: a draft model for each loaded model it can draft for.
// The first copy is `first` (loaded before the models, its pool shared with
// the first model); the others are loaded on their model's threads. A model
// it cannot draft for gets none (with a warning), unless it is the only one
// (an error); the model that is the draft model's own file gets none (in a
// big-planner / small-executor pipeline, the small model drafts for the big).
std::unique_ptr<Model> draft_for(std::unique_ptr<Model>& first, const SpecFlags& s, Model& target,
                                 const std::string& target_path, size_t n_models,
                                 const std::string& target_name, int n_ctx, int n_batch, int n_seq, const ModelFlags& f);
// --mem-budget less what the draft model takes (its weights and the KV of n_seq contexts).
ModelFlags flags_beside_draft(const ModelFlags& f, const Model* draft, int n_ctx, int n_seq);
// 512, 64K, 1.5G, 8G (binary units); throws spool::Error on anything else.
uint64_t parse_size(const std::string& s);
// pool: compute on these threads (a draft model's), null: a pool of n_threads.
std::unique_ptr<Model> open_model(const std::string& given_path, int n_threads, const ModelFlags& f, int n_ctx,
                                  int n_batch, int n_seq = 1, int n_logits = 0, std::shared_ptr<ThreadPool> pool = nullptr);
// --dist ep: under mpirun, rank 0 returns the model with the routed experts
// dealt out over all ranks; every other rank serves its experts and exits
// inside this call (dist/expert_dist.h).
std::unique_ptr<Model> open_distributed(const std::string& path, const LoadOptions& opt);
// --dist: whether this process is the home rank (rank 0) of its MPI job.
bool dist_home_rank();
std::vector<int32_t> parse_ids(const std::string& csv);
std::string join_ids(const std::vector<int32_t>& ids);
std::string read_text_file(const std::string& path);
double now_seconds();

// Each subcommand adds itself to the app.
void add_run_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_logits_command(CLI::App& app);
void add_perplexity_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_synth_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_agents_command(CLI::App& app);
void add_checksum_command(CLI::App& app);
void add_convert_command(CLI::App& app);

}  // namespace spool::cli
