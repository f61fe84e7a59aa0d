// `spool synth`: write a random-weight GGUF with a real model's shapes and a
// real tokenizer, in any supported quant type, for benchmarks and tests.
// DeepSeek-V3 / Kimi-K2 (deepseek2) presets print their plan first and can be
// fitted to a file size (--target-size) or only planned (--dry-run); so can
// the Kimi K3 (kimi-k3) presets, whose experts default to MXFP4.
// With --verify the file is loaded back and one forward pass must give
// finite logits; for a mixture of experts, tokens decoded one at a time must
// also spread over the experts (a router that always picks the same ones
// would make a useless benchmark).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <thread>

#include "weights/counting_store.h"
#include "cli_common.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/arch_registry.h"
#include "runtime/session.h"
#include "synth/synth.h"
#include "synth/synth_deepseek2.h"
#include "synth/synth_kimi_k3.h"
#include "text/tokenizer.h"
#include "weights/weight_store.h"

namespace spool::cli {
namespace {

struct SynthCliOptions {
  SynthOptions synth;
  std::string target_size;
  bool verify = false;
  bool type_given = false;
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


// Decodes 32 tokens one at a time and prints, per MoE layer, how many experts
// they used and the most popular one's count; fails when a layer uses fewer
// than min(n_expert, 2 * top-k) experts.
void verify_routing(const std::string& path, int n_threads) {
  ModelParts parts;
  parts.file = open_model_file(path);
  parts.tokenizer = load_tokenizer(parts.file);
  auto owned = std::make_unique<CountingStore>(parts.file.manifest);
  CountingStore* store = owned.get();
  parts.weights = std::move(owned);
  parts.pool = std::make_shared<ThreadPool>(n_threads > 0 ? n_threads : (int)std::max(1u, std::thread::hardware_concurrency()));
  auto model = find_arch(parts.file.architecture())(std::move(parts));
  const ModelConfig& c = model->config();
  const int n_tokens = 32;
  std::map<int, std::vector<int>> hist;  // MoE layer -> picks per expert
  for (int l = 0; l < c.n_layer; ++l)
    if (c.is_moe_layer(l)) hist[l].assign(c.n_expert, 0);
  Session session(*model, n_tokens + 1);
  for (int i = 0; i < n_tokens; ++i) {
    store->acquires.clear();
    const std::vector<float>& logits = session.feed({(int32_t)((i * 7919 + 1) % c.n_vocab)});
    for (float x : logits)
      if (!std::isfinite(x)) throw Error("synthetic model '" + path + "' gives a non-finite logit at token " + std::to_string(i));
    for (auto& [l, h] : hist)
      for (int e = 0; e < c.n_expert; ++e)
        if (store->acquires.count(expert_slice_name("blk." + std::to_string(l) + ".ffn_up_exps.weight", e))) ++h[e];
  }
  const int need = std::min(c.n_expert, 2 * c.n_expert_used);
  for (const auto& [l, h] : hist) {
    const int used = (int)std::count_if(h.begin(), h.end(), [](int n) { return n > 0; });
    const int most = *std::max_element(h.begin(), h.end());
    std::fprintf(stderr, "spool: verified: layer %d: %d tokens used %d of %d experts (top-%d); the most popular took %d\n",
                 l, n_tokens, used, c.n_expert, c.n_expert_used, most);
    if (used < need)
      throw Error("synthetic model '" + path + "': layer " + std::to_string(l) + " routes " + std::to_string(n_tokens) +
                  " tokens to only " + std::to_string(used) + " experts (degenerate router)");
  }
}

void synth(SynthCliOptions o) {
  if (!o.target_size.empty()) o.synth.target_size = parse_byte_size(o.target_size);
  const bool kimi_k3 = o.synth.arch == "kimi-k3" || find_kimi_k3_preset(o.synth.preset);
  if (kimi_k3 && !o.type_given) o.synth.type = "MXFP4";  // K3's own expert format
  if (o.synth.dry_run || o.synth.arch == "deepseek2" || find_deepseek2_preset(o.synth.preset) ||
      kimi_k3) {
    SynthOptions plan_only = o.synth;
    plan_only.dry_run = true;
    const SynthResult p = synth_model(plan_only);
    std::fprintf(stderr, "%s", p.plan.c_str());
    if (o.synth.dry_run) {
      std::fprintf(stderr, "spool: dry run: nothing written (the file would be %.1f MB)\n", p.bytes / 1e6);
      return;
    }
  }
  if (o.synth.out.empty()) throw Error("synth needs an output file (--out FILE.gguf)");
  const SynthResult r = synth_model(o.synth);
  std::fprintf(stderr, "spool: wrote %s: %s %s, %d tensors, vocab %d (from %s), %.1f MB in %.2f s (%.0f MB/s)\n",
               r.path.c_str(), r.arch.c_str(), r.type.c_str(), r.n_tensors, r.n_vocab, r.vocab_from.c_str(),
               r.bytes / 1e6, r.seconds, r.bytes / 1e6 / std::max(r.seconds, 1e-9));
  if (o.verify) verify_model(r.path, o.synth.n_threads);
  if (o.verify && gguf::open(r.path).has(r.arch + ".expert_count")) verify_routing(r.path, o.synth.n_threads);
}

}  // namespace

void add_synth_command(CLI::App& app) {
  auto o = std::make_shared<SynthCliOptions>();
  CLI::App* cmd = app.add_subcommand("synth", "Write a random-weight GGUF with a real model's shapes");
  std::string presets, types;
  for (const auto& p : synth_preset_names()) presets += (presets.empty() ? "" : ", ") + p;
  for (const auto& p : deepseek2_preset_names()) presets += ", " + p;
  for (const auto& p : kimi_k3_preset_names()) presets += ", " + p;
  cmd->add_option("--arch", o->synth.arch, "Architecture: llama, qwen2, qwen3, deepseek2, kimi-k3 (default: the preset's)");
  cmd->add_option("--preset", o->synth.preset, "Model shape: " + presets)->capture_default_str();
  CLI::Option* type_opt = cmd->add_option("--type", o->synth.type,
                  "Weight type or mix. Uniform: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K MXFP4. "
                  "llama.cpp's file types with its per-tensor rules (as llama-quantize with an imatrix assigns "
                  "them; general.file_type set to match): Q4_K_M IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ3_XXS "
                  "IQ3_XS IQ3_S IQ3_M IQ4_NL IQ4_XS TQ1_0 TQ2_0 Q1_0 Q2_0 (e.g. IQ2_XXS: attn_v Q4_K on GQA/MoE "
                  "models, the first eighth of ffn_down Q2_K, output Q5_K, token_embd Q2_K). Dynamic 1-2-bit MoE "
                  "mixes in the style of the published 'UD' files: UD-IQ1_S (routed experts gate/up IQ1_S, down "
                  "IQ2_XXS; attention, shared experts and dense FFN Q4_K with their ffn_down Q6_K; token_embd Q4_K, "
                  "output Q6_K), UD-IQ1_M (experts IQ1_M / IQ2_XXS), UD-IQ2_XXS (experts IQ2_XXS / Q2_K). "
                  "deepseek2 and kimi-k3 with a uniform type or Q4_K_M: the routed experts get that type itself; "
                  "with Q4_K the other matrices follow the Q4_K_M rules (attn_k_b Q5_0 as 128-wide rows cannot be "
                  "Q4_K); kimi-k3 defaults to MXFP4 (K3's own format; other matrices Q8_0 as llama.cpp's MXFP4_MOE). "
                  "Router, exp_probs_b, conv weights and norms stay F32")
      ->capture_default_str();
  cmd->add_option("--tensor-type", o->synth.tensor_types,
                  "PATTERN=TYPE, repeatable, as llama-quantize's --tensor-type: a tensor whose name contains a match "
                  "of the regular expression PATTERN (ECMAScript, lower-cased; the first matching option wins) gets "
                  "TYPE instead of what --type's rules give, e.g. --tensor-type ffn_down_exps=IQ2_XXS "
                  "--tensor-type 'blk\\.[0-2]\\.'=Q8_0. Rows TYPE cannot hold fall back as llama.cpp does");
  cmd->add_flag("--pure", o->synth.pure,
                "As llama-quantize --pure: no per-tensor rules, every matrix the file type's default type "
                "(IQ2_S's is IQ2_XS, IQ2_M's IQ2_S, IQ3_XS's and IQ3_M's IQ3_S); --tensor-type still applies");
  cmd->add_option("-o,--out", o->synth.out, "Output GGUF file (required unless --dry-run)");
  cmd->add_option("--vocab-from", o->synth.vocab_from,
                  "GGUF whose tokenizer.* metadata is copied (default: ../shared/models/llama-2-tiny-random.gguf, "
                  "or GPT-2's BPE vocab padded to size for the Qwen/Llama-3 presets; for deepseek2 and kimi-k3 the 512-token "
                  "byte-level BPE of ../shared/fixtures/gguf/qwen2-tiny.f32.gguf, so token_embd/output stay small)");
  cmd->add_option("--seed", o->synth.seed, "Random seed")->capture_default_str();
  cmd->add_option("--layers,--n-layer", o->synth.n_layer, "Override the preset's layer count");
  cmd->add_option("--n-expert", o->synth.n_expert, "deepseek2, kimi-k3: routed experts per MoE layer (overrides the preset)");
  cmd->add_option("--target-size", o->target_size,
                  "deepseek2, kimi-k3: fit the counts to a file of at most this size (24G, 512M; powers of 1024). Layers stay "
                  "at --n-layer (default 8) and the routed-expert count is the largest (a multiple of the expert "
                  "groups, up to the real count) that fits; if the real count fits, layers grow instead. With "
                  "--n-expert, the layer count is fitted. Required by the *-scaled presets");
  cmd->add_option("--router-skew", o->synth.router_skew,
                  "deepseek2, kimi-k3: skewed expert popularity through the router bias, exp_probs_b = -S * ln(1 + rank) "
                  "with a random popularity rank per layer; 0 = uniform (default 0.05)");
  cmd->add_flag("--dry-run", o->synth.dry_run, "deepseek2, kimi-k3: print the plan (shapes, sizes, bytes/token) and write nothing");
  cmd->add_option("-t,--threads", o->synth.n_threads, "Threads for generating and quantizing (default: all cores)");
  cmd->add_flag("--verify", o->verify,
                "Load the written file and check a forward pass gives finite logits (MoE: and that 32 decoded tokens "
                "spread over the experts, printing how)");
  cmd->callback([o, type_opt] {
    o->type_given = type_opt->count() > 0;
    synth(*o);
  });
}

}  // namespace spool::cli
