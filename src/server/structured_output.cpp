// Structured output and tool calls: request fields, grammars, tool-call
// parsing; see structured_output.h.
#include "server/structured_output.h"

#include <cctype>
#include <random>

#include "grammar/json_schema.h"
#include "server/api_error.h"
#include "text/chat_template.h"

namespace spool::server {

using ojson = nlohmann::ordered_json;

namespace {

const ojson* field(const ojson& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

bool valid_tool_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!std::isalnum((unsigned char)c) && c != '_' && c != '-' && c != '.') return false;
  return true;
}

void parse_response_format(const ojson& body, StructuredRequest& s) {
  int n_given = 0;
  if (const ojson* rf = field(body, "response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      throw bad_param("response_format", "'response_format' must be an object with a string 'type'", "invalid_type");
    const std::string type = (*rf)["type"];
    if (type == "json_object") {
      s.format = StructuredRequest::Format::JsonObject;
      if (const ojson* schema = field(*rf, "schema")) {  // llama-server's extension
        s.format = StructuredRequest::Format::JsonSchema;
        s.schema = *schema;
      }
      ++n_given;
    } else if (type == "json_schema") {
      const ojson* js = field(*rf, "json_schema");
      if (!js || !js->is_object())
        throw bad_param("response_format.json_schema", "'response_format.json_schema' must be an object with a "
                        "'schema'", "invalid_type");
      const ojson* schema = field(*js, "schema");
      s.format = StructuredRequest::Format::JsonSchema;
      s.schema = schema ? *schema : ojson::object();
      ++n_given;
    } else if (type != "text") {
      throw bad_param("response_format.type", "'response_format.type' must be 'text', 'json_object' or "
                      "'json_schema', got '" + type + "'");
    }
  }
  if (const ojson* js = field(body, "json_schema")) {  // llama-server's extension
    if (!js->is_object() && !js->is_boolean())
      throw bad_param("json_schema", "'json_schema' must be a JSON Schema object", "invalid_type");
    s.format = StructuredRequest::Format::JsonSchema;
    s.schema = *js;
    ++n_given;
  }
  if (const ojson* g = field(body, "grammar")) {  // llama-server's extension (GBNF)
    if (!g->is_string()) throw bad_param("grammar", "'grammar' must be a string (GBNF)", "invalid_type");
    s.format = StructuredRequest::Format::Grammar;
    s.grammar = g->get<std::string>();
    ++n_given;
  }
  if (const ojson* c = field(body, "compact_json")) {  // spool's extension
    if (!c->is_boolean()) throw bad_param("compact_json", "'compact_json' must be a boolean", "invalid_type");
    s.compact_json = c->get<bool>();
  }
  if (n_given > 1)
    throw bad_param("response_format", "give only one of 'response_format' (json), 'json_schema' and 'grammar'");
}

// One function definition {name, description, parameters}; `p` names it in
// errors ("tools[0].function" or, legacy, "functions[0]").
ToolDef parse_function(const ojson& f, const std::string& p, const StructuredRequest& s) {
  ToolDef d;
  if (!f.contains("name") || !f["name"].is_string() || !valid_tool_name(f["name"]))
    throw bad_param(p + ".name", "'" + p + ".name' must be 1-64 letters, digits, '_', '-' or '.'");
  d.name = f["name"];
  if (f.contains("description") && f["description"].is_string()) d.description = f["description"];
  d.parameters = f.contains("parameters") && !f["parameters"].is_null() ? f["parameters"]
                                                                      : ojson{{"type", "object"}, {"properties", ojson::object()}};
  if (!d.parameters.is_object())
    throw bad_param(p + ".parameters", "'" + p + ".parameters' must be a JSON Schema object", "invalid_type");
  for (const ToolDef& other : s.tools)
    if (other.name == d.name) throw bad_param(p + ".name", "two tools are named '" + d.name + "'");
  return d;
}

// A named tool_choice / function_call must name one of the tools.
void choose_named(StructuredRequest& s, const std::string& name, const char* param, const char* list) {
  s.tool_choice = ToolChoice::Named;
  s.tool_name = name;
  bool known = false;
  for (const ToolDef& t : s.tools) known |= t.name == s.tool_name;
  if (!known)
    throw bad_param(param, std::string("'") + param + "' names '" + s.tool_name + "', which is not in '" + list + "'");
}

void parse_tool_choice(const ojson* choice, StructuredRequest& s) {
  if (!choice) return;
  if (choice->is_string()) {
    const std::string c = *choice;
    if (c == "none") s.tool_choice = ToolChoice::None;
    else if (c == "auto") s.tool_choice = ToolChoice::Auto;
    else if (c == "required") s.tool_choice = ToolChoice::Required;
    else throw bad_param("tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or a named function");
  } else if (choice->is_object() && choice->contains("function") && (*choice)["function"].is_object() &&
             (*choice)["function"].contains("name") && (*choice)["function"]["name"].is_string()) {
    choose_named(s, (*choice)["function"]["name"], "tool_choice", "tools");
  } else {
    throw bad_param("tool_choice", "'tool_choice' must be a string or {\"type\": \"function\", \"function\": "
                    "{\"name\": ...}}", "invalid_type");
  }
}

// OpenAI's deprecated function calling, mapped as OpenAI maps it: `functions`
// are tools, `function_call` ("none", "auto", {"name": N}) is tool_choice, and
// one call at most (its reply is message.function_call, see ToolCallStyle).
void parse_legacy_functions(const ojson& body, StructuredRequest& s) {
  const ojson* functions = field(body, "functions");
  const ojson* choice = field(body, "function_call");
  if (!functions) throw bad_param("function_call", "'function_call' needs 'functions'");
  if (field(body, "tools")) throw bad_param("functions", "give 'tools' or the deprecated 'functions', not both");
  if (field(body, "tool_choice")) throw bad_param("tool_choice", "'tool_choice' needs 'tools' ('functions' take 'function_call')");
  if (!functions->is_array() || functions->empty())
    throw bad_param("functions", "'functions' must be a non-empty array", "invalid_type");
  for (size_t i = 0; i < functions->size(); ++i) {
    const std::string p = "functions[" + std::to_string(i) + "]";
    if (!(*functions)[i].is_object()) throw bad_param(p, "'" + p + "' must be an object", "invalid_type");
    s.tools.push_back(parse_function((*functions)[i], p, s));
  }
  s.legacy_functions = true;
  s.parallel_tool_calls = false;
  s.tool_choice = ToolChoice::Auto;
  if (!choice) return;
  if (choice->is_string() && *choice == "none") s.tool_choice = ToolChoice::None;
  else if (choice->is_string() && *choice == "auto") s.tool_choice = ToolChoice::Auto;
  else if (choice->is_object() && choice->contains("name") && (*choice)["name"].is_string())
    choose_named(s, (*choice)["name"], "function_call", "functions");
  else
    throw bad_param("function_call", "'function_call' must be 'none', 'auto' or {\"name\": ...}", "invalid_type");
}

void parse_tools(const ojson& body, StructuredRequest& s) {
  if (field(body, "functions") || field(body, "function_call")) {
    parse_legacy_functions(body, s);
  } else if (const ojson* tools = field(body, "tools")) {
    if (!tools->is_array()) throw bad_param("tools", "'tools' must be an array", "invalid_type");
    for (size_t i = 0; i < tools->size(); ++i) {
      const ojson& t = (*tools)[i];
      const std::string p = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") || !t["function"].is_object())
        throw bad_param(p, "'" + p + "' must be {\"type\": \"function\", \"function\": {...}}", "invalid_type");
      s.tools.push_back(parse_function(t["function"], p + ".function", s));
    }
  }
  if (!s.legacy_functions) {
    const ojson* choice = field(body, "tool_choice");
    if (choice && s.tools.empty()) throw bad_param("tool_choice", "'tool_choice' needs 'tools'");
    s.tool_choice = s.tools.empty() ? ToolChoice::None : ToolChoice::Auto;
    parse_tool_choice(choice, s);
    if (const ojson* p = field(body, "parallel_tool_calls")) {
      if (!p->is_boolean()) throw bad_param("parallel_tool_calls", "'parallel_tool_calls' must be a boolean", "invalid_type");
      s.parallel_tool_calls = p->get<bool>();
    }
  }
  if (s.tools_active() && s.format == StructuredRequest::Format::Grammar)
    throw bad_param("tools", "'tools' together with a GBNF 'grammar' is not supported; use a response_format");
}

std::string text_content(const ojson& m) {
  const auto it = m.find("content");
  if (it == m.end() || it->is_null()) return "";
  if (it->is_string()) return *it;
  std::string text;
  if (it->is_array())
    for (const ojson& part : *it)
      if (part.is_object() && part.contains("text") && part["text"].is_string()) text += part["text"].get<std::string>();
  return text;
}

// A call in a history message as templates expect it: arguments parsed to
// an object (Hugging Face templates index into them).
ojson template_call(const ojson& fn, const std::string& id, const std::string& p) {
  ojson args = fn.value("arguments", ojson("{}"));
  if (args.is_string()) {
    try {
      args = ojson::parse(args.get<std::string>());
    } catch (const std::exception&) {
      throw bad_param(p, "'" + p + "' arguments must be a JSON text, got " + fn["arguments"].dump());
    }
  }
  return {{"id", id}, {"type", "function"}, {"function", {{"name", fn["name"]}, {"arguments", args}}}};
}

// Messages for the template: role and content as text, plus tool calls (their
// arguments as objects, as Hugging Face templates expect) and tool results.
// Legacy function calling is rewritten the same way: an assistant's
// `function_call` is a one-element tool_calls, a "function" message a "tool"
// result answering it.
ojson template_messages(const ojson& body) {
  ojson out = ojson::array();
  const ojson* msgs = field(body, "messages");
  if (!msgs || !msgs->is_array()) return out;
  std::string legacy_call_id;  // the last legacy call, which a "function" message answers
  for (size_t i = 0; i < msgs->size(); ++i) {
    const ojson& m = (*msgs)[i];
    if (!m.is_object()) continue;
    const std::string role = m.value("role", "");
    ojson t{{"role", role == "function" ? "tool" : role}, {"content", text_content(m)}};
    if (const ojson* calls = field(m, "tool_calls")) {
      const std::string p = "messages[" + std::to_string(i) + "].tool_calls";
      if (!calls->is_array()) throw bad_param(p, "'" + p + "' must be an array", "invalid_type");
      ojson list = ojson::array();
      for (const ojson& c : *calls) {
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
            !c["function"].contains("name") || !c["function"]["name"].is_string())
          throw bad_param(p, "'" + p + "' entries must be {\"id\", \"type\": \"function\", \"function\": {\"name\", "
                          "\"arguments\"}}", "invalid_type");
        list.push_back(template_call(c["function"], c.value("id", ""), p));
      }
      t["tool_calls"] = list;
    } else if (const ojson* fc = field(m, "function_call")) {
      const std::string p = "messages[" + std::to_string(i) + "].function_call";
      if (!fc->is_object() || !fc->contains("name") || !(*fc)["name"].is_string())
        throw bad_param(p, "'" + p + "' must be {\"name\", \"arguments\"}", "invalid_type");
      legacy_call_id = "call_" + std::to_string(i);
      t["tool_calls"] = ojson::array({template_call(*fc, legacy_call_id, p)});
    }
    if (const ojson* id = field(m, "tool_call_id"); id && id->is_string()) t["tool_call_id"] = *id;
    else if (role == "function" && !legacy_call_id.empty()) t["tool_call_id"] = legacy_call_id;
    if (const ojson* name = field(m, "name"); name && name->is_string()) t["name"] = *name;
    out.push_back(std::move(t));
  }
  return out;
}

ojson tool_json(const ToolDef& t) {
  return {{"type", "function"},
          {"function", {{"name", t.name}, {"description", t.description}, {"parameters", t.parameters}}}};
}

}  // namespace

