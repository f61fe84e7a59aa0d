// The HTTP server (src/server) over a scripted fake Engine: request parsing and
// validation, OpenAI response and SSE shapes, errors and their status codes,
// auth, metrics text and cancel-on-disconnect. The real engine behind a real
// `spool serve` is covered by tests/api (node + the openai package).
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "model/model.h"
#include "server/api_error.h"
#include "server/auth.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "text/text_stream.h"

namespace spool::server {
namespace {

using nlohmann::json;
const std::string kModel = std::string(SPOOL_SHARED_DIR) + "/models/stories260K.gguf";

// Generates a fixed token sequence ("Once upon a time, ..." as stories260K
// tokenizes it, over and over), one token per `step_ms`, honouring max_tokens,
// stop strings, cancel and the queue limit.
class FakeEngine : public Engine {
 public:
  explicit FakeEngine(int step_ms = 1, int n_ctx = 64) : step_ms_(step_ms) {
    model_ = load_model(kModel, LoadOptions{1});
    script_ = model_->tokenizer().encode(" Once upon a time, there was a little dog. He was happy.", false, false);
    options_.n_ctx = n_ctx;
    options_.max_waiting = 4;
  }
  ~FakeEngine() override {
    stopping_ = true;
    for (auto& t : threads_) t.join();
  }

  RequestId submit(RequestParams p, RequestCallback cb) override {
    if (p.prompt.empty() || (int)p.prompt.size() + 1 > options_.n_ctx) throw InvalidRequest("prompt too long");
    if (queue_full) throw QueueFull("4 requests waiting");
    const RequestId id = ++next_id_;
    ++active_;
    std::lock_guard<std::mutex> lock(mu_);
    last_params = p;
    threads_.emplace_back([this, id, p = std::move(p), cb = std::move(cb)] { generate(id, p, cb); });
    return id;
  }
  void cancel(RequestId id) override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ids.push_back(id);
  }
  EngineStats stats() const override {
    EngineStats s;
    s.running = active_;
    s.kv_blocks_used = active_;
    s.kv_blocks_total = 100;
    s.ttft.add(0.002);
    s.ttft.add(0.2);
    return s;
  }
  Model& model() override { return *model_; }
  const EngineOptions& options() const override { return options_; }

  // The last submitted request's parameters. Read under the lock: the test
  // thread learns of the submit only through the HTTP reply, which TSan does
  // not count as synchronisation.
  RequestParams last() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_params;
  }

  bool is_cancelled(RequestId id) {
    std::lock_guard<std::mutex> lock(mu_);
    return std::find(cancelled_ids.begin(), cancelled_ids.end(), id) != cancelled_ids.end();
  }

  std::atomic<bool> queue_full{false};
  std::atomic<int> active_{0};
  std::vector<RequestId> cancelled_ids;
  RequestParams last_params;
  std::mutex mu_;

 private:
  void generate(RequestId id, const RequestParams& p, const RequestCallback& cb) {
    TextStream stream(p.stop);
    int n = 0;
    RequestEvent ev;
    ev.id = id;
    for (; n < p.max_tokens && !stopping_; ++n) {
      std::this_thread::sleep_for(std::chrono::milliseconds(step_ms_));
      if (is_cancelled(id)) break;
      const int32_t t = script_[n % script_.size()];
      RequestEvent step;
      step.id = id;
      step.tokens = {t};
      step.text = stream.push(model_->tokenizer().token_to_piece(t));
      if (p.top_logprobs >= 0) {
        step.logprobs = {{t, -0.5f}};
        step.top_logprobs = {std::vector<TokenLogprob>(p.top_logprobs, TokenLogprob{t, -0.5f})};
      }
      if (stream.stopped()) { ev = step; ++n; break; }
      cb(step);
    }
    ev.id = id;
    ev.finished = true;
    ev.reason = is_cancelled(id) ? FinishReason::Cancelled
                : stream.stopped() ? FinishReason::Stop
                                   : FinishReason::Length;
    if (!stream.stopped()) ev.text += stream.flush();
    ev.prompt_tokens = (int)p.prompt.size();
    ev.cached_tokens = 1;
    ev.completion_tokens = n;
    --active_;
    cb(ev);
  }

