// One run's execution: stages in order (rounds repeated until their marker or
// max_rounds), each agent step as an engine request with retries, prompts
// from templates under the spec's context policy.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

#include "agents/kv_hints.h"
#include "agents/prompt_template.h"
#include "agents/run_state.h"
#include "model/model.h"
#include "text/unicode_util.h"

namespace spool::agents {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// SPOOL_FAILPOINTS="agent:NAME:N[,agent:NAME2:M]": the first N attempts of
// every step of agent NAME fail ("injected failure"). A test hook for the
// retry path; documented in docs/AGENTS.md.
int injected_failures(const std::string& agent) {
  const char* env = std::getenv("SPOOL_FAILPOINTS");
  if (!env) return 0;
  const std::string s = env;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string item = s.substr(i, j - i);
    const size_t c1 = item.find(':'), c2 = item.rfind(':');
    if (c1 != std::string::npos && c2 > c1 && item.substr(0, c1) == "agent" && item.substr(c1 + 1, c2 - c1 - 1) == agent)
      return std::atoi(item.c_str() + c2 + 1);
    i = j + 1;
  }
  return 0;
}

constexpr int64_t kEventIdBlock = 1024;  // token event ids reserved in the store at a time

std::string one_line(const std::string& s, size_t max) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fs", s);
  return buf;
}

}  // namespace

struct RunExecutor::StepResult {
  bool ok = false;
  bool retryable = true;
  FinishReason reason = FinishReason::None;
  std::string output, error;
  int prompt_tokens = 0, cached_tokens = 0, tokens = 0;
};

RunExecutor::RunExecutor(PipelineRunner& runner, std::shared_ptr<PipelineRunner::Run> run)
    : runner_(runner), run_(std::move(run)) {
  static std::atomic<uint64_t> next_owner{1};
  hint_owner_ = next_owner++;
  for (StepRecord& s : runner_.store_.steps(run_->id))
    if (s.status == "done") done_.emplace(std::make_pair(s.agent, s.round), std::move(s));
  plan_ = unroll_stages(run_->spec);
}

RunExecutor::~RunExecutor() {
  for (Engine* e : hinted_) e->set_hints(hint_owner_, {});
}

void RunExecutor::check_stop() const {
  if (run_->cancelled) throw RunCancelled{};
  std::lock_guard<std::mutex> lock(runner_.mu_);
  if (runner_.stopping_) throw RunStopping{};
}

void RunExecutor::record(const StepRecord* step, const json& event, const std::vector<std::string>& lines) {
  std::lock_guard<std::mutex> order(run_->record_mu);
  int64_t seq = 0;
  if (!event.is_null()) {
    std::lock_guard<std::mutex> lock(run_->mu);
    seq = run_->next_seq + 1;
  }
  runner_.store_.commit(run_->id, step, lines, seq, event);
  if (seq > 0) {
    {
      std::lock_guard<std::mutex> lock(run_->mu);
      run_->next_seq = seq;
      run_->events.emplace_back(seq, event);
    }
    run_->cv.notify_all();
  }
  if (runner_.options_.log_to_stderr)
    for (const std::string& line : lines) std::fprintf(stderr, "%s\n", line.c_str());
}

void RunExecutor::emit_token(json ev) {
  std::lock_guard<std::mutex> order(run_->record_mu);
  int64_t seq;
  {
    std::lock_guard<std::mutex> lock(run_->mu);
    seq = run_->next_seq + 1;
  }
  // Token deltas are not stored: their ids come from a block reserved in the
  // store first, so a restart after a crash numbers above them (one write per block).
  if (seq > run_->reserved_seq) {
    runner_.store_.reserve_event_seq(run_->id, seq + kEventIdBlock - 1);
    run_->reserved_seq = seq + kEventIdBlock - 1;
  }
  {
    std::lock_guard<std::mutex> lock(run_->mu);
    run_->next_seq = seq;
    run_->events.emplace_back(seq, std::move(ev));
  }
  run_->cv.notify_all();
}

