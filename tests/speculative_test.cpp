// Speculative decoding (runtime/speculative.*, the engine's verify step):
// n-gram drafts, draft models (-md), the governor's choices, and the engine's output with drafts
// verified: greedy and seeded outputs bit-identical to decoding without
// drafts (dense, MLA and MoE models, concurrency, preemption), and unseeded
// sampled output distributed as the target's (a two-sample chi-square test).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/matmul.h"
#include "model/model.h"
#include "runtime/draft_model.h"
#include "runtime/engine.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "test_util.h"

using namespace spool;

namespace {

const std::string kShared = SPOOL_SHARED_DIR;

struct Out {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

// Runs the requests together and returns their tokens and chosen-token logprobs.
std::vector<Out> run_together(Engine& e, const std::vector<RequestParams>& reqs) {
  std::vector<Out> out(reqs.size());
  std::vector<std::future<void>> futs;
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto d = std::make_shared<std::promise<void>>();
    futs.push_back(d->get_future());
    Out* o = &out[i];
    e.submit(reqs[i], [o, d](const RequestEvent& ev) {
      o->tokens.insert(o->tokens.end(), ev.tokens.begin(), ev.tokens.end());
      for (const TokenLogprob& lp : ev.logprobs) o->logprobs.push_back(lp.logprob);
      if (ev.finished) d->set_value();
    });
  }
  for (auto& f : futs) EXPECT_EQ(f.wait_for(std::chrono::seconds(300)), std::future_status::ready);
  return out;
}

// One request at a time.
std::vector<Out> run_alone(Engine& e, const std::vector<RequestParams>& reqs) {
  std::vector<Out> out;
  for (const RequestParams& r : reqs) out.push_back(run_together(e, {r})[0]);
  return out;
}

RequestParams greedy(std::vector<int32_t> prompt, int n) {
  RequestParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = n;
  p.sampling.temperature = 0;
  p.ignore_eos = true;
  p.top_logprobs = 0;
  return p;
}

// Prompts with repeated phrases (drafts to find) and without.
std::vector<std::vector<int32_t>> prompts_for(const Model& m) {
  const int V = m.config().n_vocab;
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < 5; ++i) {
    std::vector<int32_t> p;
    for (int j = 0; j < 4 + 5 * i; ++j) p.push_back((int32_t)((11 + 37 * i + 7 * j + i * j) % (V - 10) + 5));
    if (i % 2 == 0) {  // the prompt said twice: a copy the drafts can follow
      const std::vector<int32_t> once = p;
      p.insert(p.end(), once.begin(), once.end() - 1);
    }
    out.push_back(p);
  }
  return out;
}

EngineOptions options(SpecMode mode, int max_draft = 4) {
  EngineOptions o;
  o.n_ctx = 160;
  o.max_batch_tokens = 24;  // prefill chunks split and mixed with decodes and drafts
  o.block_size = 8;
  o.spec.mode = mode;
  o.spec.max_draft = max_draft;
  return o;
}

const char* kModels[] = {"/models/stories260K.gguf", "/fixtures/gguf/qwen2-tiny.f32.gguf",
                         "/fixtures/gguf/deepseek3-tiny.q8_0.gguf", "/fixtures/gguf/mixtral-tiny.q8_0.gguf",
                         "/fixtures/gguf/llama-tiny.q8_0.gguf"};

}  // namespace

