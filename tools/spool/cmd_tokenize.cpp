// `spool tokenize` prints token ids; `spool logits` writes full-sequence logits
// to a safetensors file for comparison with reference implementations.
#include <cstdio>
#include <iostream>
#include <iterator>

#include "cli_common.h"
#include "core/error.h"
#include "format/safetensors_writer.h"
#include "model/tokenizer_file.h"
#include "runtime/session.h"

namespace spool::cli {

// Like llama-tokenize: only the tokenizer is loaded (a vocab-only GGUF or a
// tokenizer.json is enough), --no-bos adds no BOS (nor EOS), and the text comes
// from -p, from files (verbatim, trailing newline included) or from stdin.
void add_tokenize_command(CLI::App& app) {
  struct Opts {
    std::string model, prompt;
    std::vector<std::string> files;
    bool no_bos = false, no_special = false, from_stdin = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text, comma-separated");
  cmd->add_option("-m,--model", o->model,
                  "Model or tokenizer: GGUF file (vocab-only ones too), Hugging Face directory, or tokenizer.json");
  CLI::Option* prompt = cmd->add_option("-p,--prompt", o->prompt, "Text to tokenize");
  cmd->add_option("-f,--file", o->files, "Tokenize this file's bytes as they are; repeat for one line of ids per file");
  cmd->add_flag("--stdin", o->from_stdin, "Tokenize standard input");
  cmd->add_flag("--no-bos", o->no_bos, "Do not add BOS/EOS");
  cmd->add_flag("--no-parse-special", o->no_special, "Treat special-token text as plain text");
  cmd->callback([o, prompt] {
    const int n_sources = (int)!o->files.empty() + (int)o->from_stdin + (int)(prompt->count() > 0);
    if (n_sources != 1) throw Error("tokenize: give exactly one of -p TEXT, -f FILE or --stdin");
    std::vector<std::string> texts;
    for (const std::string& f : o->files) texts.push_back(read_text_file(f));
    if (o->from_stdin) texts.push_back(std::string(std::istreambuf_iterator<char>(std::cin), {}));
    if (prompt->count() > 0) texts.push_back(o->prompt);
    const auto tok = open_tokenizer(resolve_model_path(o->model));
    for (const std::string& text : texts)
      std::printf("%s\n", join_ids(tok->encode(text, !o->no_bos, !o->no_special)).c_str());
  });
}

void add_logits_command(CLI::App& app) {
  struct Opts { std::string model, ids, out; int n_threads = 0; ModelFlags flags; };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("logits", "Write logits of every position to a safetensors file");
  cmd->add_option("-m,--model", o->model, "Model: GGUF file or Hugging Face directory");
  cmd->add_option("--ids", o->ids, "Input token ids, comma-separated")->required();
  cmd->add_option("--out", o->out, "Output .safetensors path (tensor 'logits', F32 [n_ids, n_vocab])")->required();
  cmd->add_option("-t,--threads", o->n_threads, "Threads");
  add_model_flags(cmd, o->flags);
  cmd->callback([o] {
    const std::vector<int32_t> ids = parse_ids(o->ids);
    auto model = open_model(o->model, o->n_threads, o->flags, (int)ids.size(), 512);
    Session session(*model, (int)ids.size(), 512);
    const std::vector<float>& logits = session.feed(ids, true);
    write_safetensors_f32(o->out, {{"logits", {(int64_t)ids.size(), model->config().n_vocab}, logits.data()}});
  });
}

}  // namespace spool::cli
