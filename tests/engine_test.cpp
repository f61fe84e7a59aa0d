// The serving engine on small real models: greedy output equals Session's,
// concurrent requests equal the same requests run one at a time (with mixed
// prefill/decode batches, prefix sharing and preemption), cancellation
// releases blocks, and bad submissions are refused.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/kv_paged.h"
#include "runtime/engine.h"
#include "test_util.h"

using namespace spool;

namespace {

const std::string kShared = SPOOL_SHARED_DIR;

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // of the chosen tokens, when asked
  std::string text;
  std::vector<RequestEvent> events;
  RequestEvent last;
};

// Collects one request's events; get() waits for its finished event.
struct Pending {
  std::shared_ptr<Result> res = std::make_shared<Result>();
  std::shared_ptr<std::promise<void>> done = std::make_shared<std::promise<void>>();
  std::shared_future<void> fut = done->get_future().share();
  RequestCallback callback() {
    auto r = res;
    auto d = done;
    return [r, d](const RequestEvent& ev) {
      r->tokens.insert(r->tokens.end(), ev.tokens.begin(), ev.tokens.end());
      for (const TokenLogprob& lp : ev.logprobs) r->logprobs.push_back(lp.logprob);
      r->text += ev.text;
      r->events.push_back(ev);
      if (ev.finished) {
        r->last = ev;
        d->set_value();
      }
    };
  }
  const Result& get() {
    EXPECT_EQ(fut.wait_for(std::chrono::seconds(120)), std::future_status::ready);
    return *res;
  }
};

RequestParams greedy_params(std::vector<int32_t> prompt, int n) {
  RequestParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = n;
  p.sampling.temperature = 0;
  p.ignore_eos = true;
  return p;
}

// Prompts of different lengths that share nothing beyond chance.
std::vector<std::vector<int32_t>> make_prompts(const Model& m, int count) {
  const int V = m.config().n_vocab;
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> p;
    const int len = 3 + 7 * i;
    for (int j = 0; j < len; ++j) p.push_back((int32_t)((17 + 31 * i + 13 * j + i * j) % (V - 10) + 5));
    out.push_back(p);
  }
  return out;
}

std::vector<std::vector<int32_t>> run_all(Engine& e, const std::vector<std::vector<int32_t>>& prompts, int n,
                                          bool concurrent, std::vector<RequestEvent>* finals = nullptr,
                                          std::vector<std::vector<float>>* logprobs = nullptr) {
  std::vector<std::vector<int32_t>> out(prompts.size());
  std::vector<Pending> pend(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestParams p = greedy_params(prompts[i], n);
    if (logprobs) p.top_logprobs = 0;
    e.submit(p, pend[i].callback());
    if (!concurrent) out[i] = pend[i].get().tokens;
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    out[i] = pend[i].get().tokens;
    if (finals) finals->push_back(pend[i].get().last);
    if (logprobs) logprobs->push_back(pend[i].get().logprobs);
  }
  return out;
}

struct ModelCase { const char* path; };
const ModelCase kModels[] = {{"/models/stories260K.gguf"},
                             {"/fixtures/gguf/qwen2-tiny.f32.gguf"},
                             {"/fixtures/gguf/deepseek3-tiny.f32.gguf"},
                             {"/fixtures/gguf/qwen2-tiny.q8_0.gguf"},
                             {"/fixtures/gguf/deepseek3-tiny.q8_0.gguf"},
                             {"/fixtures/gguf/mixtral-tiny.q8_0.gguf"},
                             {"/fixtures/gguf/llama-tiny.q8_0.gguf"}};

}  // namespace

