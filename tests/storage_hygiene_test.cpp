// The durable store's hygiene (issue 25): the data dir and database files are
// private to their user; deleting files, specs and ended runs removes their
// rows and gives the space back; the admission caps (--max-queued-runs,
// --max-storage) refuse with LimitExceeded; pipeline event ids never repeat
// across a restart, token deltas included; and a grammar or schema that can
// never end is a GrammarError (a 400), not a request that fails in the engine.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "agents/pipeline_runner.h"
#include "agents/run_store.h"
#include "grammar/grammar.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_schema.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "test_util.h"

using namespace spool;
using namespace spool::agents;
using nlohmann::json;

namespace {

const std::string kShared = SPOOL_SHARED_DIR;

unsigned mode_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0xffffffffu;
  return st.st_mode & 0777;
}

uint64_t file_size(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : n;
}

RunRecord run_record(const std::string& id, const std::string& kind, const std::string& status) {
  RunRecord r;
  r.id = id;
  r.kind = kind;
  r.spec = json{{"agents", json::array()}};
  r.status = status;
  return r;
}

}  // namespace

TEST(StorageHygiene, DataDirIsPrivateAndTheDatabaseFiles0600) {
  test::ScratchDir tmp("spool-hygiene");
  const std::string dir = tmp.path + "/nested/data";
  {
    RunStore store(dir);
    store.put_spec("s", json{{"agents", json::array()}});  // a write: the WAL and shared-memory files exist now
    EXPECT_EQ(mode_of(dir), 0700u);
    for (const char* f : {"/spool.db", "/spool.db-wal", "/spool.db-shm", "/spool.lock"})
      EXPECT_EQ(mode_of(dir + f), 0600u) << f;
  }
  // A store an earlier version left world-readable is tightened when opened.
  ::chmod(dir.c_str(), 0755);
  ::chmod((dir + "/spool.db").c_str(), 0644);
  {
    RunStore store(dir);
    store.put_spec("t", json{{"agents", json::array()}});
    EXPECT_EQ(mode_of(dir), 0700u);
    for (const char* f : {"/spool.db", "/spool.db-wal", "/spool.db-shm"}) EXPECT_EQ(mode_of(dir + f), 0600u) << f;
  }
  // Some other existing directory given as --data-dir keeps its mode (only what spool creates is tightened).
  const std::string other = tmp.path + "/other";
  std::filesystem::create_directories(other);
  ::chmod(other.c_str(), 0755);
  { RunStore store(other); }
  EXPECT_EQ(mode_of(other), 0755u);
  EXPECT_EQ(mode_of(other + "/spool.db"), 0600u);
}

TEST(StorageHygiene, DeletingAFileRemovesItsContentAndTheFileShrinks) {
  test::ScratchDir tmp("spool-hygiene");
  RunStore store(tmp.path);
  const std::string big(4u << 20, 'x');
  FileRecord f;
  f.id = "file-big";
  f.filename = "big.jsonl";
  f.purpose = "batch";
  store.put_file(f, big);
  f.id = "file-small";
  store.put_file(f, "{}\n");
  const uint64_t used = store.used_bytes();
  EXPECT_GE(used, big.size());
  EXPECT_GE(file_size(tmp.path + "/spool.db") + file_size(tmp.path + "/spool.db-wal"), big.size());

  EXPECT_TRUE(store.delete_file("file-big"));
  EXPECT_FALSE(store.get_file("file-big"));
  EXPECT_FALSE(store.file_content("file-big"));
  EXPECT_FALSE(store.delete_file("file-big"));  // a second time: no such file
  EXPECT_TRUE(store.get_file("file-small"));
  EXPECT_LT(store.used_bytes() + big.size() / 2, used);
  // The pages went back to the file system, not just to SQLite's free list.
  EXPECT_LT(file_size(tmp.path + "/spool.db") + file_size(tmp.path + "/spool.db-wal"), big.size() / 2);
}

