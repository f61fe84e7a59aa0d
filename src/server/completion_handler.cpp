// POST /v1/completions and /v1/chat/completions: validate, submit to the
// engine, then either wait for the whole answer or stream it as SSE chunks.
// A streaming client that goes away is noticed when a write fails (token
// chunks, or an SSE comment sent while nothing else is); its request is then
// cancelled so its KV blocks are freed at once.
#include <chrono>
#include <nlohmann/json.hpp>

#include "server/openai_format.h"
#include "server/request_channel.h"
#include "server/server_context.h"

namespace spool::server {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollInterval = std::chrono::milliseconds(100);
constexpr auto kKeepAliveInterval = std::chrono::milliseconds(200);

RequestId submit(ServerContext& ctx, RequestParams params, const std::shared_ptr<RequestChannel>& channel) {
  try {
    return ctx.engine.submit(std::move(params), [channel](const RequestEvent& ev) { channel->push(ev); });
  } catch (const QueueFull& e) {
    ApiError err(503, std::string("the server is busy (request queue full): ") + e.what() + "; retry later",
                 "server_error", "queue_full");
    err.retry_after_s = 1;
    throw err;
  } catch (const InvalidRequest& e) {
    throw ApiError(400, e.what(), "invalid_request_error", "invalid_request");
  }
}

struct StreamState {
  ServerContext* ctx = nullptr;
  std::shared_ptr<RequestChannel> channel;
  RequestId id = 0;
  ResponseMeta meta;
  bool include_usage = false;
  bool finished = false;
  bool role_sent = false;
  size_t text_sent = 0;
};

// Runs on the connection's thread until the request finishes or the client is gone.
bool stream_events(StreamState& st, httplib::DataSink& sink) {
  auto last_write = Clock::now();
  const auto write = [&](const std::string& s) {
    last_write = Clock::now();
    return sink.write(s.data(), s.size());
  };
  const auto cancel = [&] {
    st.ctx->engine.cancel(st.id);
    return false;  // closes the connection
  };
  const TokenText text = [&](int32_t t) { return st.ctx->engine.model().tokenizer().token_to_piece(t); };
  if (st.meta.endpoint == Endpoint::ChatCompletions && !st.role_sent) {
    st.role_sent = true;
    if (!write(sse_data(role_chunk(st.meta)))) return cancel();
  }
  while (true) {
    const std::vector<RequestEvent> events = st.channel->wait(kPollInterval);
    if (events.empty()) {
      if (Clock::now() - last_write >= kKeepAliveInterval && !write(": keep-alive\n\n")) return cancel();
      continue;
    }
    for (const RequestEvent& ev : events) {
      if (ev.finished && ev.reason == FinishReason::Error) {
        st.finished = true;
        write(sse_data(error_json(ApiError(500, "generation failed: " + ev.error, "server_error", "engine_error"))));
        sink.done();
        return true;
      }
      for (const json& chunk : event_chunks(st.meta, ev, text, st.text_sent, st.include_usage))
        if (!write(sse_data(chunk))) return cancel();
      st.text_sent += ev.text.size();
      if (!ev.finished) continue;
      st.finished = true;
      if (st.include_usage && !write(sse_data(usage_chunk(st.meta, ev)))) return false;
      if (!write(kSseDone)) return false;
      sink.done();
      return true;
    }
  }
}

}  // namespace

void handle_completion(ServerContext& ctx, const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  const json body = parse_json_body(req);
  const ApiRequest api = parse_api_request(body, endpoint);
  check_model(ctx, api.model);
  RequestParams params = to_request_params(api, ctx.prompt_context());

  ResponseMeta meta;
  meta.endpoint = endpoint;
  meta.id = new_response_id(endpoint);
  meta.created = (int64_t)std::time(nullptr);
  meta.model = ctx.options.model_id;
  meta.logprobs = api.top_logprobs >= 0;

  auto channel = std::make_shared<RequestChannel>();
  const RequestId id = submit(ctx, std::move(params), channel);

  if (!api.stream) {
    Generation g;
    while (!g.finished)
      for (const RequestEvent& ev : channel->wait(kPollInterval)) g.add(ev);
    if (g.reason == FinishReason::Error)
      throw ApiError(500, "generation failed: " + g.error, "server_error", "engine_error");
    const TokenText text = [&](int32_t t) { return ctx.engine.model().tokenizer().token_to_piece(t); };
    res.set_content(dump_json(completion_response(meta, g, text)), "application/json");
    return;
  }

  auto st = std::make_shared<StreamState>();
  st->ctx = &ctx;
  st->channel = channel;
  st->id = id;
  st->meta = meta;
  st->include_usage = api.include_usage;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [st](size_t, httplib::DataSink& sink) { return stream_events(*st, sink); },
      [st](bool) {
        if (!st->finished) st->ctx->engine.cancel(st->id);  // the connection ended early
      });
}

}  // namespace spool::server
