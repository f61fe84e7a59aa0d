// Shared CLI helpers.
#include "cli_common.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "core/byte_size.h"
#include "core/error.h"
#include "dist/comm.h"
#include "dist/expert_dist.h"
#include "runtime/draft_model.h"
#include "weights/convert.h"

namespace spool::cli {

namespace fs = std::filesystem;

std::string resolve_model_path(const std::string& given) {
  if (!given.empty()) return given;
  std::vector<fs::path> candidates = {fs::path("../shared/models/stories260K.gguf")};
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    // build/spool -> <repo>/../shared
    candidates.push_back(fs::path(exe).parent_path().parent_path().parent_path() / "shared/models/stories260K.gguf");
  }
  for (const auto& p : candidates)
    if (fs::exists(p)) return p.string();
  throw Error("no model given: pass one with -m MODEL.gguf (the default ../shared/models/stories260K.gguf was not found)");
}

std::unique_ptr<Model> open_model(const std::string& given_path, int n_threads) {
  LoadOptions opt;
  opt.n_threads = n_threads;
  return load_model(resolve_model_path(given_path), opt);
}

void add_spec_flags(CLI::App* cmd, SpecFlags& f) {
  cmd->add_option("--spec", f.mode,
                  "Speculative decoding: drafts from n-gram lookup in the request's own tokens (and, in agent runs, "
                  "the other stages' text), verified in one pass; the text is the same as without. auto: draft "
                  "only while measured acceptance and step cost say it pays; on: always; off: never")
      ->capture_default_str();
  cmd->add_option("--spec-max", f.max_draft, "Drafted tokens per sequence and step at most (1-64)")
      ->capture_default_str();
  cmd->add_option("--model-draft", f.draft_model,
                  "(also -md) A draft model: a smaller attention-only model with the same tokenizer that drafts "
                  "tokens for the model to verify, besides n-gram lookup (held resident on the model's threads; its "
                  "memory comes out of --mem-budget)");
}

namespace {
// --kv-type; throws spool::Error on anything but f32 / f16.
DType kv_type_of(const ModelFlags& f) {
  if (f.kv_type == "f16" || f.kv_type == "F16") return DType::F16;
  if (f.kv_type != "f32" && f.kv_type != "F32") throw Error("--kv-type: expected f32 or f16, got '" + f.kv_type + "'");
  return DType::F32;
}
}  // namespace

std::unique_ptr<Model> open_draft_model(const SpecFlags& s, int n_threads, int n_ctx, int n_batch, int n_seq,
                                        const ModelFlags& f, std::shared_ptr<ThreadPool> pool) {
  if (s.draft_model.empty() || s.mode == "off") return nullptr;
  if (!f.dist.empty()) throw Error("--model-draft: not with --dist");
  LoadOptions opt;
  opt.n_threads = n_threads;
  opt.pool = std::move(pool);
  opt.weight_mode = WeightMode::Resident;
  opt.n_ctx = n_ctx;
  opt.n_batch = n_batch;
  opt.n_seq = n_seq;
  opt.verbose = f.verbose_load;
  opt.kv_type = kv_type_of(f);
  try {
    return load_model(s.draft_model, opt);
  } catch (const Error& e) {
    throw Error(std::string("--model-draft: ") + e.what());
  }
}

std::unique_ptr<Model> draft_for(std::unique_ptr<Model>& first, const SpecFlags& s, Model& target,
                                 const std::string& target_path, size_t n_models, const std::string& target_name,
                                 int n_ctx, int n_batch, int n_seq, const ModelFlags& f) {
  if (s.draft_model.empty() || s.mode == "off") return nullptr;
  std::error_code ec;
  if (n_models > 1 && fs::equivalent(target_path, s.draft_model, ec)) {
    std::fprintf(stderr, "spool: '%s' is the draft model itself: it drafts for the others\n", target_name.c_str());
    return nullptr;
  }
  // A copy computes on its model's threads only (two engines never share a pool).
  std::unique_ptr<Model> d = first && first->shared_pool() == target.shared_pool()
                                 ? std::move(first)
                                 : open_draft_model(s, 0, n_ctx, n_batch, n_seq, f, target.shared_pool());
  try {
    check_draft_model(target, *d);
  } catch (const Error& e) {
    if (n_models == 1) throw;
    std::fprintf(stderr, "spool: warning: '%s' gets no draft model: %s\n", target_name.c_str(), e.what());
    return nullptr;
  }
  std::fprintf(stderr, "spool: '%s': draft model %s (%s, %d layers)\n", target_name.c_str(), d->config().name.c_str(),
               d->config().arch.c_str(), d->config().n_layer);
  return d;
}