StructuredRequest parse_structured(const ojson& body, bool chat) {
  StructuredRequest s;
  parse_response_format(body, s);
  if (chat) {
    parse_tools(body, s);
    s.messages = template_messages(body);
  } else if (field(body, "tools")) {
    throw bad_param("tools", "'tools' is only supported on /v1/chat/completions");
  } else if (field(body, "functions")) {
    throw bad_param("functions", "'functions' is only supported on /v1/chat/completions");
  }
  return s;
}

ToolCallStyle tool_call_style(const ChatTemplate* tmpl, const StructuredRequest& s) {
  ToolCallStyle style;
  style.legacy_function_call = s.legacy_functions;
  if ((tmpl && tmpl->source().find("<tool_call>") != std::string::npos) ||
      (s.tools_active() && s.format != StructuredRequest::Format::Text)) {
    style.open = "<tool_call>\n";
    style.close = "\n</tool_call>";
  }
  return style;
}

TemplateInput template_input(const StructuredRequest& s, const ChatTemplate& tmpl, const ToolCallStyle& style) {
  TemplateInput in{s.messages, ojson::object()};
  // OpenAI's "developer" role is the newer name of "system"; most templates
  // know only "system" (and some raise on other roles).
  if (tmpl.source().find("developer") == std::string::npos)
    for (ojson& m : in.messages)
      if (m.value("role", "") == "developer") m["role"] = "system";
  if (s.tools.empty()) return in;
  ojson tools = ojson::array();
  for (const ToolDef& t : s.tools) tools.push_back(tool_json(t));
  if (tmpl.source().find("tools") != std::string::npos) {
    in.extra["tools"] = tools;
    return in;
  }
  // The template does not render tools: describe them in a system message.
  std::string text = "You can call these tools. To call one, answer with only " + style.open +
                     "{\"name\": <tool name>, \"arguments\": <arguments as a JSON object>}" + style.close +
                     "\nTools:\n";
  for (const ojson& t : tools) text += t.dump() + "\n";
  if (!in.messages.empty() && in.messages[0].value("role", "") == "system") {
    in.messages[0]["content"] = in.messages[0]["content"].get<std::string>() + "\n\n" + text;
  } else {
    in.messages.insert(in.messages.begin(), ojson{{"role", "system"}, {"content", text}});
  }
  return in;
}

