// The Responses API routes: POST /v1/responses (answered whole, streamed as
// OpenAI's events, or run in the background), GET and DELETE
// /v1/responses/{id}, GET /v1/responses/{id}/input_items and POST
// /v1/responses/{id}/cancel. Responses are stored in the server's data dir
// (unless store: false) with the token ids a follow-up continues from.
// A foreground request watches its client as the chat route does (cancelled
// when it goes; 504 past --request-timeout). A background one runs detached:
// the engine's callback gathers its output and a writer thread stores it, so
// the engine thread never waits on SQLite.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "server/request_channel.h"
#include "server/request_deadline.h"
#include "server/responses_turn.h"

namespace spool::server {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollInterval = std::chrono::milliseconds(100);
constexpr auto kKeepAliveInterval = std::chrono::milliseconds(200);

RequestId submit(Engine& engine, RequestParams params, RequestCallback callback) {
  try {
    return engine.submit(std::move(params), std::move(callback));
  } catch (const QueueFull& e) {
    ApiError err(503, std::string("the server is busy (request queue full): ") + e.what() + "; retry later",
                 "server_error", "queue_full");
    err.retry_after_s = 1;
    throw err;
  } catch (const InvalidRequest& e) {
    throw ApiError(400, e.what(), "invalid_request_error", "invalid_request");
  }
}

void reply(httplib::Response& res, const json& j) { res.set_content(dump_json(j), "application/json"); }

// A stored turn takes room in the data dir: refused (507) past --max-storage.
void check_room(ServerContext& ctx, const ResponseTurn& t, httplib::Response& res) {
  if (!t.request.store || !ctx.runner) return;
  try {
    ctx.runner->check_storage(t.context.dump().size() + 4 * t.prompt.size() + 4096);
  } catch (const agents::LimitExceeded& e) {
    throw_limit_error(e, res);
  }
}

}  // namespace

// Background responses in flight, and the thread that stores them.
class ResponsesService {
 public:
  explicit ResponsesService(ServerContext& ctx) : ctx_(ctx) {}
  ~ResponsesService() { shutdown(); }

  agents::RunStore* store() {
    agents::RunStore* s = responses_store(ctx_);
    // Background responses an earlier process left unfinished will never finish.
    if (s) std::call_once(swept_, [&] {
        for (const char* status : {"queued", "in_progress"})
          for (const std::string& id : s->responses_with_status(status)) {
            std::optional<agents::ResponseRecord> r = s->get_response(id);
            if (!r) continue;
            r->status = "failed";
            r->body["status"] = "failed";
            r->body["error"] = {{"code", "server_error"}, {"message", "the server stopped before this background "
                                                                      "response finished"}};
            s->put_response(*r, {});
          }
      });
    return s;
  }