ModelFlags flags_beside_draft(const ModelFlags& f, const Model* draft, int n_ctx, int n_seq) {
  ModelFlags out = f;
  if (!draft || f.mem_budget.empty()) return out;
  const ModelConfig& c = draft->config();
  const int ctx = n_ctx > 0 ? n_ctx : std::min(c.n_ctx_train > 0 ? c.n_ctx_train : 4096, 4096);
  const DType kv = kv_type_of(f);
  const uint64_t bytes = draft->file().manifest.total_bytes() + (uint64_t)std::max(1, n_seq) * kv_bytes_estimate(c, ctx, kv);
  const uint64_t budget = parse_size(f.mem_budget);
  if (bytes >= budget)
    throw Error("the draft model takes about " + std::to_string(bytes >> 20) + " MiB (weights and KV), more than "
                "--mem-budget " + f.mem_budget + " leaves for both models");
  out.mem_budget = std::to_string(budget - bytes);
  return out;
}

SpecOptions spec_options(const SpecFlags& f) {
  SpecOptions o;
  o.mode = parse_spec_mode(f.mode);
  if (f.max_draft < 1 || f.max_draft > 64) throw Error("--spec-max must be between 1 and 64");
  o.max_draft = f.max_draft;
  return o;
}

void add_model_flags(CLI::App* cmd, ModelFlags& f) {
  cmd->add_option("--mem-budget", f.mem_budget,
                  "Memory budget (K/M/G) for weight cache + KV + scratch; weights stream from storage when they do "
                  "not fit (default: resident if the model fits the memory available, else streaming)");
  cmd->add_option("--cache-policy", f.cache_policy, "Streaming: expert cache eviction policy (lru, lfu, lru2)")
      ->capture_default_str();
  cmd->add_flag("--no-speculate", f.no_speculate, "Streaming: do not prefetch the next layer's guessed experts");
  cmd->add_option("--http-retries", f.http_retries,
                  "Models over HTTP(S): times a failed range request (5xx, 429, dropped connection, short body) is "
                  "sent again, with exponential backoff from 100 ms")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  cmd->add_flag("--verbose-load", f.verbose_load, "Per-tensor load timings on stderr (also SPOOL_LOG=debug)");
  cmd->add_option("--convert", f.convert,
                  "Convert matmul weights at load into TYPE (q8_0, q4_0, f16, ...): faster, in memory, not exact");
  cmd->add_option("--dist", f.dist,
                  "Distributed mode, under mpirun: 'ep' deals the routed experts out to all ranks, balanced per layer "
                  "pass (rank 0 runs the rest and prints; each rank reads its experts from its own copy of the file; "
                  "docs/DISTRIBUTED.md)")
      ->check(CLI::IsMember({"ep"}));
  cmd->add_option("--kv-type", f.kv_type,
                  "KV cache element type: f32, or f16 (half the KV memory and attention reads; MLA caches stay f32)")
      ->capture_default_str();
}

uint64_t parse_size(const std::string& s) { return parse_memory_size(s); }

std::unique_ptr<Model> open_model(const std::string& given_path, int n_threads, const ModelFlags& f, int n_ctx,
                                  int n_batch, int n_seq, int n_logits, std::shared_ptr<ThreadPool> pool) {
  LoadOptions opt;
  opt.n_threads = n_threads;
  opt.pool = std::move(pool);
  if (!f.mem_budget.empty()) opt.mem_budget = parse_size(f.mem_budget);
  opt.n_ctx = n_ctx;
  opt.n_batch = n_batch;
  opt.n_seq = n_seq;
  opt.n_logits = n_logits;
  opt.cache_policy = f.cache_policy;
  opt.speculate = !f.no_speculate;
  opt.http_retries = f.http_retries;
  opt.verbose = f.verbose_load;
  opt.kv_type = kv_type_of(f);
  if (!f.convert.empty()) {
    opt.convert = dtype_from_name(f.convert);
    if (!opt.convert) throw Error("--convert: unknown type '" + f.convert + "' (try q8_0, q4_0, f16)");
    try {
      check_convert_target(*opt.convert);
    } catch (const Error& e) {
      throw Error(std::string("--convert: ") + e.what());
    }
  }
  if (f.dist.empty()) return load_model(resolve_model_path(given_path), opt);
  return open_distributed(resolve_model_path(given_path), opt);
}

