// Fuzz entry for the Jinja engine: the input is a chat template, lexed,
// parsed and rendered (both with the chat-template options and plain) over a
// conversation with the fields real templates read (tool calls, tools, nested
// content), under a small step and output budget so that every input ends fast.
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "fuzz_targets.h"
#include "text/chat_template.h"
#include "text/jinja.h"

namespace spool::fuzz {

namespace {

const jinja::Value& conversation() {
  static const jinja::Value messages = jinja::Value::from_json(nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hi <b>there</b> \u00e9\u2603"},
    {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
      "function": {"name": "get", "arguments": {"q": "x", "n": 3}}}]},
    {"role": "tool", "content": "42", "name": "get"},
    {"role": "user", "content": [{"type": "text", "text": "part"}, {"type": "image"}]}
  ])"));
  return messages;
}

const jinja::Value& extras() {
  static const jinja::Value extra = jinja::Value::from_json(nlohmann::ordered_json::parse(R"({
    "tools": [{"type": "function", "function": {"name": "get", "description": "d",
      "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}],
    "enable_thinking": false, "date_string": "1 Jan 2026"
  })"));
  return extra;
}

}  // namespace

int jinja(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  jinja::TemplateOptions options;
  options.max_steps = 200000;        // the defaults are larger; a fuzz input must end within milliseconds
  options.max_output_bytes = 1 << 20;
  try {
    const jinja::Template plain(source, options);
    jinja::Dict vars;
    vars.set("messages", conversation());
    vars.set("add_generation_prompt", jinja::Value(true));
    vars.set("bos_token", jinja::Value("<s>"));
    vars.set("eos_token", jinja::Value("</s>"));
    for (const auto& [k, v] : extras().as_dict().items) vars.set(k, v);
    (void)plain.render(jinja::Value(std::move(vars)));
  } catch (const Error&) {
  }
  try {
    options.trim_blocks = options.lstrip_blocks = true;
    const jinja::Template chat(source, options);
    jinja::Dict vars;
    vars.set("messages", jinja::Value(jinja::List{}));
    vars.set("add_generation_prompt", jinja::Value(false));
    (void)chat.render(jinja::Value(std::move(vars)));
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace spool::fuzz
