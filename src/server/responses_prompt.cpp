// Conversation prompts that keep earlier turns' tokens; see responses_prompt.h.
#include "server/responses_prompt.h"

#include <string>

namespace spool::server {

using ojson = nlohmann::ordered_json;

namespace {

constexpr const char* kSpanKey = "spool_span";

struct Render {
  std::string text;
  bool add_bos = false;  // the tokenizer wants BOS and the template did not write it
};

Render render(const ChatTemplate& tmpl, const Tokenizer& tok, const ojson& messages, const ojson& extra,
              bool add_generation_prompt = true) {
  const auto token = [&](int32_t id) { return id >= 0 ? tok.token_text(id) : std::string(); };
  const std::string bos = token(tok.bos());
  Render r;
  r.text = tmpl.render(jinja::Value::from_json(messages), add_generation_prompt, bos, token(tok.eos()),
                       jinja::Value::from_json(extra));
  r.add_bos = tok.add_bos() && tok.bos() >= 0 && !(!bos.empty() && r.text.starts_with(bos));
  return r;
}

std::vector<int32_t> with_bos(const Render& r, const Tokenizer& tok) {
  std::vector<int32_t> ids;
  if (r.add_bos) ids.push_back(tok.bos());
  return ids;
}

void append(std::vector<int32_t>& to, const std::vector<int32_t>& more) { to.insert(to.end(), more.begin(), more.end()); }

ojson without_span_keys(const ojson& messages) {
  ojson out = messages;
  for (ojson& m : out) m.erase(kSpanKey);
  return out;
}

// Text as it reads once it has been through JSON: bytes that are not UTF-8
// (a sampled token that is half a character, never completed) replaced by
// U+FFFD, as the response object and the stored items write them.
std::string as_stored(const std::string& text) {
  return nlohmann::json::parse(nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
      .get<std::string>();
}

// `previous` then the tokens of the render past the text they stand for, when
// the render starts with that text (as stored: the model saw the bytes it
// generated, the conversation's items hold them as JSON does).
bool continue_previous(const Render& full, const Tokenizer& tok, const std::vector<int32_t>& previous,
                       std::vector<int32_t>& out) {
  const bool bos_first = full.add_bos && !previous.empty() && previous[0] == tok.bos();
  if (full.add_bos && !bos_first) return false;
  const std::string prefix = as_stored(tokens_text(tok, previous, bos_first ? 1 : 0));
  if (prefix.empty() || !full.text.starts_with(prefix)) return false;
  out = previous;
  append(out, tok.encode(std::string_view(full.text).substr(prefix.size()), false, true));
  return true;
}

// `previous` then the render past the previous response's output, when the
// model's own text of that output differs from the template's (a tool call
// written with other spacing). The render before the output (with the
// generation prompt) must be the start of the text of `previous`; the render
// through the output must be the start of the full render and end as the
// template ends an assistant turn (found by rendering one with a marker for
// its content). `previous` is continued with that turn end (less the
// end-of-generation token the model wrote, if it wrote one) and the rest of
// the render. The model keeps its own text, as it saw it when it wrote it.
bool continue_own_text(const ChatTemplate& tmpl, const Tokenizer& tok, const ojson& extra, const Render& full,
                       const std::vector<int32_t>& previous, const PreviousTurnMessages& turn,
                       std::vector<int32_t>& out) {
  const bool bos_first = full.add_bos && !previous.empty() && previous[0] == tok.bos();
  if (previous.empty() || (full.add_bos && !bos_first)) return false;
  const Render before = render(tmpl, tok, without_span_keys(turn.before), extra, true);
  const Render through = render(tmpl, tok, without_span_keys(turn.through), extra, false);
  const std::string marker = "\x1e" "spool-turn\x1e";
  ojson marked = without_span_keys(turn.before);
  marked.push_back({{"role", "assistant"}, {"content", marker}});
  const Render plain = render(tmpl, tok, marked, extra, false);
  if (before.add_bos != full.add_bos || through.add_bos != full.add_bos || plain.add_bos != full.add_bos) return false;
  const std::string seen = as_stored(tokens_text(tok, previous, bos_first ? 1 : 0));
  if (!seen.starts_with(before.text) || !through.text.starts_with(before.text) || !full.text.starts_with(through.text) ||
      !plain.text.starts_with(before.text + marker))
    return false;
  std::string turn_end = plain.text.substr(before.text.size() + marker.size());
  if (!through.text.ends_with(turn_end)) return false;
  if (tok.is_eog(previous.back())) {
    const std::string eog = tok.token_to_piece(previous.back(), true);
    if (!turn_end.starts_with(eog)) return false;
    turn_end.erase(0, eog.size());
  }
  out = previous;
  append(out, tok.encode(turn_end + full.text.substr(through.text.size()), false, true));
  return true;
}

// The render with each spanned message's content replaced by a marker, cut at
// the markers: the pieces between the spans, or nothing when the template did
// not write each marker once, in order, or the text differs from `full`.
bool splice_spans(const ChatTemplate& tmpl, const Tokenizer& tok, const ojson& messages, const ojson& extra,
                  const std::vector<std::vector<int32_t>>& spans, const Render& full, std::vector<int32_t>& out) {
  ojson marked = messages;
  std::vector<std::string> markers, span_texts;
  std::vector<size_t> order;  // the spans, in the order their messages come
  for (ojson& m : marked) {
    if (!m.contains(kSpanKey)) continue;
    const size_t k = m[kSpanKey].get<size_t>();
    m.erase(kSpanKey);
    if (k >= spans.size() || spans[k].empty()) continue;
    span_texts.push_back(as_stored(tokens_text(tok, spans[k])));
    if (m.value("content", "") != span_texts.back()) return false;
    markers.push_back("\x1e" "spool-span-" + std::to_string(markers.size()) + "\x1e");
    m["content"] = markers.back();
    order.push_back(k);
  }
  if (markers.empty()) return false;
  const Render r = render(tmpl, tok, marked, extra);
  std::vector<std::string> pieces;
  size_t at = 0;
  for (const std::string& marker : markers) {
    const size_t found = r.text.find(marker, at);
    if (found == std::string::npos || r.text.find(marker, found + marker.size()) != std::string::npos) return false;
    pieces.push_back(r.text.substr(at, found - at));
    at = found + marker.size();
  }
  pieces.push_back(r.text.substr(at));
  std::string joined = pieces[0];
  for (size_t i = 0; i < span_texts.size(); ++i) joined += span_texts[i] + pieces[i + 1];
  if (joined != full.text) return false;
  out = with_bos(full, tok);
  for (size_t i = 0; i < order.size(); ++i) {
    append(out, tok.encode(pieces[i], false, true));
    append(out, spans[order[i]]);
  }
  append(out, tok.encode(pieces.back(), false, true));
  return true;
}

}  // namespace

std::string tokens_text(const Tokenizer& tok, const std::vector<int32_t>& ids, size_t begin) {
  std::string out;
  for (size_t i = begin; i < ids.size(); ++i) out += tok.token_to_piece(ids[i], true);
  return out;
}

ConversationPrompt conversation_prompt(const ChatTemplate& tmpl, const Tokenizer& tok, const ojson& messages,
                                       const ojson& extra, const std::vector<std::vector<int32_t>>& spans,
                                       const std::vector<int32_t>& previous, const PreviousTurnMessages* turn) {
  const Render full = render(tmpl, tok, without_span_keys(messages), extra);
  ConversationPrompt p;
  if (!previous.empty() && continue_previous(full, tok, previous, p.tokens)) {
    p.how = ConversationPrompt::How::Continued;
    return p;
  }
  if (turn && continue_own_text(tmpl, tok, extra, full, previous, *turn, p.tokens)) {
    p.how = ConversationPrompt::How::ContinuedOwnText;
    return p;
  }
  if (splice_spans(tmpl, tok, messages, extra, spans, full, p.tokens)) {
    p.how = ConversationPrompt::How::Spliced;
    return p;
  }
  p.tokens = with_bos(full, tok);
  append(p.tokens, tok.encode(full.text, false, true));
  p.how = ConversationPrompt::How::Rendered;
  return p;
}

}  // namespace spool::server