TEST(StorageHygiene, ListFilesPagesNewestFirstOrOldestFirst) {
  RunStore store("");
  for (const char* id : {"file-a", "file-b", "file-c"}) {
    FileRecord f;
    f.id = id;
    f.filename = std::string(id) + ".jsonl";
    f.purpose = std::string(id) == "file-b" ? "batch_output" : "batch";
    store.put_file(f, "x");
  }
  bool more = false;
  std::vector<FileRecord> page = store.list_files("", 2, "", false, more);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0].id, "file-c");
  EXPECT_EQ(page[1].id, "file-b");
  EXPECT_TRUE(more);
  page = store.list_files("", 2, "file-b", false, more);
  ASSERT_EQ(page.size(), 1u);
  EXPECT_EQ(page[0].id, "file-a");
  EXPECT_FALSE(more);
  page = store.list_files("batch", 10, "", true, more);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0].id, "file-a");
  EXPECT_EQ(page[1].id, "file-c");
}

TEST(StorageHygiene, DeletingARunRemovesEverythingStoredWithItOnlyOnceItEnded) {
  RunStore store("");
  store.create_run(run_record("run_x", "pipeline", "queued"));
  store.set_run_status("run_x", "running");
  StepRecord st;
  st.agent = "a";
  st.status = "done";
  st.output = "out";
  store.commit("run_x", &st, {"[agent:a] DONE"}, 1, json{{"type", "output"}});
  store.reserve_event_seq("run_x", 1024);
  EXPECT_EQ(store.delete_run("run_x", "pipeline"), DeleteOutcome::Active);  // running: cancel first
  EXPECT_TRUE(store.get_run("run_x"));
  store.finish_run("run_x", "completed", "", "[run:run_x] COMPLETED", 2, json{{"type", "done"}});
  EXPECT_EQ(store.delete_run("run_x", "batch"), DeleteOutcome::NotFound);  // another kind's route
  EXPECT_EQ(store.delete_run("run_x", "pipeline"), DeleteOutcome::Deleted);
  EXPECT_FALSE(store.get_run("run_x"));
  EXPECT_TRUE(store.steps("run_x").empty());
  EXPECT_TRUE(store.events("run_x", 0).empty());
  EXPECT_TRUE(store.logs("run_x").empty());
  EXPECT_EQ(store.event_seq_floor("run_x"), 0);
  EXPECT_EQ(store.delete_run("run_x", "pipeline"), DeleteOutcome::NotFound);

  // A batch goes with the files it wrote; the input file stays.
  FileRecord f;
  f.purpose = "batch";
  for (const char* id : {"file-in", "file-out", "file-err"}) {
    f.id = id;
    store.put_file(f, "{}");
  }
  store.create_run(run_record("batch_1", "batch", "in_progress"));
  EXPECT_EQ(store.delete_run("batch_1", "batch", {"file-out", "file-err"}), DeleteOutcome::Active);
  EXPECT_TRUE(store.get_file("file-out"));
  store.set_run_status("batch_1", "cancelled");
  EXPECT_EQ(store.delete_run("batch_1", "batch", {"file-out", "file-err"}), DeleteOutcome::Deleted);
  EXPECT_FALSE(store.get_file("file-out"));
  EXPECT_FALSE(store.get_file("file-err"));
  EXPECT_TRUE(store.get_file("file-in"));

  store.put_spec("keep", json{{"agents", json::array()}});
  store.put_spec("drop", json{{"agents", json::array()}});
  EXPECT_TRUE(store.delete_spec("drop"));
  EXPECT_FALSE(store.delete_spec("drop"));
  EXPECT_EQ(store.spec_names(), std::vector<std::string>{"keep"});
}

TEST(StorageHygiene, EventIdMarksSurviveAReopen) {
  test::ScratchDir tmp("spool-hygiene");
  {
    RunStore store(tmp.path);
    store.create_run(run_record("run_m", "pipeline", "running"));
    store.add_event("run_m", 1, json{{"type", "start"}});
    store.reserve_event_seq("run_m", 1024);
    store.reserve_event_seq("run_m", 5);  // a mark never goes down
  }
  RunStore store(tmp.path);
  EXPECT_EQ(store.last_event_seq("run_m"), 1);
  EXPECT_EQ(store.event_seq_floor("run_m"), 1024);
  store.add_event("run_m", 2000, json{{"type", "done"}});
  EXPECT_EQ(store.event_seq_floor("run_m"), 2000);
}