void RunExecutor::execute() {
  for (const Stage& s : run_->spec.stages) {
    if (s.kind != Stage::Kind::Rounds) {
      run_stage(s, 1);
      continue;
    }
    for (int round = 1; round <= s.max_rounds; ++round) {
      bool marker = false;
      for (const Stage& b : s.body) {
        run_stage(b, round);
        if (!s.until.empty())
          for (const std::string& name : b.agents) marker = marker || outputs_[name].text.find(s.until) != std::string::npos;
      }
      if (marker) {
        log("[run:" + run_->id + "] ROUNDS stop marker '" + s.until + "' seen in round " + std::to_string(round));
        break;
      }
    }
  }
}

void RunExecutor::run_stage(const Stage& s, int round) {
  check_stop();
  while (pos_ < plan_.size() && !(plan_[pos_].stage == &s && plan_[pos_].round == round)) ++pos_;
  if (runner_.options_.kv_hints) update_hints(pos_);
  struct Job {
    const AgentSpec* agent;
    std::string step;
    const nlohmann::ordered_json* item;
  };
  std::vector<Job> jobs;
  const bool for_each = s.kind == Stage::Kind::ForEach;
  const nlohmann::ordered_json items = for_each ? for_each_items(s, round) : nlohmann::ordered_json();
  if (for_each) {
    for (size_t i = 0; i < items.size(); ++i)
      jobs.push_back({run_->spec.agent(s.agents[0]), item_step_name(s.agents[0], i), &items[i]});
  } else {
    for (const std::string& name : s.agents) jobs.push_back({run_->spec.agent(name), name, nullptr});
  }
  const int ord0 = next_ord_;
  next_ord_ += (int)jobs.size();
  std::vector<AgentOutput> outs(jobs.size());
  StartGate gate(jobs.size());
  const auto run_job = [&](size_t i, StartGate* g) {
    outs[i] = run_agent(*jobs[i].agent, round, ord0 + (int)i, jobs[i].step, jobs[i].item, g);
  };
  if (s.kind != Stage::Kind::Agent && run_->spec.enable_batch && jobs.size() > 1) {
    // Submitted together (after the gate): the scheduler decodes them in one batch.
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      threads.emplace_back([&, i] {
        try {
          run_job(i, &gate);
        } catch (...) {
          errors[i] = std::current_exception();
          run_->cancel_requests();  // the stage has failed: stop the siblings (their errors are secondary)
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
  } else {
    for (size_t i = 0; i < jobs.size(); ++i) run_job(i, nullptr);
  }
  if (jobs.size() == 1 && !for_each) {
    previous_ = outs[0].text;
    return;
  }
  previous_.clear();
  for (size_t i = 0; i < jobs.size(); ++i) previous_ += (i ? "\n\n" : "") + std::string("[") + jobs[i].step + "]\n" + outs[i].text;
  if (for_each) {
    // Later templates see the elements' outputs as one array: {agents.NAME.output[i]...}.
    AgentOutput all{previous_, nlohmann::ordered_json::array(), true};
    for (const AgentOutput& o : outs) all.value.push_back(o.structured ? o.value : nlohmann::ordered_json(o.text));
    std::lock_guard<std::mutex> lock(mu_);
    outputs_[s.agents[0]] = std::move(all);
  }
}

nlohmann::ordered_json RunExecutor::for_each_items(const Stage& s, int round) {
  const Placeholder& src = s.source;
  const std::string what = "agents." + src.agent + ".output" + path_text(src.path);
  const std::string fail = "for_each stage of agent '" + s.agents[0] + "': ";
  nlohmann::ordered_json items;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = outputs_.find(src.agent);
    if (it == outputs_.end() || !it->second.structured)
      throw RunFailed{fail + "agent '" + src.agent + "' has no structured output"};
    try {
      items = value_at(it->second.value, src.path, "agents." + src.agent + ".output");
    } catch (const PathError& e) {
      throw RunFailed{fail + e.what()};
    }
  }
  if (!items.is_array()) throw RunFailed{fail + what + " is not an array: " + items.dump().substr(0, 200)};
  if ((int)items.size() > s.max_items)
    throw RunFailed{fail + what + " has " + std::to_string(items.size()) + " elements, more than max_items " +
                    std::to_string(s.max_items)};
  log("[agent:" + s.agents[0] + "] FOR_EACH " + std::to_string(items.size()) + " element" +
      (items.size() == 1 ? "" : "s") + " of " + what + " round=" + std::to_string(round) + " run=" + run_->id);
  return items;
}

AgentOutput RunExecutor::make_output(const AgentSpec& a, const std::string& text) {
  AgentOutput out{text, nullptr, false};
  if (a.output_schema.is_null()) return out;
  out.value = nlohmann::ordered_json::parse(text);
  out.structured = true;
  return out;
}

RunExecutor::StepResult RunExecutor::attempt(const AgentSpec& a, const AgentModel& m, int round, const std::string& step,
                                             const nlohmann::ordered_json* item) {
  StepResult r;
  int max_tokens = a.max_tokens;
  RequestParams p;
  try {
    p.prompt = build_prompt(a, round, m, max_tokens, item);
    if (!a.output_schema.is_null()) {
      if (!m.grammars) throw RunFailed{"model '" + a.model + "' has no grammar support for an output_schema"};
      try {
        p.grammar = m.grammars->json_schema(a.output_schema, a.compact_json);
      } catch (const std::exception& e) {
        throw RunFailed{std::string("output_schema: ") + e.what()};
      }
    }
  } catch (const RunFailed& e) {  // the context policy said fail, or a path is missing: retrying cannot help
    r.error = e.reason;
    r.retryable = false;
    return r;
  }
  p.max_tokens = max_tokens;
  p.sampling.temperature = a.temperature;
  p.sampling.top_p = a.top_p;
  p.sampling.top_k = 0;
  p.sampling.min_p = 0;
  if (a.seed) p.sampling.seed = a.seed;
  p.stop = a.stop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = draft_contexts_.find(&m.engine->model());
    if (it != draft_contexts_.end()) p.draft_contexts = it->second;
  }
  r = generate(a, m, std::move(p), step, round);
  if (r.ok && !a.output_schema.is_null()) {
    if (r.reason == FinishReason::Length) {
      r.ok = false;
      r.error = "the output reached max_tokens (" + std::to_string(max_tokens) +
                ") before its JSON was complete; raise the agent's max_tokens";
    } else {
      try {
        (void)make_output(a, r.output);
      } catch (const std::exception& e) {
        r.ok = false;
        r.error = std::string("the output is not valid JSON (a stop string may have cut it): ") + e.what();
      }
    }
  }
  return r;
}

AgentOutput RunExecutor::run_agent(const AgentSpec& a, int round, int ord, const std::string& step,
                                   const nlohmann::ordered_json* item, StartGate* gate) {
  // Arrives at the gate on every way out that did not pass it.
  struct GateGuard {
    StartGate* g;
    void pass(bool wait) {
      if (g) std::exchange(g, nullptr)->arrive(wait);
    }
    ~GateGuard() { pass(false); }
  } gate_guard{gate};
  const auto key = std::make_pair(step, round);
  if (const auto it = done_.find(key); it != done_.end()) {  // finished before a restart: not run again
    AgentOutput out = make_output(a, it->second.output);      // parsed again from the stored text
    std::lock_guard<std::mutex> lock(mu_);
    if (!item) outputs_[a.name] = out;
    return out;
  }
  const AgentModel m = runner_.resolve_(a.model);
  if (!m.engine) throw RunFailed{"agent '" + a.name + "': model '" + a.model + "' is not loaded"};
  const std::string tag = "[agent:" + step + "]";
  const std::string where = " round=" + std::to_string(round) + " run=" + run_->id;
  StepRecord st;
  st.agent = step;
  st.round = round;
  st.ord = ord;
  st.started_at = unix_now();
  const auto t0 = Clock::now();
  const int fail_first = injected_failures(a.name);
  for (int attempt_no = 1;; ++attempt_no) {
    check_stop();
    st.attempts = attempt_no;
    st.status = "running";
    record(&st, {{"type", "start"}, {"agent", step}, {"round", round}, {"attempt", attempt_no}},
           {tag + " START attempt=" + std::to_string(attempt_no) + where});
    gate_guard.pass(true);  // the siblings' starts are recorded: submit together
    StepResult r;
    if (attempt_no <= fail_first) r.error = "injected failure (SPOOL_FAILPOINTS)";
    else r = attempt(a, m, round, step, item);
    if (r.ok) {
      AgentOutput out = make_output(a, r.output);
      st.status = "done";
      st.output = r.output;
      st.prompt_tokens = r.prompt_tokens;
      st.cached_tokens = r.cached_tokens;
      st.tokens = r.tokens;
      st.error.clear();
      st.finished_at = unix_now();
      auto ctx = std::make_shared<const DraftContext>(m.engine->model().tokenizer().encode(r.output, false, false));
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!item) outputs_[a.name] = out;
        auto& ctxs = draft_contexts_[&m.engine->model()];
        ctxs.push_back(std::move(ctx));
        if (ctxs.size() > 32) ctxs.erase(ctxs.begin());  // the latest outputs: a lookup tries each in turn
      }
      ++runner_.steps_done_;
      json ev{{"type", "output"}, {"agent", step}, {"round", round}, {"output", r.output}, {"tokens", r.tokens},
              {"prompt_tokens", r.prompt_tokens}, {"cached_tokens", r.cached_tokens}};
      if (out.structured) ev["output_json"] = json(out.value);
      record(&st, ev,
             {tag + " OUTPUT tokens=" + std::to_string(r.tokens) + where + ": " + one_line(r.output, 120),
              tag + " DONE wall=" + fmt_seconds(std::chrono::duration<double>(Clock::now() - t0).count()) +
                  " tokens=" + std::to_string(r.tokens) + " prompt_tokens=" + std::to_string(r.prompt_tokens) +
                  " cached_tokens=" + std::to_string(r.cached_tokens) + where});
      return out;
    }
    check_stop();  // a cancelled request is not a failure
    st.error = r.error;
    if (r.retryable && attempt_no <= a.retries) {
      ++runner_.retries_;
      st.status = "retrying";
      record(&st, {{"type", "retry"}, {"agent", step}, {"round", round}, {"attempt", attempt_no}, {"error", r.error}},
             {tag + " RETRY " + std::to_string(attempt_no) + "/" + std::to_string(a.retries) + where + ": " + r.error});
      continue;
    }
    st.status = "failed";
    st.finished_at = unix_now();
    ++runner_.steps_failed_;
    record(&st, {{"type", "failed"}, {"agent", step}, {"round", round}, {"attempts", attempt_no}, {"error", r.error}},
           {tag + " FAILED after " + std::to_string(attempt_no) + " attempt" + (attempt_no > 1 ? "s" : "") + where +
            ": " + r.error});
    throw RunFailed{"agent '" + step + "' (round " + std::to_string(round) + ") failed after " +
                    std::to_string(attempt_no) + " attempt" + (attempt_no > 1 ? "s" : "") + ": " + r.error};
  }
}