TEST(Engine, GreedyEqualsSessionAndConcurrentEqualsSequential) {
  for (const ModelCase& mc : kModels) {
    SCOPED_TRACE(mc.path);
    auto model = load_model(kShared + mc.path, LoadOptions{2});
    const auto prompts = make_prompts(*model, 8);
    const int n = 24;
    std::vector<std::vector<int32_t>> reference;
    for (const auto& p : prompts) reference.push_back(test::greedy(*model, p, n));

    EngineOptions o;
    o.n_ctx = 128;
    o.max_batch_tokens = 20;  // prefill chunks split and mixed with decodes
    o.block_size = 8;
    auto engine = make_engine(*model, o);
    std::vector<std::vector<float>> lp_one, lp_together;
    const auto one_by_one = run_all(*engine, prompts, n, false, nullptr, &lp_one);
    const auto together = run_all(*engine, prompts, n, true, nullptr, &lp_together);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(test::join(one_by_one[i]), test::join(reference[i])) << "prompt " << i;
      EXPECT_EQ(test::join(together[i]), test::join(reference[i])) << "prompt " << i;
      // Not just the same argmax: each row's computation does not depend on the
      // batch around it, so the logits (and their log-softmax) are bit-identical.
      EXPECT_EQ(lp_one[i], lp_together[i]) << "prompt " << i;
    }
    const EngineStats s = engine->stats();
    EXPECT_EQ(s.kv_blocks_used, 0);
    EXPECT_EQ(s.running, 0);
    EXPECT_EQ(s.requests_finished, 16u);
    EXPECT_EQ(s.generated_tokens, 16u * n);
  }
}

TEST(Engine, SharedPrefixIsPrefilledOnce) {
  auto model = load_model(kShared + "/models/stories260K.gguf", LoadOptions{2});
  std::vector<int32_t> prefix = {1};
  for (int i = 0; i < 999; ++i) prefix.push_back((int32_t)(5 + (i * 37) % 500));
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) {
    auto p = prefix;
    for (int j = 0; j <= i; ++j) p.push_back((int32_t)(100 + 7 * i + j));
    prompts.push_back(p);
  }
  EngineOptions o;
  o.n_ctx = 1100;
  o.block_size = 16;
  o.max_batch_tokens = 128;
  auto engine = make_engine(*model, o);
  std::vector<RequestEvent> finals;
  const auto out = run_all(*engine, prompts, 8, true, &finals);
  const int shared = 1000 / 16 * 16;  // full blocks of the common prefix
  int hits = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(test::join(out[i]), test::join(test::greedy(*model, prompts[i], 8))) << i;
    EXPECT_EQ(finals[i].prompt_tokens, (int)prompts[i].size());
    hits += finals[i].cached_tokens;
  }
  // The first request computes the prefix; the other seven share its blocks.
  EXPECT_EQ(finals[0].cached_tokens, 0);
  for (size_t i = 1; i < prompts.size(); ++i) EXPECT_EQ(finals[i].cached_tokens, shared) << i;
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.prefix_hit_tokens, (uint64_t)hits);
  EXPECT_EQ(s.prefix_hit_tokens, 7u * shared);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_GT(s.kv_blocks_cached, 0);

  // A prompt whose every block is cached still recomputes its last token (copy-on-write of that block).
  Pending again;
  std::vector<int32_t> whole(prefix.begin(), prefix.begin() + 992);
  engine->submit(greedy_params(whole, 4), again.callback());
  EXPECT_EQ(again.get().last.cached_tokens, 991);
  EXPECT_EQ(test::join(again.get().tokens), test::join(test::greedy(*model, whole, 4)));
}

TEST(Engine, TinyPoolPreemptsAndKeepsOutputs) {
  for (const ModelCase& mc : kModels) {
    SCOPED_TRACE(mc.path);
    auto model = load_model(kShared + mc.path, LoadOptions{2});
    const auto prompts = make_prompts(*model, 8);
    const int n = 40;
    EngineOptions o;
    o.n_ctx = 128;
    o.block_size = 8;
    o.max_batch_tokens = 32;
    o.prefix_cache = false;  // nothing to fall back on: every preempted token is recomputed
    // 24 blocks: the longest request alone needs (52 + 40) / 8 = 12.
    o.kv_bytes = 24 * (uint64_t)model->kv_shape().n_layer * o.block_size *
                 (model->kv_shape().k_row() + model->kv_shape().v_row()) * sizeof(float);
    auto engine = make_engine(*model, o);
    EXPECT_EQ(engine->stats().kv_blocks_total, 24);
    const auto out = run_all(*engine, prompts, n, true);
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(test::join(out[i]), test::join(test::greedy(*model, prompts[i], n))) << "prompt " << i;
    const EngineStats s = engine->stats();
    EXPECT_GT(s.preemptions, 0u);
    EXPECT_EQ(s.kv_blocks_used, 0);
  }
}

