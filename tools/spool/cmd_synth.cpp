// `spool synth`: write a random-weight GGUF with a real model's shapes and a
// real tokenizer, in any supported quant type, for benchmarks and tests.
// With --verify the file is loaded back and one forward pass must give
// finite logits.
#include <cmath>
#include <cstdio>

#include "cli_common.h"
#include "core/error.h"
#include "model/synth.h"
#include "runtime/session.h"

namespace spool::cli {
namespace {

struct SynthCliOptions {
  SynthOptions synth;
  bool verify = false;
};

// Loads the file and checks that a short prompt gives finite logits.
void verify_model(const std::string& path, int n_threads) {
  auto model = open_model(path, n_threads);
  const int n_vocab = model->config().n_vocab;
  Session session(*model, 64, 64);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 8; ++i) tokens.push_back((int32_t)((i * 7919 + 1) % n_vocab));
  const std::vector<float>& logits = session.feed(tokens, true);
  for (size_t i = 0; i < logits.size(); ++i)
    if (!std::isfinite(logits[i]))
      throw Error("synthetic model '" + path + "' gives a non-finite logit at index " + std::to_string(i));
  std::fprintf(stderr, "spool: verified: forward pass over %zu tokens gives finite logits\n", tokens.size());
}

void synth(const SynthCliOptions& o) {
  const SynthResult r = synth_model(o.synth);
  std::fprintf(stderr, "spool: wrote %s: %s %s, %d tensors, vocab %d (from %s), %.1f MB in %.2f s (%.0f MB/s)\n",
               r.path.c_str(), r.arch.c_str(), r.type.c_str(), r.n_tensors, r.n_vocab, r.vocab_from.c_str(),
               r.bytes / 1e6, r.seconds, r.bytes / 1e6 / std::max(r.seconds, 1e-9));
  if (o.verify) verify_model(r.path, o.synth.n_threads);
}

}  // namespace

void add_synth_command(CLI::App& app) {
  auto o = std::make_shared<SynthCliOptions>();
  CLI::App* cmd = app.add_subcommand("synth", "Write a random-weight GGUF with a real model's shapes");
  std::string presets, types;
  for (const auto& p : synth_preset_names()) presets += (presets.empty() ? "" : ", ") + p;
  cmd->add_option("--arch", o->synth.arch, "Architecture: llama, qwen2, qwen3 (default: the preset's)");
  cmd->add_option("--preset", o->synth.preset, "Model shape: " + presets)->capture_default_str();
  cmd->add_option("--type", o->synth.type,
                  "Weight type: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K, "
                  "or llama.cpp's Q4_K_M mix")
      ->capture_default_str();
  cmd->add_option("-o,--out", o->synth.out, "Output GGUF file")->required();
  cmd->add_option("--vocab-from", o->synth.vocab_from,
                  "GGUF whose tokenizer.* metadata is copied (default: ../shared/models/llama-2-tiny-random.gguf, "
                  "or GPT-2's BPE vocab padded to size for the Qwen/Llama-3 presets)");
  cmd->add_option("--seed", o->synth.seed, "Random seed")->capture_default_str();
  cmd->add_option("--layers", o->synth.n_layer, "Override the preset's layer count");
  cmd->add_option("-t,--threads", o->synth.n_threads, "Threads for generating and quantizing (default: all cores)");
  cmd->add_flag("--verify", o->verify, "Load the written file and check a forward pass gives finite logits");
  cmd->callback([o] { synth(*o); });
}

}  // namespace spool::cli
