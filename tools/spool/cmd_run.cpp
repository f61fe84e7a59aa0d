// `spool run`: generate text from a prompt and stream it to stdout. Only the
// generated text goes to stdout; load info and timings go to stderr.
#include <malloc.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "agents/run_store.h"
#include "cli_common.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "grammar/grammar_cache.h"
#include "kernels/matmul.h"
#include "runtime/sampler.h"
#include "runtime/draft_model.h"
#include "runtime/speculative.h"
#include "server/stats_handler.h"
#include "runtime/kv_disk.h"
#include "runtime/session.h"
#include "text/chat_template.h"
#include "text/text_stream.h"
#include "stream_stats.h"

namespace spool::cli {
namespace {

// Bytes malloc has handed out and not had back (its mapped chunks included).
uint64_t heap_in_use() {
  const struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

struct RunOptions {
  std::string model, prompt, prompt_file, prompt_ids, system;
  int n_predict = -1, n_threads = 0, n_ctx = 0, n_batch = 0;
  bool output_ids = false, no_bos = false, verbose = false, chat = false;
  std::vector<std::string> stop;
  SamplingParams sampling;
  ModelFlags model_flags;
  std::string stats_json;
  std::string json_schema_file, grammar_file, regex;
  std::string kv_disk, data_dir;
  SpecFlags spec;
  std::vector<std::string> spec_context;  // files whose text drafts may copy
};

// --json-schema / --grammar / --regex: the grammar every generated token must fit.
std::shared_ptr<grammar::TokenMasker> load_constraint(const RunOptions& o, grammar::GrammarCache& cache) {
  const int n = !o.json_schema_file.empty() + !o.grammar_file.empty() + !o.regex.empty();
  if (n > 1) throw Error("give only one of --json-schema, --grammar and --regex");
  try {
    if (!o.json_schema_file.empty()) {
      nlohmann::ordered_json schema;
      try {
        schema = nlohmann::ordered_json::parse(read_text_file(o.json_schema_file));
      } catch (const nlohmann::json::exception& e) {
        throw Error("--json-schema " + o.json_schema_file + ": not valid JSON: " + e.what());
      }
      return cache.json_schema(schema);
    }
    if (!o.grammar_file.empty()) return cache.gbnf(read_text_file(o.grammar_file));
    if (!o.regex.empty()) return cache.regex(o.regex);
  } catch (const grammar::GrammarError& e) {
    const std::string flag = !o.json_schema_file.empty() ? "--json-schema " + o.json_schema_file
                             : !o.grammar_file.empty()   ? "--grammar " + o.grammar_file
                                                         : "--regex";
    throw Error(flag + ": " + e.what());
  }
  return nullptr;
}

// --chat: the text as one user message (after an optional system message), rendered
// by the model's chat template with the assistant's turn opened. BOS is added only
// when the tokenizer wants it and the template did not already write it.
std::vector<int32_t> chat_tokens(const RunOptions& o, const Model& model, const std::string& text) {
  const std::string source = chat_template_source(model.file());
  if (source.empty())
    throw Error("--chat: the model has no chat template (GGUF tokenizer.chat_template, or chat_template in "
                "tokenizer_config.json / chat_template.jinja); run without --chat");
  const Tokenizer& tok = model.tokenizer();
  const auto token = [&](int32_t id) { return id >= 0 ? tok.token_text(id) : std::string(); };
  std::vector<ChatMessage> messages;
  if (!o.system.empty()) messages.push_back({"system", o.system});
  messages.push_back({"user", text});
  const std::string prompt = ChatTemplate(source).render(messages, true, token(tok.bos()), token(tok.eos()));
  if (o.verbose) std::fprintf(stderr, "spool: chat prompt:\n%s\n", prompt.c_str());
  const std::string bos = token(tok.bos());
  const bool add_bos = !o.no_bos && tok.add_bos() && tok.bos() >= 0 && !(!bos.empty() && prompt.starts_with(bos));
  std::vector<int32_t> ids;
  if (add_bos) ids.push_back(tok.bos());
  const std::vector<int32_t> body = tok.encode(prompt, false, true);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::vector<int32_t> prompt_tokens(const RunOptions& o, const Model& model) {
  if (!o.prompt_ids.empty()) {
    if (o.chat) throw Error("--chat takes -p or -f, not --prompt-ids");
    return parse_ids(o.prompt_ids);
  }
  if (!o.prompt.empty() && !o.prompt_file.empty()) throw Error("give either -p or -f, not both");
  if (!o.system.empty() && !o.chat) throw Error("--system needs --chat");
  const std::string text = o.prompt_file.empty() ? o.prompt : read_text_file(o.prompt_file);
  std::vector<int32_t> ids = o.chat ? chat_tokens(o, model, text) : model.tokenizer().encode(text, !o.no_bos, true);
  if (ids.empty()) throw Error("the prompt is empty; pass one with -p TEXT or -f FILE");
  return ids;
}

void run(const RunOptions& o) {
  const double t_load = now_seconds();
  SpecOptions so = spec_options(o.spec);
  // A draft model (-md) first: the model then computes on its threads and its budget leaves the draft's share.
  std::unique_ptr<Model> draft_model =
      so.mode == SpecMode::Off ? nullptr : open_draft_model(o.spec, o.n_threads, o.n_ctx, o.n_batch, 1, o.model_flags);
  // One logits row a step, or one per drafted token too.
  auto model = open_model(o.model, o.n_threads, flags_beside_draft(o.model_flags, draft_model.get(), o.n_ctx, 1),
                          o.n_ctx, o.n_batch, 1, so.mode == SpecMode::Off ? 1 : 1 + so.max_draft,
                          draft_model ? draft_model->shared_pool() : nullptr);
  if (draft_model) check_draft_model(*model, *draft_model);
  const ModelConfig& cfg = model->config();
  const Tokenizer& tok = model->tokenizer();
  const int n_ctx = o.n_ctx > 0 ? o.n_ctx : std::min(cfg.n_ctx_train > 0 ? cfg.n_ctx_train : 4096, 4096);
  std::fprintf(stderr, "spool: %s (%s, %d layers, %d threads, weights %s) loaded in %.2f s\n", cfg.name.c_str(),
               cfg.arch.c_str(), cfg.n_layer, model->pool().size(), model->weights().mode(), now_seconds() - t_load);

  const std::vector<int32_t> prompt = prompt_tokens(o, *model);
  for (int32_t id : prompt)
    if (id < 0 || id >= cfg.n_vocab) throw Error("prompt token id " + std::to_string(id) + " is out of range");
  if ((int)prompt.size() >= n_ctx)
    throw Error("prompt has " + std::to_string(prompt.size()) + " tokens, context is " + std::to_string(n_ctx) +
                " (raise -c)");
  grammar::GrammarCache grammars(tok);
  std::optional<grammar::GrammarState> constraint;
  if (auto masker = load_constraint(o, grammars)) constraint.emplace(masker);
  // Every row is computed as it would be inside any batch (the serving engine's mode): the text does not
  // depend on --spec, and equals `spool serve`'s for the same request.
  set_matmul_batch_invariant(true);
  Session session(*model, n_ctx, model->n_batch());
  // --kv-disk: the prompt's leading blocks are read from the disk tier when an earlier run (or `spool serve` on
  // the same data dir) saved them; this run's blocks are saved for the next.
  std::unique_ptr<KvDiskTier> kv_disk;
  if (!o.kv_disk.empty()) {
    const uint64_t bytes = parse_size(o.kv_disk);
    if (bytes == 0) throw Error("--kv-disk must be positive");
    const std::string dir =
        (std::filesystem::path(o.data_dir.empty() ? agents::default_data_dir() : o.data_dir) / "kv").string();
    kv_disk = make_kv_disk_tier(*model, dir, bytes, 16);
    if (!session.set_kv_disk(kv_disk.get())) {
      std::fprintf(stderr, "spool: kv-disk: off (models with a recurrent state do not use it yet)\n");
      kv_disk.reset();
    }
  }
  Sampler sampler(o.sampling, cfg.n_vocab);
  for (int32_t id : prompt) sampler.accept(id);
  TextStream stream(o.stop);

  StatsRecorder stats(*model);
  const double t0 = now_seconds();
  const uint64_t heap0 = o.model_flags.verbose_load ? heap_in_use() : 0;
  stats.begin_step();
  const float* logits = session.feed(prompt).data();
  stats.end_step("prompt", (int)prompt.size());
  if (o.model_flags.verbose_load)  // what the prompt pass allocated: KV cache + activation buffers
    std::fprintf(stderr, "spool: debug: prompt pass (%zu tokens, %d per pass) grew the heap by %.1f MiB "
                 "(KV %.1f MiB; scratch estimate %.1f MiB of which %.1f fixed)\n", prompt.size(), model->n_batch(),
                 (heap_in_use() - heap0) / 1048576.0, kv_bytes_estimate(cfg, n_ctx) / 1048576.0,
                 scratch_bytes_estimate(cfg, n_ctx, model->n_batch(), MlaForm::Auto, 1) / 1048576.0, kScratchFixedBytes / 1048576.0);
  const double t_prompt = now_seconds() - t0;
  std::vector<int32_t> generated;
  // Speculative decoding (runtime/speculative.h): the sampled token goes into
  // the next pass with a draft after it; the rows are sampled in order and
  // drafted tokens kept while they equal what was sampled; the session then
  // forgets the rejected positions. Rows are computed batch-invariantly (set
  // above), so the text is the same with or without drafts. A hybrid model's
  // recurrent state cannot drop positions: it folds a drafted pass in one token
  // at a time from a checkpoint, and after a rejection goes back to the
  // checkpoint and computes the kept tokens again with the next pass.
  const bool hybrid = session.recurrent();
  SpecSequence spec(so);
  std::unique_ptr<DraftModel> drafter;
  if (draft_model) {
    drafter = std::make_unique<DraftModel>(*draft_model, cfg.n_vocab, n_ctx, 1);
    std::fprintf(stderr, "spool: draft model %s (%s, %d layers)\n", draft_model->config().name.c_str(),
                 draft_model->config().arch.c_str(), draft_model->config().n_layer);
  }
  DraftSource src = DraftSource::Ngram;   // where the last pass's draft came from
  std::vector<std::shared_ptr<const DraftContext>> contexts;
  for (const std::string& f : o.spec_context)
    contexts.push_back(std::make_shared<const DraftContext>(tok.encode(read_text_file(f), false, false)));
  spec.set_contexts(std::move(contexts));
  StepCosts costs;
  // The prompt's pass, when it was one, is the governor's first large measured size.
  if ((int)prompt.size() <= model->n_batch()) costs.record((int)prompt.size(), t_prompt);
  SpecStats spec_stats;
  spec_stats.mode = so.mode;
  spec_stats.max_draft = so.mode == SpecMode::Off ? 0 : so.max_draft;
  spec_stats.draft_model = drafter != nullptr;
  std::vector<int32_t> history = prompt;  // what drafts are looked up in
  std::vector<int32_t> draft;             // the drafted tokens in the last pass
  std::vector<int32_t> step;              // the last pass's tokens: redone ones (hybrid), the sampled one, the draft
  int base = 0;                           // the last pass's row of the sampled token (after the redone ones)
  int row = 0;                            // the logits row sampled next, after base
  const int n_vocab = cfg.n_vocab;
  const double t1 = now_seconds();
  while (o.n_predict < 0 || (int)generated.size() < o.n_predict) {
    std::shared_ptr<const grammar::TokenMask> mask;
    if (constraint) mask = constraint->mask();
    const int32_t next = sampler.sample(logits + (size_t)(base + row) * n_vocab, mask ? mask->data() : nullptr);
    if (next < 0) throw Error("the grammar allows no token of this vocabulary here");
    if (tok.is_eog(next)) break;
    if (constraint) constraint->accept(next);
    generated.push_back(next);
    history.push_back(next);
    sampler.accept(next);
    if (o.output_ids) {
      std::printf("%s%d", generated.size() > 1 ? "," : "", next);
    } else {
      std::fputs(stream.push(tok.token_to_piece(next)).c_str(), stdout);
      if (stream.stopped()) break;
    }
    std::fflush(stdout);
    if (constraint && constraint->complete()) break;  // the grammar cannot go on
    if (row < (int)draft.size() && next == draft[row]) {  // accepted: the next row saw this very token
      ++row;
      continue;
    }
    std::vector<int32_t> redo;  // hybrid: tokens to fold in again after a rejection
    if (!draft.empty()) {  // the rest of the draft was rejected: forget its positions
      const int rejected = (int)draft.size() - row;
      if (hybrid && rejected > 0) {
        session.restore_checkpoint();
        redo.assign(step.begin(), step.begin() + base + 1 + row);
      } else if (!hybrid) {
        session.rewind(session.n_past() - rejected);
      }
      spec.verified((int)draft.size(), row, src);
      spec_stats.drafted += draft.size();
      spec_stats.accepted += row;
      if (src == DraftSource::Model) spec_stats.model_drafted += draft.size(), spec_stats.model_accepted += row;
      ++spec_stats.verify_steps;
    }
    draft.clear();
    row = 0;
    if (session.n_past() + (int)redo.size() >= n_ctx) break;
    if (so.mode != SpecMode::Off) {
      spec.observe(history);
      const int left = o.n_predict < 0 ? so.max_draft : o.n_predict - (int)generated.size() - 1;
      const int kmax = std::min({so.max_draft, left, n_ctx - session.n_past() - (int)redo.size() - 1});
      std::vector<int32_t> d = spec.propose(history, kmax);
      src = DraftSource::Ngram;
      if (drafter && kmax > 0 && spec.prefers_model(!d.empty())) {
        // The draft model, where it is likelier to be right: the n-gram draft is still scored, for free.
        if (!d.empty()) spec.shadow(std::move(d), (int)history.size());
        src = DraftSource::Model;
        const int k = choose_drafts(so.mode, costs, 1, 1, {{kmax, spec.evidence(src), true}}, so.max_draft,
                                    &drafter->costs())[0];
        if (k > 0) {
          std::vector<DraftJob> jobs{{1, &history, k, {}}};
          const double td = now_seconds();
          drafter->propose(jobs);
          spec_stats.draft_seconds += now_seconds() - td;
          draft = std::move(jobs[0].draft);
        } else {
          ++spec_stats.declined;
        }
      } else {
        const int k =
            d.empty() ? 0 : choose_drafts(so.mode, costs, 1, 1, {{(int)d.size(), spec.evidence()}}, so.max_draft)[0];
        if (k > 0) draft.assign(d.begin(), d.begin() + k);
        else if (!d.empty()) spec.shadow(std::move(d), (int)history.size()), ++spec_stats.declined;
      }
    }
    step = redo;
    base = (int)redo.size();
    step.push_back(next);
    step.insert(step.end(), draft.begin(), draft.end());
    const bool stepwise = hybrid && (!draft.empty() || !redo.empty());
    if (hybrid && !draft.empty()) session.checkpoint();
    stats.begin_step();
    const double ts = now_seconds();
    logits = session.feed(step, !draft.empty() || !redo.empty(), stepwise).data();
    costs.record((int)step.size(), now_seconds() - ts);
    stats.end_step("decode", (int)step.size());
  }
  if (costs.measured(1) && costs.measured(1 + so.max_draft))
    spec_stats.verify_cost = costs.estimate(1 + so.max_draft) / costs.estimate(1);
  spec_stats.acceptance = drafter ? spec.model_acceptance() : spec.acceptance();
  const double t_gen = now_seconds() - t1;
  stats.end_progress();
  if (o.output_ids) std::printf("\n");
  else std::fputs(stream.flush().c_str(), stdout);
  std::fflush(stdout);
  std::fprintf(stderr, "\nspool: prompt %zu tokens in %.3f s (%.1f tok/s), generated %zu tokens in %.3f s (%.1f tok/s)\n",
               prompt.size(), t_prompt, prompt.size() / std::max(t_prompt, 1e-9), generated.size(), t_gen,
               generated.size() / std::max(t_gen, 1e-9));
  if (kv_disk)
    std::fprintf(stderr, "spool: kv-disk: %d prompt tokens read from disk, %d computed\n", session.disk_hit_tokens(),
                 (int)prompt.size() - session.disk_hit_tokens());
  // Time to first token: the prompt's forward pass (the first generated token is sampled from its logits).
  if (!o.stats_json.empty())
    stats.write_json(o.stats_json, {{"command", "run"}, {"ttft_s", t_prompt}, {"prompt_tokens", prompt.size()},
                                    {"generated_tokens", generated.size()}, {"gen_s", t_gen},
                                    {"threads", model->pool().size()}, {"spec", server::spec_stats_json(spec_stats)}});
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt, streamed to stdout");
  cmd->add_option("-m,--model", o->model, "Model: GGUF file (first shard if split) or Hugging Face directory; default ../shared/models/stories260K.gguf");
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text");
  cmd->add_option("-f,--file", o->prompt_file, "Read the prompt from a file");
  cmd->add_option("--prompt-ids", o->prompt_ids, "Prompt as comma-separated token ids (no BOS added)");
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate (-1: until end of generation)");
  cmd->add_option("--temp", o->sampling.temperature, "Temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "Top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p, "Top-p (1: off)")->capture_default_str();
  cmd->add_option("--min-p", o->sampling.min_p, "Min-p (0: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", o->sampling.repeat_penalty, "Repetition penalty (1: off)")->capture_default_str();
  cmd->add_option("--repeat-last-n", o->sampling.penalty_last_n, "Tokens the penalties look back over")->capture_default_str();
  cmd->add_option("--frequency-penalty", o->sampling.frequency_penalty, "Frequency penalty")->capture_default_str();
  cmd->add_option("--presence-penalty", o->sampling.presence_penalty, "Presence penalty")->capture_default_str();
  cmd->add_option("--seed", o->sampling.seed, "Random seed (default: random)");
  cmd->add_option("--stop", o->stop, "Stop when this string is generated (repeatable)");
  cmd->add_option("-t,--threads", o->n_threads, "Threads (default: all cores)");
  cmd->add_option("-c,--ctx-size", o->n_ctx, "Context size in tokens (default: model's, at most 4096)");
  cmd->add_option("-b,--batch-size", o->n_batch,
                  "Prompt tokens per forward pass (default: 512; streaming: as many as 1/16 of --mem-budget holds)");
  cmd->add_flag("--no-bos", o->no_bos, "Do not add BOS/EOS to the prompt");
  cmd->add_flag("--chat", o->chat, "Treat the prompt as a user message and apply the model's chat template");
  cmd->add_option("--system", o->system, "With --chat: a system message before the user's");
  cmd->add_flag("-v,--verbose", o->verbose, "With --chat: print the rendered prompt to stderr");
  add_model_flags(cmd, o->model_flags);
  cmd->add_option("--stats-json", o->stats_json, "Write per-token and total statistics (bytes read, cache hits, I/O wait, ...) as JSON");
  cmd->add_option("--json-schema", o->json_schema_file,
                  "Constrain the output to JSON valid under the JSON Schema in FILE (docs/STRUCTURED_OUTPUT.md)");
  cmd->add_option("--grammar", o->grammar_file, "Constrain the output to the GBNF grammar in FILE (llama.cpp's syntax)");
  cmd->add_option("--regex", o->regex, "Constrain the output to text matching this regular expression");
  cmd->add_option("--kv-disk", o->kv_disk,
                  "Keep this run's KV blocks on disk (up to SIZE bytes, e.g. 4G, under DATA_DIR/kv) and read a "
                  "prompt's leading blocks from there instead of computing them (off by default)");
  cmd->add_option("--data-dir", o->data_dir,
                  "With --kv-disk: the data dir (default $XDG_DATA_HOME/spool or ~/.local/share/spool, as serve's)");
  add_spec_flags(cmd, o->spec);
  cmd->add_option("--spec-context", o->spec_context,
                  "A text file that drafts may also copy from (a document being edited, earlier output; "
                  "repeatable)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--output-ids", o->output_ids, "Print generated token ids (comma-separated) instead of text");
  cmd->callback([o] { run(*o); });
}

}  // namespace spool::cli
