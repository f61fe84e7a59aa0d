/* spool.h - the C API of spool, an LLM inference engine (libspool.so / libspool.a).
 *
 * Everything here is plain C: opaque handles, status codes, caller-owned
 * buffers. No C++ type and no exception crosses this boundary: every function
 * that can fail returns a spool_status, and spool_last_error() gives the
 * message of the last failure on the calling thread. A NULL, freed or
 * foreign handle is reported as SPOOL_ERR_INVALID_ARGUMENT, never a crash.
 *
 * Objects:
 *   spool_tokenizer  a tokenizer alone (vocab-only GGUF, tokenizer.json) or a model's
 *   spool_model      a loaded model: tokenize, chat template, generate, logits
 *   spool_engine     many concurrent requests over one model (continuous batching)
 *   spool_server     the OpenAI-compatible HTTP server over an engine, in this process
 *
 * Threads: a tokenizer may be used from several threads at once. A model runs
 * one spool_generate / spool_logits at a time (calls on one model are
 * serialized); for concurrent requests create an engine on it. Engine
 * functions may be called from any thread.
 *
 * Option structs carry their own size (struct_size): fill them with the
 * matching *_init function first, then change what you need, so a program
 * built against this header keeps working with a later library.
 *
 * Build against it: `pkg-config --cflags --libs spool` (libspool.so) or
 * `pkg-config --cflags --libs spool-static` (libspool.a), or in CMake
 * `find_package(spool)` and link `spool::spool` (shared) or `spool::spool_static`.
 */
#ifndef SPOOL_H
#define SPOOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when a function or struct changes incompatibly; new functions and
 * struct fields appended at the end (with struct_size) do not bump it. */
#define SPOOL_API_VERSION 1

#if defined(__GNUC__)
#define SPOOL_API __attribute__((visibility("default")))
#else
#define SPOOL_API
#endif

/* ---- status and errors ---------------------------------------------------- */

typedef enum spool_status {
  SPOOL_OK = 0,
  SPOOL_ERR_INVALID_ARGUMENT = 1, /* NULL / freed / wrong handle, NULL pointer, bad option value */
  SPOOL_ERR_LOAD = 2,             /* a file or URL could not be opened or is not a valid model/tokenizer */
  SPOOL_ERR_UNSUPPORTED = 3,      /* valid input that spool cannot do (e.g. no chat template) */
  SPOOL_ERR_BUFFER_TOO_SMALL = 4, /* the output did not fit; the *_needed / n_* output says how much is needed */
  SPOOL_ERR_BUSY = 5,             /* the object is in use (a model with an engine, an engine with a server) */
  SPOOL_ERR_QUEUE_FULL = 6,       /* the engine's waiting queue is full; retry later */
  SPOOL_ERR_NOT_FOUND = 7,        /* unknown (or already collected) request id */
  SPOOL_ERR_RUNTIME = 8,          /* failed while running (I/O error while streaming weights, ...) */
  SPOOL_ERR_OUT_OF_MEMORY = 9,
  SPOOL_ERR_INTERNAL = 10         /* a bug in spool: please report the message */
} spool_status;

/* The message of the last call on this thread that did not return SPOOL_OK
 * ("" if none). Valid until the next spool_* call on this thread. */
SPOOL_API const char* spool_last_error(void);
/* "SPOOL_OK", "SPOOL_ERR_LOAD", ... ("unknown status" otherwise). Static storage. */
SPOOL_API const char* spool_status_name(spool_status status);
/* SPOOL_API_VERSION of the library (compare with the header's at run time). */
SPOOL_API int spool_api_version(void);

/* ---- tokenizer ------------------------------------------------------------ */

typedef struct spool_tokenizer spool_tokenizer;

/* Opens a tokenizer without loading a model: a GGUF file (llama.cpp's
 * vocab-only ggml-vocab-*.gguf included, whatever its architecture), a Hugging
 * Face checkpoint directory, a directory holding tokenizer.json, or a
 * tokenizer.json file. Free it with spool_tokenizer_free. */
SPOOL_API spool_status spool_tokenizer_open(const char* path, spool_tokenizer** out);
/* Frees a tokenizer from spool_tokenizer_open. A model's tokenizer
 * (spool_model_tokenizer) is owned by its model: freeing it is an error. */
SPOOL_API spool_status spool_tokenizer_free(spool_tokenizer* tok);

typedef struct spool_tokenizer_info {
  int32_t n_vocab;
  int32_t bos;     /* -1 if none */
  int32_t eos;     /* -1 if none */
  int32_t add_bos; /* 1 when encoding with add_special adds BOS */
  int32_t has_chat_template;
} spool_tokenizer_info;
SPOOL_API spool_status spool_tokenizer_get_info(const spool_tokenizer* tok, spool_tokenizer_info* out);

