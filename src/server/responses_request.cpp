// Responses API request parsing and items -> messages; see responses_request.h.
#include "server/responses_request.h"

#include <cmath>
#include <map>
#include <random>

#include "server/api_error.h"

namespace spool::server {

using ojson = nlohmann::ordered_json;

namespace {

constexpr size_t kMaxMetadataKeys = 16, kMaxMetadataKey = 64, kMaxMetadataValue = 512;

const ojson* field(const ojson& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::string quoted(const std::string& p) { return "'" + p + "'"; }

std::optional<double> number_field(const ojson& body, const char* name, double lo, double hi) {
  const ojson* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw bad_param(name, quoted(name) + " must be a number", "invalid_type");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    throw bad_param(name, quoted(name) + " must be between " + ojson(lo).dump() + " and " + ojson(hi).dump() +
                              ", got " + v->dump());
  return x;
}

std::optional<bool> bool_field(const ojson& body, const char* name) {
  const ojson* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw bad_param(name, quoted(name) + " must be a boolean", "invalid_type");
  return v->get<bool>();
}

std::optional<std::string> string_field(const ojson& body, const char* name) {
  const ojson* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw bad_param(name, quoted(name) + " must be a string", "invalid_type");
  return v->get<std::string>();
}

// Content: a string, or parts {type input_text|output_text|text, text}; other
// part types (images, files, refusals) are refused by name.
ojson normalize_content(const ojson& content, const std::string& p, bool assistant) {
  const char* part_type = assistant ? "output_text" : "input_text";
  const auto part = [&](const std::string& text) {
    ojson out{{"type", part_type}, {"text", text}};
    if (assistant) out["annotations"] = ojson::array();
    return out;
  };
  if (content.is_string()) return ojson::array({part(content.get<std::string>())});
  if (!content.is_array()) throw bad_param(p, quoted(p) + " must be a string or an array of parts", "invalid_type");
  ojson parts = ojson::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const ojson& c = content[k];
    const std::string pk = p + "[" + std::to_string(k) + "]";
    if (!c.is_object() || !c.contains("type") || !c["type"].is_string())
      throw bad_param(pk, quoted(pk) + " must be an object with a string 'type'", "invalid_type");
    const std::string type = c["type"];
    if (type != "input_text" && type != "output_text" && type != "text")
      throw bad_param(pk + ".type", quoted(pk + ".type") + " '" + type.substr(0, 40) +
                                        "' is not supported by this server (text parts only: input_text, output_text)");
    if (!c.contains("text") || !c["text"].is_string())
      throw bad_param(pk + ".text", quoted(pk + ".text") + " must be a string", "invalid_type");
    parts.push_back(part(c["text"].get<std::string>()));
  }
  return parts;
}

ojson normalize_message(const ojson& m, const std::string& p) {
  const ojson* role = field(m, "role");
  if (!role || !role->is_string()) throw bad_param(p + ".role", quoted(p + ".role") + " must be a string", "invalid_type");
  const std::string r = *role;
  if (r != "user" && r != "system" && r != "developer" && r != "assistant")
    throw bad_param(p + ".role", quoted(p + ".role") + " must be one of 'user', 'system', 'developer' or "
                                 "'assistant', got " + role->dump().substr(0, 40));
  const ojson* content = field(m, "content");
  if (!content) throw bad_param(p + ".content", quoted(p + ".content") + " is required", "missing_required_parameter");
  const ojson* id = field(m, "id");
  return ojson{{"type", "message"},
               {"id", id && id->is_string() ? id->get<std::string>() : new_item_id("msg")},
               {"role", r},
               {"content", normalize_content(*content, p + ".content", r == "assistant")},
               {"status", "completed"}};
}

std::string required_string(const ojson& item, const char* key, const std::string& p) {
  const ojson* v = field(item, key);
  if (!v || !v->is_string())
    throw bad_param(p + "." + key, quoted(p + "." + key) + " must be a string", v ? "invalid_type" : "missing_required_parameter");
  return *v;
}

ojson normalize_item(const ojson& item, const std::string& p) {
  if (!item.is_object()) throw bad_param(p, quoted(p) + " must be an object", "invalid_type");
  const ojson* t = field(item, "type");
  if (t && !t->is_string()) throw bad_param(p + ".type", quoted(p + ".type") + " must be a string", "invalid_type");
  const std::string type = t ? t->get<std::string>() : "message";
  const ojson* id = field(item, "id");
  const auto id_or = [&](const char* prefix) { return id && id->is_string() ? id->get<std::string>() : new_item_id(prefix); };
  if (type == "message") return normalize_message(item, p);
  if (type == "function_call") {
    const std::string args = required_string(item, "arguments", p);
    return ojson{{"type", "function_call"}, {"id", id_or("fc")}, {"call_id", required_string(item, "call_id", p)},
                 {"name", required_string(item, "name", p)}, {"arguments", args}, {"status", "completed"}};
  }
  if (type == "function_call_output") {
    const ojson* out = field(item, "output");
    if (!out) throw bad_param(p + ".output", quoted(p + ".output") + " is required", "missing_required_parameter");
    const ojson output = out->is_string() ? *out : normalize_content(*out, p + ".output", false);
    return ojson{{"type", "function_call_output"}, {"id", id_or("fco")}, {"call_id", required_string(item, "call_id", p)},
                 {"output", output}, {"status", "completed"}};
  }
  if (type == "item_reference") return ojson{{"type", "item_reference"}, {"id", required_string(item, "id", p)}};
  if (type == "reasoning") return nullptr;  // this server writes none; a client's are dropped
  throw bad_param(p + ".type", quoted(p + ".type") + " '" + type.substr(0, 40) + "' is not supported by this server "
                  "(message, function_call, function_call_output, item_reference)");
}

// tools: function tools only, as the Responses API writes them (flat: name,
// description, parameters, strict); returns them as echoed and in the chat
// route's nested form.
void parse_tools(const ojson& body, ResponsesRequest& r, ojson& chat) {
  const ojson* tools = field(body, "tools");
  if (!tools) return;
  if (!tools->is_array()) throw bad_param("tools", "'tools' must be an array", "invalid_type");
  ojson nested = ojson::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const ojson& t = (*tools)[i];
    const std::string p = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) throw bad_param(p, quoted(p) + " must be an object", "invalid_type");
    const std::string type = t.value("type", "");
    if (type != "function")
      throw bad_param(p + ".type", quoted(p + ".type") + " '" + type.substr(0, 40) + "' is not supported by this "
                      "server: only function tools ({\"type\": \"function\", \"name\", \"parameters\"})");
    ojson fn{{"name", t.contains("name") ? t["name"] : ojson(nullptr)}};
    if (const ojson* d = field(t, "description")) fn["description"] = *d;
    if (const ojson* params = field(t, "parameters")) fn["parameters"] = *params;
    nested.push_back({{"type", "function"}, {"function", fn}});
    r.tools.push_back({{"type", "function"},
                       {"name", fn["name"]},
                       {"description", fn.contains("description") ? fn["description"] : ojson(nullptr)},
                       {"parameters", fn.contains("parameters") ? fn["parameters"] : ojson(nullptr)},
                       {"strict", t.contains("strict") && t["strict"].is_boolean() ? t["strict"] : ojson(true)}});
  }
  chat["tools"] = nested;
}