TEST(NgramDrafts, OwnTokensRepetitionAndContexts) {
  SpecSequence s;
  // "1 2 3 4 5 ... 1 2 3" -> drafts "4 5 ..." (the latest earlier occurrence of the longest n-gram).
  std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 9, 1, 2, 3};
  EXPECT_EQ(test::join(s.propose(t, 3)), "4,5,6");
  EXPECT_EQ(test::join(s.propose(t, 8)), "4,5,6,9,1,2,3,4");  // past the end it follows its own draft
  // A loop of period 2 drafts the full length.
  std::vector<int32_t> loop = {7, 8, 7, 8, 7, 8};
  SpecSequence s2;
  EXPECT_EQ(test::join(s2.propose(loop, 5)), "7,8,7,8,7");
  // Nothing repeats: no draft, unless a shared context has the n-gram.
  std::vector<int32_t> fresh = {20, 21, 22, 23};
  SpecSequence s3;
  EXPECT_TRUE(s3.propose(fresh, 4).empty());
  s3.set_contexts({std::make_shared<DraftContext>(std::vector<int32_t>{5, 22, 23, 24, 25, 26})});
  EXPECT_EQ(test::join(s3.propose(fresh, 3)), "24,25,26");
  EXPECT_EQ(test::join(s3.propose(fresh, 9)), "24,25,26");  // a context's draft ends with the context
  // The index is incremental: a sequence that grows finds its new n-grams.
  t.push_back(4);
  t.push_back(77);
  t.push_back(2);
  t.push_back(3);
  EXPECT_EQ(test::join(s.propose(t, 2)), "4,77");  // "2 3" last seen before "4 77"
}

TEST(NgramDrafts, ShadowDraftsMoveTheAcceptanceEstimate) {
  SpecSequence good, bad;
  const double prior = good.acceptance();
  std::vector<int32_t> t = {1, 2, 3};
  for (int step = 0; step < 20; ++step) {
    good.shadow({10, 11}, (int)t.size());
    bad.shadow({10, 11}, (int)t.size());
    std::vector<int32_t> g = t, b = t;
    g.insert(g.end(), {10, 11});
    b.insert(b.end(), {12, 11});
    good.observe(g);
    bad.observe(b);
  }
  EXPECT_GT(good.acceptance(), 0.9);
  EXPECT_LT(bad.acceptance(), 0.1);
  EXPECT_LT(bad.acceptance(), prior);
}

TEST(SpecGovernor, DraftsOnlyWhereTokensPerSecondRise) {
  StepCosts flat, linear;
  for (int rows = 1; rows <= 9; ++rows) {
    flat.record(rows, 0.010 * (1 + 0.02 * (rows - 1)));  // memory-bound: a step reads the weights once
    linear.record(rows, 0.010 * rows);                    // streamed experts: each row reads its own
  }
  const std::vector<SpecCandidate> likely = {{8, 0.8}}, unlikely = {{8, 0.01}};
  const std::vector<int> k_flat = choose_drafts(SpecMode::Auto, flat, 1, 1, likely, 100);
  EXPECT_GE(k_flat[0], 6);
  EXPECT_EQ(choose_drafts(SpecMode::Auto, linear, 1, 1, likely, 100)[0], 0);
  EXPECT_EQ(choose_drafts(SpecMode::Auto, flat, 1, 1, unlikely, 100)[0], 0);
  EXPECT_EQ(choose_drafts(SpecMode::Off, flat, 1, 1, likely, 100)[0], 0);
  EXPECT_EQ(choose_drafts(SpecMode::On, linear, 1, 1, unlikely, 100)[0], 8);
  EXPECT_EQ(choose_drafts(SpecMode::On, linear, 1, 1, unlikely, 3)[0], 3);  // the step's token budget
  // Two sequences: the likelier one gets drafts first.
  const std::vector<int> two = choose_drafts(SpecMode::Auto, flat, 2, 2, {{4, 0.2}, {4, 0.9}}, 100);
  EXPECT_GT(two[1], two[0]);
  // Nothing measured: decode plainly first.
  EXPECT_EQ(choose_drafts(SpecMode::Auto, StepCosts{}, 1, 1, likely, 100)[0], 0);
  // A size never measured is assumed cheap, once: the governor tries it.
  StepCosts only_one;
  only_one.record(1, 0.01);
  EXPECT_GT(choose_drafts(SpecMode::Auto, only_one, 1, 1, likely, 100)[0], 0);
  // ... but not when a larger pass (a prompt's) was measured and the sizes between interpolate as dear:
  // streamed experts, read per row, are not probed at all.
  only_one.record(14, 0.14);
  EXPECT_EQ(choose_drafts(SpecMode::Auto, only_one, 1, 1, {{8, 1.0 / 3}}, 100)[0], 0);
  // The step's own size is measured first: estimated from larger passes, drafts would look free.
  StepCosts no_base;
  no_base.record(5, 0.011);
  EXPECT_EQ(choose_drafts(SpecMode::Auto, no_base, 1, 1, likely, 100)[0], 0);
  // A draft model's passes count: one as dear as the model's own pass does not pay, a cheap one does.
  StepCosts dear, cheap;
  for (int rows = 1; rows <= 9; ++rows) dear.record(rows, 0.010), cheap.record(rows, 0.0005);
  const std::vector<SpecCandidate> model_draft = {{8, 0.8, true}};
  EXPECT_EQ(choose_drafts(SpecMode::Auto, flat, 1, 1, model_draft, 100, &dear)[0], 0);
  EXPECT_GE(choose_drafts(SpecMode::Auto, flat, 1, 1, model_draft, 100, &cheap)[0], 4);
  EXPECT_GE(choose_drafts(SpecMode::Auto, flat, 1, 1, model_draft, 100, nullptr)[0], 6);  // n-gram-like: free
  // A sequence whose drafts were never scored offers no evidence: its first draft is scored for free.
  SpecSequence fresh;
  EXPECT_EQ(fresh.evidence(), 0.0);
  fresh.verified(2, 1);
  EXPECT_GT(fresh.evidence(), 0.0);
}