  json start(ResponseTurn turn) {
    agents::RunStore* store_ptr = store();
    if (!store_ptr)
      throw bad_param("background", "background responses need the server's store, which this server does not have");
    agents::RunStore& s = *store_ptr;
    auto job = std::make_shared<Job>();
    job->turn = std::move(turn);
    job->turn.skeleton["status"] = "queued";
    store_turn(s, job->turn, job->turn.skeleton, nullptr);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) throw ApiError(503, "the server is stopping", "server_error", "shutting_down");
      if (!writer_.joinable()) writer_ = std::thread([this] { write_loop(); });
      jobs_[job->turn.id] = job;
    }
    try {
      job->request = submit(*job->turn.served->engine, job->turn.params, [this, job](const RequestEvent& ev) {
        std::lock_guard<std::mutex> lock(job->mu);
        job->gen.add(ev);
        if (ev.finished || !job->started) post(job);
        job->started = true;
      });
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.erase(job->turn.id);
      s.delete_response(job->turn.id);
      throw;
    }
    return job->turn.skeleton;
  }

  // Cancels a background response in flight and waits for its final state to
  // be stored; false when none is in flight under that id.
  bool cancel(const std::string& id, bool forget = false) {
    std::shared_ptr<Job> job;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = jobs_.find(id);
      if (it == jobs_.end()) return false;
      job = it->second;
    }
    {
      std::lock_guard<std::mutex> lock(job->mu);
      job->deleted |= forget;
    }
    job->turn.served->engine->cancel(job->request);
    std::unique_lock<std::mutex> lock(job->mu);
    job->cv.wait_for(lock, std::chrono::seconds(10), [&] { return job->stored; });
    return true;
  }

  void shutdown() {
    std::vector<std::string> ids;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      for (const auto& [id, job] : jobs_) ids.push_back(id);
    }
    for (const std::string& id : ids) cancel(id);
    {
      std::lock_guard<std::mutex> lock(mu_);
      exit_ = true;
    }
    cv_.notify_all();
    if (writer_.joinable()) writer_.join();
  }

 private:
  struct Job {
    ResponseTurn turn;
    RequestId request = 0;
    std::mutex mu;
    std::condition_variable cv;
    Generation gen;
    bool started = false, stored = false, deleted = false;
  };

  void post(const std::shared_ptr<Job>& job) {  // on the engine thread: never blocks on the store
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(job);
    }
    cv_.notify_one();
  }

  void write_loop() {
    while (true) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return exit_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = queue_.front();
        queue_.pop_front();
      }
      write(*job);
    }
  }

  void write(Job& job) {
    std::unique_lock<std::mutex> lock(job.mu);
    if (job.stored) return;
    agents::RunStore* s = responses_store(ctx_);
    const bool finished = job.gen.finished;
    try {
      if (!job.deleted && s) {
        json body = job.turn.skeleton;
        if (finished) body = final_response(job.turn, job.gen);
        else body["status"] = "in_progress";
        store_turn(*s, job.turn, body, finished ? &job.gen : nullptr);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "spool: response %s: cannot store it: %s\n", job.turn.id.c_str(), e.what());
    }
    if (!finished) return;
    job.stored = true;
    if (job.gen.reason == FinishReason::Cancelled) ++ctx_.outcomes.cancelled;
    if (job.gen.reason == FinishReason::Error) ++ctx_.outcomes.failed;
    job.cv.notify_all();
    lock.unlock();
    std::lock_guard<std::mutex> g(mu_);
    jobs_.erase(job.turn.id);
  }

  ServerContext& ctx_;
  std::once_flag swept_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<Job>> jobs_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::thread writer_;
  bool stopping_ = false, exit_ = false;
};

namespace {

ResponsesService& service(ServerContext& ctx) { return *ctx.responses; }

// Waits for a foreground answer as the chat route does: cancelled when the
// client goes or the deadline passes (throws the ApiError to answer with).
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

struct StreamState {
  ServerContext* ctx = nullptr;
  std::shared_ptr<ResponseTurn> turn;
  std::shared_ptr<RequestChannel> channel;
  RequestId id = 0;
  RequestDeadline deadline;
  std::unique_ptr<ResponseEvents> events;
  Generation gen;
  bool finished = false;
};

// The stream's end: the response stored (before the client hears it ended,
// so a follow-up can name it at once), then the final events.
std::vector<json> end_stream(StreamState& st) {
  std::vector<json> out = st.events->finish(response_end(st.gen));
  agents::RunStore* store = responses_store(*st.ctx);
  if (st.turn->request.store && store && st.gen.reason != FinishReason::Error) {
    try {
      store_turn(*store, *st.turn, st.events->response(), &st.gen);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "spool: response %s: cannot store it: %s\n", st.turn->id.c_str(), e.what());
    }
  }
  return out;
}

bool stream_events(StreamState& st, httplib::DataSink& sink) {
  auto last_write = Clock::now();
  const auto write = [&](const std::vector<json>& events) {
    last_write = Clock::now();
    for (const json& e : events) {
      const std::string s = sse_event(e);
      if (!sink.write(s.data(), s.size())) return false;
    }
    return true;
  };
  const auto cancel = [&] {
    st.turn->served->engine->cancel(st.id);
    st.finished = true;
    ++st.ctx->outcomes.cancelled;
    return false;
  };
  const auto fail = [&](const std::string& code, const std::string& message) {
    st.finished = true;
    ResponseEnd end;
    end.kind = ResponseEnd::Kind::Failed;
    end.error_code = code;
    end.error_message = message;
    write(st.events->finish(end));
    sink.done();
    return true;
  };
  if (!st.events) {
    st.events = std::make_unique<ResponseEvents>(st.turn->skeleton, st.turn->tools, st.turn->style);
    if (!write(st.events->start())) return cancel();
  }
  const auto timed_out = [&] {
    st.turn->served->engine->cancel(st.id);
    ++st.ctx->outcomes.cancelled;
    return fail("request_timeout", st.deadline.error().what());
  };
  while (true) {
    const std::vector<RequestEvent> evs = st.channel->wait(kPollInterval);
    if (evs.empty() && st.deadline.passed()) return timed_out();
    if (evs.empty()) {
      if (Clock::now() - last_write >= kKeepAliveInterval) {
        last_write = Clock::now();
        if (!sink.write(": keep-alive\n\n", 15)) return cancel();
      }
      continue;
    }
    for (const RequestEvent& ev : evs) {
      st.gen.add(ev);
      if (ev.finished && ev.reason == FinishReason::Error) {
        ++st.ctx->outcomes.failed;
        return fail("engine_error", "generation failed: " + ev.error);
      }
      if (!write(st.events->text(ev.text))) return cancel();
      if (!ev.finished) continue;
      st.finished = true;
      write(end_stream(st));
      sink.done();
      return true;
    }
    if (st.deadline.passed()) return timed_out();
  }
}

