// `spool perplexity`: llama.cpp's method. The text is tokenized once (with
// BOS), cut into chunks of n_ctx tokens; each chunk starts with BOS and is
// evaluated from an empty cache; the second half of each chunk is scored.
// Prints running estimates to stderr and "PPL: <value>" last on stdout.
#include <cmath>
#include <cstdio>

#include "cli_common.h"
#include "core/error.h"
#include "runtime/session.h"

namespace spool::cli {
namespace {

struct PplOptions { std::string model, file; int n_ctx = 512, n_threads = 0, n_batch = 512, n_chunks = -1; ModelFlags model_flags; };

// -log p(target) under softmax(logits).
double nll(const float* logits, int n_vocab, int32_t target) {
  float mx = logits[0];
  for (int i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp((double)logits[i] - mx);
  return std::log(sum) - ((double)logits[target] - mx);
}

void perplexity(const PplOptions& o) {
  auto model = open_model(o.model, o.n_threads, o.model_flags, o.n_ctx, o.n_batch, 1, o.n_ctx);  // a chunk's logits
  const Tokenizer& tok = model->tokenizer();
  const int n_vocab = model->config().n_vocab, n_ctx = o.n_ctx;
  if (n_ctx < 4) throw Error("context size must be at least 4");
  const std::vector<int32_t> tokens = tok.encode(read_text_file(o.file), true, false);
  if ((int)tokens.size() < 2 * n_ctx)
    throw Error("need at least " + std::to_string(2 * n_ctx) + " tokens for context " + std::to_string(n_ctx) +
                ", the text has " + std::to_string(tokens.size()) + " (use a smaller -c or a longer text)");
  int n_chunks = (int)tokens.size() / n_ctx;
  if (o.n_chunks > 0) n_chunks = std::min(n_chunks, o.n_chunks);
  std::fprintf(stderr, "spool: %zu tokens, %d chunks of %d\n", tokens.size(), n_chunks, n_ctx);

  Session session(*model, n_ctx, o.n_batch);
  const int first = n_ctx / 2;
  double total = 0;
  int64_t count = 0;
  const double t0 = now_seconds();
  for (int c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + (size_t)c * n_ctx, tokens.begin() + (size_t)(c + 1) * n_ctx);
    if (tok.add_bos() && tok.bos() >= 0) chunk[0] = tok.bos();
    session.reset();
    const std::vector<float>& logits = session.feed(chunk, true);
    for (int j = first; j < n_ctx - 1; ++j)
      total += nll(logits.data() + (size_t)j * n_vocab, n_vocab, tokens[(size_t)c * n_ctx + j + 1]);
    count += n_ctx - 1 - first;
    std::fprintf(stderr, "[%d]%.4f%s", c + 1, std::exp(total / count), c + 1 == n_chunks ? "\n" : ",");
  }
  std::fprintf(stderr, "spool: %.2f s (%.1f tok/s)\n", now_seconds() - t0,
               (double)n_chunks * n_ctx / std::max(1e-9, now_seconds() - t0));
  std::printf("PPL: %.4f\n", std::exp(total / count));
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto o = std::make_shared<PplOptions>();
  CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity of a text file (llama.cpp's method)");
  cmd->add_option("-m,--model", o->model, "Model: GGUF file or Hugging Face directory");
  cmd->add_option("-f,--file", o->file, "Text file")->required();
  cmd->add_option("-c,--ctx-size", o->n_ctx, "Chunk size in tokens")->capture_default_str();
  cmd->add_option("-t,--threads", o->n_threads, "Threads");
  cmd->add_option("-b,--batch-size", o->n_batch, "Tokens per forward pass")->capture_default_str();
  cmd->add_option("--chunks", o->n_chunks, "Score at most this many chunks");
  add_model_flags(cmd, o->model_flags);
  cmd->callback([o] { perplexity(*o); });
}

}  // namespace spool::cli