/* Text (UTF-8, text_len bytes) to token ids. add_special: add BOS/EOS as the
 * tokenizer's metadata says (like llama-tokenize without --no-bos).
 * parse_special: text such as "<|im_start|>" becomes the special token.
 * Writes at most `capacity` ids; *n_ids is always set to the full count, and
 * SPOOL_ERR_BUFFER_TOO_SMALL is returned when it exceeds capacity (ids may be
 * NULL with capacity 0 to ask for the count). */
SPOOL_API spool_status spool_tokenize(const spool_tokenizer* tok, const char* text, size_t text_len, int add_special,
                                      int parse_special, int32_t* ids, size_t capacity, size_t* n_ids);

/* Token ids to text. render_special: control tokens are written as their text
 * (else they give nothing). Writes at most capacity bytes and, when there is
 * room, a terminating NUL; *n_bytes is the text's full length without the NUL
 * (SPOOL_ERR_BUFFER_TOO_SMALL when n_bytes + 1 > capacity). Out-of-range ids
 * are SPOOL_ERR_INVALID_ARGUMENT. */
SPOOL_API spool_status spool_detokenize(const spool_tokenizer* tok, const int32_t* ids, size_t n_ids,
                                        int render_special, char* text, size_t capacity, size_t* n_bytes);

typedef struct spool_chat_message {
  const char* role;    /* "system", "user", "assistant", "tool" */
  const char* content; /* UTF-8, NUL-terminated */
} spool_chat_message;

/* Renders the tokenizer's chat template (GGUF tokenizer.chat_template or the
 * HF tokenizer_config.json one) over the messages, as transformers'
 * apply_chat_template does; add_generation_prompt appends the assistant's
 * turn header. Output like spool_detokenize's. No template:
 * SPOOL_ERR_UNSUPPORTED. */
SPOOL_API spool_status spool_apply_chat_template(const spool_tokenizer* tok, const spool_chat_message* messages,
                                                 size_t n_messages, int add_generation_prompt, char* text,
                                                 size_t capacity, size_t* n_bytes);

/* ---- model ---------------------------------------------------------------- */

typedef struct spool_model spool_model;

/* The load options `spool run` has. Strings may be NULL (the default). */
typedef struct spool_model_options {
  size_t struct_size;       /* sizeof(spool_model_options), set by spool_model_options_init */
  int32_t n_threads;        /* 0: all cores */
  int32_t n_ctx;            /* positions the memory budget reserves KV for (0: the model's, at most 4096) */
  const char* mem_budget;   /* "8G", "512M": weight cache + KV + scratch; weights stream when they do not fit.
                               NULL: resident if the model fits the memory available */
  const char* kv_type;      /* "f32" (default) or "f16" */
  const char* convert;      /* convert matmul weights at load into this type ("q8_0", "q4_0", "f16"); NULL: as stored */
  const char* cache_policy; /* streaming expert cache eviction: "lru" (default), "lfu", "lru2" */
  int32_t no_speculate;     /* streaming: do not prefetch the next layer's guessed experts */
} spool_model_options;
SPOOL_API void spool_model_options_init(spool_model_options* options);

/* Opens a model: a GGUF file (or the first of a split GGUF), an http(s) URL of
 * a GGUF, or a Hugging Face checkpoint directory. options may be NULL
 * (defaults). Free it with spool_model_free. */
SPOOL_API spool_status spool_model_open(const char* path, const spool_model_options* options, spool_model** out);
/* SPOOL_ERR_BUSY while an engine created on it still exists. */
SPOOL_API spool_status spool_model_free(spool_model* model);

typedef struct spool_model_info {
  int32_t n_vocab;
  int32_t n_ctx_train; /* context length the model was trained with */
  int32_t n_layer;
  int32_t n_embd;
  char arch[32];       /* "llama", "qwen3moe", ... (NUL-terminated, truncated if longer) */
  char weight_mode[16]; /* "resident" or "streaming" */
} spool_model_info;
SPOOL_API spool_status spool_model_get_info(const spool_model* model, spool_model_info* out);

/* The model's tokenizer, owned by the model (valid until spool_model_free). */
SPOOL_API spool_status spool_model_tokenizer(const spool_model* model, const spool_tokenizer** out);

/* Weight-store counters since load. */
typedef struct spool_model_stats {
  uint64_t bytes_read;     /* streaming: bytes read from storage (resident mode maps the file: 0) */
  uint64_t resident_bytes; /* weights held in memory (resident mode: the whole model) */
  uint64_t budget_bytes;   /* streaming: the weight cache budget (0 resident) */
  uint64_t cache_hits;     /* streaming: weight lookups served from memory */
  uint64_t cache_misses;   /* streaming: weight lookups read on demand */
  uint64_t io_wait_ns;     /* time compute waited for reads */
} spool_model_stats;
SPOOL_API spool_status spool_model_get_stats(const spool_model* model, spool_model_stats* out);

