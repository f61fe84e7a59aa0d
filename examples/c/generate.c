/* Generates text with spool's C API, printing each token as it comes.
 *   cc generate.c $(pkg-config --cflags --libs spool) -o generate
 *   ./generate MODEL.gguf "Once upon a time" [max_tokens]
 * Greedy (temperature 0), so the output is the same on every run. Exit code 0
 * on success; on failure the status name and spool_last_error() go to stderr. */
#include <stdio.h>
#include <stdlib.h>

#include <spool.h>

static int on_token(int32_t token, const char* text, size_t text_len, void* user_data) {
  int* n_tokens = (int*)user_data;
  if (token >= 0) ++*n_tokens;
  fwrite(text, 1, text_len, stdout);
  fflush(stdout);
  return 0; /* nonzero would stop generation */
}

static int check(spool_status st, const char* what) {
  if (st == SPOOL_OK) return 0;
  fprintf(stderr, "%s: %s: %s\n", what, spool_status_name(st), spool_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL PROMPT [MAX_TOKENS]\n", argv[0]);
    return 2;
  }
  if (spool_api_version() != SPOOL_API_VERSION) {
    fprintf(stderr, "libspool has API version %d, this program was built for %d\n", spool_api_version(),
            SPOOL_API_VERSION);
    return 1;
  }
  spool_model_options options;
  spool_model_options_init(&options);
  options.n_threads = 2;
  spool_model* model = NULL;
  if (check(spool_model_open(argv[1], &options, &model), "open")) return 1;

  spool_generate_params params;
  spool_generate_params_init(&params);
  params.temperature = 0; /* greedy */
  params.max_tokens = argc > 3 ? atoi(argv[3]) : 64;
  int n_tokens = 0;
  spool_generate_result result;
  fputs(argv[2], stdout);
  int rc = check(spool_generate(model, argv[2], &params, on_token, &n_tokens, NULL, &result), "generate");
  if (rc == 0)
    fprintf(stderr, "\n[%d prompt tokens, %d generated (callback saw %d), finish reason %d]\n", result.prompt_tokens,
            result.completion_tokens, n_tokens, (int)result.finish_reason);
  rc |= check(spool_model_free(model), "free");
  return rc;
}