// Greedy output with drafts verified is the output without, token for token
// and logprob for logprob, alone and batched, on dense, MLA and MoE models.
TEST(SpeculativeEngine, GreedyOutputIdenticalToPlainDecoding) {
  for (const char* path : kModels) {
    SCOPED_TRACE(path);
    auto model = load_model(kShared + path, LoadOptions{2});
    std::vector<RequestParams> reqs;
    for (const auto& p : prompts_for(*model)) reqs.push_back(greedy(p, 40));
    auto off = make_engine(*model, options(SpecMode::Off));
    const std::vector<Out> ref = run_together(*off, reqs);
    for (SpecMode mode : {SpecMode::On, SpecMode::Auto}) {
      SCOPED_TRACE(spec_mode_name(mode));
      auto e = make_engine(*model, options(mode));
      const std::vector<Out> alone = run_alone(*e, reqs);
      const std::vector<Out> together = run_together(*e, reqs);
      for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ(test::join(alone[i].tokens), test::join(ref[i].tokens)) << "request " << i;
        EXPECT_EQ(test::join(together[i].tokens), test::join(ref[i].tokens)) << "request " << i;
        EXPECT_EQ(alone[i].logprobs, ref[i].logprobs) << "request " << i;
        EXPECT_EQ(together[i].logprobs, ref[i].logprobs) << "request " << i;
      }
      const EngineStats s = e->stats();
      EXPECT_EQ(s.kv_blocks_used, 0);
      EXPECT_EQ(s.generated_tokens, 2u * reqs.size() * 40);
      if (mode == SpecMode::On) {
        EXPECT_GT(s.spec.drafted, 0u);  // the test is not vacuous: drafts were verified
        EXPECT_GT(s.spec.accepted, 0u);
        EXPECT_LT(s.computed_tokens, off->stats().computed_tokens * 3);
      }
    }
    EXPECT_EQ(off->stats().spec.drafted, 0u);
  }
}

