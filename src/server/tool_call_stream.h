// Streams tool calls as they are generated: the call's id and name as soon
// as `{"name": "...", "arguments":` is complete, then the arguments' text as
// it arrives, call after call, as OpenAI streams tool-call deltas. The text
// follows the tool-call grammar (structured_output.h), so a plain scan of
// strings and nesting depth finds where each call's arguments end.
#pragma once

#include <string>
#include <vector>

#include "server/structured_output.h"

namespace spool::server {

struct ToolCallDelta {
  int index = 0;
  std::string id, name;  // set on a call's first delta only
  std::string arguments; // more of the arguments' JSON text
};

class ToolCallStreamer {
 public:
  explicit ToolCallStreamer(ToolCallStyle style) : style_(std::move(style)) {}
  // More generated text in; the deltas it completes out.
  std::vector<ToolCallDelta> push(const std::string& text);

 private:
  enum class Phase { Open, Header, Args, Tail };
  ToolCallStyle style_;
  std::string buf_;
  size_t pos_ = 0;     // buf_ before this is consumed
  Phase phase_ = Phase::Open;
  int index_ = 0;
  int depth_ = 0;
  bool in_string_ = false, escape_ = false;
};

}  // namespace spool::server
