// C API: tokenizers alone or a model's: open, info, tokenize, detokenize and
// the chat template (include/spool.h).
#include <cstring>

#include "capi/capi_internal.h"
#include "core/error.h"
#include "model/tokenizer_file.h"

namespace spool::capi {

void init_tokenizer_view(spool_tokenizer& view, const Tokenizer& tok, const gguf::File& file) {
  view.tok = &tok;
  view.template_source = chat_template_source(file);
  view.bos_text = tok.bos() >= 0 ? tok.token_text(tok.bos()) : "";
  view.eos_text = tok.eos() >= 0 ? tok.token_text(tok.eos()) : "";
}

}  // namespace spool::capi

using namespace spool;
using namespace spool::capi;

extern "C" {

spool_status spool_tokenizer_open(const char* path, spool_tokenizer** out) {
  return call_api(SPOOL_ERR_LOAD, [&] {
    require(path, "path");
    require(out, "out");
    *out = nullptr;
    const gguf::File file = open_tokenizer_file(path);
    auto h = std::make_unique<spool_tokenizer>();
    try {
      h->owned = load_tokenizer(file);
    } catch (const Error& e) {
      fail(SPOOL_ERR_LOAD, std::string("'") + path + "': " + e.what());
    }
    init_tokenizer_view(*h, *h->owned, file);
    register_handle(h.get(), Kind::Tokenizer);
    *out = h.release();
  });
}

spool_status spool_tokenizer_free(spool_tokenizer* tok) {
  return call_api(SPOOL_ERR_INTERNAL, [&] {
    checked(tok, Kind::Tokenizer, "tokenizer");
    if (!tok->owned) fail(SPOOL_ERR_INVALID_ARGUMENT, "this tokenizer belongs to a model: free the model instead");
    unregister_handle(tok);
    delete tok;
  });
}

spool_status spool_tokenizer_get_info(const spool_tokenizer* tok, spool_tokenizer_info* out) {
  return call_api(SPOOL_ERR_INTERNAL, [&] {
    checked(tok, Kind::Tokenizer, "tokenizer");
    require(out, "out");
    out->n_vocab = tok->tok->n_vocab();
    out->bos = tok->tok->bos();
    out->eos = tok->tok->eos();
    out->add_bos = tok->tok->add_bos() ? 1 : 0;
    out->has_chat_template = tok->template_source.empty() ? 0 : 1;
  });
}

spool_status spool_tokenize(const spool_tokenizer* tok, const char* text, size_t text_len, int add_special,
                            int parse_special, int32_t* ids, size_t capacity, size_t* n_ids) {
  return call_api(SPOOL_ERR_RUNTIME, [&] {
    checked(tok, Kind::Tokenizer, "tokenizer");
    if (text_len > 0) require(text, "text");
    require(n_ids, "n_ids");
    if (capacity > 0) require(ids, "ids");
    const std::vector<int32_t> got =
        tok->tok->encode(std::string_view(text ? text : "", text_len), add_special != 0, parse_special != 0);
    *n_ids = got.size();
    if (got.size() > capacity)
      fail(SPOOL_ERR_BUFFER_TOO_SMALL, "the text has " + std::to_string(got.size()) + " tokens, the buffer holds " +
                                           std::to_string(capacity));
    if (!got.empty()) std::memcpy(ids, got.data(), got.size() * sizeof(int32_t));
  });
}

spool_status spool_detokenize(const spool_tokenizer* tok, const int32_t* ids, size_t n_ids, int render_special,
                              char* text, size_t capacity, size_t* n_bytes) {
  return call_api(SPOOL_ERR_RUNTIME, [&] {
    checked(tok, Kind::Tokenizer, "tokenizer");
    if (n_ids > 0) require(ids, "ids");
    const int32_t n_vocab = tok->tok->n_vocab();
    std::string out;
    for (size_t i = 0; i < n_ids; ++i) {
      if (ids[i] < 0 || ids[i] >= n_vocab)
        fail(SPOOL_ERR_INVALID_ARGUMENT, "token id " + std::to_string(ids[i]) + " (at " + std::to_string(i) +
                                             ") is out of range (vocab " + std::to_string(n_vocab) + ")");
      out += tok->tok->token_to_piece(ids[i], render_special != 0);
    }
    write_text(out, text, capacity, n_bytes);
  });
}

spool_status spool_apply_chat_template(const spool_tokenizer* tok, const spool_chat_message* messages,
                                       size_t n_messages, int add_generation_prompt, char* text, size_t capacity,
                                       size_t* n_bytes) {
  return call_api(SPOOL_ERR_RUNTIME, [&] {
    checked(tok, Kind::Tokenizer, "tokenizer");
    if (n_messages > 0) require(messages, "messages");
    if (tok->template_source.empty()) fail(SPOOL_ERR_UNSUPPORTED, "this tokenizer has no chat template");
    std::vector<ChatMessage> msgs;
    for (size_t i = 0; i < n_messages; ++i) {
      if (!messages[i].role || !messages[i].content)
        fail(SPOOL_ERR_INVALID_ARGUMENT, "message " + std::to_string(i) + " has a NULL role or content");
      msgs.push_back({messages[i].role, messages[i].content});
    }
    std::string rendered;
    {
      std::lock_guard<std::mutex> lock(tok->template_mu);
      if (!tok->chat_template) {
        try {
          tok->chat_template = std::make_unique<ChatTemplate>(tok->template_source);
        } catch (const Error& e) {
          fail(SPOOL_ERR_UNSUPPORTED, std::string("the chat template does not parse: ") + e.what());
        }
      }
      rendered = tok->chat_template->render(msgs, add_generation_prompt != 0, tok->bos_text, tok->eos_text);
    }
    write_text(rendered, text, capacity, n_bytes);
  });
}

}  // extern "C"