void parse_tool_choice(const ojson& body, ResponsesRequest& r, ojson& chat) {
  const ojson* c = field(body, "tool_choice");
  if (!c) return;
  if (c->is_string()) {
    // With no tools, "auto" and "none" change nothing (some clients always send one).
    if (!r.tools.empty() || (*c != "auto" && *c != "none")) chat["tool_choice"] = *c;
  } else if (c->is_object() && c->value("type", "") == "function" && c->contains("name") && (*c)["name"].is_string()) {
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*c)["name"]}}}};
  } else {
    throw bad_param("tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", "
                    "\"name\": ...} (other tool types are not supported)", "invalid_type");
  }
  r.tool_choice = *c;
}

// text.format: {type: text} | {type: json_object} | {type: json_schema, name, schema, strict}.
void parse_text_format(const ojson& body, ResponsesRequest& r, ojson& chat) {
  const ojson* text = field(body, "text");
  if (!text) return;
  if (!text->is_object()) throw bad_param("text", "'text' must be an object", "invalid_type");
  const ojson* f = field(*text, "format");
  if (!f) return;
  if (!f->is_object() || !f->contains("type") || !(*f)["type"].is_string())
    throw bad_param("text.format", "'text.format' must be an object with a string 'type'", "invalid_type");
  const std::string type = (*f)["type"];
  if (type == "json_object") {
    chat["response_format"] = {{"type", "json_object"}};
  } else if (type == "json_schema") {
    const ojson* schema = field(*f, "schema");
    if (!schema || !schema->is_object())
      throw bad_param("text.format.schema", "'text.format.schema' must be a JSON Schema object",
                      schema ? "invalid_type" : "missing_required_parameter");
    chat["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", f->value("name", "")}, {"schema", *schema}}}};
  } else if (type != "text") {
    throw bad_param("text.format.type", "'text.format.type' must be 'text', 'json_object' or 'json_schema', got '" +
                                            type.substr(0, 40) + "'");
  }
  r.text = {{"format", *f}};
}

