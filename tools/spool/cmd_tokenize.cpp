// `spool tokenize` prints token ids (only the tokenizer is loaded).
#include <cstdio>
#include <iostream>
#include <iterator>

#include "cli_common.h"
#include "core/error.h"
#include "model/tokenizer_file.h"

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

}  // namespace spool::cli