namespace {

// The home rank's expert parallelism, for the life of the process; prints its
// traffic when it ends.
struct DistHome {
  std::unique_ptr<dist::HomeExperts> home;
  ~DistHome() { finish(); }
  void finish() {
    if (!home) return;
    const ExpertParallelStats t = home->stats();
    std::fprintf(stderr, "dist ep: %d ranks, %llu work messages, %.1f MB sent, %.1f MB received, %.3f s waiting for "
                 "other ranks, %.3f s of it beyond their compute (network and MPI)\n", t.ranks,
                 (unsigned long long)t.messages, t.bytes_sent / 1e6, t.bytes_received / 1e6, t.wait_seconds,
                 t.network_seconds);
    if (t.jobs)
      std::fprintf(stderr, "dist ep: %llu expert jobs, %.0f %% on the home rank, %.0f %% moved off their owner to "
                   "balance the ranks\n", (unsigned long long)t.jobs, 100.0 * t.jobs_home / t.jobs,
                   100.0 * t.jobs_moved / t.jobs);
    for (const ExpertRankStats& x : t.rank) {
      const std::string hit = x.lookups ? std::to_string((int)(100.0 * x.hits / x.lookups + 0.5)) + " % of units in memory"
                                        : std::string("weights resident");
      std::fprintf(stderr, "dist ep: rank %d (%s): %llu answers, %.3f s computing (%.3f s of it waiting for reads), "
                   "%.1f MB read, %s\n", x.rank, x.host.c_str(), (unsigned long long)x.answers, x.compute_seconds,
                   x.io_wait_seconds, x.bytes_read / 1e6, hit.c_str());
    }
    home.reset();  // tells the other ranks to stop
  }
};
DistHome g_dist_home;

// Costs of --dist ep's balancing (dist::place_jobs): when the experts are
// streamed, reading one is counted as 16 rows of compute (a one-token expert
// matvec is a few ms from memory, a 20-80 ms read from a 0.3-1 GB/s disk; rows
// of a prompt chunk are cheaper than that, so 16 is a middle), and the home
// rank's own reads per MoE layer (the non-expert tensors it streams) in the
// same unit.
dist::PlacementCosts placement_costs(Model& model) {
  dist::PlacementCosts c;
  const StoreStats st = model.weights().stats_snapshot();
  if (st.expert_slots == 0 || st.expert_slot_bytes == 0) return c;  // resident: rows only
  constexpr double kReadRows = 16;
  c.read_rows = kReadRows;
  const ModelConfig& mc = model.config();
  const int moe_layers = std::max(1, mc.n_layer - (int)mc.dense_ffn_layers.size());
  c.home_rows = kReadRows * (double)st.streamed_tensor_bytes / moe_layers / (double)st.expert_slot_bytes;
  return c;
}

}  // namespace

bool dist_home_rank() { return dist::mpi_world().rank() == 0; }

std::unique_ptr<Model> open_distributed(const std::string& path, const LoadOptions& opt) {
  dist::Communicator& comm = dist::mpi_world();
  if (g_dist_home.home)
    throw Error("--dist ep: one model per process (serve and agents take one model with --dist)");
  if (comm.rank() != 0) {
    // Another rank: load the same file, answer the home rank's expert work until it stops, and end quietly.
    std::unique_ptr<Model> model;
    std::string error;
    try {
      LoadOptions mine = opt;
      mine.experts_only = true;  // when streaming: its budget all for its experts
      model = load_model(path, mine);
    } catch (const std::exception& e) {
      error = e.what();
    }
    dist::serve_experts(model.get(), comm, error);
    model.reset();
    std::exit(0);
  }
  std::unique_ptr<Model> model;
  try {
    model = load_model(path, opt);
  } catch (...) {
    dist::stop_all(comm);
    throw;
  }
  g_dist_home.home = std::make_unique<dist::HomeExperts>(comm);  // throws naming a rank that could not load
  g_dist_home.home->set_costs(placement_costs(*model));
  // Registered after MPI's own exit handler (made by mpi_world()), so it runs first: the other ranks are told to
  // stop before MPI_Finalize.
  std::atexit([] { g_dist_home.finish(); });
  model->set_expert_parallel(g_dist_home.home.get());
  return model;
}

std::vector<int32_t> parse_ids(const std::string& csv) {
  std::vector<int32_t> ids;
  std::stringstream ss(csv);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t a = item.find_first_not_of(" \t\n"), b = item.find_last_not_of(" \t\n");
    if (a == std::string::npos) continue;
    item = item.substr(a, b - a + 1);
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back((int32_t)v);
    } catch (const std::exception&) {
      throw Error("invalid token id '" + item + "' (expected comma-separated non-negative integers)");
    }
  }
  if (ids.empty()) throw Error("empty token id list");
  return ids;
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace spool::cli
