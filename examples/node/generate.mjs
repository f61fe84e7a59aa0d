// Generates text with spool's C API from Node through koffi (an FFI package:
// no compiled addon of our own), printing each token as it comes, then
// tokenizes the prompt with the model's tokenizer.
//   npm ci --prefix examples/node
//   node examples/node/generate.mjs [--lib PATH/libspool.so.1] MODEL "Once upon a time" [max_tokens]
// Greedy, so the output is the same on every run. Exit code 0 on success; on
// failure the status name and spool_last_error() are printed.
import koffi from 'koffi';

const args = process.argv.slice(2);
let libPath = 'libspool.so.1';
if (args[0] === '--lib') {
  libPath = args[1];
  args.splice(0, 2);
}
if (args.length < 2) {
  console.error('usage: generate.mjs [--lib PATH/libspool.so.1] MODEL PROMPT [MAX_TOKENS]');
  process.exit(2);
}
const [modelPath, prompt] = args;
const maxTokens = args.length > 2 ? Number(args[2]) : 64;

const lib = koffi.load(libPath);
const Model = koffi.opaque('spool_model');
const Tokenizer = koffi.opaque('spool_tokenizer');
const ModelOptions = koffi.struct('spool_model_options', {
  struct_size: 'size_t', n_threads: 'int32_t', n_ctx: 'int32_t', mem_budget: 'const char *',
  kv_type: 'const char *', convert: 'const char *', cache_policy: 'const char *', no_speculate: 'int32_t',
});
const GenerateParams = koffi.struct('spool_generate_params', {
  struct_size: 'size_t', max_tokens: 'int32_t', temperature: 'float', top_k: 'int32_t', top_p: 'float',
  min_p: 'float', repeat_penalty: 'float', seed: 'uint64_t', ignore_eos: 'int32_t', stop: 'void *',
  n_stop: 'size_t', n_ctx: 'int32_t',
});
const GenerateResult = koffi.struct('spool_generate_result', {
  prompt_tokens: 'int32_t', completion_tokens: 'int32_t', finish_reason: 'int',
});
const TokenCallback = koffi.proto('int spool_token_callback(int32_t token, const char *text, size_t len, void *user)');

const api = {
  lastError: lib.func('const char *spool_last_error(void)'),
  statusName: lib.func('const char *spool_status_name(int status)'),
  apiVersion: lib.func('int spool_api_version(void)'),
  modelOptionsInit: lib.func('void spool_model_options_init(_Out_ spool_model_options *o)'),
  modelOpen: lib.func('int spool_model_open(const char *path, const spool_model_options *o, _Out_ spool_model **out)'),
  modelFree: lib.func('int spool_model_free(spool_model *m)'),
  modelTokenizer: lib.func('int spool_model_tokenizer(spool_model *m, _Out_ spool_tokenizer **out)'),
  generateParamsInit: lib.func('void spool_generate_params_init(_Out_ spool_generate_params *p)'),
  generate: lib.func('int spool_generate(spool_model *m, const char *prompt, const spool_generate_params *p, ' +
                     'spool_token_callback *cb, void *user, void *cancel, _Out_ spool_generate_result *r)'),
  tokenize: lib.func('int spool_tokenize(spool_tokenizer *t, const char *text, size_t len, int add_special, ' +
                     'int parse_special, _Out_ int32_t *ids, size_t capacity, _Out_ size_t *n_ids)'),
};

function check(status, what) {
  if (status !== 0) throw new Error(`${what}: ${api.statusName(status)}: ${api.lastError()}`);
}

try {
  if (api.apiVersion() !== 1) throw new Error(`libspool has API version ${api.apiVersion()}, this script speaks 1`);
  const opts = {};
  api.modelOptionsInit(opts);
  opts.n_threads = 2;
  const model = [null];
  check(api.modelOpen(modelPath, opts, model), 'open');
  try {
    const params = {};
    api.generateParamsInit(params);
    params.temperature = 0;
    params.max_tokens = maxTokens;
    const result = {};
    process.stdout.write(prompt);
    check(api.generate(model[0], prompt, params, (token, text) => {
      process.stdout.write(text);
      return 0;  // nonzero would stop generation
    }, null, null, result), 'generate');
    process.stdout.write('\n');
    console.error(`[${result.prompt_tokens} prompt tokens, ${result.completion_tokens} generated, ` +
                  `finish reason ${result.finish_reason}]`);

    const tok = [null];
    check(api.modelTokenizer(model[0], tok), 'tokenizer');
    const bytes = Buffer.byteLength(prompt);
    const ids = new Int32Array(bytes + 8);  // a token is at least one byte, plus BOS/EOS
    const n = [0];
    check(api.tokenize(tok[0], prompt, bytes, 1, 1, ids, ids.length, n), 'tokenize');
    console.log(`tokens: ${Array.from(ids.subarray(0, Number(n[0]))).join(',')}`);
  } finally {
    check(api.modelFree(model[0]), 'free');
  }
} catch (e) {
  console.error(`error: ${e.message}`);
  process.exit(1);
}