TEST(Engine, RequestLargerThanPoolFailsOthersContinue) {
  auto model = load_model(kShared + "/models/stories260K.gguf", LoadOptions{2});
  EngineOptions o;
  o.n_ctx = 256;
  o.block_size = 8;
  o.kv_bytes = 4 * (uint64_t)model->kv_shape().n_layer * 8 * (model->kv_shape().k_row() + model->kv_shape().v_row()) * 4;
  auto engine = make_engine(*model, o);
  Pending big, small;
  engine->submit(greedy_params(std::vector<int32_t>(40, 7), 4), big.callback());
  engine->submit(greedy_params({1, 10, 20}, 4), small.callback());
  EXPECT_EQ(big.get().last.reason, FinishReason::Error);
  EXPECT_NE(big.get().last.error.find("cannot hold"), std::string::npos) << big.get().last.error;
  EXPECT_EQ(small.get().last.reason, FinishReason::Length);
  EXPECT_EQ(small.get().tokens.size(), 4u);
  // Generation that outgrows the pool: an error finish, not a crash.
  Pending grow;
  engine->submit(greedy_params({1, 10, 20}, 100), grow.callback());
  EXPECT_EQ(grow.get().last.reason, FinishReason::Error);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

TEST(Engine, CancelReleasesBlocks) {
  auto model = load_model(kShared + "/models/stories260K.gguf", LoadOptions{2});
  EngineOptions o;
  o.n_ctx = 2048;
  // Declared before the engine so that they outlive its thread: the finished event's
  // callback still runs `++seen` after p.get() has returned (ASan: stack-use-after-scope).
  std::mutex mu;
  std::condition_variable cv;
  int seen = 0;
  Pending p;
  auto engine = make_engine(*model, o);
  auto inner = p.callback();
  const RequestId id = engine->submit(greedy_params({1, 403, 407}, 2000), [&](const RequestEvent& ev) {
    inner(ev);
    std::lock_guard<std::mutex> l(mu);
    ++seen;
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return seen >= 5; });
  }
  EXPECT_GT(engine->stats().kv_blocks_used, 0);
  engine->cancel(id);
  const Result& r = p.get();
  EXPECT_EQ(r.last.reason, FinishReason::Cancelled);
  EXPECT_LT(r.tokens.size(), 2000u);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
  EXPECT_EQ(engine->stats().running, 0);
  engine->cancel(id);      // finished: ignored
  engine->cancel(123456);  // unknown: ignored
}

TEST(Engine, RefusesBadRequestsAndFullQueue) {
  auto model = load_model(kShared + "/models/stories260K.gguf", LoadOptions{2});
  EngineOptions o;
  o.n_ctx = 2048;
  o.max_running = 1;
  o.max_waiting = 2;
  auto engine = make_engine(*model, o);
  EXPECT_THROW(engine->submit(greedy_params(std::vector<int32_t>(2048, 5), 4), nullptr), InvalidRequest);
  EXPECT_THROW(engine->submit(greedy_params({}, 4), nullptr), InvalidRequest);
  EXPECT_THROW(engine->submit(greedy_params({1, 99999}, 4), nullptr), InvalidRequest);
  std::vector<RequestId> ids;
  bool full = false;
  for (int i = 0; i < 6 && !full; ++i) {
    try {
      // Long enough that the running one cannot finish while the queue fills.
      ids.push_back(engine->submit(greedy_params({1, 5, 6}, 2000), nullptr));
    } catch (const QueueFull&) {
      full = true;
    }
  }
  EXPECT_TRUE(full);
  EXPECT_LE(ids.size(), 3u);
  for (RequestId id : ids) engine->cancel(id);
}

