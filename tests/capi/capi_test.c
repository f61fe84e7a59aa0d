/* The C API from C, as an embedding app uses it (include/spool.h):
 *   capi_test SHARED_DIR
 * - bad handles (NULL, freed, foreign pointers), bad paths and bad options
 *   give error codes and messages, never an abort;
 * - a tokenizer alone (vocab-only GGUF, tokenizer.json): ids, round trip, chat template;
 * - spool_generate: greedy text, a per-token callback, the cancel flag; spool_logits;
 * - the engine: 4 concurrent requests (3 polled, 1 with a callback), one of
 *   them cancelled; the others give spool_generate's greedy text;
 * - the HTTP server in process answers /health and /v1/models.
 * Prints one line per failed check and exits 1 if any failed. */
#define _DEFAULT_SOURCE /* usleep */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spool.h>

static int n_failed = 0, n_checks = 0;

#define CHECK(cond)                                                         \
  do {                                                                      \
    ++n_checks;                                                             \
    if (!(cond)) {                                                          \
      ++n_failed;                                                           \
      fprintf(stderr, "FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond);     \
    }                                                                       \
  } while (0)

/* The call returns `want`, and on failure a message (containing `needle` when not NULL). */
#define EXPECT_STATUS(call, want, needle)                                                                    \
  do {                                                                                                       \
    spool_status st_ = (call);                                                                               \
    ++n_checks;                                                                                              \
    if (st_ != (want)) {                                                                                     \
      ++n_failed;                                                                                            \
      fprintf(stderr, "FAILED %s:%d: %s gave %s (%s), expected %s\n", __FILE__, __LINE__, #call,             \
              spool_status_name(st_), spool_last_error(), spool_status_name(want));                          \
    } else if ((want) != SPOOL_OK &&                                                                         \
               (spool_last_error()[0] == 0 || ((needle) && !strstr(spool_last_error(), (needle) ? (needle) : "")))) { \
      ++n_failed;                                                                                            \
      fprintf(stderr, "FAILED %s:%d: %s: message '%s' lacks '%s'\n", __FILE__, __LINE__, #call,            \
              spool_last_error(), (needle) ? (needle) : "(any text)");                                       \
    }                                                                                                        \
  } while (0)

static char shared_dir[1024];
static const char* path_of(const char* rel) {
  static char buf[4][2048];
  static int i = 0;
  i = (i + 1) % 4;
  snprintf(buf[i], sizeof buf[i], "%s/%s", shared_dir, rel);
  return buf[i];
}

static void bad_inputs(void) {
  spool_model* model = NULL;
  spool_tokenizer* tok = NULL;
  int not_a_handle = 42;
  EXPECT_STATUS(spool_model_open(NULL, NULL, &model), SPOOL_ERR_INVALID_ARGUMENT, "path");
  EXPECT_STATUS(spool_model_open(path_of("models/stories260K.gguf"), NULL, NULL), SPOOL_ERR_INVALID_ARGUMENT, "out");
  EXPECT_STATUS(spool_model_open("/nonexistent/model.gguf", NULL, &model), SPOOL_ERR_LOAD, "/nonexistent/model.gguf");
  CHECK(model == NULL);
  /* A vocab-only file opens as a tokenizer, not as a model. */
  EXPECT_STATUS(spool_model_open(path_of("models/llama.cpp-vocab/ggml-vocab-baichuan.gguf"), NULL, &model),
                SPOOL_ERR_LOAD, "architecture");
  EXPECT_STATUS(spool_tokenizer_open("/nonexistent/tokenizer.json", &tok), SPOOL_ERR_LOAD, "/nonexistent");

  spool_model_options o;
  spool_model_options_init(&o);
  o.struct_size = 3;
  EXPECT_STATUS(spool_model_open(path_of("models/stories260K.gguf"), &o, &model), SPOOL_ERR_INVALID_ARGUMENT,
                "struct_size");
  spool_model_options_init(&o);
  o.mem_budget = "lots";
  EXPECT_STATUS(spool_model_open(path_of("models/stories260K.gguf"), &o, &model), SPOOL_ERR_INVALID_ARGUMENT, "lots");
  spool_model_options_init(&o);
  o.kv_type = "q3";
  EXPECT_STATUS(spool_model_open(path_of("models/stories260K.gguf"), &o, &model), SPOOL_ERR_INVALID_ARGUMENT, "kv_type");
  spool_model_options_init(&o);
  o.convert = "bogus";
  EXPECT_STATUS(spool_model_open(path_of("models/stories260K.gguf"), &o, &model), SPOOL_ERR_INVALID_ARGUMENT, "bogus");
  spool_model_options_init(&o);
  o.n_threads = -2;
  EXPECT_STATUS(spool_model_open(path_of("models/stories260K.gguf"), &o, &model), SPOOL_ERR_INVALID_ARGUMENT, "n_threads");

  /* Handles: NULL, a pointer that is no handle, a handle of the wrong kind. */
  EXPECT_STATUS(spool_model_free(NULL), SPOOL_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_STATUS(spool_model_free((spool_model*)&not_a_handle), SPOOL_ERR_INVALID_ARGUMENT, "not a live handle");
  EXPECT_STATUS(spool_tokenizer_free((spool_tokenizer*)&not_a_handle), SPOOL_ERR_INVALID_ARGUMENT, "not a live handle");
  EXPECT_STATUS(spool_engine_free((spool_engine*)&not_a_handle), SPOOL_ERR_INVALID_ARGUMENT, "not a live handle");
  EXPECT_STATUS(spool_server_stop((spool_server*)&not_a_handle), SPOOL_ERR_INVALID_ARGUMENT, "not a live handle");
  size_t n = 0;
  EXPECT_STATUS(spool_tokenize(NULL, "hi", 2, 0, 0, NULL, 0, &n), SPOOL_ERR_INVALID_ARGUMENT, "tokenizer");
  spool_poll_result pr;
  EXPECT_STATUS(spool_engine_poll((spool_engine*)&not_a_handle, 1, NULL, 0, 0, &pr), SPOOL_ERR_INVALID_ARGUMENT,
                "engine");
  EXPECT_STATUS(spool_generate((spool_model*)&not_a_handle, "x", NULL, NULL, NULL, NULL, NULL),
                SPOOL_ERR_INVALID_ARGUMENT, "model");
  CHECK(strcmp(spool_status_name(SPOOL_ERR_BUSY), "SPOOL_ERR_BUSY") == 0);
  CHECK(spool_api_version() == SPOOL_API_VERSION);
}

static void tokenizer_alone(void) {
  spool_tokenizer* tok = NULL;
  EXPECT_STATUS(spool_tokenizer_open(path_of("models/llama.cpp-vocab/ggml-vocab-llama-spm.gguf"), &tok), SPOOL_OK, NULL);
  if (!tok) return;
  spool_tokenizer_info info;
  EXPECT_STATUS(spool_tokenizer_get_info(tok, &info), SPOOL_OK, NULL);
  CHECK(info.n_vocab == 32000 && info.bos == 1 && info.add_bos == 1);
  /* The .out file's vector for "Hello world" (parse_special off, no BOS). */
  int32_t ids[16];
  size_t n = 0;
  EXPECT_STATUS(spool_tokenize(tok, "Hello world", 11, 0, 0, ids, 16, &n), SPOOL_OK, NULL);
  CHECK(n == 2 && ids[0] == 15043 && ids[1] == 3186);
  EXPECT_STATUS(spool_tokenize(tok, "Hello world", 11, 1, 0, ids, 16, &n), SPOOL_OK, NULL);
  CHECK(n == 3 && ids[0] == 1);
  EXPECT_STATUS(spool_tokenize(tok, "Hello world", 11, 1, 0, ids, 2, &n), SPOOL_ERR_BUFFER_TOO_SMALL, "3 tokens");
  CHECK(n == 3);
  char text[64];
  EXPECT_STATUS(spool_detokenize(tok, ids + 1, 2, 0, text, sizeof text, &n), SPOOL_OK, NULL);
  CHECK(strcmp(text, " Hello world") == 0 && n == 12);
  EXPECT_STATUS(spool_detokenize(tok, ids + 1, 2, 0, text, 5, &n), SPOOL_ERR_BUFFER_TOO_SMALL, NULL);
  CHECK(n == 12);
  int32_t bad = 99999999;
  EXPECT_STATUS(spool_detokenize(tok, &bad, 1, 0, text, sizeof text, &n), SPOOL_ERR_INVALID_ARGUMENT, "out of range");
  spool_chat_message msg = {"user", "hi"};
  EXPECT_STATUS(spool_apply_chat_template(tok, &msg, 1, 1, text, sizeof text, &n), SPOOL_ERR_UNSUPPORTED, "chat template");
  EXPECT_STATUS(spool_tokenizer_free(tok), SPOOL_OK, NULL);
  EXPECT_STATUS(spool_tokenizer_free(tok), SPOOL_ERR_INVALID_ARGUMENT, "not a live handle"); /* double free */

  /* A tokenizer.json with a chat template (HF's rendering of this conversation). */
  EXPECT_STATUS(spool_tokenizer_open(path_of("fixtures/tok-qwen2/tokenizer.json"), &tok), SPOOL_OK, NULL);
  if (!tok) return;
  spool_chat_message chat = {"user", "What is the capital of France?"};
  char rendered[512];
  EXPECT_STATUS(spool_apply_chat_template(tok, &chat, 1, 1, rendered, sizeof rendered, &n), SPOOL_OK, NULL);
  CHECK(strcmp(rendered, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                         "What is the capital of France?<|im_end|>\n<|im_start|>assistant\n") == 0);
  spool_chat_message broken = {NULL, "x"};
  EXPECT_STATUS(spool_apply_chat_template(tok, &broken, 1, 1, rendered, sizeof rendered, &n),
                SPOOL_ERR_INVALID_ARGUMENT, "NULL role");
  EXPECT_STATUS(spool_tokenizer_free(tok), SPOOL_OK, NULL);
}

struct collected {
  char text[8192];
  size_t len;
  int n_tokens, stop_after;
  volatile int* cancel;
};

static int collect(int32_t token, const char* text, size_t len, void* user) {
  struct collected* c = (struct collected*)user;
  if (token >= 0) ++c->n_tokens;
  if (c->len + len < sizeof c->text) {
    memcpy(c->text + c->len, text, len);
    c->len += len;
    c->text[c->len] = 0;
  }
  if (c->cancel && c->n_tokens == c->stop_after) __atomic_store_n(c->cancel, 1, __ATOMIC_RELAXED);
  return 0;
}

static const char* kPrompt = "Once upon a time";

static void generation(spool_model* model, struct collected* greedy) {
  spool_generate_params p;
  spool_generate_params_init(&p);
  p.temperature = 0;
  p.max_tokens = 40;
  p.ignore_eos = 1;
  spool_generate_result r;
  memset(greedy, 0, sizeof *greedy);
  EXPECT_STATUS(spool_generate(model, kPrompt, &p, collect, greedy, NULL, &r), SPOOL_OK, NULL);
  CHECK(r.completion_tokens == 40 && greedy->n_tokens == 40 && r.finish_reason == SPOOL_FINISH_LENGTH);
  CHECK(strstr(greedy->text, "Lily") != NULL); /* stories260K's greedy story */
  printf("greedy: %s\n", greedy->text);

  /* The cancel flag, set from the callback after 3 tokens. */
  volatile int cancel = 0;
  struct collected c;
  memset(&c, 0, sizeof c);
  c.cancel = &cancel;
  c.stop_after = 3;
  EXPECT_STATUS(spool_generate(model, kPrompt, &p, collect, &c, &cancel, &r), SPOOL_OK, NULL);
  CHECK(r.finish_reason == SPOOL_FINISH_CANCELLED && r.completion_tokens == 3);

  /* Bad parameters. */
  p.temperature = -1;
  EXPECT_STATUS(spool_generate(model, kPrompt, &p, NULL, NULL, NULL, &r), SPOOL_ERR_INVALID_ARGUMENT, "temperature");
  p.temperature = 0;
  p.struct_size = 1;
  EXPECT_STATUS(spool_generate(model, kPrompt, &p, NULL, NULL, NULL, &r), SPOOL_ERR_INVALID_ARGUMENT, "struct_size");
  EXPECT_STATUS(spool_generate(model, "", NULL, NULL, NULL, NULL, &r), SPOOL_OK, NULL); /* BOS alone is a prompt */

  /* Logits: the last row of all positions is the last-position call's row. */
  spool_model_info info;
  EXPECT_STATUS(spool_model_get_info(model, &info), SPOOL_OK, NULL);
  CHECK(info.n_vocab == 512 && strcmp(info.arch, "llama") == 0);
  const int32_t ids[3] = {1, 403, 407};
  size_t n = 0;
  float* all = malloc(sizeof(float) * 3 * 512);
  float last[512];
  EXPECT_STATUS(spool_logits(model, ids, 3, 1, all, 3 * 512, &n), SPOOL_OK, NULL);
  CHECK(n == 3 * 512);
  EXPECT_STATUS(spool_logits(model, ids, 3, 0, last, 512, &n), SPOOL_OK, NULL);
  float max_diff = 0, max_ref = 0;
  for (int i = 0; i < 512; ++i) {
    const float d = last[i] - all[2 * 512 + i], r = all[2 * 512 + i];
    if ((d < 0 ? -d : d) > max_diff) max_diff = d < 0 ? -d : d;
    if ((r < 0 ? -r : r) > max_ref) max_ref = r < 0 ? -r : r;
  }
  CHECK(n == 512 && max_ref > 0 && max_diff <= 1e-4f * max_ref);
  EXPECT_STATUS(spool_logits(model, ids, 3, 1, all, 100, &n), SPOOL_ERR_BUFFER_TOO_SMALL, "1536");
  const int32_t bad_ids[1] = {512};
  EXPECT_STATUS(spool_logits(model, bad_ids, 1, 0, last, 512, &n), SPOOL_ERR_INVALID_ARGUMENT, "out of range");
  free(all);
}

static void on_event(const spool_event* e, void* user) {
  struct collected* c = (struct collected*)user;
  if (c->len + e->text_len < sizeof c->text) {
    memcpy(c->text + c->len, e->text, e->text_len);
    c->len += e->text_len;
    c->text[c->len] = 0;
  }
  c->n_tokens += (int)e->n_tokens;
  if (e->finished) __atomic_store_n(&c->stop_after, 1000 + (int)e->finish_reason, __ATOMIC_RELEASE);
}

static void engine(spool_model* model, const struct collected* greedy) {
  spool_engine_options eo;
  spool_engine_options_init(&eo);
  eo.max_running = 0;
  spool_engine* eng = NULL;
  EXPECT_STATUS(spool_engine_create(model, &eo, &eng), SPOOL_ERR_INVALID_ARGUMENT, "max_running");
  spool_engine_options_init(&eo);
  eo.max_running = 4;
  eo.n_ctx = 256;
  EXPECT_STATUS(spool_engine_create(model, &eo, &eng), SPOOL_OK, NULL);
  if (!eng) return;
  /* While the engine exists the model is only used through it. */
  EXPECT_STATUS(spool_generate(model, kPrompt, NULL, NULL, NULL, NULL, NULL), SPOOL_ERR_BUSY, "engine");
  EXPECT_STATUS(spool_model_free(model), SPOOL_ERR_BUSY, "engine");

  spool_generate_params p;
  spool_generate_params_init(&p);
  p.temperature = 0;
  p.ignore_eos = 1;
  p.max_tokens = 40;
  spool_request_id ids[3], cb_id = 0;
  struct collected cb;
  memset(&cb, 0, sizeof cb);
  for (int i = 0; i < 3; ++i) EXPECT_STATUS(spool_engine_submit(eng, kPrompt, &p, NULL, NULL, &ids[i]), SPOOL_OK, NULL);
  EXPECT_STATUS(spool_engine_submit(eng, kPrompt, &p, on_event, &cb, &cb_id), SPOOL_OK, NULL);
  EXPECT_STATUS(spool_engine_cancel(eng, ids[1]), SPOOL_OK, NULL);
  EXPECT_STATUS(spool_engine_cancel(eng, 999999), SPOOL_ERR_NOT_FOUND, "999999");
  p.top_p = 0;
  spool_request_id bad_id;
  EXPECT_STATUS(spool_engine_submit(eng, kPrompt, &p, NULL, NULL, &bad_id), SPOOL_ERR_INVALID_ARGUMENT, "top_p");

  /* Collect the polled ones, with a small buffer so texts come in pieces. */
  for (int i = 0; i < 3; ++i) {
    struct collected got;
    memset(&got, 0, sizeof got);
    spool_poll_result r;
    int n_polls = 0;
    for (;;) {
      char piece[8];
      spool_status st = spool_engine_poll(eng, ids[i], piece, sizeof piece, 2000, &r);
      if (st != SPOOL_OK || ++n_polls > 10000) {
        EXPECT_STATUS(st, SPOOL_OK, NULL);
        break;
      }
      memcpy(got.text + got.len, piece, r.n_bytes);
      got.len += r.n_bytes;
      if (r.finished) break;
    }
    if (i == 1) {
      CHECK(r.finish_reason == SPOOL_FINISH_CANCELLED);
      CHECK(r.completion_tokens < 40);
    } else {
      CHECK(r.finish_reason == SPOOL_FINISH_LENGTH && r.completion_tokens == 40);
      /* spool_generate's text minus the prompt it echoes: the engine returns only new text. */
      CHECK(strcmp(got.text, greedy->text) == 0);
      if (strcmp(got.text, greedy->text) != 0) fprintf(stderr, "request %d: '%s'\n", i, got.text);
    }
    spool_poll_result again;
    EXPECT_STATUS(spool_engine_poll(eng, ids[i], NULL, 0, 0, &again), SPOOL_ERR_NOT_FOUND, "not held");
  }
  for (int waited = 0; __atomic_load_n(&cb.stop_after, __ATOMIC_ACQUIRE) == 0 && waited < 30000; waited += 10)
    usleep(10000);
  CHECK(cb.stop_after == 1000 + SPOOL_FINISH_LENGTH);
  CHECK(cb.n_tokens == 40 && strcmp(cb.text, greedy->text) == 0);
  spool_poll_result none;
  EXPECT_STATUS(spool_engine_poll(eng, cb_id, NULL, 0, 0, &none), SPOOL_ERR_NOT_FOUND, NULL);

  spool_engine_stats st;
  EXPECT_STATUS(spool_engine_get_stats(eng, &st), SPOOL_OK, NULL);
  CHECK(st.requests_finished == 4 && st.running == 0 && st.waiting == 0);
  CHECK(st.generated_tokens >= 3 * 40 && st.prompt_tokens > 0);

  /* The HTTP server in this process. */
  spool_server_options so;
  spool_server_options_init(&so);
  so.host = "0.0.0.0"; /* not loopback: needs an API key */
  spool_server* server = NULL;
  EXPECT_STATUS(spool_server_start(eng, &so, &server), SPOOL_ERR_INVALID_ARGUMENT, "key");
  spool_server_options_init(&so);
  so.model_id = "tiny";
  EXPECT_STATUS(spool_server_start(eng, &so, &server), SPOOL_OK, NULL);
  if (server) {
    int32_t port = 0;
    EXPECT_STATUS(spool_server_port(server, &port), SPOOL_OK, NULL);
    CHECK(port > 0);
    EXPECT_STATUS(spool_engine_free(eng), SPOOL_ERR_BUSY, "server");
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char reply[4096] = {0};
    if (connect(fd, (struct sockaddr*)&addr, sizeof addr) == 0) {
      const char* req = "GET /v1/models HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
      if (write(fd, req, strlen(req)) > 0) {
        size_t got = 0;
        ssize_t k;
        while (got < sizeof reply - 1 && (k = read(fd, reply + got, sizeof reply - 1 - got)) > 0) got += (size_t)k;
      }
    }
    close(fd);
    CHECK(strstr(reply, "200 OK") != NULL && strstr(reply, "\"tiny\"") != NULL);
    EXPECT_STATUS(spool_server_stop(server), SPOOL_OK, NULL);
    EXPECT_STATUS(spool_server_stop(server), SPOOL_ERR_INVALID_ARGUMENT, "not a live handle");
  }
  EXPECT_STATUS(spool_engine_free(eng), SPOOL_OK, NULL);
  EXPECT_STATUS(spool_engine_cancel(eng, ids[0]), SPOOL_ERR_INVALID_ARGUMENT, "not a live handle");
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s SHARED_DIR\n", argv[0]);
    return 2;
  }
  snprintf(shared_dir, sizeof shared_dir, "%s", argv[1]);
  bad_inputs();
  tokenizer_alone();

  spool_model_options o;
  spool_model_options_init(&o);
  o.n_threads = 2;
  spool_model* model = NULL;
  EXPECT_STATUS(spool_model_open(path_of("models/stories260K.gguf"), &o, &model), SPOOL_OK, NULL);
  if (model) {
    const spool_tokenizer* tok = NULL;
    EXPECT_STATUS(spool_model_tokenizer(model, &tok), SPOOL_OK, NULL);
    EXPECT_STATUS(spool_tokenizer_free((spool_tokenizer*)tok), SPOOL_ERR_INVALID_ARGUMENT, "belongs to a model");
    struct collected greedy;
    generation(model, &greedy);
    engine(model, &greedy);
    spool_model_stats ms;
    EXPECT_STATUS(spool_model_get_stats(model, &ms), SPOOL_OK, NULL);
    printf("model stats: bytes_read %llu resident %llu\n", (unsigned long long)ms.bytes_read,
           (unsigned long long)ms.resident_bytes);
    CHECK(ms.bytes_read > 0 || ms.resident_bytes > 0);
    EXPECT_STATUS(spool_model_free(model), SPOOL_OK, NULL);
    EXPECT_STATUS(spool_model_free(model), SPOOL_ERR_INVALID_ARGUMENT, "not a live handle");
    EXPECT_STATUS(spool_model_tokenizer(model, &tok), SPOOL_ERR_INVALID_ARGUMENT, "model");
  }
  printf("capi_test: %d checks, %d failed\n", n_checks, n_failed);
  return n_failed ? 1 : 0;
}
