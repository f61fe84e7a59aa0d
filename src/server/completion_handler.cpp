// POST /v1/completions and /v1/chat/completions: validate, submit to the
// engine, then either wait for the whole answer or stream it as SSE chunks.
// A client that goes away is noticed: streamed, when a write fails (a token
// chunk, or an SSE comment sent while nothing else is); not streamed, by
// watching its socket for EOF while the answer is computed, so that the status
// line waits for the outcome (200, or 504 past --request-timeout, 500 on an
// engine failure). Its request is then cancelled so its KV blocks are freed at once.
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
constexpr auto kKeepAliveInterval = std::chrono::milliseconds(200);  // SSE comments while a stream is idle

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

// Waits for a non-streamed answer on the connection's thread. Throws the
// ApiError to answer with when the deadline passes, the engine fails or the
// client went away (cancelling the request in each case).
Generation wait_whole(ServerContext& ctx, Engine& engine, RequestChannel& channel, RequestId id,
                      const RequestDeadline& deadline) {
  Generation g;
  while (!g.finished) {
    for (const RequestEvent& ev : channel.wait(kPollInterval)) g.add(ev);
    if (g.finished) break;
    if (deadline.passed()) {
      engine.cancel(id);
      ++ctx.outcomes.cancelled;
      throw deadline.error();
    }
    if (GuardedHttpServer::client_gone()) {
      engine.cancel(id);
      ++ctx.outcomes.cancelled;
      GuardedHttpServer::close_after_response();
      throw ApiError(499, "the client closed the connection", "invalid_request_error", "client_closed");
    }
  }
  if (g.reason == FinishReason::Error) {
    ++ctx.outcomes.failed;
    throw ApiError(500, "generation failed: " + g.error, "server_error", "engine_error");
  }
  return g;
}

// A prompt whose text alone needs more tokens than the context holds is
// refused before it is rendered or tokenized (megabytes of text would cost
// seconds and hundreds of MB first). No token covers more than
// max_token_bytes of input; the factor 4 leaves room for normalization
// (NFC composes several bytes into fewer).
void refuse_surely_too_long(const ApiRequest& api, const ServedModel& served) {
  size_t bytes = api.prompt_text ? api.prompt_text->size() : 0;
  for (const ChatMessage& m : api.messages) bytes += m.content.size();
  const size_t n_ctx = (size_t)served.engine->options().n_ctx;
  if (bytes / 4 / served.max_token_bytes <= n_ctx) return;
  const std::string param = api.endpoint == Endpoint::ChatCompletions ? "messages" : "prompt";
  throw ApiError(400,
                 "the prompt has " + std::to_string(bytes) + " bytes of text, more tokens than the context holds (" +
                     std::to_string(n_ctx) + "); shorten it or restart the server with a larger -c",
                 "invalid_request_error", "context_length_exceeded", param);
}

}  // namespace

void handle_completion(ServerContext& ctx, const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  const RequestDeadline deadline(ctx.options.request_timeout_s);
  const json body = parse_json_body(req);
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(req.body, nullptr, false);
  const ApiRequest api = parse_api_request(body, endpoint, ordered.is_object() ? &ordered : nullptr);
  ServedModel& served = resolve_model(ctx, api.model);
  refuse_surely_too_long(api, served);
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
    const Generation g = wait_whole(ctx, *served.engine, *channel, id, deadline);
    const TokenText text = [&](int32_t t) { return served.engine->model().tokenizer().token_to_piece(t); };
    res.set_content(dump_json(completion_response(meta, g, text)), "application/json");
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
