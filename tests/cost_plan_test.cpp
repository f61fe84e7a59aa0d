// spool plan: the arithmetic on a small synthetic kimi-k3 file checked against
// sizes summed independently from its tensor table (total, experts, per-token
// bytes, KV and recurrent state from the layer shapes), the placement under a
// budget, reads per token at a hit rate, tok/s and TTFT; the K3 preset and the
// context comparison; the CLI prints its assumptions and rejects bad input.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "format/gguf.h"
#include "plan/cost_plan.h"
#include "synth/synth.h"
#include "test_util.h"

using namespace spool;
namespace fs = std::filesystem;

namespace {

const std::string kShared = SPOOL_SHARED_DIR;
const std::string kBin = SPOOL_BIN;

struct MiniFile {
  std::string dir, path;
  MiniFile() {
    dir = (fs::temp_directory_path() / "spool-plan-XXXXXX").string();
    if (!mkdtemp(dir.data())) throw std::runtime_error("mkdtemp failed");
    SynthOptions o;
    o.arch = "kimi-k3";
    o.preset = "kimi-k3-mini";
    o.type = "MXFP4";
    o.out = path = dir + "/mini.gguf";
    o.vocab_from = kShared + "/fixtures/gguf/qwen2-tiny.f32.gguf";
    o.n_threads = 2;
    synth_model(o);
  }
  ~MiniFile() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

const MiniFile& mini() {
  static MiniFile f;
  return f;
}

// Independent sums over the manifest.
struct Sums {
  uint64_t total = 0, experts = 0, embd = 0, per_token_experts = 0;
  int n_vocab = 0;
};

Sums sums(const gguf::File& f) {
  Sums s;
  const int N = (int)f.get_int("kimi-k3.expert_count"), k = (int)f.get_int("kimi-k3.expert_used_count");
  for (const TensorEntry& e : f.manifest.tensors) {
    s.total += e.bytes;
    if (e.name.find("_exps.weight") != std::string::npos) {  // [n_cols, n_rows, N]: k of N per layer a token
      EXPECT_EQ(e.shape.size(), 3u);
      EXPECT_EQ(e.shape[2], N);
      s.experts += e.bytes;
      s.per_token_experts += e.bytes * (uint64_t)k;
    }
    if (e.name == "token_embd.weight") s.embd = e.bytes, s.n_vocab = (int)e.shape[1];
  }
  s.per_token_experts /= (uint64_t)N;
  return s;
}

DeviceProfile device(double budget, double bw) {
  DeviceProfile d;
  d.name = "test";
  d.ram_bytes = budget * 2;
  d.budget_bytes = budget;
  d.read_bw = bw;
  return d;
}

}  // namespace

TEST(CostPlan, SizesMatchTheTensorTable) {
  const gguf::File f = gguf::open(mini().path);
  const Sums s = sums(f);
  const CostModel m = cost_model_from_gguf(f, mini().path);
  PlanOptions o;
  o.device = device(1e12, 1e9);
  const CostReport r = compute_cost(m, o);
  EXPECT_EQ(r.total, s.total);
  EXPECT_EQ(r.total, f.manifest.total_bytes());
  EXPECT_EQ(r.experts_total, s.experts);
  EXPECT_EQ(r.n_moe_layers, 3);
  EXPECT_EQ(r.tok_experts, s.per_token_experts);
  EXPECT_EQ(r.tok_dense(), s.total - s.experts - s.embd + s.embd / (uint64_t)s.n_vocab);
  EXPECT_EQ(r.expert_bytes, 3ull * 96 * 64 / 32 * 17);
  // KV: one MLA layer caching kv_lora 64 + rope 32 floats; state: 3 KDA layers of
  // 3 convs x (4 - 1) x 128 channels + 4 heads x 32 x 32, all F32.
  EXPECT_EQ(r.kv_per_token, 1u * (64 + 32) * 4);
  EXPECT_EQ(r.state_per_seq, 3u * (3 * 3 * 128 + 4 * 32 * 32) * 4);
  EXPECT_EQ(r.kv_reserved, r.state_per_seq + 4096ull * r.kv_per_token);
  // Everything fits: nothing is read, every expert cached.
  EXPECT_EQ(r.dense_streamed, 0);
  EXPECT_DOUBLE_EQ(r.cached_fraction, 1.0);
  EXPECT_EQ(r.read_per_token, 0);
  EXPECT_TRUE(std::isinf(r.decode_tok_s));
}

TEST(CostPlan, ReadsTokSAndTtftUnderABudget) {
  const gguf::File f = gguf::open(mini().path);
  const CostModel m = cost_model_from_gguf(f, mini().path);
  // From the tensor table: page-rounded non-expert tensors (token_embd is read by rows) and one expert slot.
  auto page = [](uint64_t b) { return (b + 4095) / 4096 * 4096; };
  uint64_t dense_rounded = 0;
  for (const TensorEntry& e : f.manifest.tensors)
    if (e.name.find("_exps.weight") == std::string::npos && e.name != "token_embd.weight") dense_rounded += page(e.bytes);
  const uint64_t slot = page(3ull * 96 * 64 / 32 * 17);
  PlanOptions o;
  o.n_ctx = 100;
  o.device = device(1e12, 2e6);
  const CostReport full = compute_cost(m, o);
  EXPECT_EQ(full.dense_streamed, 0);
  EXPECT_EQ(full.tensor_slots, 0);
  const double dense = (double)full.tok_dense();

  // Every non-expert tensor resident and room for exactly 10 expert slots (the 5 = top-4 + 1 minimum included).
  o.device = device((double)(full.kv_reserved + dense_rounded + 10 * slot), 2e6);
  CostReport r = compute_cost(m, o);
  EXPECT_TRUE(r.fits_streaming_minimum);
  EXPECT_EQ(r.dense_streamed, 0);
  EXPECT_DOUBLE_EQ(r.expert_cache, 10.0 * slot);
  EXPECT_DOUBLE_EQ(r.cached_fraction, 10.0 / 48);  // 3 MoE layers x 16 experts
  EXPECT_DOUBLE_EQ(r.hit_rate, 10.0 / 48);
  EXPECT_DOUBLE_EQ(r.read_per_token, (1 - 10.0 / 48) * (double)r.tok_experts);
  EXPECT_DOUBLE_EQ(r.decode_tok_s, 2e6 / r.read_per_token);
  o.hit_rate = 0.6;  // a measured rate replaces the cached share
  r = compute_cost(m, o);
  EXPECT_TRUE(r.hit_rate_given);
  EXPECT_NEAR(r.read_per_token, 0.4 * (double)r.tok_experts, 1e-6);
  o.hit_rate = 1.5;
  EXPECT_THROW(compute_cost(m, o), Error);
  o.hit_rate = NAN;

  // Below the expert minimum: spool would refuse; everything is read.
  o.device = device((double)(full.kv_reserved + 4 * slot), 2e6);
  r = compute_cost(m, o);
  EXPECT_FALSE(r.fits_streaming_minimum);
  const TensorEntry* embd = f.manifest.find("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_DOUBLE_EQ(r.dense_resident, (double)(embd->bytes / (uint64_t)embd->shape[1]));  // the embedding row only
  EXPECT_DOUBLE_EQ(r.read_per_token, r.dense_streamed + (double)r.tok_experts);

  // Budgets in between: below the store's minimum first (3 slots of a tensor and the tensors larger than it),
  // then the books balance and more memory never reads more.
  double last = INFINITY;
  bool feasible = false;
  for (double extra = 5 * slot; extra <= dense_rounded + 20.0 * slot; extra += dense_rounded / 16.0) {
    o.device = device((double)full.kv_reserved + extra, 2e6);
    r = compute_cost(m, o);
    SCOPED_TRACE(extra);
    if (!r.fits_streaming_minimum) {
      EXPECT_FALSE(feasible) << "a larger budget fell below the minimum";
      continue;
    }
    feasible = true;
    EXPECT_DOUBLE_EQ(r.dense_resident + r.dense_streamed, dense);
    EXPECT_LE(r.dense_resident + r.tensor_slots + r.expert_cache, extra + 4096.0 * 64);
    EXPECT_GE(r.expert_cache, 5.0 * slot);
    EXPECT_DOUBLE_EQ(r.read_per_token, r.dense_streamed + (1 - r.cached_fraction) * (double)r.tok_experts);
    EXPECT_LE(r.read_per_token, last);
    last = r.read_per_token;
  }
  EXPECT_TRUE(feasible);

  // Prefill: a 1-token prompt reads what a decode step reads (k distinct experts per layer); 64 tokens in
  // chunks of 32 are two chunks with N (1 - (1 - k/N)^32) experts per layer each.
  o.device = device((double)full.kv_reserved + dense_rounded / 2.0 + 5 * slot, 2e6);
  o.n_prompt = 1;
  r = compute_cost(m, o);
  EXPECT_GT(r.dense_streamed, 0);
  EXPECT_NEAR(r.prefill_read, r.read_per_token, 1e-6 * r.read_per_token);
  EXPECT_NEAR(r.ttft_s, r.read_per_token / 2e6, 1e-9);
  o.n_prompt = 64;
  o.n_chunk = 32;
  r = compute_cost(m, o);
  const double distinct = 16 * (1 - std::pow(1 - 4.0 / 16, 32));
  EXPECT_NEAR(r.distinct_per_chunk, distinct, 1e-9);
  EXPECT_NEAR(r.prefill_read,
              2 * (r.dense_streamed + (1 - r.hit_rate) * distinct * 3 * (double)r.expert_bytes), 1e-6 * r.prefill_read);
}

TEST(CostPlan, KimiK3PresetAndContextTable) {
  const CostModel m = cost_model_kimi_k3("native");
  PlanOptions o;
  o.device = *find_device_profile("phone");
  const CostReport r = compute_cost(m, o);
  std::printf("[ kimi-k3 native ] total %.1f GB (experts %.1f GB); per token %.2f GB (experts %.2f GB); phone reads "
              "%.2f GB/token\n",
              r.total / 1e9, r.experts_total / 1e9, r.tok_total() / 1e9, r.tok_experts / 1e9, r.read_per_token / 1e9);
  // 92 MoE layers x 896 experts x 3 x 3584 x 3072 MXFP4 values (17 bytes per 32).
  EXPECT_EQ(r.experts_total, 92ull * 896 * 3 * 3584 * 3072 / 32 * 17);
  EXPECT_EQ(r.tok_experts, 92ull * 16 * 3 * 3584 * 3072 / 32 * 17);
  EXPECT_NEAR(r.total / 1e12, 1.55, 0.05);  // + ~58B BF16 non-expert parameters
  // 24 MLA layers x 576 floats per token; 69 KDA layers of 96 x 128 x 128 + 3 x 3 x 12288 floats.
  EXPECT_EQ(r.kv_per_token, 24u * 576 * 4);
  EXPECT_EQ(r.state_per_seq, 69ull * (96 * 128 * 128 + 3 * 3 * 12288) * 4);
  EXPECT_GT(r.dense_streamed, 0);  // ~117 GB of BF16 weights cannot stay in a phone
  const std::vector<int> ctx = {2048, 32768, 131072};
  const std::vector<ContextRow> rows = context_comparison(m, ctx);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].at[2], r.state_per_seq + 131072ull * 24 * 576 * 4);
  EXPECT_EQ(rows[1].per_token, 93u * 576 * 4);
  EXPECT_EQ(rows[1].fixed, 0u);
  EXPECT_EQ(rows[2].per_token, 93u * 2 * 8 * 128 * 4);
  EXPECT_EQ(rows[3].per_token, 93u * 2 * 8 * 128 * 2);
}