// Drafts in a pool so small that requests preempt each other: outputs unchanged.
TEST(SpeculativeEngine, TinyPoolPreemptionKeepsOutputs) {
  auto model = load_model(kShared + "/models/stories260K.gguf", LoadOptions{2});
  std::vector<RequestParams> reqs;
  for (const auto& p : prompts_for(*model)) reqs.push_back(greedy(p, 48));
  EngineOptions o = options(SpecMode::Off);
  auto off = make_engine(*model, o);
  const std::vector<Out> ref = run_together(*off, reqs);
  o.spec.mode = SpecMode::On;
  o.spec.max_draft = 8;
  o.kv_bytes = 12 * PagedKvCache::block_bytes(model->kv_shape(), o.block_size);
  auto e = make_engine(*model, o);
  const std::vector<Out> out = run_together(*e, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(test::join(out[i].tokens), test::join(ref[i].tokens));
  EXPECT_GT(e->stats().preemptions, 0u);
  EXPECT_GT(e->stats().spec.accepted, 0u);
}

// Seeded sampling: with drafts, the very tokens decoding without gives.
TEST(SpeculativeEngine, SeededSamplingIdenticalToPlainDecoding) {
  auto model = load_model(kShared + "/models/stories260K.gguf", LoadOptions{2});
  const char* texts[] = {"Once upon a time, there was a little girl. She had a red ball. Once upon a time, there was a",
                         "Tom and Sue went to the park. They played with a ball. Tom and Sue went to the",
                         "The cat sat on the mat. The dog sat on the"};
  std::vector<RequestParams> reqs;
  int i = 0;
  for (const char* text : texts)
    for (float temp : {0.3f, 0.8f}) {
      RequestParams r = greedy(model->tokenizer().encode(text, true, true), 40);
      r.sampling.temperature = temp;
      r.sampling.seed = 77 + i++;
      reqs.push_back(r);
    }
  auto off = make_engine(*model, options(SpecMode::Off));
  auto on = make_engine(*model, options(SpecMode::On));
  const std::vector<Out> a = run_together(*off, reqs), b = run_together(*on, reqs);
  for (size_t j = 0; j < reqs.size(); ++j) {
    EXPECT_EQ(test::join(a[j].tokens), test::join(b[j].tokens)) << "request " << j;
    EXPECT_EQ(a[j].logprobs, b[j].logprobs) << "request " << j;
  }
  EXPECT_GT(on->stats().spec.accepted, 0u);
}

// Unseeded sampling: the distribution of the generated text with drafts is
// the target's. Two samples of 240 requests each, with and without drafts,
// compared by a chi-square test on the tokens at positions 2..5 (where
// drafts from the repeated prompt are verified).
TEST(SpeculativeEngine, SampledOutputFollowsTheTargetDistribution) {
  auto model = load_model(kShared + "/models/stories260K.gguf", LoadOptions{2});
  const Tokenizer& tok = model->tokenizer();
  const std::vector<int32_t> prompt =
      tok.encode("Once upon a time, there was a little girl. She had a red ball. Once upon a time, there was a", true,
                 true);
  constexpr int kRequests = 240, kTokens = 6;
  auto sample = [&](SpecMode mode, EngineStats* stats) {
    EngineOptions o = options(mode);
    o.max_running = 16;
    o.max_batch_tokens = 256;
    o.max_waiting = kRequests;
    auto e = make_engine(*model, o);
    std::vector<RequestParams> reqs;
    for (int i = 0; i < kRequests; ++i) {
      RequestParams r = greedy(prompt, kTokens);
      r.sampling.temperature = 1.0f;
      r.sampling.top_k = 0;
      r.sampling.top_p = 1.0f;
      r.sampling.min_p = 0.0f;
      reqs.push_back(r);
    }
    std::vector<Out> out = run_together(*e, reqs);
    *stats = e->stats();
    return out;
  };
  EngineStats s_off, s_on;
  const std::vector<Out> a = sample(SpecMode::Off, &s_off), b = sample(SpecMode::On, &s_on);
  ASSERT_GT(s_on.spec.drafted, 100u);
  ASSERT_GT(s_on.spec.accepted, 50u);
  ASSERT_LT(s_on.spec.accepted, s_on.spec.drafted);  // rejections happened too: the rule is exercised
  for (int pos = 2; pos < kTokens; ++pos) {
    SCOPED_TRACE("position " + std::to_string(pos));
    std::map<int32_t, std::pair<int, int>> counts;
    for (int i = 0; i < kRequests; ++i) {
      ++counts[a[i].tokens.at(pos)].first;
      ++counts[b[i].tokens.at(pos)].second;
    }
    // Categories with few observations pooled into one.
    double chi2 = 0;
    int df = -1, pooled_a = 0, pooled_b = 0;
    auto add = [&](int x, int y) {
      const double e = (x + y) / 2.0;
      chi2 += (x - e) * (x - e) / e + (y - e) * (y - e) / e;
      ++df;
    };
    for (const auto& [t, c] : counts) {
      if (c.first + c.second >= 10) add(c.first, c.second);
      else pooled_a += c.first, pooled_b += c.second;
    }
    if (pooled_a + pooled_b > 0) add(pooled_a, pooled_b);
    ASSERT_GE(df, 1);
    // The 99.9th percentile of chi-square: about df + 3.1 sqrt(2 df) + 7 for the small df seen here.
    const double limit = df + 3.1 * std::sqrt(2.0 * df) + 7;
    EXPECT_LT(chi2, limit) << "df " << df;
  }
}

// Hybrid models (linear attention with a recurrent state): the verify pass
// folds its rows into the state one token at a time, and a rejected draft
// restores the state and recomputes the accepted tokens. Greedy output and
// logprobs equal decoding without drafts, alone and batched, also with state
// snapshots (prefix reuse) and in a pool small enough to preempt.
TEST(SpeculativeEngine, HybridModelsRollTheirStateBack) {
  const std::string fixtures = kShared + "/fixtures/";
  for (const char* name : {"qwen3next-tiny", "qwen35moe-tiny", "kimi-linear-tiny", "gguf/kimi-k3-tiny.f32.gguf"}) {
    SCOPED_TRACE(name);
    auto model = load_model(fixtures + name, LoadOptions{2});
    std::vector<RequestParams> reqs;
    for (const auto& p : prompts_for(*model)) reqs.push_back(greedy(p, 40));
    // Prefill chunks of hybrid models are aligned to the delta rule's 64-token chunk when a step has room
    // for one (Scheduler::chunk_len), so their numbers do not depend on what else a step held.
    EngineOptions o = options(SpecMode::Off);
    o.max_batch_tokens = 128;
    auto off = make_engine(*model, o);
    const std::vector<Out> ref = run_together(*off, reqs);
    // Tiny random models rarely repeat themselves: each request drafts from its own reference text with every
    // 7th token changed, so drafts are accepted up to a wrong token and then rejected.
    const int V = model->config().n_vocab;
    for (size_t i = 0; i < reqs.size(); ++i) {
      std::vector<int32_t> ctx = reqs[i].prompt;
      for (size_t j = 0; j < ref[i].tokens.size(); ++j)
        ctx.push_back(j % 7 == 6 ? (ref[i].tokens[j] + 1) % V : ref[i].tokens[j]);
      reqs[i].draft_contexts = {std::make_shared<const DraftContext>(ctx)};
    }
    o.spec.mode = SpecMode::On;
    auto on = make_engine(*model, o);
    EXPECT_EQ(on->stats().spec.mode, SpecMode::On);
    const std::vector<Out> alone = run_alone(*on, reqs), together = run_together(*on, reqs);
    o.state_snapshots = 4;
    o.snapshot_interval = 64;
    auto snap = make_engine(*model, o);
    const std::vector<Out> snapped = run_together(*snap, reqs), again = run_together(*snap, reqs);
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(test::join(alone[i].tokens), test::join(ref[i].tokens)) << "request " << i;
      EXPECT_EQ(together[i].logprobs, ref[i].logprobs) << "request " << i;
      EXPECT_EQ(snapped[i].logprobs, ref[i].logprobs) << "request " << i;
      EXPECT_EQ(again[i].logprobs, ref[i].logprobs) << "request " << i;
    }
    const EngineStats s = on->stats();
    EXPECT_GT(s.spec.accepted, 0u);
    EXPECT_LT(s.spec.accepted, s.spec.drafted);  // rejections happened: the rollback is exercised
    EXPECT_EQ(s.kv_blocks_used, 0);
  }
}

