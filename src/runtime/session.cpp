// Session: chunked prefill and decode for one sequence (seq id 0).
#include "runtime/session.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace spool {

Session::Session(Model& model, int n_ctx, int n_batch)
    : model_(model), n_ctx_(n_ctx), n_batch_(std::max(1, n_batch)) {
  kv_ = make_simple_kv_cache(model.kv_shape(), n_ctx, 1);
}

void Session::reset() {
  kv_->clear(0);
  n_past_ = 0;
}

const std::vector<float>& Session::feed(const std::vector<int32_t>& tokens, bool all_logits) {
  const int n_vocab = model_.config().n_vocab;
  if (tokens.empty()) throw Error("nothing to evaluate: empty token list");
  if (n_past_ + (int)tokens.size() > n_ctx_)
    throw Error("context full: " + std::to_string(n_past_ + tokens.size()) + " tokens, context size is " +
                std::to_string(n_ctx_) + " (raise -c)");
  kv_->reserve(0, n_past_ + (int)tokens.size());
  logits_.resize((size_t)(all_logits ? tokens.size() : 1) * n_vocab);
  Batch batch;
  for (size_t start = 0; start < tokens.size(); start += n_batch_) {
    const size_t end = std::min(tokens.size(), start + n_batch_);
    batch.clear();
    for (size_t i = start; i < end; ++i)
      batch.add(tokens[i], n_past_ + (int)(i - start), 0, all_logits || i + 1 == tokens.size());
    float* out = all_logits ? logits_.data() + start * n_vocab : logits_.data();
    if (!all_logits && end != tokens.size()) {
      chunk_logits_.resize(n_vocab);  // no outputs wanted; pass a dummy
      out = chunk_logits_.data();
    }
    model_.forward(batch, *kv_, out);
    n_past_ += (int)(end - start);
  }
  return logits_;
}

}  // namespace spool
