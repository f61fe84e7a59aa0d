// Responses API objects and events; see responses_format.h.
#include "server/responses_format.h"

#include "server/openai_format.h"

namespace spool::server {

namespace {

json plain(const nlohmann::ordered_json& o) { return json::parse(o.dump()); }

}  // namespace

json response_skeleton(const ResponsesRequest& r, const std::string& id, const std::string& model, int64_t created_at) {
  return json{{"id", id},
              {"object", "response"},
              {"created_at", created_at},
              {"status", "in_progress"},
              {"background", r.background},
              {"error", nullptr},
              {"incomplete_details", nullptr},
              {"instructions", r.instructions ? json(*r.instructions) : json(nullptr)},
              {"max_output_tokens", r.max_output_tokens ? json(*r.max_output_tokens) : json(nullptr)},
              {"model", model},
              {"output", json::array()},
              {"parallel_tool_calls", r.parallel_tool_calls},
              {"previous_response_id", r.previous_response_id.empty() ? json(nullptr) : json(r.previous_response_id)},
              {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
              {"store", r.store},
              {"temperature", r.temperature},
              {"text", plain(r.text)},
              {"tool_choice", plain(r.tool_choice)},
              {"tools", plain(r.tools)},
              {"top_p", r.top_p},
              {"truncation", "disabled"},
              {"usage", nullptr},
              {"user", nullptr},
              {"metadata", plain(r.metadata)}};
}

json responses_usage(int input_tokens, int cached_tokens, int output_tokens) {
  return json{{"input_tokens", input_tokens},
              {"input_tokens_details", {{"cached_tokens", cached_tokens}}},
              {"output_tokens", output_tokens},
              {"output_tokens_details", {{"reasoning_tokens", 0}}},
              {"total_tokens", input_tokens + output_tokens}};
}

ResponseEvents::ResponseEvents(json skeleton, bool tools, ToolCallStyle style)
    : response_(std::move(skeleton)), tools_(tools), style_(std::move(style)) {}

json ResponseEvents::event(const char* type, json fields) {
  fields["type"] = type;
  fields["sequence_number"] = seq_++;
  return fields;
}

json ResponseEvents::text_part() const {
  return json{{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}, {"logprobs", json::array()}};
}

json ResponseEvents::message_item(const char* status) const {
  const bool open = std::string(status) == "in_progress";
  return json{{"type", "message"},
              {"id", message_id_},
              {"status", status},
              {"role", "assistant"},
              {"content", open ? json::array() : json::array({text_part()})}};
}

std::vector<json> ResponseEvents::start() {
  return {event("response.created", {{"response", response_}}), event("response.in_progress", {{"response", response_}})};
}

void ResponseEvents::open_message(std::vector<json>& out) {
  message_id_ = new_item_id("msg");
  message_open_ = true;
  out.push_back(event("response.output_item.added", {{"output_index", 0}, {"item", message_item("in_progress")}}));
  out.push_back(event("response.content_part.added",
                      {{"item_id", message_id_},
                       {"output_index", 0},
                       {"content_index", 0},
                       {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}, {"logprobs", json::array()}}}}));
}

std::vector<json> ResponseEvents::text(const std::string& more) {
  std::vector<json> out;
  if (more.empty()) return out;
  if (phase_ == Phase::Undecided) {
    const char first = style_.open.empty() ? '{' : style_.open[0];
    phase_ = tools_ && more[0] == first ? Phase::Calls : Phase::Message;
    if (phase_ == Phase::Calls) calls_ = std::make_unique<ToolCallStreamer>(style_);
  }
  const size_t before = text_.size();
  text_ += more;
  if (phase_ == Phase::Message) {
    if (!message_open_) open_message(out);
    out.push_back(event("response.output_text.delta", {{"item_id", message_id_},
                                                        {"output_index", 0},
                                                        {"content_index", 0},
                                                        {"delta", text_.substr(before)},
                                                        {"logprobs", json::array()}}));
    return out;
  }
  for (const ToolCallDelta& d : calls_->push(more)) {
    if (!d.id.empty()) {
      while (calls_closed_ < call_list_.size()) close_call(out, false);
      call_list_.push_back({new_item_id("fc"), d.id, d.name, "", true});
      const Call& c = call_list_.back();
      out.push_back(event("response.output_item.added",
                          {{"output_index", call_list_.size() - 1},
                           {"item", {{"type", "function_call"}, {"id", c.item_id}, {"call_id", c.call_id},
                                     {"name", c.name}, {"arguments", ""}, {"status", "in_progress"}}}}));
    }
    if (d.arguments.empty() || call_list_.empty()) continue;
    call_list_.back().arguments += d.arguments;
    out.push_back(event("response.function_call_arguments.delta", {{"item_id", call_list_.back().item_id},
                                                                   {"output_index", call_list_.size() - 1},
                                                                   {"delta", d.arguments}}));
  }
  return out;
}