// The draft model's drafts are its greedy continuation, however the sequence
// moved since its last draft (accepted tokens, a rejected tail, another
// sequence taking its only slot).
TEST(DraftModel, DraftsAreTheGreedyContinuation) {
  set_matmul_batch_invariant(true);
  auto model = load_model(kShared + "/models/stories260K.gguf", LoadOptions{2});
  auto greedy_next = [&](const std::vector<int32_t>& tokens, int n) {
    Session s(*model, 128);
    std::vector<int32_t> seq = tokens, out;
    const std::vector<float>* l = &s.feed(seq);
    for (int i = 0; i < n; ++i) {
      const float* row = l->data();
      int32_t best = 0;
      for (int32_t t = 1; t < model->config().n_vocab; ++t)
        if (row[t] > row[best]) best = t;
      out.push_back(best);
      l = &s.feed({best});
    }
    return out;
  };
  auto draft = load_model(kShared + "/models/stories260K.gguf", LoadOptions{2});
  DraftModel dm(*draft, model->config().n_vocab, 128, 1);  // one slot: two sequences evict each other
  const std::vector<std::vector<int32_t>> prompts = prompts_for(*model);
  std::vector<int32_t> a = prompts[0], b = prompts[1];
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE(round);
    std::vector<DraftJob> jobs{{1, &a, 6, {}}};
    dm.propose(jobs);
    EXPECT_EQ(test::join(jobs[0].draft), test::join(greedy_next(a, 6)));
    // The sequence goes on with one drafted token and then two of its own: the draft model keeps the common
    // prefix and computes the rest (its K/V of the second drafted token is stale).
    a.push_back(jobs[0].draft[0]);
    a.push_back((jobs[0].draft[1] + 3) % model->config().n_vocab);
    a.push_back((jobs[0].draft[2] + 5) % model->config().n_vocab);
    if (round % 2 == 1) {  // another sequence takes the only slot
      std::vector<DraftJob> other{{2, &b, 3, {}}};
      dm.propose(other);
      EXPECT_EQ(test::join(other[0].draft), test::join(greedy_next(b, 3)));
    }
  }
  // Two sequences at once, and a draft cut by the context.
  std::vector<int32_t> full(126, 7);
  std::vector<DraftJob> two{{3, &a, 4, {}}, {4, &full, 8, {}}};
  DraftModel dm2(*draft, model->config().n_vocab, 128, 2);
  dm2.propose(two);
  EXPECT_EQ(test::join(two[0].draft), test::join(greedy_next(a, 4)));
  EXPECT_EQ(two[1].draft.size(), 3u);  // positions 126 and 127 are left: rows for d0, d1 and d2 at most
  EXPECT_GT(dm2.passes(), 0u);
}

