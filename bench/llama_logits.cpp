// Reference check against the peer: loads a GGUF with llama.cpp (libllama),
// evaluates comma-separated token ids as one sequence, writes every
// position's logits as raw float32 [n_ids][n_vocab] to OUT, and prints the
// greedy continuation of the first P ids (token by token through llama.cpp's
// own recurrent/KV cache). LLAMA_KV_F32=1: an F32 KV cache instead of F16,
// and attention without flash attention (whose CPU kernel works in F16).
// Built and run by bench/gguf_llama_check.sh against
// a llama.cpp checkout given as an argument; not part of spool.
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

static std::vector<llama_token> parse(const char* s) {
  std::vector<llama_token> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back((llama_token)std::atoi(item.c_str()));
  return out;
}

static void decode(llama_context* ctx, const std::vector<llama_token>& ids, int pos0, bool all_logits) {
  llama_batch b = llama_batch_init((int32_t)ids.size(), 0, 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    b.token[i] = ids[i];
    b.pos[i] = pos0 + (llama_pos)i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = all_logits || i + 1 == ids.size();
  }
  b.n_tokens = (int32_t)ids.size();
  if (llama_decode(ctx, b) != 0) { std::fprintf(stderr, "llama_decode failed\n"); std::exit(1); }
  llama_batch_free(b);
}

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s MODEL.gguf IDS OUT.f32 PROMPT_IDS N_GREEDY\n", argv[0]);
    return 2;
  }
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (!model) return 1;
  const int V = llama_vocab_n_tokens(llama_model_get_vocab(model));
  auto fresh = [&] {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = cp.n_ubatch = 256;
    cp.n_threads = cp.n_threads_batch = 2;
    if (std::getenv("LLAMA_KV_F32")) {  // F32 KV cache (default F16) and no flash attention (its CPU kernel rounds to F16)
      cp.type_k = cp.type_v = GGML_TYPE_F32;
      cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    }
    return llama_init_from_model(model, cp);
  };
  const std::vector<llama_token> ids = parse(argv[2]);
  llama_context* ctx = fresh();
  decode(ctx, ids, 0, true);
  FILE* f = std::fopen(argv[3], "wb");
  for (size_t i = 0; i < ids.size(); ++i) std::fwrite(llama_get_logits_ith(ctx, (int32_t)i), sizeof(float), V, f);
  std::fclose(f);
  llama_free(ctx);
  // Greedy from the prompt, one token per decode call.
  ctx = fresh();
  std::vector<llama_token> prompt = parse(argv[4]);
  decode(ctx, prompt, 0, false);
  int pos = (int)prompt.size();
  const int n = std::atoi(argv[5]);
  for (int k = 0; k < n; ++k) {
    const float* l = llama_get_logits_ith(ctx, -1);
    int best = 0;
    for (int j = 1; j < V; ++j) if (l[j] > l[best]) best = j;
    std::printf("%s%d", k ? "," : "", best);
    decode(ctx, {best}, pos++, false);
  }
  std::printf("\n");
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
