// `spool checksum MODEL`: writes MODEL.sums, the per-tensor CRC-32 sidecar the
// streaming store checks every read against (weights/checksums.h).
#include <chrono>
#include <cstdio>

#include "cli_common.h"
#include "core/error.h"
#include "model/model.h"
#include "weights/checksums.h"

namespace spool::cli {

void add_checksum_command(CLI::App& app) {
  struct Opts { std::string model, out; };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "checksum", "Write MODEL.sums: a CRC-32 per tensor, checked on every streamed read from then on");
  cmd->add_option("-m,--model,model", o->model, "Model: GGUF file (first of a split) or Hugging Face directory")->required();
  cmd->add_option("-o,--out", o->out, "Output path (default: MODEL.sums next to the model's first file)");
  cmd->callback([o] {
    const gguf::File f = open_model_file(o->model);
    if (f.manifest.files.empty()) throw spool::Error("'" + o->model + "' has no tensor files");
    const std::string out = o->out.empty() ? checksums_path(f.manifest.files[0]) : o->out;
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t bytes = write_checksums(f.manifest, out);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: %zu tensors, %.2f GB checksummed in %.1f s\n", out.c_str(), f.manifest.tensors.size(), bytes / 1e9, s);
  });
}

}  // namespace spool::cli