// The chat route's validation names its own fields; name the Responses API's.
std::string responses_param(std::string p) {
  const auto replace = [&](const std::string& from, const std::string& to) {
    for (size_t at; (at = p.find(from)) != std::string::npos;) p.replace(at, from.size(), to);
  };
  replace(".function", "");
  replace("response_format.json_schema", "text.format");
  replace("response_format", "text.format");
  return p;
}

void parse_metadata(const ojson& body, ResponsesRequest& r) {
  const ojson* m = field(body, "metadata");
  if (!m) return;
  if (!m->is_object()) throw bad_param("metadata", "'metadata' must be an object of strings", "invalid_type");
  if (m->size() > kMaxMetadataKeys)
    throw bad_param("metadata", "'metadata' may have at most " + std::to_string(kMaxMetadataKeys) + " keys");
  for (const auto& [k, v] : m->items()) {
    if (k.size() > kMaxMetadataKey || !v.is_string() || v.get<std::string>().size() > kMaxMetadataValue)
      throw bad_param("metadata", "'metadata' keys must be at most 64 characters and values strings of at most 512");
  }
  r.metadata = *m;
}

}  // namespace

ApiError responses_error(const ApiError& e) { return ApiError(e.status, e.what(), e.type, e.code, responses_param(e.param)); }

std::string new_item_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id = std::string(prefix) + "_";
  for (int k = 0; k < 32; ++k) id += hex[rng() & 15];
  return id;
}

ojson normalize_input_items(const ojson& input) {
  if (input.is_string())
    return ojson::array({normalize_message(ojson{{"role", "user"}, {"content", input}}, "input")});
  if (!input.is_array()) throw bad_param("input", "'input' must be a string or an array of items", "invalid_type");
  ojson out = ojson::array();
  for (size_t i = 0; i < input.size(); ++i) {
    ojson item = normalize_item(input[i], "input[" + std::to_string(i) + "]");
    if (!item.is_null()) out.push_back(std::move(item));
  }
  return out;
}

std::string item_text(const ojson& item) {
  std::string text;
  const auto it = item.find("content");
  if (it == item.end()) return text;
  if (it->is_string()) return *it;
  if (it->is_array())
    for (const ojson& part : *it)
      if (part.is_object() && part.contains("text") && part["text"].is_string()) text += part["text"].get<std::string>();
  return text;
}

