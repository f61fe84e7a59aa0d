// `spool convert`: a small Hugging Face checkpoint (or GGUF) written out as a
// GGUF file in llama.cpp's layout, F32/F16/BF16 as stored. Holds the whole
// model in memory: meant for tiny models and test fixtures (checking that
// llama.cpp and spool read the same file), not for converting big checkpoints.
#include <cstdio>

#include "cli_common.h"
#include "format/gguf_export.h"
#include "format/hf_hybrid.h"
#include "format/kimi_convert.h"
#include "model/model.h"

namespace spool::cli {

void add_convert_command(CLI::App& app) {
  struct Opts { std::string model, out; };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "convert", "Write a small model (HF directory) as a GGUF file in llama.cpp's layout (whole model in memory)");
  cmd->add_option("-m,--model", o->model, "Model: Hugging Face directory (or GGUF file)")->required();
  cmd->add_option("-o,--out", o->out, "Output .gguf path")->required();
  cmd->callback([o] {
    gguf::File f = open_model_file(o->model);
    std::vector<ExportTensor> tensors = export_tensors(f);
    hf::gdn_to_llama_layout(f, tensors);  // Gated DeltaNet hybrids; other architectures unchanged
    kimi_to_llama_layout(f, tensors);     // Kimi Linear; other architectures unchanged
    write_gguf(f, tensors, o->out);
    std::fprintf(stderr, "spool: wrote %s (%s, %zu tensors)\n", o->out.c_str(), f.architecture().c_str(),
                 tensors.size());
  });
}

}  // namespace spool::cli