/* ---- generation ----------------------------------------------------------- */

typedef enum spool_finish_reason {
  SPOOL_FINISH_NONE = 0,      /* still running */
  SPOOL_FINISH_STOP = 1,      /* end-of-generation token or a stop string */
  SPOOL_FINISH_LENGTH = 2,    /* max_tokens or the context's end */
  SPOOL_FINISH_CANCELLED = 3, /* cancel flag, callback's stop, or spool_engine_cancel */
  SPOOL_FINISH_ERROR = 4
} spool_finish_reason;

typedef struct spool_generate_params {
  size_t struct_size;       /* sizeof(spool_generate_params), set by spool_generate_params_init */
  int32_t max_tokens;       /* tokens generated at most (default 256) */
  float temperature;        /* 0: greedy (default 0.8) */
  int32_t top_k;            /* <= 0 off (default 40) */
  float top_p;              /* >= 1 off (default 0.95) */
  float min_p;              /* <= 0 off (default 0.05) */
  float repeat_penalty;     /* 1 off (default) */
  uint64_t seed;            /* UINT64_MAX: random (default) */
  int32_t ignore_eos;       /* keep going past end-of-generation tokens */
  const char* const* stop;  /* stop strings (never part of the text); may be NULL */
  size_t n_stop;
  int32_t n_ctx;            /* spool_generate: positions at most (0: the model's, at most 4096) */
} spool_generate_params;
SPOOL_API void spool_generate_params_init(spool_generate_params* params);

/* Called once per generated token, on the calling thread: the token id and
 * the new text it completes (UTF-8 complete; may be empty while a multi-byte
 * character or a possible stop string is held back). Return nonzero to stop.
 * Text still held back when generation ends comes in one last call with
 * token -1. */
typedef int (*spool_token_callback)(int32_t token, const char* text, size_t text_len, void* user_data);

typedef struct spool_generate_result {
  int32_t prompt_tokens;
  int32_t completion_tokens;
  spool_finish_reason finish_reason;
} spool_generate_result;

/* Tokenizes prompt (BOS added when the model wants it, special tokens
 * parsed), then samples up to max_tokens tokens, calling on_token for each.
 * cancel (may be NULL): generation stops, with SPOOL_FINISH_CANCELLED, at the
 * next token after another thread stores a nonzero value there (use an
 * atomic store). result may be NULL. SPOOL_ERR_BUSY while an engine exists on
 * this model. */
SPOOL_API spool_status spool_generate(spool_model* model, const char* prompt, const spool_generate_params* params,
                                      spool_token_callback on_token, void* user_data, const volatile int* cancel,
                                      spool_generate_result* result);

/* Runs the token ids through the model from an empty context and writes
 * logits: all_positions ? n_ids rows : the last position's row, of n_vocab
 * floats each, row-major. *n_floats is set to the count needed
 * (SPOOL_ERR_BUFFER_TOO_SMALL when over capacity). */
SPOOL_API spool_status spool_logits(spool_model* model, const int32_t* ids, size_t n_ids, int all_positions,
                                    float* logits, size_t capacity, size_t* n_floats);

/* ---- engine: concurrent requests ------------------------------------------ */

typedef struct spool_engine spool_engine;
typedef uint64_t spool_request_id;

typedef struct spool_engine_options {
  size_t struct_size;       /* sizeof(spool_engine_options), set by spool_engine_options_init */
  int32_t n_ctx;            /* positions per request at most (0: the model's, at most 4096) */
  int32_t max_running;      /* requests decoded together at most (default 8) */
  int32_t max_batch_tokens; /* tokens per step, decodes + prefill chunks (default 512) */
  int32_t max_waiting;      /* queued requests at most; beyond it submit gives SPOOL_ERR_QUEUE_FULL (default 64) */
  int32_t prefix_cache;     /* reuse KV blocks of earlier requests with the same prefix (default 1) */
  /* Later fields (a struct_size that ends at prefix_cache, from programs built before them, is accepted): */
  const char* kv_disk_dir;  /* KV disk tier: full prefix blocks saved here and read back instead of recomputed,
                               across evictions and restarts (NULL, default: off). Not for hybrid models. */
  uint64_t kv_disk_bytes;   /* the tier's files kept within this (0 with a kv_disk_dir: 1 GiB) */
} spool_engine_options;
SPOOL_API void spool_engine_options_init(spool_engine_options* options);

/* Starts an engine (its scheduler thread) over model; options may be NULL.
 * While it exists, the model is only used through it. */