namespace {

std::string tool_grammar(const StructuredRequest& s, const ToolCallStyle& style) {
  ojson alternatives = ojson::array();
  for (const ToolDef& t : s.tools) {
    if (s.tool_choice == ToolChoice::Named && t.name != s.tool_name) continue;
    alternatives.push_back({{"type", "object"},
                            {"properties", {{"name", {{"const", t.name}}}, {"arguments", t.parameters}}},
                            {"required", {"name", "arguments"}},
                            {"additionalProperties", false}});
  }
  const ojson call_schema = alternatives.size() == 1 ? alternatives[0] : ojson{{"anyOf", alternatives}};
  grammar::JsonGbnfOptions o;
  o.root = "tool-call";
  o.prefix = "t";
  o.compact = s.compact_json;
  std::string g = grammar::json_schema_to_gbnf(call_schema, o);
  const std::string one = "\"" + grammar::gbnf_escape(style.open) + "\" tool-call \"" + grammar::gbnf_escape(style.close) + "\"";
  const bool many = s.parallel_tool_calls && s.tool_choice != ToolChoice::Named;
  g += "tool-calls ::= " + one + (many ? " (\"\\n\" " + one + "){0,3}" : "") + "\n";
  if (s.tool_choice == ToolChoice::Auto && s.format == StructuredRequest::Format::JsonObject) {
    g += "root ::= tool-calls | json-object\n";
  } else if (s.tool_choice == ToolChoice::Auto && s.format == StructuredRequest::Format::JsonSchema) {
    grammar::JsonGbnfOptions f;  // the answer when it is not a call (tool_call_style wrapped the calls)
    f.root = "formatted";
    f.prefix = "f";
    f.primitives = false;
    g += grammar::json_schema_to_gbnf(s.schema, f);
    g += "root ::= tool-calls | formatted\n";
  } else if (s.tool_choice == ToolChoice::Auto) {
    // Text may not start like a tool call does.
    const char first = style.open.empty() ? '{' : style.open[0];
    g += std::string("root ::= tool-calls | free-text\nfree-text ::= ([^") + (first == '{' ? "{" : "<") + "] .*)?\n";
  } else {
    g += "root ::= tool-calls\n";
  }
  return g;
}

}  // namespace