  int step_ms_;
  std::unique_ptr<Model> model_;
  std::vector<int32_t> script_;
  EngineOptions options_;
  std::atomic<RequestId> next_id_{0};
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> threads_;
};

class ServerTest : public ::testing::Test {
 protected:
  void start(ServerOptions o = {}, int step_ms = 1, int n_ctx = 64) {
    engine_ = std::make_unique<FakeEngine>(step_ms, n_ctx);
    o.port = 0;
    o.model_id = "stories260K.gguf";
    server_ = std::make_unique<ApiServer>(*engine_, o);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->listen(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_read_timeout(10, 0);
  }
  void TearDown() override {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
    server_.reset();
    engine_.reset();
  }
  httplib::Result post(const std::string& path, const std::string& body, httplib::Headers h = {}) {
    return client_->Post(path.c_str(), h, body, "application/json");
  }
  static void expect_error(const httplib::Result& r, int status, const std::string& code) {
    ASSERT_TRUE(r) << "no response";
    EXPECT_EQ(r->status, status) << r->body;
    const json j = json::parse(r->body);
    ASSERT_TRUE(j.contains("error")) << r->body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
    EXPECT_TRUE(j["error"]["type"].is_string());
    EXPECT_TRUE(j["error"].contains("param"));
    EXPECT_EQ(j["error"]["code"], code) << r->body;
  }
  // The "data:" payloads of an SSE body, in order.
  static std::vector<std::string> sse_payloads(const std::string& body) {
    std::vector<std::string> out;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
      const size_t end = body.find("\n\n", pos);
      out.push_back(body.substr(pos + 6, end - pos - 6));
      pos = end;
    }
    return out;
  }
  std::string script_text(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += engine_->model().tokenizer().token_to_piece(script_token(i));
    return s;
  }
  int32_t script_token(int i) {
    auto ids = engine_->model().tokenizer().encode(" Once upon a time, there was a little dog. He was happy.", false, false);
    return ids[i % ids.size()];
  }

  std::unique_ptr<FakeEngine> engine_;
  std::unique_ptr<ApiServer> server_;
  std::thread thread_;
  std::unique_ptr<httplib::Client> client_;
  int port_ = 0;
};

TEST_F(ServerTest, HealthModelsAndUnknownRoute) {
  start();
  auto r = client_->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["status"], "ok");
  r = client_->Get("/v1/models");
  ASSERT_TRUE(r);
  const json models = json::parse(r->body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "stories260K.gguf");
  expect_error(client_->Get("/v1/models/other"), 404, "model_not_found");
  expect_error(client_->Get("/v1/nothing"), 404, "not_found");
}