// A draft model drafts in the engine: with the model itself as its draft every
// draft token is accepted; with another model of the vocabulary (the Q8_0 copy
// of an F32 model) some are rejected; the output is decoding's without drafts.
TEST(DraftModel, EngineOutputIdenticalAndSelfDraftAlwaysAccepted) {
  struct Pair {
    const char* target;
    const char* draft;
    bool self;
  };
  for (const Pair& p : {Pair{"/models/stories260K.gguf", "/models/stories260K.gguf", true},
                        Pair{"/fixtures/gguf/llama-tiny.f32.gguf", "/fixtures/gguf/llama-tiny.q8_0.gguf", false},
                        Pair{"/fixtures/gguf/deepseek3-tiny.f32.gguf", "/fixtures/gguf/deepseek3-tiny.q8_0.gguf", false}}) {
    SCOPED_TRACE(p.target);
    auto model = load_model(kShared + p.target, LoadOptions{2});
    LoadOptions dl{2};
    dl.pool = model->shared_pool();
    auto draft = load_model(kShared + p.draft, dl);
    std::vector<RequestParams> reqs;
    for (const auto& pr : prompts_for(*model)) reqs.push_back(greedy(pr, 40));
    auto off = make_engine(*model, options(SpecMode::Off));
    const std::vector<Out> ref = run_together(*off, reqs);
    for (SpecMode mode : {SpecMode::On, SpecMode::Auto}) {
      SCOPED_TRACE(spec_mode_name(mode));
      EngineOptions o = options(mode);
      o.draft_model = draft.get();
      o.max_running = 3;  // fewer than the requests: the draft model's slots are reused
      auto e = make_engine(*model, o);
      const std::vector<Out> alone = run_alone(*e, reqs), together = run_together(*e, reqs);
      for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ(test::join(alone[i].tokens), test::join(ref[i].tokens)) << "request " << i;
        EXPECT_EQ(together[i].logprobs, ref[i].logprobs) << "request " << i;
      }
      const EngineStats s = e->stats();
      EXPECT_TRUE(s.spec.draft_model);
      EXPECT_EQ(s.kv_blocks_used, 0);
      if (mode == SpecMode::On) {
        EXPECT_GT(s.spec.model_drafted, 100u);
        if (p.self) EXPECT_EQ(s.spec.model_accepted, s.spec.model_drafted);
        else EXPECT_GT(s.spec.model_accepted, 0u);
        EXPECT_GT(s.spec.draft_seconds, 0.0);
      }
    }
  }
}

