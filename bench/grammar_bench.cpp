// Token-mask cost in isolation: for a JSON Schema (or GBNF file) over a model's
// vocabulary, walks N random valid outputs token by token and times each
// mask() call (first visit of a state: a walk of the sorted vocabulary; later:
// the per-state cache) and each accept(). Compare the per-token figure with a
// decode step's time (bench/structured_compare.sh) to see the share of decode.
// usage: spool_grammar_bench MODEL.gguf (SCHEMA.json | GRAMMAR.gbnf) [N_OUTPUTS=20] [MAX_TOKENS=200]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "format/gguf.h"
#include "grammar/grammar_cache.h"
#include "text/tokenizer.h"

using namespace spool;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.gguf (SCHEMA.json | GRAMMAR.gbnf) [N_OUTPUTS] [MAX_TOKENS]\n", argv[0]);
    return 2;
  }
  const int n_outputs = argc > 3 ? std::atoi(argv[3]) : 20, max_tokens = argc > 4 ? std::atoi(argv[4]) : 200;
  try {
    auto tok = load_tokenizer(gguf::open(argv[1]));
    std::stringstream text;
    text << std::ifstream(argv[2]).rdbuf();
    grammar::GrammarCache cache(*tok);
    const std::string path = argv[2];
    const auto t_compile = Clock::now();
    auto masker = path.ends_with(".json") ? cache.json_schema(nlohmann::ordered_json::parse(text.str()))
                                          : cache.gbnf(text.str());
    const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_compile).count();
    std::mt19937 rng(1);
    double cold_ms = 0, warm_ms = 0, accept_ms = 0;
    int n_cold = 0, n_warm = 0, n_tokens = 0;
    for (int o = 0; o < n_outputs; ++o) {
      grammar::GrammarState st(masker);
      for (int t = 0; t < max_tokens && !st.complete(); ++t) {
        const uint64_t misses = masker->mask_misses();
        const auto t0 = Clock::now();
        auto mask = st.mask();
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (masker->mask_misses() > misses) { cold_ms += ms; ++n_cold; } else { warm_ms += ms; ++n_warm; }
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < tok->n_vocab(); ++id)
          if (grammar::mask_has(*mask, id) && !tok->is_eog(id)) allowed.push_back(id);
        if (allowed.empty()) break;
        const auto t1 = Clock::now();
        st.accept(allowed[rng() % allowed.size()]);
        accept_ms += std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
        ++n_tokens;
      }
    }
    std::printf("{\"vocab\": %d, \"compile_ms\": %.2f, \"tokens\": %d, \"cold_masks\": %d, \"cold_ms_each\": %.3f, "
                "\"warm_masks\": %d, \"warm_ms_each\": %.4f, \"accept_ms_each\": %.4f, \"mask_ms_per_token\": %.3f, "
                "\"states\": %zu}\n",
                tok->n_vocab(), compile_ms, n_tokens, n_cold, n_cold ? cold_ms / n_cold : 0.0, n_warm,
                n_warm ? warm_ms / n_warm : 0.0, n_tokens ? accept_ms / n_tokens : 0.0,
                n_tokens ? (cold_ms + warm_ms) / n_tokens : 0.0, masker->grammar().n_states());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
