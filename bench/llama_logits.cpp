// Logits of llama.cpp for a list of token ids, for checking a GGUF that spool
// wrote (e.g. the kimi-linear conversion) against a reference. Built and run
// by bench/llama_logits.sh against a llama.cpp build given by path; not part
// of spool. Writes n_ids x n_vocab float32 (little-endian) to the output file:
// all ids in one batch at positions 0.., every position's logits, F32 KV
// cache, flash attention off.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf ID,ID,... OUT.f32\n", argv[0]);
    return 2;
  }
  std::vector<llama_token> ids;
  for (const char* p = argv[2]; *p;) {
    char* end;
    ids.push_back((llama_token)std::strtol(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p) return 2;
  }
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) { std::fprintf(stderr, "llama.cpp could not load %s\n", argv[1]); return 1; }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = cp.n_ubatch = 256;
  cp.n_threads = cp.n_threads_batch = 2;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) { std::fprintf(stderr, "no llama.cpp context\n"); return 1; }
  llama_batch b = llama_batch_init((int32_t)ids.size(), 0, 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    b.token[i] = ids[i];
    b.pos[i] = (llama_pos)i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = 1;
  }
  b.n_tokens = (int32_t)ids.size();
  if (llama_decode(ctx, b) != 0) { std::fprintf(stderr, "llama_decode failed\n"); return 1; }
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  FILE* out = std::fopen(argv[3], "wb");
  if (!out) return 1;
  for (size_t i = 0; i < ids.size(); ++i) std::fwrite(llama_get_logits_ith(ctx, (int32_t)i), sizeof(float), n_vocab, out);
  std::fclose(out);
  llama_batch_free(b);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
