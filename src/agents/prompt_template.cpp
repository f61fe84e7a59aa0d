#include "agents/prompt_template.h"

#include <stdexcept>

namespace spool::agents {

namespace {

bool word_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'; }

// "{...}" starting at tmpl[i] == '{' that looks like a placeholder (words
// joined by dots, nothing else): its inside; otherwise npos (literal text).
size_t placeholder_end(const std::string& tmpl, size_t i) {
  size_t j = i + 1;
  if (j >= tmpl.size() || !word_char(tmpl[j])) return std::string::npos;
  while (j < tmpl.size() && (word_char(tmpl[j]) || tmpl[j] == '.')) ++j;
  if (j >= tmpl.size() || tmpl[j] != '}') return std::string::npos;
  return j;
}

Placeholder classify(const std::string& inner) {
  if (inner == "task") return {Placeholder::Kind::Task, ""};
  if (inner == "input") return {Placeholder::Kind::Input, ""};
  if (inner == "previous") return {Placeholder::Kind::Previous, ""};
  if (inner == "round") return {Placeholder::Kind::Round, ""};
  const std::string prefix = "agents.", suffix = ".output";
  if (inner.size() > prefix.size() + suffix.size() && inner.compare(0, prefix.size(), prefix) == 0 &&
      inner.compare(inner.size() - suffix.size(), suffix.size(), suffix) == 0) {
    const std::string name = inner.substr(prefix.size(), inner.size() - prefix.size() - suffix.size());
    if (name.find('.') == std::string::npos) return {Placeholder::Kind::AgentOutput, name};
  }
  throw std::invalid_argument("unknown placeholder {" + inner +
                              "} (use {task}, {input}, {previous}, {round} or {agents.NAME.output}; {{ for a brace)");
}

// Walks the template: literal text and placeholders in order.
template <typename OnText, typename OnPlaceholder>
void walk(const std::string& tmpl, OnText on_text, OnPlaceholder on_placeholder) {
  std::string text;
  for (size_t i = 0; i < tmpl.size(); ++i) {
    const char c = tmpl[i];
    if ((c == '{' || c == '}') && i + 1 < tmpl.size() && tmpl[i + 1] == c) {
      text += c;
      ++i;
      continue;
    }
    if (c == '{') {
      const size_t end = placeholder_end(tmpl, i);
      if (end != std::string::npos) {
        const Placeholder p = classify(tmpl.substr(i + 1, end - i - 1));
        if (!text.empty()) on_text(text), text.clear();
        on_placeholder(p);
        i = end;
        continue;
      }
    }
    text += c;
  }
  if (!text.empty()) on_text(text);
}

}  // namespace

std::vector<Placeholder> template_placeholders(const std::string& tmpl) {
  std::vector<Placeholder> out;
  walk(tmpl, [](const std::string&) {}, [&](const Placeholder& p) { out.push_back(p); });
  return out;
}

std::vector<PromptPiece> render_template(const std::string& tmpl, const TemplateVars& vars) {
  std::vector<PromptPiece> out;
  walk(
      tmpl, [&](const std::string& t) { out.push_back({t, false}); },
      [&](const Placeholder& p) {
        switch (p.kind) {
          case Placeholder::Kind::Task: out.push_back({vars.task, false}); break;
          case Placeholder::Kind::Input: out.push_back({vars.input, false}); break;
          case Placeholder::Kind::Previous: out.push_back({vars.previous, true}); break;
          case Placeholder::Kind::Round: out.push_back({std::to_string(vars.round), false}); break;
          case Placeholder::Kind::AgentOutput:
            out.push_back({vars.agent_output ? vars.agent_output(p.agent) : std::string(), true});
            break;
        }
      });
  return out;
}

std::string join_pieces(const std::vector<PromptPiece>& pieces) {
  std::string s;
  for (const PromptPiece& p : pieces) s += p.text;
  return s;
}

}  // namespace spool::agents