// A queue slot per run waiting to start; the cap counts batches too (they take
// slots through the same runner). No model is needed: runs are never started.
TEST(StorageHygiene, QueueAndStorageCapsRefuseWithLimitExceeded) {
  RunStore store("");
  SpecContext models;
  models.model_aliases = {"m"};
  RunnerOptions o;
  o.log_to_stderr = false;
  o.max_queued = 3;
  o.kv_hints = false;  // no engines here
  PipelineRunner runner(store, models, [](const std::string&) { return AgentModel{}; }, o);  // not started
  const SpecJson spec = SpecJson::parse(R"({"agents": [{"name": "a", "prompt": "hi"}]})");
  const std::string first = runner.submit(spec, "");
  runner.submit(spec, "");
  runner.take_queue_slot();  // a batch
  try {
    runner.submit(spec, "");
    FAIL() << "a fourth queued submission was accepted";
  } catch (const LimitExceeded& e) {
    EXPECT_EQ(e.kind, LimitExceeded::Kind::Queue);
    EXPECT_NE(std::string(e.what()).find("--max-queued-runs 3"), std::string::npos) << e.what();
  }
  EXPECT_EQ(store.list_runs("pipeline", 10).size(), 2u);  // nothing stored for the refused one
  ASSERT_TRUE(runner.cancel(first));                    // a cancelled queued run gives its slot back
  runner.submit(spec, "");
  EXPECT_THROW(runner.take_queue_slot(), LimitExceeded);
  runner.return_queue_slot();  // the batch started
  runner.take_queue_slot();
  runner.take_queue_slot(true);  // a restart's requeue is never refused
  EXPECT_EQ(runner.remove(first), DeleteOutcome::Deleted);  // cancelled: it has ended

  RunStore small("");
  RunnerOptions so;
  so.log_to_stderr = false;
  so.kv_hints = false;
  so.max_storage_bytes = small.used_bytes() + 64 * 1024;
  PipelineRunner capped(small, models, [](const std::string&) { return AgentModel{}; }, so);
  capped.save_spec("fits", spec);
  try {
    capped.submit(spec, std::string(100 * 1024, 'x'));
    FAIL() << "a run over --max-storage was accepted";
  } catch (const LimitExceeded& e) {
    EXPECT_EQ(e.kind, LimitExceeded::Kind::Storage);
    EXPECT_NE(std::string(e.what()).find("--max-storage"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("holds"), std::string::npos) << e.what();
  }
  SpecJson huge = spec;
  huge["task"] = std::string(100 * 1024, 'y');
  EXPECT_THROW(capped.save_spec("huge", huge), LimitExceeded);
  EXPECT_THROW(capped.check_storage(100 * 1024), LimitExceeded);
  EXPECT_TRUE(small.list_runs("pipeline", 10).empty());
  EXPECT_FALSE(small.get_spec("huge"));
}

// A kill -9 loses the token deltas' ids (never stored); the restarted step's
// events must still number above every id a client saw, so Last-Event-ID
// resumes with the restart's start and tokens. The crash is simulated by
// stopping the runner mid-step (the run stays "running", tokens unstored) and
// opening a new store and runner on the same directory.
TEST(StorageHygiene, PipelineEventIdsNeverRepeatAcrossARestart) {
  test::ScratchDir tmp("spool-hygiene");
  auto model = load_model(kShared + "/models/stories260K.gguf", LoadOptions{1});
  EngineOptions eo;
  eo.n_ctx = 512;
  auto engine = make_engine(*model, eo);
  SpecContext models;
  models.model_aliases = {"m"};
  RunnerOptions o;
  o.log_to_stderr = false;
  const ModelResolver resolve = [&](const std::string&) { return AgentModel{engine.get(), nullptr, nullptr}; };
  const SpecJson spec = SpecJson::parse(
      R"({"agents": [{"name": "a", "prompt": "Once upon a time", "max_tokens": 400, "temperature": 0, "stop": ["QQZZ"]}]})");

  std::string id;
  int64_t seen_max = 0;
  {
    RunStore store(tmp.path);
    PipelineRunner runner(store, models, resolve, o);
    runner.start();
    id = runner.submit(spec, "");
    int tokens = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (tokens < 20 && std::chrono::steady_clock::now() < deadline) {
      const EventBatch b = runner.wait_events(id, seen_max, std::chrono::milliseconds(100));
      for (const auto& [seq, ev] : b.events) {
        EXPECT_GT(seq, seen_max);
        seen_max = seq;
        tokens += ev.value("type", "") == "token";
      }
      ASSERT_FALSE(b.ended) << "the run ended before the simulated crash";
    }
    ASSERT_GE(tokens, 20);
    runner.shutdown();  // the run stays running in the store; its token events were never stored
  }
  RunStore store(tmp.path);
  ASSERT_EQ(store.get_run(id)->status, "running");
  ASSERT_LT(store.last_event_seq(id), seen_max);  // what the fix is for: ids handed out beyond the stored ones
  PipelineRunner runner(store, models, resolve, o);
  runner.start();
  // A client resuming with the last id it saw gets the restarted step from its start.
  std::vector<std::pair<int64_t, json>> after;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int64_t last = seen_max; std::chrono::steady_clock::now() < deadline;) {
    const EventBatch b = runner.wait_events(id, last, std::chrono::milliseconds(200));
    for (const auto& e : b.events) {
      after.push_back(e);
      last = e.first;
    }
    if (b.ended && b.events.empty()) break;
  }
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after.front().second.value("type", ""), "start") << after.front().second.dump();
  EXPECT_EQ(after.back().second.value("type", ""), "done");
  EXPECT_EQ(after.back().second.value("status", ""), "completed");
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_GT(after[i].first, seen_max);
    if (i > 0) {
      EXPECT_GT(after[i].first, after[i - 1].first);
    }
  }
  EXPECT_GT(std::count_if(after.begin(), after.end(), [](const auto& e) { return e.second.value("type", "") == "token"; }), 0);
}

