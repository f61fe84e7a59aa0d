// C API: the serving engine (continuous batching over one model) for
// concurrent requests: submit with a callback or for polling, poll, cancel,
// stats (include/spool.h).
#include <chrono>
#include <cstddef>
#include <cstring>

#include "capi/capi_internal.h"
#include "core/error.h"

using namespace spool;
using namespace spool::capi;

namespace {

EngineOptions engine_options(const spool_model& model, const spool_engine_options* o) {
  EngineOptions opt;
  const int train = model.model->config().n_ctx_train;
  opt.n_ctx = std::min(train > 0 ? train : 4096, 4096);
  if (!o) return opt;
  // The struct as this library knows it, or as it was before kv_disk_dir (programs built before it).
  const size_t before_kv_disk = offsetof(spool_engine_options, kv_disk_dir);
  if (o->struct_size != sizeof(spool_engine_options) && o->struct_size != before_kv_disk)
    fail(SPOOL_ERR_INVALID_ARGUMENT, "spool_engine_options.struct_size is " + std::to_string(o->struct_size) +
                                         ", expected " + std::to_string(sizeof(spool_engine_options)) +
                                         " (fill the struct with spool_engine_options_init)");
  if (o->n_ctx < 0) fail(SPOOL_ERR_INVALID_ARGUMENT, "n_ctx must not be negative");
  if (o->max_running < 1) fail(SPOOL_ERR_INVALID_ARGUMENT, "max_running must be at least 1");
  if (o->max_batch_tokens < 1) fail(SPOOL_ERR_INVALID_ARGUMENT, "max_batch_tokens must be at least 1");
  if (o->max_waiting < 1) fail(SPOOL_ERR_INVALID_ARGUMENT, "max_waiting must be at least 1");
  if (o->n_ctx > 0) opt.n_ctx = o->n_ctx;
  opt.max_running = o->max_running;
  opt.max_batch_tokens = std::max(o->max_batch_tokens, o->max_running);
  opt.max_waiting = o->max_waiting;
  opt.prefix_cache = o->prefix_cache != 0;
  if (o->struct_size > before_kv_disk && o->kv_disk_dir && *o->kv_disk_dir) {
    opt.kv_disk_dir = o->kv_disk_dir;
    opt.kv_disk_bytes = o->kv_disk_bytes ? o->kv_disk_bytes : (1ull << 30);
  }
  return opt;
}

spool_event to_c_event(const RequestEvent& e) {
  spool_event c{};
  c.id = e.id;
  c.tokens = e.tokens.data();
  c.n_tokens = e.tokens.size();
  c.text = e.text.c_str();
  c.text_len = e.text.size();
  c.finished = e.finished ? 1 : 0;
  c.finish_reason = finish_reason_of(e.reason);
  c.error = e.error.c_str();
  c.prompt_tokens = e.prompt_tokens;
  c.cached_tokens = e.cached_tokens;
  c.completion_tokens = e.completion_tokens;
  return c;
}

// How many bytes of s, at most `limit`, end on a UTF-8 character boundary.
size_t utf8_cut(const std::string& s, size_t limit) {
  if (limit >= s.size()) return s.size();
  size_t n = limit;
  while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) --n;  // s[n] continues a character: step back
  return n;
}

}  // namespace