TEST(CostPlan, CliPrintsAssumptionsAndRejectsBadInput) {
  int status = 0;
  std::string out = test::run_stdout(kBin + " plan --preset kimi-k3 --device phone 2>&1", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("assumptions:"), std::string::npos) << out;
  EXPECT_NE(out.find("decode:"), std::string::npos) << out;
  EXPECT_NE(out.find("TTFT"), std::string::npos) << out;
  out = test::run_stdout(kBin + " plan " + mini().path + " --ram 64M --read-bw 1G --hit-rate 0.5 2>&1", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("hit rate 0.500 as given"), std::string::npos) << out;
  out = test::run_stdout(kBin + " plan --preset kimi-k3 --context-table 2>&1", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("every layer MLA"), std::string::npos) << out;
  out = test::run_stdout(kBin + " plan --preset kimi-k3 --device toaster 2>&1", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("unknown --device 'toaster'"), std::string::npos) << out;
  out = test::run_stdout(kBin + " plan --preset kimi-k9 --device phone 2>&1", &status);
  EXPECT_NE(status, 0);
  out = test::run_stdout(kBin + " plan " + mini().path + ".missing --device phone 2>&1", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("error:"), std::string::npos) << out;
}

namespace spool {
namespace {

// --nodes N (--dist ep): each node reads its 1/N of the experts, and the
// network carries k (N - 1) / N rows of n_embd floats out and back per MoE layer.
TEST(CostPlan, NodesShareTheExpertsAndPayTheNetwork) {
  PlanTypes t;
  t.type = "UD-IQ1_S";
  const CostModel m = cost_model_deepseek2("kimi-k2", t);
  ASSERT_EQ(m.expert_row, 7168);
  PlanOptions o;
  o.device = *find_device_profile("workstation");
  o.hit_rate = 0.25;
  const CostReport one = compute_cost(m, o);
  EXPECT_EQ(one.net_bytes_per_token, 0.0);
  for (int n : {2, 4}) {
    o.nodes = n;
    const CostReport r = compute_cost(m, o);
    EXPECT_DOUBLE_EQ(r.node_expert_read, 0.75 * (double)one.tok_experts / n);
    EXPECT_DOUBLE_EQ(r.read_per_token, one.dense_streamed + r.node_expert_read);
    const double rows = 8.0 * (n - 1) / n;
    EXPECT_DOUBLE_EQ(r.net_bytes_per_token, 2.0 * r.n_moe_layers * rows * 4 * 7168);
    EXPECT_DOUBLE_EQ(r.net_s_per_token, r.net_bytes_per_token / 125e6 + 2 * 2e-4 * r.n_moe_layers);
    EXPECT_NEAR(1.0 / r.decode_tok_s, r.read_per_token / o.device.read_bw + r.net_s_per_token, 1e-12);
    EXPECT_GT(r.decode_tok_s, one.decode_tok_s) << n << " nodes";
    EXPECT_NE(describe_cost(m, o, r).find(std::to_string(n) + " nodes (--dist ep)"), std::string::npos);
  }
  o.nodes = 0;
  EXPECT_THROW(compute_cost(m, o), Error);
}

}  // namespace
}  // namespace spool
