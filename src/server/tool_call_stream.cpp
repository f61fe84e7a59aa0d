// ToolCallStreamer: a small scanner over the tool-call text; see the header.
#include "server/tool_call_stream.h"

namespace spool::server {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Reads `{ "name" : "NAME" , "arguments" :` (any whitespace) at text[i]; the
// index after it, or npos while it is not all there yet.
size_t header_end(const std::string& text, size_t i, std::string& name) {
  const auto skip = [&](size_t k) {
    while (k < text.size() && is_ws(text[k])) ++k;
    return k;
  };
  const auto expect = [&](size_t k, const std::string& lit) {
    k = skip(k);
    return text.compare(k, lit.size(), lit) == 0 ? k + lit.size() : std::string::npos;
  };
  size_t k = expect(i, "{");
  if (k != std::string::npos) k = expect(k, "\"name\"");
  if (k != std::string::npos) k = expect(k, ":");
  if (k != std::string::npos) k = expect(k, "\"");
  if (k == std::string::npos) return k;
  std::string raw;
  for (; k < text.size() && text[k] != '"'; ++k) raw += text[k];  // tool names have no escapes
  if (k >= text.size()) return std::string::npos;
  k = expect(k + 1, ",");
  if (k != std::string::npos) k = expect(k, "\"arguments\"");
  if (k != std::string::npos) k = expect(k, ":");
  if (k == std::string::npos) return k;
  k = skip(k);
  if (k >= text.size()) return std::string::npos;  // the arguments' first character decides the end of the blanks
  name = raw;
  return k;
}

}  // namespace

std::vector<ToolCallDelta> ToolCallStreamer::push(const std::string& text) {
  buf_ += text;
  std::vector<ToolCallDelta> out;
  while (pos_ < buf_.size()) {
    if (phase_ == Phase::Open) {
      if (buf_.size() - pos_ < style_.open.size()) break;
      pos_ += style_.open.size();
      phase_ = Phase::Header;
    } else if (phase_ == Phase::Header) {
      std::string name;
      const size_t end = header_end(buf_, pos_, name);
      if (end == std::string::npos) break;
      out.push_back({index_, new_tool_call_id(), name, ""});
      pos_ = end;
      phase_ = Phase::Args;
      depth_ = 0;
      in_string_ = escape_ = false;
    } else if (phase_ == Phase::Args) {
      size_t k = pos_;
      bool done = false;
      for (; k < buf_.size() && !done; ++k) {
        const char c = buf_[k];
        if (in_string_) {
          if (escape_) escape_ = false;
          else if (c == '\\') escape_ = true;
          else if (c == '"') in_string_ = false;
        } else if (c == '"') {
          in_string_ = true;
        } else if (c == '{' || c == '[') {
          ++depth_;
        } else if ((c == '}' || c == ']') && --depth_ == 0) {
          done = true;
        }
      }
      if (k > pos_) {
        if (!out.empty() && out.back().index == index_) out.back().arguments += buf_.substr(pos_, k - pos_);
        else out.push_back({index_, "", "", buf_.substr(pos_, k - pos_)});
      }
      pos_ = k;
      if (done) phase_ = Phase::Tail;
    } else {  // Tail: blanks, the call object's "}", the close marker, "\n", then the next call
      size_t k = pos_;
      while (k < buf_.size() && is_ws(buf_[k])) ++k;
      if (k >= buf_.size() || buf_[k] != '}') break;
      const std::string after = style_.close + "\n";
      if (buf_.size() - (k + 1) < after.size() || buf_.compare(k + 1, after.size(), after) != 0) break;
      pos_ = k + 1 + after.size();
      ++index_;
      phase_ = Phase::Open;
    }
  }
  return out;
}

}  // namespace spool::server
