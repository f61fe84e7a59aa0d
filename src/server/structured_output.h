// Structured output and tool calls on the OpenAI routes: the request fields
// (response_format json_schema/json_object, llama-server's `grammar` and
// `json_schema` extensions, `tools` + `tool_choice`, tool-call and tool-result
// messages), the grammar a request is constrained by, and the tool calls
// read back out of the generated text.
//
// A tool call is generated as {"name": ..., "arguments": {...}} under a
// grammar built from every tool's parameter schema, so its arguments always
// parse and validate. With tool_choice "auto" the alternative to calls is
// free text, or the response format's JSON when one is given. When the chat template writes Hermes-style tool calls
// (it mentions <tool_call>), the call is wrapped in <tool_call>...</tool_call>
// as that template expects; a template that does not render `tools` gets the
// tool list in a system message instead.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "grammar/grammar_cache.h"

namespace spool {
class ChatTemplate;
}

namespace spool::server {

struct ToolDef {
  std::string name, description;
  nlohmann::ordered_json parameters;  // a JSON Schema (an object schema)
};

enum class ToolChoice { None, Auto, Required, Named };

struct StructuredRequest {
  enum class Format { Text, JsonSchema, JsonObject, Grammar };
  Format format = Format::Text;
  nlohmann::ordered_json schema;  // Format::JsonSchema
  std::string grammar;            // Format::Grammar (GBNF)
  std::vector<ToolDef> tools;
  ToolChoice tool_choice = ToolChoice::None;
  std::string tool_name;          // ToolChoice::Named
  bool parallel_tool_calls = true;
  bool compact_json = false;      // spool's extension: no whitespace between JSON tokens
  bool legacy_functions = false;  // given as deprecated `functions` / `function_call` (one call at most)
  nlohmann::ordered_json messages;  // chat: the messages as the template sees them
  bool tools_active() const { return !tools.empty() && tool_choice != ToolChoice::None; }
};

// Reads the fields above from a request body (parsed with key order kept).
// Throws ApiError (400) naming the field.
StructuredRequest parse_structured(const nlohmann::ordered_json& body, bool chat);

// How tool calls are written in the generated text: wrapped in
// <tool_call>...</tool_call> for Hermes-style templates, and whenever tools
// come with a response format (so that a call and a formatted answer, both
// JSON, differ from their first character); bare JSON otherwise. And how the
// reply carries them: message.tool_calls, or for a legacy `functions` request
// message.function_call with finish_reason "function_call" (delta.function_call
// streamed), as OpenAI answers those.
struct ToolCallStyle {
  std::string open, close;  // "<tool_call>\n" / "\n</tool_call>", or ""
  bool legacy_function_call = false;
};
ToolCallStyle tool_call_style(const ChatTemplate* tmpl, const StructuredRequest& s);

// The messages and extra template variables (`tools`) for the chat template;
// without template support for tools, a system message lists them.
struct TemplateInput {
  nlohmann::ordered_json messages;
  nlohmann::ordered_json extra;  // an object
};
TemplateInput template_input(const StructuredRequest& s, const ChatTemplate& tmpl, const ToolCallStyle& style);

// The grammar for the request, or null for free text. Throws ApiError (400)
// naming the field when the schema or grammar is invalid.
std::shared_ptr<grammar::TokenMasker> request_grammar(const StructuredRequest& s, grammar::GrammarCache& cache,
                                                      const ToolCallStyle& style);

struct ToolCall {
  std::string id, name, arguments;  // arguments: JSON text
};
// A fresh "call_" + 24 hex digits id.
std::string new_tool_call_id();
// Whether a generated text is tool calls rather than text: its first character
// decides, as the grammar lets text never start the way a call does (the
// streamed answer decides the same way).
bool starts_as_tool_call(const std::string& text, const ToolCallStyle& style);
// The complete calls at the start of a text, and whether they are all of it;
// a call cut short (max_tokens, a stop string) ends the list.
struct ParsedToolCalls {
  std::vector<ToolCall> calls;
  bool complete = false;  // the text is exactly these calls
};
ParsedToolCalls parse_leading_tool_calls(const std::string& text, const ToolCallStyle& style);
// The tool calls in a generated text, or nullopt when it is not exactly calls.
std::optional<std::vector<ToolCall>> parse_tool_calls(const std::string& text, const ToolCallStyle& style);

}  // namespace spool::server
