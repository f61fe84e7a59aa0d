// Turns generated token pieces into text safe to print: holds back an
// incomplete UTF-8 sequence until its last byte arrives, and holds back any
// tail that could still become one of the stop strings. When a stop string
// appears, the text before it is released and the stream reports stopped.
#pragma once

#include <string>
#include <vector>

namespace spool {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stop_strings = {}) : stops_(std::move(stop_strings)) {}
  // Adds bytes; returns what can be emitted now.
  std::string push(const std::string& piece);
  // Returns whatever is still held back (end of generation).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace spool
