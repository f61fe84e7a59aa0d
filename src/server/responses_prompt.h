// The prompt tokens of a /v1/responses request, built so that the prefix
// cache finds what earlier turns computed. A follow-up (previous_response_id)
// starts with exactly the token ids of the previous response's prompt and
// output, then the new turn: the whole conversation is rendered with the chat
// template and the text past what those tokens decode to is tokenized and
// appended. When the render does not start with that text because the
// model's last turn reads differently from the template's layout of it (a
// tool call), the earlier turns are checked alone and the model's own text of
// its last turn is kept, as it wrote and saw it; when even the earlier turns
// differ (a template that re-renders them), the prompt is built from the
// render alone. Assistant messages whose exact generated tokens are known
// (output items sent back by id) keep those tokens, spliced between the
// tokenized pieces of the render, when the template writes their text
// unchanged. Apart from a tool call kept as the model wrote it, the text the
// model sees is the template's render; only the token boundaries are the ones
// it generated.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace spool::server {

struct ConversationPrompt {
  std::vector<int32_t> tokens;
  // Continued: `previous` then the new turn; ContinuedOwnText: the same
  // where the model's own text of its last turn differs from the template's
  // (a tool call written with other spacing); Spliced: the render with known
  // token spans; Rendered: the render tokenized as a whole.
  enum class How { Continued, ContinuedOwnText, Spliced, Rendered } how = How::Rendered;
};

// Where the previous response sits in the conversation: the messages before
// its output and through its output, as the template gets them (rendered
// alone, they show which part of the render stands for the model's own text).
struct PreviousTurnMessages {
  nlohmann::ordered_json before;
  nlohmann::ordered_json through;
};

// `messages`: as items_to_messages makes them (a message may carry
// "spool_span": an index into `spans`, the exact token ids of its content);
// `extra`: more template variables (tools). `previous`: the token ids the
// prompt should start with ({} for none). `turn`: where the previous
// response's output sits; when the render does not start with the text of
// `previous` but the render before that output does, `previous` is continued
// with the template's turn end and the rest of the render (ContinuedOwnText).
// Throws what the template throws.
ConversationPrompt conversation_prompt(const ChatTemplate& tmpl, const Tokenizer& tok, const nlohmann::ordered_json& messages,
                                       const nlohmann::ordered_json& extra, const std::vector<std::vector<int32_t>>& spans,
                                       const std::vector<int32_t>& previous,
                                       const PreviousTurnMessages* turn = nullptr);

// The text of token ids as the model saw them (special tokens written out).
std::string tokens_text(const Tokenizer& tok, const std::vector<int32_t>& ids, size_t begin = 0);

}  // namespace spool::server