extern "C" {

void spool_engine_options_init(spool_engine_options* options) {
  if (!options) return;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  const EngineOptions d;
  options->max_running = d.max_running;
  options->max_batch_tokens = d.max_batch_tokens;
  options->max_waiting = d.max_waiting;
  options->prefix_cache = d.prefix_cache ? 1 : 0;
}

spool_status spool_engine_create(spool_model* model, const spool_engine_options* options, spool_engine** out) {
  return call_api(SPOOL_ERR_RUNTIME, [&] {
    checked(model, Kind::Model, "model");
    require(out, "out");
    *out = nullptr;
    const EngineOptions opt = engine_options(*model, options);
    std::lock_guard<std::mutex> lock(model->run_mu);  // no spool_generate in flight
    auto h = std::make_unique<spool_engine>();
    h->model = model;
    h->engine = make_engine(*model->model, opt);
    ++model->n_engines;
    register_handle(h.get(), Kind::Engine);
    *out = h.release();
  });
}

spool_status spool_engine_free(spool_engine* engine) {
  return call_api(SPOOL_ERR_INTERNAL, [&] {
    checked(engine, Kind::Engine, "engine");
    if (engine->n_servers > 0) fail(SPOOL_ERR_BUSY, "a server runs on this engine: stop it first");
    unregister_handle(engine);
    engine->engine.reset();  // cancels what is left; callbacks see their finishing events
    --engine->model->n_engines;
    delete engine;
  });
}

spool_status spool_engine_submit(spool_engine* engine, const char* prompt, const spool_generate_params* params,
                                 spool_event_callback on_event, void* user_data, spool_request_id* out) {
  return call_api(SPOOL_ERR_RUNTIME, [&] {
    checked(engine, Kind::Engine, "engine");
    require(out, "out");
    RequestParams req = request_params(params);
    req.prompt = prompt_tokens(engine->engine->model(), prompt);
    RequestCallback callback;
    std::shared_ptr<PolledRequest> state;
    if (on_event) {
      callback = [on_event, user_data](const RequestEvent& e) {
        const spool_event c = to_c_event(e);
        on_event(&c, user_data);
      };
    } else {
      state = std::make_shared<PolledRequest>();
      callback = [engine, state](const RequestEvent& e) {
        {
          std::lock_guard<std::mutex> lock(engine->mu);
          state->text += e.text;
          state->completion_tokens = e.completion_tokens ? e.completion_tokens
                                                         : state->completion_tokens + (int)e.tokens.size();
          if (e.finished) {
            state->finished = true;
            state->reason = e.reason;
            state->error = e.error;
            state->prompt_tokens = e.prompt_tokens;
          }
        }
        engine->cv.notify_all();
      };
    }
    // The callback holds the state, so events that come before it is listed here are kept.
    const RequestId id = engine->engine->submit(std::move(req), std::move(callback));
    std::lock_guard<std::mutex> lock(engine->mu);
    engine->max_id = std::max(engine->max_id, id);
    if (state) engine->polled[id] = state;
    *out = id;
  });
}

spool_status spool_engine_poll(spool_engine* engine, spool_request_id id, char* text, size_t capacity,
                               int32_t timeout_ms, spool_poll_result* out) {
  return call_api(SPOOL_ERR_RUNTIME, [&] {
    checked(engine, Kind::Engine, "engine");
    require(out, "out");
    if (capacity > 0) require(text, "text");
    std::unique_lock<std::mutex> lock(engine->mu);
    auto it = engine->polled.find(id);
    if (it == engine->polled.end())
      fail(SPOOL_ERR_NOT_FOUND, "request " + std::to_string(id) +
                                    " is not held for polling (unknown, submitted with a callback, or finished and collected)");
    std::shared_ptr<PolledRequest> state = it->second;
    const auto ready = [&] { return !state->text.empty() || state->finished; };
    if (timeout_ms < 0) engine->cv.wait(lock, ready);
    else if (timeout_ms > 0) engine->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready);
    *out = {};
    const size_t n = capacity > 0 ? utf8_cut(state->text, capacity - 1) : 0;
    if (n > 0) std::memcpy(text, state->text.data(), n);
    if (capacity > 0) text[n] = 0;
    state->text.erase(0, n);
    out->n_bytes = n;
    out->n_pending = state->text.size();
    out->prompt_tokens = state->prompt_tokens;
    out->completion_tokens = state->completion_tokens;
    if (state->finished && state->text.empty()) {
      out->finished = 1;
      out->finish_reason = finish_reason_of(state->reason);
      std::strncpy(out->error, state->error.c_str(), sizeof out->error - 1);
      engine->polled.erase(it);
    }
  });
}

spool_status spool_engine_cancel(spool_engine* engine, spool_request_id id) {
  return call_api(SPOOL_ERR_RUNTIME, [&] {
    checked(engine, Kind::Engine, "engine");
    {
      std::lock_guard<std::mutex> lock(engine->mu);
      if (id == 0 || id > engine->max_id)
        fail(SPOOL_ERR_NOT_FOUND, "request " + std::to_string(id) + " was never submitted to this engine");
    }
    engine->engine->cancel(id);
  });
}

spool_status spool_engine_get_stats(const spool_engine* engine, spool_engine_stats* out) {
  return call_api(SPOOL_ERR_INTERNAL, [&] {
    checked(engine, Kind::Engine, "engine");
    require(out, "out");
    const EngineStats s = engine->engine->stats();
    *out = {};
    out->running = s.running;
    out->waiting = s.waiting;
    out->prompt_tokens = s.prompt_tokens;
    out->generated_tokens = s.generated_tokens;
    out->prefix_hit_tokens = s.prefix_hit_tokens;
    out->requests_finished = s.requests_finished;
    out->preemptions = s.preemptions;
    out->kv_blocks_total = s.kv_blocks_total;
    out->kv_blocks_used = s.kv_blocks_used;
    out->kv_bytes = s.kv_bytes;
  });
}

}  // extern "C"
