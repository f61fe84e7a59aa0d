// The durable store of the agent runtime: SQLite in WAL mode (synchronous
// FULL) in the server's data directory. It holds saved specs, runs, their
// agent steps (with outputs), the durable events of each run (everything but
// token deltas), log lines, the Batch API's files and batches, and the
// Responses API's stored responses. After a crash, runs still marked running
// are resumed from their last completed step: nothing accepted is lost.
//
// One connection, serialized by a mutex: the writes are a few per agent step,
// far from SQLite's limits. The directory is private to its user (0700 when
// created here) and the database files are 0600: they hold every prompt and
// output. Deletions give their pages back (auto_vacuum=INCREMENTAL and a WAL
// checkpoint), so the files shrink.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace spool::agents {

struct RunRecord {
  int64_t seq = 0;            // insertion order
  std::string id;
  std::string kind = "pipeline";
  nlohmann::ordered_json spec;  // the spec as submitted (validated), keys in their order
  std::string input;
  std::string status;         // queued | running | completed | failed | cancelled
  std::string error;
  double created_at = 0, started_at = 0, finished_at = 0;
};

struct StepRecord {
  std::string agent;
  int round = 1;
  int ord = 0;                // position in the run (order of first start)
  std::string status;         // running | retrying | done | failed | cancelled
  std::string output;
  int attempts = 0, prompt_tokens = 0, cached_tokens = 0, tokens = 0;
  std::string error;
  double started_at = 0, finished_at = 0;
};

struct FileRecord {
  std::string id, filename, purpose;
  int64_t bytes = 0;
  double created_at = 0;
};

// A Responses API response (/v1/responses) as stored: its object as answered,
// the input items it saw (its context: the earlier turns' items and its own
// input, each with an id) and the token ids of its prompt and output, so that
// a follow-up naming it continues the same token sequence (and its KV).
struct ResponseRecord {
  std::string id, status;
  nlohmann::json body;          // the response object
  nlohmann::json context;       // the input items, in order
  std::vector<int32_t> tokens;  // prompt + output token ids
  double created_at = 0;
};

// One item of a stored response, found by its id (an item_reference, or an
// output item sent back as input).
struct ResponseItemRecord {
  std::string id, response_id;
  nlohmann::json body;
  std::vector<int32_t> tokens;  // an output message: its text's token ids as generated
};

// What delete_run did: removed it, found no such run (of that kind), or left
// it because it has not ended (queued / running / a batch in progress).
enum class DeleteOutcome { Deleted, NotFound, Active };

// Opens (creating) <dir>/spool.db and holds an exclusive lock on
// <dir>/spool.lock for the object's life: a second process on the same
// directory gets an Error naming it.
class RunStore {
 public:
  // dir == "": an in-memory store (tests, `spool agents run` without --data-dir).
  explicit RunStore(const std::string& dir);
  ~RunStore();
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  const std::string& dir() const { return dir_; }

  void put_spec(const std::string& name, const nlohmann::ordered_json& spec);
  std::optional<nlohmann::ordered_json> get_spec(const std::string& name);
  std::vector<std::string> spec_names();
  bool delete_spec(const std::string& name);  // false: no such spec

  void create_run(const RunRecord& r);
  // Sets status (and error); stamps started_at when it becomes running (or a
  // batch in_progress), finished_at when it ends (completed, failed, cancelled).
  void set_run_status(const std::string& id, const std::string& status, const std::string& error = "");
  void set_run_spec(const std::string& id, const nlohmann::ordered_json& spec);
  std::optional<RunRecord> get_run(const std::string& id);
  // Newest first; `before_seq` > 0 pages (runs with smaller seq).
  std::vector<RunRecord> list_runs(const std::string& kind, int limit, int64_t before_seq = 0);
  // A page of list_runs after the run `after_id` ("" : from the newest); `more`: older runs remain.
  std::vector<RunRecord> page(const std::string& kind, int limit, const std::string& after_id, bool& more);
  // Oldest first.
  std::vector<RunRecord> runs_with_status(const std::string& kind, const std::string& status);
  std::map<std::string, int64_t> count_runs(const std::string& kind);
  // Removes an ended run (completed, failed, cancelled, expired) of `kind` with
  // its steps, events, logs and the given files (a batch's output and error
  // files), in one transaction; a run that has not ended is left as it is.
  DeleteOutcome delete_run(const std::string& id, const std::string& kind, const std::vector<std::string>& files = {});

  void put_step(const std::string& run_id, const StepRecord& s);
  // One transaction: the step (if any), its log lines and its event (if seq > 0),
  // so a crash never keeps a finished step without its DONE line, or the reverse.
  void commit(const std::string& run_id, const StepRecord* step, const std::vector<std::string>& log_lines,
              int64_t event_seq, const nlohmann::json& event);
  std::vector<StepRecord> steps(const std::string& run_id);
  // A run's end in one transaction: its status (and error), its last log line and its "done" event.
  void finish_run(const std::string& id, const std::string& status, const std::string& error,
                  const std::string& log_line, int64_t event_seq, const nlohmann::json& event);

  void add_event(const std::string& run_id, int64_t seq, const nlohmann::json& ev);
  std::vector<std::pair<int64_t, nlohmann::json>> events(const std::string& run_id, int64_t after_seq);
  int64_t last_event_seq(const std::string& run_id);
  // Event ids that are never stored (token deltas) are handed out only up to
  // a mark reserved here first, so a restarted run continues above every id
  // an earlier process may have sent: event_seq_floor is the larger of the
  // last stored event and that mark.
  void reserve_event_seq(const std::string& run_id, int64_t upto);
  int64_t event_seq_floor(const std::string& run_id);

  void add_log(const std::string& run_id, const std::string& line);
  std::vector<std::string> logs(const std::string& run_id);

  // Batch API files (content stored in the database).
  void put_file(const FileRecord& f, const std::string& content);
  std::optional<FileRecord> get_file(const std::string& id);
  std::optional<std::string> file_content(const std::string& id);
  // Oldest first (asc) or newest first; `purpose` "" : any; a page after
  // `after_id` ("" : from the start); `more`: further files remain.
  std::vector<FileRecord> list_files(const std::string& purpose, int limit, const std::string& after_id, bool asc,
                                     bool& more);
  bool delete_file(const std::string& id);  // false: no such file

  // Responses API: a response (inserted or replaced) with its items indexed by
  // id (an id already indexed keeps its first record), in one transaction.
  void put_response(const ResponseRecord& r, const std::vector<ResponseItemRecord>& items);
  std::optional<ResponseRecord> get_response(const std::string& id);
  bool delete_response(const std::string& id);  // false: no such response; its items go with it
  std::optional<ResponseItemRecord> get_response_item(const std::string& item_id);
  std::vector<std::string> responses_with_status(const std::string& status);

  // Bytes the database holds (its pages in use, free pages not counted):
  // what serve's --max-storage caps.
  uint64_t used_bytes();

 private:
  void exec(const char* sql);
  void update_status(const std::string& id, const std::string& status, const std::string& error);  // mu_ held
  void reclaim();  // mu_ held: after a deletion, free pages go back to the file system
  int64_t pragma_int(const char* sql);  // mu_ held
  std::string dir_;
  int lock_fd_ = -1;
  sqlite3* db_ = nullptr;
  std::mutex mu_;
};

// The default data directory: $XDG_DATA_HOME/spool, else ~/.local/share/spool.
std::string default_data_dir();

double unix_now();

}  // namespace spool::agents