// A hybrid target (its recurrent state rolled back on rejection) with an
// attention-only draft of its vocabulary; a hybrid draft model is refused, as
// is a draft of another vocabulary, by name.
TEST(DraftModel, HybridTargetAndRefusals) {
  auto target = load_model(kShared + "/fixtures/qwen3next-tiny", LoadOptions{2});
  auto qwen3 = load_model(kShared + "/fixtures/gguf/qwen3-tiny.q8_0.gguf", LoadOptions{2});
  auto stories = load_model(kShared + "/models/stories260K.gguf", LoadOptions{2});
  try {
    check_draft_model(*stories, *target);
    ADD_FAILURE() << "a hybrid draft model was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("recurrent state"), std::string::npos) << e.what();
  }
  try {
    check_draft_model(*target, *stories);
    ADD_FAILURE() << "a draft of another vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary"), std::string::npos) << e.what();
  }
  EngineOptions bad = options(SpecMode::On);
  bad.draft_model = stories.get();
  EXPECT_THROW(make_engine(*target, bad), Error);

  check_draft_model(*target, *qwen3);  // the tiny Qwen fixtures share their tokenizer
  std::vector<RequestParams> reqs;
  for (const auto& pr : prompts_for(*target)) reqs.push_back(greedy(pr, 32));
  EngineOptions o = options(SpecMode::Off);
  o.max_batch_tokens = 128;
  auto off = make_engine(*target, o);
  const std::vector<Out> ref = run_together(*off, reqs);
  o.spec.mode = SpecMode::On;
  o.draft_model = qwen3.get();
  auto on = make_engine(*target, o);
  const std::vector<Out> out = run_together(*on, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(out[i].logprobs, ref[i].logprobs) << "request " << i;
  const EngineStats s = on->stats();
  EXPECT_GT(s.spec.model_drafted, 0u);
  EXPECT_LT(s.spec.model_accepted, s.spec.model_drafted);  // random models disagree: rollbacks exercised
}