void RunExecutor::update_hints(size_t pos) {
  std::map<Engine*, std::vector<PrefixHint>> by_engine;
  for (Engine* e : hinted_) by_engine[e];  // engines hinted before get their new (maybe empty) set
  RunView view{&run_->spec, run_->input, &plan_, {}};
  {
    std::lock_guard<std::mutex> lock(mu_);
    view.outputs = outputs_;
  }
  add_run_hints(view, runner_.resolve_, pos, pos + 1, 1, by_engine);
  for (auto& [engine, hints] : by_engine) {
    if (!hints.empty()) hinted_.insert(engine);
    engine->set_hints(hint_owner_, std::move(hints));
  }
}

// Renders the agent's template; when prompt + max_tokens would not fit the
// context, applies the spec's policy to the history pieces ({previous},
// {agents.X.output}): summarize them (the model writes a summary), truncate
// their oldest text, or fail.
std::vector<int32_t> RunExecutor::build_prompt(const AgentSpec& a, int round, const AgentModel& m, int& max_tokens,
                                               const nlohmann::ordered_json* item) {
  const PipelineSpec& spec = run_->spec;
  TemplateVars v;
  v.task = spec.task.empty() ? run_->input : spec.task;
  v.input = run_->input.empty() ? v.task : run_->input;
  v.previous = previous_;
  v.round = round;
  v.value = [this, item](const Placeholder& p) -> std::string {
    try {
      if (p.kind == Placeholder::Kind::Item)
        return item ? value_text(value_at(*item, p.path, "item")) : std::string();
      std::lock_guard<std::mutex> lock(mu_);
      const auto it = outputs_.find(p.agent);
      if (it == outputs_.end()) return std::string();
      if (p.path.empty()) return it->second.text;
      if (!it->second.structured) throw PathError("agents." + p.agent + ".output is text, without fields");
      return value_text(value_at(it->second.value, p.path, "agents." + p.agent + ".output"));
    } catch (const PathError& e) {
      throw RunFailed{"prompt placeholder {" + p.text + "}: " + e.what()};
    }
  };
  std::vector<PromptPiece> pieces;
  if (template_placeholders(a.prompt).empty()) {
    // No placeholders: the task, the element (for_each) and the previous stage's output follow the prompt.
    if (!a.prompt.empty()) pieces.push_back({a.prompt + "\n\n", false});
    pieces.push_back({"Task: " + v.task, false});
    if (item) {
      pieces.push_back({"\n\nItem: ", false});
      pieces.push_back({value_text(*item), true});
    }
    if (!previous_.empty()) {
      pieces.push_back({"\n\nPrevious output:\n", false});
      pieces.push_back({previous_, true});
    }
  } else {
    pieces = render_template(a.prompt, v);
  }
  const int n_ctx = m.engine->options().n_ctx;
  const int limit = spec.max_context > 0 ? std::min(spec.max_context, n_ctx) : n_ctx;
  if (max_tokens >= limit)
    throw RunFailed{"max_tokens " + std::to_string(max_tokens) + " leaves no room for a prompt in a context of " +
                    std::to_string(limit) + " tokens"};
  std::vector<int32_t> ids = agent_prompt_tokens(a, m, join_pieces(pieces));
  if ((int)ids.size() + max_tokens <= limit) return ids;

  const std::string tag = "[agent:" + a.name + "]";
  const int before = (int)ids.size();
  const Tokenizer& tok = m.engine->model().tokenizer();
  if (spec.context_policy == ContextPolicy::Fail)
    throw RunFailed{"the prompt has " + std::to_string(ids.size()) + " tokens and max_tokens is " +
                    std::to_string(max_tokens) + ": over max_context " + std::to_string(limit) +
                    " (context_policy fail)"};
  // History pieces, largest first, are summarized (policy summarize) and/or cut from their start.
  for (int pass = 0; pass < 2 && (int)ids.size() + max_tokens > limit; ++pass) {
    const bool summarizing = pass == 0 && spec.context_policy == ContextPolicy::Summarize;
    if (pass == 0 && !summarizing) continue;
    std::vector<size_t> order;
    for (size_t i = 0; i < pieces.size(); ++i)
      if (pieces[i].history && !pieces[i].text.empty()) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return pieces[x].text.size() > pieces[y].text.size(); });
    for (size_t i : order) {
      // A few tries per piece: token counts shift a little where the text is cut.
      for (int tries = 0; tries < 4 && (int)ids.size() + max_tokens > limit && !pieces[i].text.empty(); ++tries) {
        const int excess = (int)ids.size() + max_tokens - limit;
        const std::string header = summarizing ? "[summary of earlier output]\n" : "[earlier text truncated]\n";
        const std::vector<int32_t> piece = tok.encode(pieces[i].text, false, false);
        const int keep = (int)piece.size() - excess - (int)tok.encode(header, false, false).size() - 2 * tries;
        if (summarizing) {
          if (tries > 0) break;  // one summary per piece; the truncation pass trims what is left
          pieces[i].text = header + summarize(a, m, pieces[i].text, std::max(8, keep));
        } else {
          pieces[i].text = keep > 0 ? header + tok.decode(std::vector<int32_t>(piece.end() - keep, piece.end()))
                                    : std::string();
        }
        ids = agent_prompt_tokens(a, m, join_pieces(pieces));
      }
    }
  }
  if ((int)ids.size() + max_tokens > limit)
    throw RunFailed{"the prompt has " + std::to_string(ids.size()) + " tokens after applying context_policy " +
                    context_policy_name(spec.context_policy) + ", still over max_context " + std::to_string(limit) +
                    " with max_tokens " + std::to_string(max_tokens)};
  log(tag + " CONTEXT " + context_policy_name(spec.context_policy) + " " + std::to_string(before) + " -> " +
      std::to_string(ids.size()) + " prompt tokens (max_context " + std::to_string(limit) + ") run=" + run_->id);
  return ids;
}