SPOOL_API spool_status spool_engine_create(spool_model* model, const spool_engine_options* options,
                                           spool_engine** out);
/* Cancels what is left and stops the engine. SPOOL_ERR_BUSY while a server
 * started on it runs. */
SPOOL_API spool_status spool_engine_free(spool_engine* engine);

/* A request's progress, passed to the callback (valid during the call only). */
typedef struct spool_event {
  spool_request_id id;
  const int32_t* tokens;  /* tokens sampled in this step (usually one) */
  size_t n_tokens;
  const char* text;       /* new text, UTF-8 complete, NUL-terminated */
  size_t text_len;
  int32_t finished;       /* 1 on the request's last event */
  spool_finish_reason finish_reason;
  const char* error;      /* finish_reason == SPOOL_FINISH_ERROR: why ("" otherwise) */
  int32_t prompt_tokens;  /* on the finishing event */
  int32_t cached_tokens;  /* prompt tokens served from the prefix cache, on the finishing event */
  int32_t completion_tokens;
} spool_event;

/* Called on the engine's thread: keep it short, do not call spool_engine_*
 * functions that wait (poll with a timeout). */
typedef void (*spool_event_callback)(const spool_event* event, void* user_data);

/* Queues a request: prompt is tokenized as spool_generate does. With
 * on_event, every event goes to it (then spool_engine_poll knows nothing of
 * the request); without (NULL), collect the output with spool_engine_poll. */
SPOOL_API spool_status spool_engine_submit(spool_engine* engine, const char* prompt,
                                           const spool_generate_params* params, spool_event_callback on_event,
                                           void* user_data, spool_request_id* out);

typedef struct spool_poll_result {
  size_t n_bytes;           /* text bytes written (a NUL follows when there was room) */
  size_t n_pending;         /* text bytes still held for the next poll (buffer too small) */
  int32_t finished;         /* 1: the request is over and all its text was returned; its id is then forgotten */
  spool_finish_reason finish_reason;
  int32_t prompt_tokens;
  int32_t completion_tokens;
  char error[256];          /* finish_reason == SPOOL_FINISH_ERROR: why */
} spool_poll_result;

/* Takes the text a request (submitted without a callback) produced since the
 * last poll, waiting up to timeout_ms (0: do not wait; -1: no limit) for new
 * text or the end. The text is cut at a UTF-8 character boundary to fit
 * capacity (keep one byte for the NUL). SPOOL_ERR_NOT_FOUND for ids the engine
 * does not hold (unknown, callback requests, or finished and collected). */
SPOOL_API spool_status spool_engine_poll(spool_engine* engine, spool_request_id id, char* text, size_t capacity,
                                         int32_t timeout_ms, spool_poll_result* out);

/* Cancels a request: it finishes with SPOOL_FINISH_CANCELLED. SPOOL_ERR_NOT_FOUND
 * for ids this engine never gave out; finished ones are ignored. */
SPOOL_API spool_status spool_engine_cancel(spool_engine* engine, spool_request_id id);

typedef struct spool_engine_stats {
  int32_t running, waiting;
  uint64_t prompt_tokens, generated_tokens;
  uint64_t prefix_hit_tokens; /* prompt tokens not recomputed thanks to the prefix cache */
  uint64_t requests_finished;
  uint64_t preemptions;
  int32_t kv_blocks_total, kv_blocks_used;
  uint64_t kv_bytes;          /* the KV pool's size */
} spool_engine_stats;
SPOOL_API spool_status spool_engine_get_stats(const spool_engine* engine, spool_engine_stats* out);

/* ---- HTTP server in this process ------------------------------------------ */

typedef struct spool_server spool_server;

typedef struct spool_server_options {
  size_t struct_size;    /* sizeof(spool_server_options), set by spool_server_options_init */
  const char* host;      /* default "127.0.0.1"; any other address needs an api_key */
  int32_t port;          /* 0 (default): a free port (spool_server_port tells which) */
  const char* api_key;   /* NULL: no auth (loopback only) */
  const char* model_id;  /* the name /v1/models lists (default "spool") */
} spool_server_options;
SPOOL_API void spool_server_options_init(spool_server_options* options);

/* Binds and starts serving the OpenAI-compatible API (/v1/completions,
 * /v1/chat/completions, /v1/models, /health, /metrics, web UI at /) over
 * engine on a thread of its own; returns once the socket is bound. */
SPOOL_API spool_status spool_server_start(spool_engine* engine, const spool_server_options* options,
                                          spool_server** out);
SPOOL_API spool_status spool_server_port(const spool_server* server, int32_t* port);
/* Stops serving (open connections are closed) and frees the server. */
SPOOL_API spool_status spool_server_stop(spool_server* server);

#ifdef __cplusplus
}
#endif

#endif /* SPOOL_H */