// Browsers accept brotli; httplib's per-request brotli runs at quality 11
// (~150 ms per 50 KB), so API replies go out gzipped instead.
TEST_F(ServerTest, JsonRepliesAreGzipNotBrotli) {
  start();
  auto r = client_->Get("/v1/models", {{"Accept-Encoding", "gzip, deflate, br"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Encoding"), "gzip");
  EXPECT_EQ(json::parse(r->body)["object"], "list");  // the client inflated it
  r = client_->Get("/v1/models", {{"Accept-Encoding", "br"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Content-Encoding"), "");
  EXPECT_EQ(json::parse(r->body)["object"], "list");
}

TEST_F(ServerTest, CompletionNotStreamed) {
  start();
  auto r = post("/v1/completions", R"({"model": "stories260K.gguf", "prompt": "Hello", "max_tokens": 5})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "stories260K.gguf");
  EXPECT_EQ(j["choices"][0]["text"], script_text(5));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  const std::vector<int32_t> prompt = engine_->model().tokenizer().encode("Hello", true, true);
  EXPECT_EQ(engine_->last().prompt, prompt);
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], prompt.size() + 5);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
}

TEST_F(ServerTest, SamplingParametersReachTheEngine) {
  start();
  auto r = post("/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 3, "temperature": 0, "top_p": 0.5,
                                      "seed": 42, "stop": ["x", "yz"], "ignore_eos": true, "logprobs": 2})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const RequestParams p = engine_->last();
  EXPECT_EQ(p.prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(p.max_tokens, 3);
  EXPECT_EQ(p.sampling.temperature, 0.0f);
  EXPECT_EQ(p.sampling.top_p, 0.5f);
  EXPECT_EQ(p.sampling.seed, 42u);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.top_logprobs, 2);
  const json lp = json::parse(r->body)["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 3u);
  EXPECT_EQ(lp["token_logprobs"][0], -0.5);
  EXPECT_EQ(lp["text_offset"][0], 0);
  EXPECT_EQ(lp["tokens"][0], engine_->model().tokenizer().token_to_piece(script_token(0)));
}

TEST_F(ServerTest, StopStringEndsTheCompletion) {
  start();
  auto r = post("/v1/completions", R"({"prompt": "Hi", "max_tokens": 40, "stop": "time"})");
  ASSERT_TRUE(r);
  const json j = json::parse(r->body);
  const std::string full = script_text(40);
  ASSERT_NE(full.find("time"), std::string::npos);
  EXPECT_EQ(j["choices"][0]["text"], full.substr(0, full.find("time")));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

TEST_F(ServerTest, CompletionStreamed) {
  start();
  auto r = post("/v1/completions",
                R"({"prompt": "Hello", "max_tokens": 6, "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  const auto payloads = sse_payloads(r->body);
  ASSERT_GE(payloads.size(), 3u);
  EXPECT_EQ(payloads.back(), "[DONE]");
  std::string text;
  std::string finish;
  for (size_t i = 0; i + 2 < payloads.size(); ++i) {
    const json c = json::parse(payloads[i]);
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_TRUE(c["usage"].is_null());
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, script_text(6));
  EXPECT_EQ(finish, "length");
  const json usage = json::parse(payloads[payloads.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 6);
}

TEST_F(ServerTest, ChatWithoutTemplateIs400) {
  start();  // stories260K has no chat template
  expect_error(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}]})"), 400,
               "no_chat_template");
}

TEST_F(ServerTest, BadRequestsGetOpenAIErrors) {
  start();
  expect_error(post("/v1/completions", "{not json"), 400, "invalid_json");
  expect_error(post("/v1/completions", "[1, 2]"), 400, "invalid_json");
  expect_error(post("/v1/completions", R"({"max_tokens": 3})"), 400, "missing_required_parameter");
  expect_error(post("/v1/completions", R"({"prompt": 5})"), 400, "invalid_type");
  expect_error(post("/v1/completions", R"({"prompt": "a", "max_tokens": "ten"})"), 400, "invalid_type");
  expect_error(post("/v1/completions", R"({"prompt": "a", "temperature": 3})"), 400, "invalid_value");
  expect_error(post("/v1/completions", R"({"prompt": "a", "n": 2})"), 400, "invalid_value");
  expect_error(post("/v1/completions", R"({"prompt": "a", "stop": [1]})"), 400, "invalid_type");
  expect_error(post("/v1/completions", R"({"prompt": "a", "model": "gpt-4"})"), 404, "model_not_found");
  expect_error(post("/v1/completions", R"({"prompt": [100000]})"), 400, "invalid_value");
  expect_error(post("/v1/chat/completions", R"({"messages": "hi"})"), 400, "invalid_type");
  expect_error(post("/v1/chat/completions", R"({"messages": [{"content": "hi"}]})"), 400, "invalid_type");
  const json err = json::parse(post("/v1/completions", R"({"prompt": "a", "top_p": -1})")->body);
  EXPECT_EQ(err["error"]["param"], "top_p");
  // The prompt is longer than the context (64 in the fake engine).
  std::string long_prompt;
  for (int i = 0; i < 100; ++i) long_prompt += " time";
  expect_error(post("/v1/completions", json{{"prompt", long_prompt}}.dump()), 400, "context_length_exceeded");
  // Still serving.
  auto r = post("/v1/completions", R"({"prompt": "a", "max_tokens": 2})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(ServerTest, BodyTooLargeIs413) {
  ServerOptions o;
  o.max_body_bytes = 1000;
  start(o);
  expect_error(post("/v1/completions", json{{"prompt", std::string(5000, 'a')}}.dump()), 413, "payload_too_large");
  auto r = client_->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(ServerTest, QueueFullIs503WithRetryAfter) {
  start();
  engine_->queue_full = true;
  auto r = post("/v1/completions", R"({"prompt": "a"})");
  expect_error(r, 503, "queue_full");
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
}

TEST_F(ServerTest, ApiKeyRequiredEverywhereButHealth) {
  ServerOptions o;
  o.api_key = "sekrit-key";
  start(o);
  EXPECT_EQ(client_->Get("/health")->status, 200);
  expect_error(client_->Get("/v1/models"), 401, "invalid_api_key");
  expect_error(client_->Get("/metrics"), 401, "invalid_api_key");
  expect_error(client_->Get("/v1/models", {{"Authorization", "Bearer wrong"}}), 401, "invalid_api_key");
  expect_error(client_->Get("/v1/models", {{"Authorization", "Bearer sekrit-ke"}}), 401, "invalid_api_key");
  auto r = client_->Get("/v1/models", {{"Authorization", "Bearer sekrit-key"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = post("/v1/completions", R"({"prompt": "a", "max_tokens": 1})", {{"Authorization", "bearer sekrit-key"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(ServerTest, ClientGoneMidStreamCancels) {
  start(ServerOptions{}, 20);
  bool got_chunk = false;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = R"({"prompt": "a", "max_tokens": 1000, "stream": true})";
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    got_chunk = true;
    return false;  // abort: the client closes the connection
  };
  client_->send(req);
  EXPECT_TRUE(got_chunk);
  for (int i = 0; i < 200 && engine_->active_ > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine_->active_, 0);
  EXPECT_TRUE(engine_->is_cancelled(1));
}

TEST_F(ServerTest, LongNonStreamedAnswerIsPlainJsonAndCancelsWhenTheClientLeaves) {
  start(ServerOptions{}, 25, 2048);  // 25 ms a token
  // Longer than a second: still a plain JSON body, the status sent with it.
  auto r = post("/v1/completions", R"({"prompt": "a", "max_tokens": 60})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->body.front(), '{');
  const json j = json::parse(r->body);
  EXPECT_EQ(j["usage"]["completion_tokens"], 60);
  EXPECT_EQ(j["choices"][0]["text"], script_text(60));
  // A client that gives up waiting (closes its socket before any byte came): its request is cancelled.
  httplib::Client impatient("127.0.0.1", port_);
  impatient.set_read_timeout(0, 300 * 1000);
  auto gone = impatient.Post("/v1/completions", R"({"prompt": "a", "max_tokens": 1000})", "application/json");
  EXPECT_FALSE(gone);
  for (int i = 0; i < 200 && engine_->active_ > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine_->active_, 0);
  EXPECT_TRUE(engine_->is_cancelled(2));
}

TEST_F(ServerTest, RequestTimeoutIs504EvenAfterASecond) {
  ServerOptions o;
  o.request_timeout_s = 1.3;
  start(o, 25, 2048);  // 25 ms a token: 1000 tokens take 25 s
  const auto t0 = std::chrono::steady_clock::now();
  auto r = post("/v1/completions", R"({"prompt": "a", "max_tokens": 1000})");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  expect_error(r, 504, "request_timeout");
  EXPECT_GT(s, 1.2);
  EXPECT_LT(s, 5.0);
  for (int i = 0; i < 200 && engine_->active_ > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine_->active_, 0);
}

TEST_F(ServerTest, TokenizeAndDetokenize) {
  start();
  auto r = post("/tokenize", R"({"content": "Once upon a time"})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json tokens = json::parse(r->body)["tokens"];
  EXPECT_EQ(tokens.get<std::vector<int32_t>>(), engine_->model().tokenizer().encode("Once upon a time", false, true));
  r = post("/detokenize", json{{"tokens", tokens}}.dump());
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["content"], engine_->model().tokenizer().decode(tokens.get<std::vector<int32_t>>()));
  expect_error(post("/tokenize", R"({"content": 3})"), 400, "invalid_type");
  expect_error(post("/detokenize", R"({"tokens": [-1]})"), 400, "invalid_value");
}

TEST_F(ServerTest, MetricsArePrometheusText) {
  start();
  post("/v1/completions", R"({"prompt": "a", "max_tokens": 1})");
  // Responses are counted after they are sent, so the count may trail the client by a moment.
  std::string body;
  for (int i = 0; i < 100; ++i) {
    auto m = client_->Get("/metrics");
    ASSERT_TRUE(m);
    EXPECT_EQ(m->status, 200);
    body = m->body;
    if (body.find("spool_http_responses_total{code=\"200\"}") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_NE(body.find("# TYPE spool_kv_blocks_used gauge\nspool_kv_blocks_used 0\n"), std::string::npos) << body;
  EXPECT_NE(body.find("spool_kv_blocks_total 100\n"), std::string::npos);
  EXPECT_NE(body.find("spool_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"), std::string::npos);
  EXPECT_NE(body.find("spool_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"), std::string::npos);
  EXPECT_NE(body.find("spool_time_to_first_token_seconds_count 2\n"), std::string::npos);
  EXPECT_NE(body.find("spool_http_responses_total{code=\"200\"} "), std::string::npos) << body;
}

TEST(ServerAuth, KeysCompareExactly) {
  EXPECT_TRUE(keys_equal("abc", "abc"));
  EXPECT_FALSE(keys_equal("abd", "abc"));
  EXPECT_FALSE(keys_equal("ab", "abc"));
  EXPECT_FALSE(keys_equal("abcd", "abc"));
  EXPECT_FALSE(keys_equal("", "abc"));
  EXPECT_EQ(bearer_token("Bearer  xyz "), "xyz");
  EXPECT_EQ(bearer_token("BEARER xyz"), "xyz");
  EXPECT_FALSE(bearer_token("Basic xyz"));
  EXPECT_FALSE(bearer_token("Bearer "));
}

TEST(ServerAuth, NonLoopbackNeedsAKey) {
  EXPECT_TRUE(is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(is_loopback_host("127.1.2.3"));
  EXPECT_TRUE(is_loopback_host("::1"));
  EXPECT_TRUE(is_loopback_host("localhost"));
  EXPECT_FALSE(is_loopback_host("0.0.0.0"));
  EXPECT_FALSE(is_loopback_host("192.168.1.5"));
  EXPECT_FALSE(is_loopback_host("::"));
  EXPECT_THROW(check_bind_policy("0.0.0.0", ""), Error);
  EXPECT_NO_THROW(check_bind_policy("0.0.0.0", "k"));
  EXPECT_NO_THROW(check_bind_policy("127.0.0.1", ""));
}

TEST(ServerRequest, ChatLogprobsAndMaxCompletionTokens) {
  const json body = json::parse(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
      {"type": "text", "text": "b"}]}], "logprobs": true, "top_logprobs": 3, "max_completion_tokens": 7})");
  const ApiRequest r = parse_api_request(body, Endpoint::ChatCompletions);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].content, "ab");
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_THROW(parse_api_request(json::parse(R"({"messages": [{"role": "user", "content": "a"}], "top_logprobs": 2})"),
                                 Endpoint::ChatCompletions),
               ApiError);
  EXPECT_THROW(parse_api_request(json::parse(R"({"prompt": ["a", "b"]})"), Endpoint::Completions), ApiError);
}

TEST(ServerMetrics, HistogramBucketsAreCumulative) {
  std::string out;
  LatencyHistogram h{0.1, 1};
  for (double x : {0.05, 0.5, 0.5, 5.0}) h.add(x);
  append_histogram(out, "h", "help", h);
  EXPECT_NE(out.find("h_bucket{le=\"0.1\"} 1\nh_bucket{le=\"1\"} 3\nh_bucket{le=\"+Inf\"} 4\nh_sum 6.05\nh_count 4\n"),
            std::string::npos)
      << out;
}

TEST(ServerMetrics, WeightCacheFiguresOnlyWhenStreaming) {
  EngineStats e;
  EXPECT_EQ(render_metrics(e, {}).find("spool_weight_"), std::string::npos);
  StoreStats w;
  w.bytes_read = 123456789;
  w.requests = 42;
  w.layers.resize(2);
  w.layers[0].hits = 3;
  w.layers[0].prefetched = 1;
  w.layers[0].misses = 2;
  w.layers[1].inflight = 1;
  w.layers[1].misses = 1;
  const std::string out = render_metrics(e, {}, &w);
  EXPECT_NE(out.find("spool_weight_bytes_read_total 123456789\n"), std::string::npos) << out;
  EXPECT_NE(out.find("spool_weight_read_requests_total 42\n"), std::string::npos) << out;
  EXPECT_NE(out.find("spool_weight_cache_lookups_total 8\n"), std::string::npos) << out;
  EXPECT_NE(out.find("spool_weight_cache_hits_total 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("spool_weight_cache_hit_ratio 0.5\n"), std::string::npos) << out;
}


TEST(ServerMetrics, SeveralModelsGetTotalsAndOneLabelledSeriesEach) {
  EngineStats a, b;
  a.kv_blocks_used = 3;
  a.generated_tokens = 10;
  a.ttft.add(0.02);
  b.kv_blocks_used = 4;
  b.generated_tokens = 5;
  b.ttft.add(0.2);
  b.ttft.add(0.3);
  StoreStats w;
  w.bytes_read = 1000;
  w.layers.resize(1);
  w.layers[0].hits = 1;
  w.layers[0].misses = 3;
  const std::string out = render_metrics({{"planner", a, nullptr}, {"small\"x", b, &w}}, {});
  EXPECT_NE(out.find("spool_kv_blocks_used 7\nspool_kv_blocks_used{model=\"planner\"} 3\n"
                     "spool_kv_blocks_used{model=\"small\\\"x\"} 4\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("spool_generated_tokens_total 15\n"), std::string::npos) << out;
  // Weight series only for the streaming model; the ratio is of the sums.
  EXPECT_NE(out.find("spool_weight_bytes_read_total 1000\nspool_weight_bytes_read_total{model=\"small\\\"x\"} 1000\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("spool_weight_bytes_read_total{model=\"planner\"}"), std::string::npos) << out;
  EXPECT_NE(out.find("spool_weight_cache_hit_ratio 0.25\n"), std::string::npos) << out;
  // Histograms: merged total, then per model.
  EXPECT_NE(out.find("spool_time_to_first_token_seconds_count 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("spool_time_to_first_token_seconds_count{model=\"planner\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("spool_time_to_first_token_seconds_bucket{model=\"planner\",le=\"0.025\"} 1\n"), std::string::npos)
      << out;
  // One model: no labelled series.
  EXPECT_EQ(render_metrics(a, {}).find("{model="), std::string::npos);
}

}  // namespace
}  // namespace spool::server
