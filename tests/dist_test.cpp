// Expert parallelism (src/dist) with ranks as threads of this process
// (dist::local_group): the same messages as over MPI, without MPI, so it also
// runs under the sanitizers. tests/dist/mpi_test.sh runs the real mpirun.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/comm.h"
#include "dist/expert_dist.h"
#include "model/model.h"
#include "test_util.h"

namespace spool {
namespace {

using test::all_logits;
using test::greedy;

std::string fixture(const char* name) { return std::string(SPOOL_SHARED_DIR) + "/fixtures/gguf/" + name; }

// weight_budget > 0: streamed, with that much for the weights (only for the
// routed experts with experts_only, as an expert rank loads).
std::unique_ptr<Model> load(const std::string& path, uint64_t weight_budget = 0, bool experts_only = false) {
  LoadOptions o;
  o.n_threads = 1;
  o.weight_budget = weight_budget;
  o.experts_only = experts_only;
  return load_model(path, o);
}

// Runs fn(home model) on rank 0 with n - 1 expert ranks as threads, each with its own copy of the model.
template <class Fn>
void with_ranks(const std::string& path, int n, Fn fn, ExpertParallelStats* traffic = nullptr,
                std::vector<dist::RankStats>* ranks_out = nullptr, uint64_t weight_budget = 0,
                dist::PlacementCosts costs = {}) {
  auto comms = dist::local_group(n);
  std::vector<std::thread> ranks;
  for (int r = 1; r < n; ++r)
    ranks.emplace_back([&, r] {
      std::unique_ptr<Model> m = load(path, weight_budget, true);
      dist::serve_experts(m.get(), *comms[r]);
    });
  {
    std::unique_ptr<Model> home = load(path, weight_budget);
    dist::HomeExperts ep(*comms[0]);
    ep.set_costs(costs);
    home->set_expert_parallel(&ep);
    fn(*home);
    if (traffic) *traffic = ep.stats();
    if (ranks_out) *ranks_out = ep.rank_stats();
  }  // ~HomeExperts: stop
  for (std::thread& t : ranks) t.join();
}

TEST(ExpertParallel, OwnersDealEachLayerEvenly) {
  for (int n = 1; n <= 5; ++n)
    for (int layer = 0; layer < 4; ++layer) {
      std::vector<int> count(n, 0);
      for (int e = 0; e < 64; ++e) {
        const int r = dist::expert_owner(layer, e, n);
        ASSERT_GE(r, 0);
        ASSERT_LT(r, n);
        ++count[r];
      }
      for (int c : count) EXPECT_LE(c - 64 / n, 1) << n << " ranks";
    }
  EXPECT_NE(dist::expert_owner(0, 0, 3), dist::expert_owner(1, 0, 3));  // layers start on different ranks
}

// Loads per rank of a placement, as place_jobs counts them.
std::vector<double> loads(int layer, const std::vector<ExpertJob>& jobs, const std::vector<int>& rank, int n,
                          const dist::PlacementCosts& c) {
  std::vector<double> l(n, 0.0);
  l[0] = c.home_rows;
  for (size_t i = 0; i < jobs.size(); ++i) l[rank[i]] += c.read_rows + jobs[i].rows;
  (void)layer;
  return l;
}

TEST(ExpertParallel, APassCrowdedOnOneRankIsSpreadOverAll) {
  const int n = 4, layer = 3;
  std::vector<ExpertJob> jobs;  // 8 one-row jobs, all owned by rank 1
  for (int e = 0; (int)jobs.size() < 8; ++e)
    if (dist::expert_owner(layer, e, n) == 1) jobs.push_back({e, 1});
  const dist::PlacementCosts streamed{16, 0};
  std::vector<int> rank = dist::place_jobs(layer, jobs, n, streamed);
  ASSERT_EQ(rank.size(), jobs.size());
  std::vector<int> count(n, 0);
  for (int r : rank) ++count[r];
  for (int r = 0; r < n; ++r) EXPECT_EQ(count[r], 2) << "rank " << r;
  EXPECT_EQ(rank, dist::place_jobs(layer, jobs, n, streamed));  // a function of its arguments

  // The home rank's own reads: it takes fewer jobs; the largest load is as small as whole jobs allow.
  const dist::PlacementCosts home_busy{16, 40};  // more than two jobs of its own
  rank = dist::place_jobs(layer, jobs, n, home_busy);
  count.assign(n, 0);
  for (int r : rank) ++count[r];
  EXPECT_EQ(count[0], 0);
  std::vector<double> l = loads(layer, jobs, rank, n, home_busy);
  EXPECT_LE(*std::max_element(l.begin(), l.end()), 3 * 17.0);

  // A balanced pass stays where it is: every job on its owner.
  std::vector<ExpertJob> even;
  for (int e = 0; e < 8; ++e) even.push_back({e, 1});
  rank = dist::place_jobs(layer, even, n, streamed);
  for (size_t i = 0; i < even.size(); ++i) EXPECT_EQ(rank[i], dist::expert_owner(layer, even[i].expert, n));

  // Rows count too: one big job alone, the small ones elsewhere.
  std::vector<ExpertJob> mixed = {{jobs[0].expert, 40}, {jobs[1].expert, 5}, {jobs[2].expert, 5}, {jobs[3].expert, 5}};
  rank = dist::place_jobs(layer, mixed, n, {});
  for (size_t i = 1; i < mixed.size(); ++i) EXPECT_NE(rank[i], rank[0]) << i;
  EXPECT_EQ(dist::place_jobs(layer, mixed, 1, {}), std::vector<int>(mixed.size(), 0));
}

TEST(ExpertParallel, RanksGiveOneProcesssLogitsAndGreedyTokens) {
  const std::vector<int32_t> prompt = {1, 5, 9, 13, 2, 7, 11, 3, 17, 4, 8, 21};
  for (const char* name : {"deepseek3-tiny.q8_0.gguf", "kimi-k3-tiny.f32.gguf", "mixtral-tiny.q8_0.gguf"}) {
    const std::string path = fixture(name);
    std::unique_ptr<Model> one = load(path);
    const std::vector<float> want = all_logits(*one, prompt);
    const std::vector<int32_t> want_ids = greedy(*one, prompt, 12);
    for (int n : {2, 3, 4}) {
      std::vector<float> got;
      std::vector<int32_t> got_ids;
      ExpertParallelStats t;
      std::vector<dist::RankStats> ranks;
      with_ranks(path, n, [&](Model& m) {
        got = all_logits(m, prompt);
        got_ids = greedy(m, prompt, 12);
      }, &t, &ranks);
      ASSERT_EQ(ranks.size(), (size_t)n);
      uint64_t answers = 0;
      for (int r = 1; r < n; ++r) answers += ranks[r].answers;
      EXPECT_EQ(answers, t.messages) << name << ", " << n << " ranks";  // each work message answered and counted
      EXPECT_EQ(got, want) << name << ", " << n << " ranks";  // bit for bit
      EXPECT_EQ(got_ids, want_ids) << name << ", " << n << " ranks";
      EXPECT_GT(t.messages, 0u) << name << ", " << n << " ranks";
      EXPECT_GT(t.bytes_received, 0u);
    }
    // Balanced for streamed experts with a busy home rank: many jobs leave their owner, the values stay.
    std::vector<float> got;
    ExpertParallelStats t;
    with_ranks(path, 4, [&](Model& m) { got = all_logits(m, prompt); }, &t, nullptr, 0, {16, 40});
    EXPECT_EQ(got, want) << name;
    EXPECT_GT(t.jobs_moved, 0u) << name;
    EXPECT_LT(t.jobs_home, t.jobs / 4) << name;
  }
}

// Each rank streams its experts through its own weight store (the experts'
// tensors are found in that store's manifest, not the file's).
TEST(ExpertParallel, RanksStreamTheirExperts) {
  const std::vector<int32_t> prompt = {1, 5, 9, 13, 2, 7, 11, 3, 17, 4, 8, 21};
  const std::string path = fixture("deepseek3-tiny.q8_0.gguf");
  const uint64_t budget = 160 << 10;  // about half of the file's weights
  std::unique_ptr<Model> one = load(path, budget);
  ASSERT_TRUE(one->weights().streaming());
  const std::vector<float> want = all_logits(*one, prompt);
  std::vector<float> got;
  ExpertParallelStats t;
  std::vector<dist::RankStats> ranks;
  with_ranks(path, 3, [&](Model& m) { got = all_logits(m, prompt); }, &t, &ranks, budget);
  EXPECT_EQ(got, want);
  for (int r = 1; r < 3; ++r) {
    EXPECT_GT(ranks[r].answers, 0u) << "rank " << r;
    EXPECT_GT(ranks[r].lookups, 0u) << "rank " << r;
    EXPECT_GT(ranks[r].bytes_read, 0u) << "rank " << r;
  }
}

// An expert rank's store holds only the routed experts: its whole budget
// caches them, and any other tensor is refused by name.
TEST(ExpertParallel, AnExpertRankHoldsOnlyTheRoutedExperts) {
  const std::string path = fixture("deepseek3-tiny.q8_0.gguf");
  const uint64_t budget = 160 << 10;
  std::unique_ptr<Model> all = load(path, budget), experts = load(path, budget, true);
  const StoreStats a = all->weights().stats_snapshot(), e = experts->weights().stats_snapshot();
  EXPECT_GT(a.resident_bytes, 0u);
  EXPECT_EQ(e.resident_bytes, 0u);
  EXPECT_EQ(e.tensor_slots, 0);
  EXPECT_GT(e.expert_slots, a.expert_slots);
  const TensorEntry* attn = nullptr;
  for (const TensorEntry& t : experts->weights().manifest().tensors)
    if (t.expert < 0 && t.name.find("attn") != std::string::npos && !t.memory) attn = &t;
  ASSERT_NE(attn, nullptr);
  try {
    experts->weights().acquire(*attn);
    ADD_FAILURE() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find(attn->name), std::string::npos) << err.what();
  }
}

TEST(ExpertParallel, ARankWithoutTheModelIsNamed) {
  auto comms = dist::local_group(3);
  std::thread r1([&] { dist::serve_experts(nullptr, *comms[1], "cannot open 'x.gguf'"); });
  std::thread r2([&] {
    std::unique_ptr<Model> m = load(fixture("deepseek3-tiny.q8_0.gguf"));
    dist::serve_experts(m.get(), *comms[2]);
  });
  try {
    dist::HomeExperts ep(*comms[0]);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 (thread 1) could not load the model: cannot open 'x.gguf'"),
              std::string::npos) << e.what();
  }
  r1.join();  // both were told to stop
  r2.join();
}

TEST(ExpertParallel, AnErrorOnARankFailsThePassNamingIt) {
  auto comms = dist::local_group(2);
  std::thread r1([&] {
    std::unique_ptr<Model> m = load(fixture("deepseek3-tiny.q8_0.gguf"));
    dist::serve_experts(m.get(), *comms[1]);
  });
  {
    dist::HomeExperts ep(*comms[0]);
    // An expert id the model does not have: the rank answers with an error, and keeps serving.
    const std::vector<float> rows(64 * 2, 0.5f);
    std::vector<uint8_t> here;
    ep.place(1, {{100000, 2}}, here);
    ASSERT_EQ(here, std::vector<uint8_t>{0});  // rank 1 owns it
    ep.submit(1, 64, {{100000, 2}}, rows.data());
    std::vector<float> out;
    try {
      ep.collect(out);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1 (thread 1): "), std::string::npos) << e.what();
    }
  }
  r1.join();
}

}  // namespace
}  // namespace spool
