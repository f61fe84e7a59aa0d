// `spool logits` writes the logits of every position of a token sequence to a
// safetensors file, for comparison with reference implementations
// (transformers, llama.cpp).
#include "cli_common.h"
#include "format/safetensors_writer.h"
#include "runtime/session.h"

namespace spool::cli {

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