ResponsesRequest parse_responses_request(const ojson& body) {
  ResponsesRequest r;
  if (auto m = string_field(body, "model")) r.model = *m;
  const ojson* input = field(body, "input");
  if (!input) throw bad_param("input", "'input' is required", "missing_required_parameter");
  r.input = normalize_input_items(*input);
  r.instructions = string_field(body, "instructions");
  if (auto prev = string_field(body, "previous_response_id")) r.previous_response_id = *prev;
  if (field(body, "conversation"))
    throw bad_param("conversation", "'conversation' is not supported by this server; use previous_response_id");
  r.store = bool_field(body, "store").value_or(true);
  r.stream = bool_field(body, "stream").value_or(false);
  r.background = bool_field(body, "background").value_or(false);
  if (const ojson* n = field(body, "max_output_tokens")) {
    if (!n->is_number_integer() || n->get<int64_t>() < 1 || n->get<int64_t>() > INT32_MAX)
      throw bad_param("max_output_tokens", "'max_output_tokens' must be a positive integer, got " + n->dump().substr(0, 40));
    r.max_output_tokens = (int)n->get<int64_t>();
  }
  r.temperature = number_field(body, "temperature", 0, 2).value_or(1.0);
  r.top_p = number_field(body, "top_p", 0, 1).value_or(1.0);
  if (r.top_p == 0) r.top_p = 1e-6;
  if (const ojson* seed = field(body, "seed")) {
    if (!seed->is_number_integer()) throw bad_param("seed", "'seed' must be an integer", "invalid_type");
    if (seed->get<int64_t>() >= 0 || seed->is_number_unsigned()) r.seed = seed->get<uint64_t>();
  }  // the engine wants it positive; 0 means "the top token only"
  parse_metadata(body, r);
  r.parallel_tool_calls = bool_field(body, "parallel_tool_calls").value_or(true);

  ojson chat = ojson::object();  // the same request as the chat route reads it
  parse_tools(body, r, chat);
  parse_tool_choice(body, r, chat);
  parse_text_format(body, r, chat);
  chat["parallel_tool_calls"] = r.parallel_tool_calls;
  try {
    r.structured = parse_structured(chat, true);
  } catch (const ApiError& e) {
    throw responses_error(e);
  }
  return r;
}

ojson items_to_messages(const std::optional<std::string>& instructions, const ojson& items,
                        const std::vector<std::string>& span_ids) {
  ojson out = ojson::array();
  if (instructions) out.push_back({{"role", "system"}, {"content", *instructions}});
  std::map<std::string, std::string> call_names;  // call_id -> function name
  for (size_t i = 0; i < items.size(); ++i) {
    const ojson& item = items[i];
    const std::string type = item.value("type", "");
    if (type == "message") {
      ojson m{{"role", item.value("role", "user")}, {"content", item_text(item)}};
      const std::string id = item.value("id", "");
      for (size_t k = 0; k < span_ids.size() && m["role"] == "assistant"; ++k)
        if (span_ids[k] == id) m["spool_span"] = (int)k;
      out.push_back(std::move(m));
    } else if (type == "function_call") {
      ojson args;
      try {
        args = ojson::parse(item.value("arguments", "{}"));
      } catch (const std::exception&) {
        throw bad_param("input", "the arguments of function_call '" + item.value("call_id", "") +
                                     "' are not a JSON text: " + item.value("arguments", "").substr(0, 80));
      }
      ojson call{{"id", item["call_id"]}, {"type", "function"}, {"function", {{"name", item["name"]}, {"arguments", args}}}};
      call_names[item["call_id"]] = item["name"];
      // Calls one after another are one assistant turn.
      if (!out.empty() && out.back()["role"] == "assistant" && out.back().contains("tool_calls"))
        out.back()["tool_calls"].push_back(std::move(call));
      else
        out.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", ojson::array({std::move(call)})}});
    } else if (type == "function_call_output") {
      const ojson& o = item["output"];
      ojson m{{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", o.is_string() ? o.get<std::string>()
                                                                                            : item_text({{"content", o}})}};
      if (auto it = call_names.find(item["call_id"]); it != call_names.end()) m["name"] = it->second;
      out.push_back(std::move(m));
    }
  }
  return out;
}

}  // namespace spool::server