// The next open call ends: its arguments as generated (cut: a call that
// max_output_tokens ended early, status "incomplete").
void ResponseEvents::close_call(std::vector<json>& out, bool cut) {
  Call& c = call_list_[calls_closed_];
  const size_t index = calls_closed_++;
  c.open = false;
  const json item = {{"type", "function_call"}, {"id", c.item_id},   {"call_id", c.call_id},
                     {"name", c.name},          {"arguments", c.arguments}, {"status", cut ? "incomplete" : "completed"}};
  out.push_back(event("response.function_call_arguments.done",
                      {{"item_id", c.item_id}, {"output_index", index}, {"name", c.name}, {"arguments", c.arguments}}));
  out.push_back(event("response.output_item.done", {{"output_index", index}, {"item", item}}));
  response_["output"].push_back(item);
}

std::vector<json> ResponseEvents::finish(const ResponseEnd& end) {
  std::vector<json> out;
  if (end.kind == ResponseEnd::Kind::Failed) {
    out.push_back(event("error", {{"code", end.error_code}, {"message", end.error_message}, {"param", nullptr}}));
    response_["status"] = "failed";
    response_["error"] = {{"code", end.error_code}, {"message", end.error_message}};
    response_["output"] = json::array();
    out.push_back(event("response.failed", {{"response", response_}}));
    return out;
  }
  const bool incomplete = end.kind == ResponseEnd::Kind::Incomplete;
  if (phase_ != Phase::Calls) {
    if (!message_open_) open_message(out);
    const char* status = incomplete ? "incomplete" : "completed";
    out.push_back(event("response.output_text.done", {{"item_id", message_id_},
                                                      {"output_index", 0},
                                                      {"content_index", 0},
                                                      {"text", text_},
                                                      {"logprobs", json::array()}}));
    out.push_back(event("response.content_part.done",
                        {{"item_id", message_id_}, {"output_index", 0}, {"content_index", 0}, {"part", text_part()}}));
    out.push_back(event("response.output_item.done", {{"output_index", 0}, {"item", message_item(status)}}));
    response_["output"] = json::array({message_item(status)});
  } else {
    while (calls_closed_ < call_list_.size()) close_call(out, end.kind != ResponseEnd::Kind::Completed);
  }
  response_["usage"] = responses_usage(end.input_tokens, end.cached_tokens, end.output_tokens);
  switch (end.kind) {
    case ResponseEnd::Kind::Completed: response_["status"] = "completed"; break;
    case ResponseEnd::Kind::Incomplete:
      response_["status"] = "incomplete";
      response_["incomplete_details"] = {{"reason", "max_output_tokens"}};
      break;
    default: response_["status"] = "cancelled"; break;
  }
  const char* final_type = end.kind == ResponseEnd::Kind::Completed    ? "response.completed"
                           : end.kind == ResponseEnd::Kind::Incomplete ? "response.incomplete"
                                                                       : "response.failed";
  out.push_back(event(final_type, {{"response", response_}}));
  return out;
}

std::string sse_event(const json& event) {
  return "event: " + event.value("type", std::string("message")) + "\ndata: " + dump_json(event) + "\n\n";
}

json input_items_page(const json& items, int limit, const std::string& after, bool ascending) {
  std::vector<const json*> ordered;
  for (const json& it : items) ordered.push_back(&it);
  if (!ascending) std::reverse(ordered.begin(), ordered.end());
  size_t begin = 0;
  if (!after.empty()) {
    while (begin < ordered.size() && ordered[begin]->value("id", "") != after) ++begin;
    begin = begin < ordered.size() ? begin + 1 : ordered.size();
  }
  json data = json::array();
  for (size_t i = begin; i < ordered.size() && (int)data.size() < limit; ++i) data.push_back(*ordered[i]);
  const bool more = begin + data.size() < ordered.size();
  return json{{"object", "list"},
              {"data", data},
              {"first_id", data.empty() ? json(nullptr) : json(data.front().value("id", ""))},
              {"last_id", data.empty() ? json(nullptr) : json(data.back().value("id", ""))},
              {"has_more", more}};
}

}  // namespace spool::server
