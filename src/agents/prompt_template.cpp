#include "agents/prompt_template.h"

#include <stdexcept>

namespace spool::agents {

namespace {

bool word_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'; }
bool digit(char c) { return c >= '0' && c <= '9'; }

// "{...}" starting at tmpl[i] == '{' that looks like a placeholder (words
// joined by dots, and [N] indices after "agents." or "item"): its closing
// brace; otherwise npos (literal text).
size_t placeholder_end(const std::string& tmpl, size_t i) {
  size_t j = i + 1;
  if (j >= tmpl.size() || !word_char(tmpl[j])) return std::string::npos;
  bool brackets = false;
  while (j < tmpl.size() && (word_char(tmpl[j]) || tmpl[j] == '.' || tmpl[j] == '[' || tmpl[j] == ']')) {
    brackets = brackets || tmpl[j] == '[';
    ++j;
  }
  if (j >= tmpl.size() || tmpl[j] != '}') return std::string::npos;
  if (brackets && tmpl.compare(i + 1, 7, "agents.") != 0 && tmpl.compare(i + 1, 4, "item") != 0)
    return std::string::npos;
  return j;
}

[[noreturn]] void bad(const std::string& inner, const std::string& why) {
  throw std::invalid_argument("unknown placeholder {" + inner + "}" + why +
                              " (use {task}, {input}, {previous}, {round}, {agents.NAME.output} with an optional "
                              "path like .steps[0], or {item}; {{ for a brace)");
}

// ".key", "[N]" steps from `s` (which starts with '.' or '[', or is empty).
std::vector<PathStep> parse_path(const std::string& inner, const std::string& s) {
  std::vector<PathStep> path;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '.') {
      size_t j = ++i;
      while (j < s.size() && word_char(s[j])) ++j;
      if (j == i) bad(inner, ": empty name in the path");
      path.push_back({s.substr(i, j - i), -1});
      i = j;
    } else if (s[i] == '[') {
      size_t j = ++i;
      while (j < s.size() && digit(s[j])) ++j;
      if (j == i || j >= s.size() || s[j] != ']' || j - i > 9) bad(inner, ": an index is [N] with N a number");
      path.push_back({"", std::stoll(s.substr(i, j - i))});
      i = j + 1;
    } else {
      bad(inner, "");
    }
  }
  return path;
}

Placeholder classify(const std::string& inner) {
  if (inner == "task") return {Placeholder::Kind::Task, "", {}, inner};
  if (inner == "input") return {Placeholder::Kind::Input, "", {}, inner};
  if (inner == "previous") return {Placeholder::Kind::Previous, "", {}, inner};
  if (inner == "round") return {Placeholder::Kind::Round, "", {}, inner};
  if (inner.compare(0, 4, "item") == 0 && (inner.size() == 4 || inner[4] == '.' || inner[4] == '['))
    return {Placeholder::Kind::Item, "", parse_path(inner, inner.substr(4)), inner};
  const std::string prefix = "agents.", suffix = ".output";
  if (inner.compare(0, prefix.size(), prefix) == 0) {
    size_t j = prefix.size();
    while (j < inner.size() && word_char(inner[j])) ++j;
    const std::string name = inner.substr(prefix.size(), j - prefix.size());
    if (!name.empty() && inner.compare(j, suffix.size(), suffix) == 0) {
      const std::string rest = inner.substr(j + suffix.size());
      if (rest.empty() || rest[0] == '.' || rest[0] == '[')
        return {Placeholder::Kind::AgentOutput, name, parse_path(inner, rest), inner};
    }
  }
  bad(inner, "");
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

std::string path_text(const std::vector<PathStep>& path) {
  std::string s;
  for (const PathStep& p : path) s += p.index >= 0 ? "[" + std::to_string(p.index) + "]" : "." + p.key;
  return s;
}

std::vector<Placeholder> template_placeholders(const std::string& tmpl) {
  std::vector<Placeholder> out;
  walk(tmpl, [](const std::string&) {}, [&](const Placeholder& p) { out.push_back(p); });
  return out;
}

Placeholder parse_placeholder(const std::string& text) {
  std::string inner = text;
  if (inner.size() >= 2 && inner.front() == '{' && inner.back() == '}') inner = inner.substr(1, inner.size() - 2);
  const std::string braced = "{" + inner + "}";
  if (placeholder_end(braced, 0) != braced.size() - 1) bad(inner, "");
  return classify(inner);
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
          case Placeholder::Kind::Item: out.push_back({vars.value ? vars.value(p) : std::string(), true}); break;
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
