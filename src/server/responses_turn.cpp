// A /v1/responses turn from request to store; see responses_turn.h.
#include "server/responses_turn.h"

#include <ctime>

namespace spool::server {

using ojson = nlohmann::ordered_json;

namespace {

// The stored response a follow-up continues: 404 unknown (or stored with
// store: false, which keeps nothing), 400 while it has no final output.
agents::ResponseRecord previous_response(agents::RunStore* store, const std::string& id) {
  std::optional<agents::ResponseRecord> rec = store ? store->get_response(id) : std::nullopt;
  if (!rec)
    throw ApiError(404, "Previous response with id '" + id + "' not found.", "invalid_request_error",
                   "previous_response_not_found", "previous_response_id");
  if (rec->status != "completed" && rec->status != "incomplete")
    throw bad_param("previous_response_id", "previous response '" + id + "' is " + rec->status +
                                                "; only a completed or incomplete response can be continued");
  return *rec;
}

// Replaces item references by the items they name.
ojson resolve_references(agents::RunStore* store, const ojson& items) {
  ojson out = ojson::array();
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].value("type", "") != "item_reference") {
      out.push_back(items[i]);
      continue;
    }
    const std::string id = items[i]["id"];
    std::optional<agents::ResponseItemRecord> rec = store ? store->get_response_item(id) : std::nullopt;
    if (!rec)
      throw ApiError(404, "Item with id '" + id + "' not found.", "invalid_request_error", "not_found",
                     "input[" + std::to_string(i) + "].id");
    out.push_back(ojson::parse(rec->body.dump()));
  }
  return out;
}

// Assistant messages of the conversation whose generated tokens the store
// knows (by item id), for responses_prompt.h to splice.
void known_spans(agents::RunStore* store, const ojson& context, int n_vocab, std::vector<std::string>& ids,
                 std::vector<std::vector<int32_t>>& spans) {
  if (!store) return;
  for (const ojson& item : context) {
    if (item.value("type", "") != "message" || item.value("role", "") != "assistant" || !item.contains("id")) continue;
    std::optional<agents::ResponseItemRecord> rec = store->get_response_item(item["id"]);
    if (!rec || rec->tokens.empty()) continue;
    bool in_vocab = true;
    for (int32_t t : rec->tokens) in_vocab &= t >= 0 && t < n_vocab;
    if (!in_vocab) continue;
    ids.push_back(item["id"]);
    spans.push_back(std::move(rec->tokens));
  }
}

// A conversation whose text alone needs more tokens than the context holds is
// refused before it is rendered (as the chat route does; no token covers more
// than max_token_bytes of input, 4x for normalization).
void refuse_surely_too_long(const ojson& context, const std::optional<std::string>& instructions,
                            const ServedModel& served) {
  size_t bytes = instructions ? instructions->size() : 0;
  for (const ojson& item : context) {
    bytes += item_text(item).size() + item.value("arguments", "").size();
    if (item.contains("output") && item["output"].is_string()) bytes += item["output"].get<std::string>().size();
  }
  const size_t n_ctx = (size_t)served.engine->options().n_ctx;
  if (bytes / 4 / served.max_token_bytes <= n_ctx) return;
  throw ApiError(400, "the conversation has " + std::to_string(bytes) + " bytes of text, more tokens than the context "
                 "holds (" + std::to_string(n_ctx) + ")", "invalid_request_error", "context_length_exceeded", "input");
}

// The template's messages for the first n items of the conversation.
ojson template_messages(const ResponseTurn& t, const ChatTemplate& tmpl, size_t n) {
  StructuredRequest s = t.request.structured;
  s.messages = items_to_messages(t.request.instructions, ojson(t.context.begin(), t.context.begin() + (ptrdiff_t)n));
  return template_input(s, tmpl, t.style).messages;
}

// `n_previous_output`: how many items before this request's input are the
// previous response's output.
void build_prompt(ResponseTurn& t, const std::vector<int32_t>& previous, size_t n_previous_output,
                  agents::RunStore* store) {
  const ServedModel& served = *t.served;
  const Tokenizer& tok = served.engine->model().tokenizer();
  std::vector<std::string> span_ids;
  std::vector<std::vector<int32_t>> spans;
  known_spans(store, t.context, tok.n_vocab(), span_ids, spans);
  StructuredRequest& s = t.request.structured;
  s.messages = items_to_messages(t.request.instructions, t.context, span_ids);
  t.style = tool_call_style(served.chat_template.get(), s);
  t.tools = s.tools_active();
  try {
    const TemplateInput in = template_input(s, *served.chat_template, t.style);
    PreviousTurnMessages turn;
    if (!previous.empty()) {
      const size_t through = t.context.size() - t.n_own_items;
      turn.before = template_messages(t, *served.chat_template, through - n_previous_output);
      turn.through = template_messages(t, *served.chat_template, through);
    }
    const ConversationPrompt p = conversation_prompt(*served.chat_template, tok, in.messages, in.extra, spans, previous,
                                                     previous.empty() ? nullptr : &turn);
    t.prompt = p.tokens;
    t.prompt_how = p.how;
  } catch (const ApiError&) {
    throw;
  } catch (const std::exception& e) {
    throw bad_param("input", std::string("the chat template failed on this conversation: ") + e.what());
  }
}

