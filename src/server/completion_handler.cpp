// POST /v1/completions and /v1/chat/completions: validate, submit to the
// engine, then either wait for the whole answer or stream it as SSE chunks.
// A client that goes away is noticed when a write fails: streamed, a token
// chunk or an SSE comment sent while nothing else is; not streamed, a request
// still running after kSyncGrace is answered with a chunked body whose JSON
// is preceded by a space every kKeepAliveInterval (valid JSON whitespace).
// Its request is then cancelled so its KV blocks are freed at once.
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "server/openai_format.h"
#include "server/tool_call_stream.h"
#include "server/request_channel.h"
#include "server/request_deadline.h"
#include "server/server_context.h"

namespace spool::server {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollInterval = std::chrono::milliseconds(100);
constexpr auto kKeepAliveInterval = std::chrono::milliseconds(200);
// Non-streamed answers that take longer than this commit to status 200 and a chunked body (see above).
constexpr auto kSyncGrace = std::chrono::milliseconds(1000);

RequestId submit(Engine& engine, RequestParams params, const std::shared_ptr<RequestChannel>& channel) {
  try {
    return engine.submit(std::move(params), [channel](const RequestEvent& ev) { channel->push(ev); });
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
  Engine* engine = nullptr;
  std::shared_ptr<RequestChannel> channel;
  RequestId id = 0;
  RequestOutcomes* outcomes = nullptr;
  RequestDeadline deadline;
  ResponseMeta meta;
  bool include_usage = false;
  bool finished = false;
  bool role_sent = false;
  size_t text_sent = 0;
  // Tool calls: the first character decides (text may not start as a call
  // does); a call is streamed through `calls` as it is generated.
  enum class ToolPhase { Undecided, Text, Call } tool_phase = ToolPhase::Undecided;
  std::unique_ptr<ToolCallStreamer> calls;
};

// With tools active, turns an event into the chunks to send: text as usual
// once the output cannot be a call, tool-call deltas once it is one.
std::vector<json> tool_aware_chunks(StreamState& st, const RequestEvent& ev, const TokenText& text) {
  using Phase = StreamState::ToolPhase;
  if (st.meta.tools && st.tool_phase == Phase::Undecided && !ev.text.empty()) {
    const std::string& open = st.meta.tool_style.open;
    st.tool_phase = ev.text[0] == (open.empty() ? '{' : open[0]) ? Phase::Call : Phase::Text;
    if (st.tool_phase == Phase::Call) st.calls = std::make_unique<ToolCallStreamer>(st.meta.tool_style);
  }
  if (st.tool_phase != Phase::Call) return event_chunks(st.meta, ev, text, st.text_sent, st.include_usage);
  std::vector<json> chunks;
  for (const ToolCallDelta& d : st.calls->push(ev.text)) chunks.push_back(tool_call_chunk(st.meta, d, st.include_usage));
  if (ev.finished)
    chunks.push_back(finish_chunk(st.meta, ev.reason == FinishReason::Length ? "length" : "tool_calls", st.include_usage));
  return chunks;
}

// Runs on the connection's thread until the request finishes or the client is gone.
bool stream_events(StreamState& st, httplib::DataSink& sink) {
  auto last_write = Clock::now();
  const auto write = [&](const std::string& s) {
    last_write = Clock::now();
    return sink.write(s.data(), s.size());
  };
  const auto cancel = [&] {
    st.engine->cancel(st.id);
    st.finished = true;
    ++st.outcomes->cancelled;
    return false;  // closes the connection
  };
  // Past --request-timeout: cancelled, and the stream ends with an error event.
  const auto timed_out = [&] {
    st.engine->cancel(st.id);
    st.finished = true;
    ++st.outcomes->cancelled;
    write(sse_data(error_json(st.deadline.error())));
    sink.done();
    return true;
  };
  const TokenText text = [&](int32_t t) { return st.engine->model().tokenizer().token_to_piece(t); };
  if (st.meta.endpoint == Endpoint::ChatCompletions && !st.role_sent) {
    st.role_sent = true;
    if (!write(sse_data(role_chunk(st.meta, st.include_usage)))) return cancel();
  }
  while (true) {
    const std::vector<RequestEvent> events = st.channel->wait(kPollInterval);
    if (events.empty() && st.deadline.passed()) return timed_out();
    if (events.empty()) {
      if (Clock::now() - last_write >= kKeepAliveInterval && !write(": keep-alive\n\n")) return cancel();
      continue;
    }
    for (const RequestEvent& ev : events) {
      if (ev.finished && ev.reason == FinishReason::Error) {
        st.finished = true;
        ++st.outcomes->failed;
        write(sse_data(error_json(ApiError(500, "generation failed: " + ev.error, "server_error", "engine_error"))));
        sink.done();
        return true;
      }
      for (const json& chunk : tool_aware_chunks(st, ev, text))
        if (!write(sse_data(chunk))) return cancel();
      st.text_sent += ev.text.size();
      if (!ev.finished) continue;
      st.finished = true;
      if (st.include_usage && !write(sse_data(usage_chunk(st.meta, ev)))) return false;
      if (!write(kSseDone)) return false;
      sink.done();
      return true;
    }
    if (st.deadline.passed()) return timed_out();
  }
}

struct WholeState {
  Engine* engine = nullptr;
  std::shared_ptr<RequestChannel> channel;
  RequestId id = 0;
  RequestOutcomes* outcomes = nullptr;
  RequestDeadline deadline;
  ResponseMeta meta;
  Generation g;
};

std::string whole_body(const WholeState& st) {
  const TokenText text = [&](int32_t t) { return st.engine->model().tokenizer().token_to_piece(t); };
  return dump_json(completion_response(st.meta, st.g, text));
}

// A non-streamed answer that outlived kSyncGrace: the status is already 200, so
// an engine failure now can only be reported as an error object in the body.
bool send_whole(WholeState& st, httplib::DataSink& sink) {
  auto last_write = Clock::now();
  while (!st.g.finished) {
    for (const RequestEvent& ev : st.channel->wait(kPollInterval)) st.g.add(ev);
    if (!st.g.finished && st.deadline.passed()) {
      st.engine->cancel(st.id);
      ++st.outcomes->cancelled;
      const std::string body = dump_json(error_json(st.deadline.error()));
      st.g.finished = true;  // nothing left to cancel when the connection ends
      if (!sink.write(body.data(), body.size())) return false;
      sink.done();
      return true;
    }
    if (!st.g.finished && Clock::now() - last_write >= kKeepAliveInterval) {
      last_write = Clock::now();
      if (!sink.write(" ", 1)) {
        st.engine->cancel(st.id);
        st.g.finished = true;
        ++st.outcomes->cancelled;
        return false;
      }
    }
  }
  if (st.g.reason == FinishReason::Error) ++st.outcomes->failed;
  const std::string body =
      st.g.reason == FinishReason::Error
          ? dump_json(error_json(ApiError(500, "generation failed: " + st.g.error, "server_error", "engine_error")))
          : whole_body(st);
  if (!sink.write(body.data(), body.size())) return false;
  sink.done();
  return true;
}

}  // namespace

void handle_completion(ServerContext& ctx, const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  const RequestDeadline deadline(ctx.options.request_timeout_s);
  const json body = parse_json_body(req);
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(req.body, nullptr, false);
  const ApiRequest api = parse_api_request(body, endpoint, ordered.is_object() ? &ordered : nullptr);
  ServedModel& served = resolve_model(ctx, api.model);
  RequestParams params = to_request_params(api, served.prompt_context());

  ResponseMeta meta;
  meta.endpoint = endpoint;
  meta.id = new_response_id(endpoint);
  meta.created = (int64_t)std::time(nullptr);
  meta.model = served.id;
  meta.logprobs = api.top_logprobs >= 0;
  meta.tools = endpoint == Endpoint::ChatCompletions && api.structured.tools_active();
  meta.tool_style = tool_call_style(served.chat_template.get(), api.structured);

  auto channel = std::make_shared<RequestChannel>();
  const RequestId id = submit(*served.engine, std::move(params), channel);

  if (!api.stream) {
    auto st = std::make_shared<WholeState>();
    st->engine = served.engine;
    st->channel = channel;
    st->id = id;
    st->deadline = deadline;
    st->outcomes = &ctx.outcomes;
    st->meta = meta;
    const auto grace_end = Clock::now() + kSyncGrace;
    while (!st->g.finished && Clock::now() < grace_end) {
      for (const RequestEvent& ev : channel->wait(kPollInterval)) st->g.add(ev);
      if (!st->g.finished && deadline.passed()) {
        served.engine->cancel(id);
        ++ctx.outcomes.cancelled;
        throw deadline.error();
      }
    }
    if (st->g.finished) {
      if (st->g.reason == FinishReason::Error) ++ctx.outcomes.failed;
      if (st->g.reason == FinishReason::Error)
        throw ApiError(500, "generation failed: " + st->g.error, "server_error", "engine_error");
      res.set_content(whole_body(*st), "application/json");
      return;
    }
    res.set_chunked_content_provider(
        "application/json", [st](size_t, httplib::DataSink& sink) { return send_whole(*st, sink); },
        [st](bool) {
          if (st->g.finished) return;
          st->engine->cancel(st->id);  // the connection ended early
          ++st->outcomes->cancelled;
        });
    return;
  }

  auto st = std::make_shared<StreamState>();
  st->engine = served.engine;
  st->channel = channel;
  st->id = id;
  st->deadline = deadline;
  st->outcomes = &ctx.outcomes;
  st->meta = meta;
  st->include_usage = api.include_usage;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [st](size_t, httplib::DataSink& sink) { return stream_events(*st, sink); },
      [st](bool) {
        if (st->finished) return;
        st->engine->cancel(st->id);  // the connection ended early
        ++st->outcomes->cancelled;
      });
}

}  // namespace spool::server