void create_response(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const RequestDeadline deadline(ctx.options.request_timeout_s);
  auto turn = std::make_shared<ResponseTurn>(prepare_turn(ctx, req));
  check_room(ctx, *turn, res);
  if (turn->request.background) return reply(res, service(ctx).start(std::move(*turn)));

  Engine& engine = *turn->served->engine;
  auto channel = std::make_shared<RequestChannel>();
  const RequestId id = submit(engine, turn->params, [channel](const RequestEvent& ev) { channel->push(ev); });
  if (!turn->request.stream) {
    const Generation g = wait_whole(ctx, engine, *channel, id, deadline);
    const json response = final_response(*turn, g);
    if (turn->request.store)
      if (agents::RunStore* store = service(ctx).store()) store_turn(*store, *turn, response, &g);
    return reply(res, response);
  }
  auto st = std::make_shared<StreamState>();
  st->ctx = &ctx;
  st->turn = turn;
  st->channel = channel;
  st->id = id;
  st->deadline = deadline;
  if (turn->request.store) service(ctx).store();  // the sweep of an earlier process's leftovers, first
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [st](size_t, httplib::DataSink& sink) { return stream_events(*st, sink); },
      [st](bool) {
        if (st->finished) return;
        st->turn->served->engine->cancel(st->id);  // the connection ended early
        ++st->ctx->outcomes.cancelled;
      });
}

agents::ResponseRecord stored_response(ServerContext& ctx, const std::string& id) {
  agents::RunStore* store = service(ctx).store();
  std::optional<agents::ResponseRecord> r = store ? store->get_response(id) : std::nullopt;
  if (!r) throw response_not_found(id);
  return *r;
}

void list_input_items(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const agents::ResponseRecord r = stored_response(ctx, req.matches[1].str());
  const int limit = limit_param(req, 20, 100);
  const std::string order = req.has_param("order") ? req.get_param_value("order") : "desc";
  if (order != "asc" && order != "desc") throw bad_param("order", "order must be 'asc' or 'desc'");
  reply(res, input_items_page(r.context, limit, req.has_param("after") ? req.get_param_value("after") : "",
                              order == "asc"));
}

void cancel_response(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1].str();
  service(ctx).cancel(id);
  const agents::ResponseRecord r = stored_response(ctx, id);
  if (!r.body.value("background", false))
    throw ApiError(400, "Only responses created with background=true can be cancelled; '" + id + "' was not.",
                   "invalid_request_error", "invalid_request", "response_id");
  reply(res, r.body);
}

void delete_response(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1].str();
  service(ctx).cancel(id, true);
  agents::RunStore* store = service(ctx).store();
  if (!store || !store->delete_response(id)) throw response_not_found(id);
  reply(res, json{{"id", id}, {"object", "response"}, {"deleted", true}});
}

}  // namespace

void add_response_routes(ServerContext& ctx) {
  ctx.responses = std::make_shared<ResponsesService>(ctx);
  GuardedHttpServer& http = ctx.http;  // its Post reads bodies within --max-body
  const std::string id = R"(/v1/responses/([A-Za-z0-9_-]+))";
  http.Post("/v1/responses", guarded(ctx, create_response));
  http.Get(id, guarded(ctx, [](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
    if (req.has_param("stream") && req.get_param_value("stream") == "true")
      throw bad_param("stream", "streaming a stored response again is not supported by this server");
    reply(res, stored_response(c, req.matches[1].str()).body);
  }));
  http.Delete(id, guarded(ctx, delete_response));
  http.Get(id + "/input_items", guarded(ctx, list_input_items));
  http.Post(id + "/cancel", guarded(ctx, cancel_response));
}

void stop_responses(ServerContext& ctx) {
  if (ctx.responses) ctx.responses->shutdown();
}

}  // namespace spool::server