// The model's own summary of `text` in at most max_tokens tokens (the text cut
// from its start if even the summarizing request would not fit).
std::string RunExecutor::summarize(const AgentSpec& a, const AgentModel& m, const std::string& text, int max_tokens) {
  const Tokenizer& tok = m.engine->model().tokenizer();
  AgentSpec s = a;
  s.system = "You write short, faithful summaries.";
  const std::string head = "Summarize the following text in a few sentences, keeping facts, decisions and results:\n\n";
  const int n_ctx = m.engine->options().n_ctx;
  std::vector<int32_t> body = tok.encode(text, false, false);
  const int overhead = (int)agent_prompt_tokens(s, m, head).size() + 8;
  const int room = n_ctx - overhead - max_tokens;
  if (room <= 0) return "";
  if ((int)body.size() > room) body.erase(body.begin(), body.end() - room);
  RequestParams p;
  p.prompt = agent_prompt_tokens(s, m, head + tok.decode(body));
  p.max_tokens = max_tokens;
  p.sampling.temperature = 0;
  const StepResult r = generate(s, m, std::move(p), "", 0);
  if (!r.ok) throw RunFailed{"summarizing the context failed: " + r.error};
  return r.output;
}

RunExecutor::StepResult RunExecutor::generate(const AgentSpec& a, const AgentModel& m, RequestParams p,
                                              const std::string& stream_as, int round) {
  struct Mailbox {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<RequestEvent> events;
  };
  auto box = std::make_shared<Mailbox>();
  RequestId rid = 0;
  // A full queue is back-pressure, not a failure: wait for room.
  for (;;) {
    check_stop();
    try {
      rid = m.engine->submit(p, [box](const RequestEvent& ev) {
        {
          std::lock_guard<std::mutex> lock(box->mu);
          box->events.push_back(ev);
        }
        box->cv.notify_one();
      });
      break;
    } catch (const QueueFull&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } catch (const InvalidRequest& e) {
      StepResult r;
      r.error = e.what();
      r.retryable = false;
      return r;
    }
  }
  {
    std::lock_guard<std::mutex> lock(run_->mu);
    run_->in_flight.emplace(m.engine, rid);
  }
  if (run_->cancelled) m.engine->cancel(rid);  // cancel() may have run before the request was registered
  const auto deadline = a.timeout_s > 0 ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                             std::chrono::duration<double>(a.timeout_s))
                                        : Clock::time_point::max();
  StepResult r;
  bool timed_out = false, stop_sent = false;
  for (bool finished = false; !finished;) {
    std::vector<RequestEvent> evs;
    {
      std::unique_lock<std::mutex> lock(box->mu);
      box->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return !box->events.empty(); });
      evs.swap(box->events);
    }
    for (const RequestEvent& ev : evs) {
      // A model may emit bytes that are not UTF-8 (a stray byte token): outputs are stored and sent as JSON text.
      const std::string text = unicode::valid_utf8(ev.text);
      r.output += text;
      if (!stream_as.empty() && !text.empty())
        emit_token({{"type", "token"}, {"agent", stream_as}, {"round", round}, {"text", text}});
      if (!ev.finished) continue;
      finished = true;
      r.prompt_tokens = ev.prompt_tokens;
      r.cached_tokens = ev.cached_tokens;
      r.tokens = ev.completion_tokens;
      r.reason = ev.reason;
      if (ev.reason == FinishReason::Error) {
        r.error = "generation failed: " + ev.error;
        ++runner_.requests_failed_;
      } else if (ev.reason == FinishReason::Cancelled) {
        r.error = timed_out ? "timed out after " + fmt_seconds(a.timeout_s) : "cancelled";
        ++runner_.requests_cancelled_;
      } else {
        r.ok = true;
      }
    }
    if (finished || stop_sent) continue;
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(runner_.mu_);
      stopping = runner_.stopping_;
    }
    if (run_->cancelled || stopping || Clock::now() >= deadline) {
      timed_out = !run_->cancelled && !stopping;
      stop_sent = true;
      m.engine->cancel(rid);
    }
  }
  {
    std::lock_guard<std::mutex> lock(run_->mu);
    run_->in_flight.erase({m.engine, rid});
  }
  return r;
}

}  // namespace spool::agents
