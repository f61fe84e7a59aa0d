// ChatTemplate: the variables transformers passes to a chat template (messages,
// add_generation_prompt, bos_token, eos_token, plus caller extras) and the
// template source from model metadata.
#include "text/chat_template.h"

#include "format/gguf.h"

namespace spool {

ChatTemplate::ChatTemplate(const std::string& source)
    : source_(source), template_(source, jinja::TemplateOptions{.trim_blocks = true, .lstrip_blocks = true}) {}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 const std::string& bos_token, const std::string& eos_token,
                                 const jinja::Value& extra) const {
  jinja::List list;
  for (const ChatMessage& m : messages) {
    jinja::Dict d;
    d.set("role", jinja::Value(m.role));
    d.set("content", jinja::Value(m.content));
    list.emplace_back(std::move(d));
  }
  return render(jinja::Value(std::move(list)), add_generation_prompt, bos_token, eos_token, extra);
}

std::string ChatTemplate::render(const jinja::Value& messages, bool add_generation_prompt,
                                 const std::string& bos_token, const std::string& eos_token,
                                 const jinja::Value& extra) const {
  jinja::Dict vars;
  vars.set("messages", messages);
  vars.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  vars.set("bos_token", jinja::Value(bos_token));
  vars.set("eos_token", jinja::Value(eos_token));
  if (extra.is_dict())
    for (const auto& [k, v] : extra.as_dict().items) vars.set(k, v);
  return template_.render(jinja::Value(std::move(vars)));
}

std::string chat_template_source(const gguf::File& file) {
  return file.get_string("tokenizer.chat_template", "");
}

std::vector<int32_t> chat_prompt_tokens(const std::vector<ChatMessage>& messages, const Tokenizer& tok,
                                        const ChatTemplate& tmpl) {
  jinja::List list;
  for (const ChatMessage& m : messages) {
    jinja::Dict d;
    d.set("role", jinja::Value(m.role));
    d.set("content", jinja::Value(m.content));
    list.emplace_back(std::move(d));
  }
  return chat_prompt_tokens(jinja::Value(std::move(list)), tok, tmpl, jinja::Value());
}

std::vector<int32_t> chat_prompt_tokens(const jinja::Value& messages, const Tokenizer& tok, const ChatTemplate& tmpl,
                                        const jinja::Value& extra) {
  const auto token = [&](int32_t id) { return id >= 0 ? tok.token_text(id) : std::string(); };
  const std::string bos = token(tok.bos());
  const std::string prompt = tmpl.render(messages, true, bos, token(tok.eos()), extra);
  std::vector<int32_t> ids;
  if (tok.add_bos() && tok.bos() >= 0 && !(!bos.empty() && prompt.starts_with(bos))) ids.push_back(tok.bos());
  const std::vector<int32_t> body = tok.encode(prompt, false, true);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

}  // namespace spool