void set_params(ResponseTurn& t) {
  const ServedModel& served = *t.served;
  const ResponsesRequest& r = t.request;
  const int n_ctx = served.engine->options().n_ctx;
  const int n_prompt = (int)t.prompt.size();
  if (n_prompt + 1 > n_ctx)
    throw ApiError(400, "the conversation has " + std::to_string(n_prompt) + " tokens but the context holds " +
                   std::to_string(n_ctx) + " (with at least one generated token); shorten it or restart the server "
                   "with a larger -c", "invalid_request_error", "context_length_exceeded", "input");
  RequestParams& p = t.params;
  const bool constrained = r.structured.tools_active() || r.structured.format != StructuredRequest::Format::Text;
  try {
    if (constrained) p.grammar = request_grammar(r.structured, *served.grammars, t.style);
  } catch (const ApiError& e) {
    throw responses_error(e);
  }
  p.prompt = t.prompt;
  p.max_tokens = std::min(r.max_output_tokens.value_or(n_ctx - n_prompt), n_ctx - n_prompt);
  p.sampling.temperature = (float)r.temperature;
  p.sampling.top_p = (float)r.top_p;
  if (r.seed) p.sampling.seed = *r.seed;
}

}  // namespace

agents::RunStore* responses_store(ServerContext& ctx) { return ctx.runner ? &ctx.runner->store() : nullptr; }

ApiError response_not_found(const std::string& id) {
  return ApiError(404, "Response with id '" + id.substr(0, 200) + "' not found.", "invalid_request_error", "not_found",
                  "response_id");
}

ResponseTurn prepare_turn(ServerContext& ctx, const httplib::Request& req) {
  parse_json_body(req);  // a body that is not a JSON object: 400
  const ojson body = ojson::parse(req.body);
  ResponseTurn t;
  t.request = parse_responses_request(body);
  const ResponsesRequest& r = t.request;
  if (r.background && !r.store) throw bad_param("background", "background responses must be stored (store: true)");
  if (r.background && r.stream)
    throw bad_param("stream", "streaming a background response is not supported by this server; poll "
                              "GET /v1/responses/{id} instead");
  t.served = &resolve_model(ctx, r.model);
  if (!t.served->chat_template)
    throw ApiError(400, "the model has no chat template; use /v1/completions", "invalid_request_error",
                   "no_chat_template", "input");
  agents::RunStore* store = responses_store(ctx);
  std::vector<int32_t> previous;
  size_t n_previous_output = 0;
  t.context = ojson::array();
  if (!r.previous_response_id.empty()) {
    const agents::ResponseRecord prev = previous_response(store, r.previous_response_id);
    t.context = ojson::parse(prev.context.dump());
    for (const json& item : prev.body.value("output", json::array())) {
      t.context.push_back(ojson::parse(item.dump()));
      ++n_previous_output;
    }
    if (prev.body.value("model", "") == t.served->id) previous = prev.tokens;  // ids of the same vocabulary only
  }
  const ojson own = resolve_references(store, r.input);
  for (const ojson& item : own) t.context.push_back(item);
  t.n_own_items = own.size();
  refuse_surely_too_long(t.context, r.instructions, *t.served);
  build_prompt(t, previous, n_previous_output, store);
  set_params(t);
  t.id = new_item_id("resp");
  t.skeleton = response_skeleton(r, t.id, t.served->id, (int64_t)std::time(nullptr));
  return t;
}

ResponseEnd response_end(const Generation& g) {
  ResponseEnd end;
  end.input_tokens = g.prompt_tokens;
  end.cached_tokens = g.cached_tokens;
  end.output_tokens = g.completion_tokens;
  switch (g.reason) {
    case FinishReason::Length: end.kind = ResponseEnd::Kind::Incomplete; break;
    case FinishReason::Cancelled: end.kind = ResponseEnd::Kind::Cancelled; break;
    case FinishReason::Error:
      end.kind = ResponseEnd::Kind::Failed;
      end.error_code = "engine_error";
      end.error_message = "generation failed: " + g.error;
      break;
    default: end.kind = ResponseEnd::Kind::Completed; break;
  }
  return end;
}

json final_response(const ResponseTurn& t, const Generation& g) {
  ResponseEvents events(t.skeleton, t.tools, t.style);
  events.text(g.text);
  events.finish(response_end(g));
  return events.response();
}

void store_turn(agents::RunStore& store, const ResponseTurn& t, const json& response, const Generation* g) {
  agents::ResponseRecord rec;
  rec.id = t.id;
  rec.status = response.value("status", "");
  rec.body = response;
  rec.context = json::parse(t.context.dump());
  rec.tokens = t.prompt;
  std::vector<agents::ResponseItemRecord> items;
  if (g) {
    rec.tokens.insert(rec.tokens.end(), g->tokens.begin(), g->tokens.end());
    // A message's tokens as generated (without the end-of-generation token,
    // which the template writes after the text) splice into later prompts.
    std::vector<int32_t> text_tokens = g->tokens;
    const Tokenizer& tok = t.served->engine->model().tokenizer();
    if (!text_tokens.empty() && g->reason == FinishReason::Stop && tok.is_eog(text_tokens.back())) text_tokens.pop_back();
    for (const json& item : response.value("output", json::array()))
      items.push_back({item.value("id", ""), t.id, item,
                       item.value("type", "") == "message" ? text_tokens : std::vector<int32_t>{}});
  }
  for (size_t i = t.context.size() - t.n_own_items; i < t.context.size(); ++i)
    items.push_back({t.context[i].value("id", ""), t.id, json::parse(t.context[i].dump()), {}});
  store.put_response(rec, items);
}

}  // namespace spool::server