std::shared_ptr<grammar::TokenMasker> request_grammar(const StructuredRequest& s, grammar::GrammarCache& cache,
                                                      const ToolCallStyle& style) {
  std::string param;
  try {
    if (s.format == StructuredRequest::Format::JsonSchema) {  // its errors name the response format
      param = "response_format";
      const auto masker = cache.json_schema(s.schema, s.compact_json);
      if (!s.tools_active()) return masker;
    }
    if (s.tools_active()) {
      param = "tools";
      return cache.gbnf(tool_grammar(s, style));
    }
    switch (s.format) {
      case StructuredRequest::Format::Text: return nullptr;
      case StructuredRequest::Format::JsonObject: param = "response_format"; return cache.json_object(s.compact_json);
      case StructuredRequest::Format::JsonSchema: return nullptr;  // returned above
      case StructuredRequest::Format::Grammar: param = "grammar"; return cache.gbnf(s.grammar);
    }
  } catch (const grammar::GrammarError& e) {
    throw bad_param(param, std::string("invalid ") + (param == "grammar" ? "grammar" : "schema") + ": " + e.what());
  }
  return nullptr;
}

namespace {

// The end of the JSON object starting at text[i] ('{'), or npos.
size_t object_end(const std::string& text, size_t i) {
  int depth = 0;
  bool in_string = false, escape = false;
  for (size_t k = i; k < text.size(); ++k) {
    const char c = text[k];
    if (in_string) {
      if (escape) escape = false;
      else if (c == '\\') escape = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{') ++depth;
    else if (c == '}' && --depth == 0) return k + 1;
  }
  return std::string::npos;
}

}  // namespace

std::string new_tool_call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id = "call_";
  for (int k = 0; k < 24; ++k) id += hex[rng() & 15];
  return id;
}

bool starts_as_tool_call(const std::string& text, const ToolCallStyle& style) {
  return !text.empty() && text[0] == (style.open.empty() ? '{' : style.open[0]);
}

ParsedToolCalls parse_leading_tool_calls(const std::string& text, const ToolCallStyle& style) {
  ParsedToolCalls out;
  size_t i = 0;
  while (true) {
    if (text.compare(i, style.open.size(), style.open) != 0) return out;
    size_t k = i + style.open.size();
    if (k >= text.size() || text[k] != '{') return out;
    const size_t end = object_end(text, k);
    if (end == std::string::npos) return out;
    ojson call;
    try {
      call = ojson::parse(text.substr(k, end - k));
    } catch (const std::exception&) {
      return out;
    }
    if (!call.is_object() || !call.contains("name") || !call["name"].is_string() || !call.contains("arguments"))
      return out;
    k = end;
    if (text.compare(k, style.close.size(), style.close) != 0) return out;
    k += style.close.size();
    out.calls.push_back({new_tool_call_id(), call["name"], call["arguments"].dump()});
    if (k == text.size()) {
      out.complete = true;
      return out;
    }
    if (text[k] != '\n') return out;
    i = k + 1;
  }
}

std::optional<std::vector<ToolCall>> parse_tool_calls(const std::string& text, const ToolCallStyle& style) {
  ParsedToolCalls parsed = parse_leading_tool_calls(text, style);
  if (!parsed.complete) return std::nullopt;
  return std::move(parsed.calls);
}

}  // namespace spool::server