TEST(Engine, StopStringsEosAndLogprobs) {
  auto model = load_model(kShared + "/models/stories260K.gguf", LoadOptions{2});
  const Tokenizer& tok = model->tokenizer();
  auto engine = make_engine(*model, EngineOptions{});
  const std::vector<int32_t> prompt = tok.encode("Once upon a time", true, false);
  RequestParams p = greedy_params(prompt, 48);
  p.ignore_eos = false;
  p.top_logprobs = 3;
  Pending plain;
  engine->submit(p, plain.callback());
  const Result& a = plain.get();
  ASSERT_GT(a.text.size(), 20u);
  EXPECT_EQ(a.last.completion_tokens, (int)a.tokens.size());
  EXPECT_EQ(a.text, tok.decode(a.tokens));
  for (const RequestEvent& ev : a.events) {
    ASSERT_EQ(ev.logprobs.size(), ev.tokens.size());
    for (size_t i = 0; i < ev.tokens.size(); ++i) {
      EXPECT_LE(ev.logprobs[i].logprob, 0.0f);
      ASSERT_EQ(ev.top_logprobs[i].size(), 3u);
      EXPECT_EQ(ev.top_logprobs[i][0].token, ev.tokens[i]);  // greedy: the best alternative
      EXPECT_FLOAT_EQ(ev.top_logprobs[i][0].logprob, ev.logprobs[i].logprob);
      EXPECT_GE(ev.top_logprobs[i][0].logprob, ev.top_logprobs[i][1].logprob);
    }
  }
  // A stop string from the middle of that text: the output ends right before it.
  const std::string stop = a.text.substr(a.text.size() / 2, 4);
  p.stop = {stop};
  p.top_logprobs = -1;
  Pending stopped;
  engine->submit(p, stopped.callback());
  const Result& b = stopped.get();
  EXPECT_EQ(b.last.reason, FinishReason::Stop);
  EXPECT_EQ(b.text, a.text.substr(0, a.text.find(stop)));
  // Greedy without ignore_eos ends at the end-of-generation token with "stop", or at max_tokens.
  if (a.last.reason == FinishReason::Stop) EXPECT_TRUE(tok.is_eog(a.tokens.back()));
  else EXPECT_EQ(a.tokens.size(), 48u);
}

TEST(Engine, SeededSamplingIsReproducibleAcrossBatching) {
  auto model = load_model(kShared + "/models/stories260K.gguf", LoadOptions{2});
  const auto prompts = make_prompts(*model, 4);
  EngineOptions o;
  o.max_batch_tokens = 16;
  auto engine = make_engine(*model, o);
  auto run = [&](bool together) {
    std::vector<Pending> pend(prompts.size());
    std::vector<std::vector<int32_t>> out;
    for (size_t i = 0; i < prompts.size(); ++i) {
      RequestParams p = greedy_params(prompts[i], 16);
      p.sampling.temperature = 1.0f;
      p.sampling.seed = 1000 + i;
      engine->submit(p, pend[i].callback());
      if (!together) pend[i].get();
    }
    for (auto& x : pend) out.push_back(x.get().tokens);
    return out;
  };
  EXPECT_EQ(run(false), run(true));
}

// An F16 KV cache (--kv-type f16): the engine still gives every request
// exactly what it gives it alone and what a Session gives (the same F16 cache),
// and the pool holds half the bytes per block.
TEST(Engine, F16KvCacheKeepsConcurrentEqualsSequential) {
  for (const char* path : {"/models/stories260K.gguf", "/fixtures/gguf/qwen2-tiny.f32.gguf"}) {
    SCOPED_TRACE(path);
    LoadOptions lo{2};
    lo.kv_type = DType::F16;
    auto model = load_model(kShared + path, lo);
    ASSERT_EQ(model->kv_shape().type, DType::F16);
    auto f32_model = load_model(kShared + path, LoadOptions{2});
    EXPECT_EQ(PagedKvCache::block_bytes(model->kv_shape(), 8) * 2, PagedKvCache::block_bytes(f32_model->kv_shape(), 8));
    const auto prompts = make_prompts(*model, 6);
    const int n = 20;
    EngineOptions o;
    o.n_ctx = 128;
    o.max_batch_tokens = 20;
    o.block_size = 8;
    auto engine = make_engine(*model, o);
    const auto one_by_one = run_all(*engine, prompts, n, false);
    const auto together = run_all(*engine, prompts, n, true);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(test::join(one_by_one[i]), test::join(test::greedy(*model, prompts[i], n))) << "prompt " << i;
      EXPECT_EQ(test::join(together[i]), test::join(one_by_one[i])) << "prompt " << i;
    }
  }
}