TEST(StorageHygiene, GrammarsThatCanNeverEndAreGrammarErrors) {
  for (const char* g : {"root ::= root", "root ::= x\nx ::= x", "root ::= \"a\" root", "root ::= \"{\" x \"}\" | x\nx ::= \"b\" x"})
    EXPECT_THROW(grammar::parse_gbnf(g), grammar::GrammarError) << g;
  try {
    grammar::parse_gbnf("root ::= root");
  } catch (const grammar::GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("'root' can never end"), std::string::npos) << e.what();
  }
  // Recursion with a way out stays fine, as does a rule nothing reaches.
  for (const char* g : {"root ::= \"a\" root | \"b\"", "root ::= \"[\" (root (\",\" root)*)? \"]\"", "root ::= \"a\"\nx ::= x"})
    EXPECT_NO_THROW(grammar::parse_gbnf(g)) << g;

  auto model = load_model(kShared + "/models/stories260K.gguf", LoadOptions{1});
  grammar::GrammarCache cache(model->tokenizer());
  EXPECT_THROW(cache.gbnf("root ::= root"), grammar::GrammarError);
  EXPECT_THROW(cache.json_schema(nlohmann::ordered_json::parse(R"({"$ref": "#"})")), grammar::GrammarError);
  EXPECT_THROW(cache.json_schema(nlohmann::ordered_json::parse(
                   R"({"type": "object", "properties": {"a": {"$ref": "#/properties/a"}}})")),
               grammar::GrammarError);
  // A recursive schema with a way out (a tree) compiles.
  EXPECT_NO_THROW(cache.json_schema(nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}})")));
}
