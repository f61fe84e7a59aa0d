// How deep a JSON text nests, found by a plain scan (no parse): request bodies
// and batch input lines nested deeper than kMaxJsonDepth are refused before
// parsing, because what walks a parsed value (dumping it, JSON-schema
// compilation, templates) recurses.
#pragma once

#include <cstddef>
#include <string_view>

namespace spool::server {

constexpr int kMaxJsonDepth = 128;

// The offset of the first '[' or '{' (outside strings) past `max_depth` levels,
// or npos when the text nests no deeper.
size_t json_depth_exceeded_at(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace spool::server
