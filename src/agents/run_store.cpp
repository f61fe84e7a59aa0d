#include "agents/run_store.h"

#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace spool::agents {

using nlohmann::json;

namespace {

// One prepared statement; binds by position (1-based), steps, reads columns.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &st_, nullptr) != SQLITE_OK)
      throw Error(std::string("store: cannot prepare statement: ") + sqlite3_errmsg(db));
  }
  ~Stmt() { sqlite3_finalize(st_); }
  Stmt& bind(int i, const std::string& s) {
    sqlite3_bind_text(st_, i, s.data(), (int)s.size(), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind(int i, int64_t v) {
    sqlite3_bind_int64(st_, i, v);
    return *this;
  }
  Stmt& bind(int i, int v) { return bind(i, (int64_t)v); }
  Stmt& bind_blob(int i, const void* data, size_t n) {
    sqlite3_bind_blob(st_, i, n ? data : "", (int)n, SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind(int i, double v) {
    sqlite3_bind_double(st_, i, v);
    return *this;
  }
  // true: a row is ready.
  bool step() {
    const int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw Error(std::string("store: ") + sqlite3_errmsg(db_));
  }
  void run() { while (step()) {} }
  std::string text(int c) const {
    const unsigned char* p = sqlite3_column_text(st_, c);
    return p ? std::string(reinterpret_cast<const char*>(p), (size_t)sqlite3_column_bytes(st_, c)) : std::string();
  }
  std::string blob(int c) const {
    const void* p = sqlite3_column_blob(st_, c);
    return p ? std::string(static_cast<const char*>(p), (size_t)sqlite3_column_bytes(st_, c)) : std::string();
  }
  int64_t i64(int c) const { return sqlite3_column_int64(st_, c); }
  double real(int c) const { return sqlite3_column_double(st_, c); }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
};

const char* kSchema = R"SQL(
CREATE TABLE IF NOT EXISTS specs(name TEXT PRIMARY KEY, body TEXT NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS runs(
  seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, kind TEXT NOT NULL, spec TEXT NOT NULL,
  input TEXT NOT NULL, status TEXT NOT NULL, error TEXT NOT NULL DEFAULT '',
  created_at REAL NOT NULL, started_at REAL NOT NULL DEFAULT 0, finished_at REAL NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs(kind, status, seq);
CREATE TABLE IF NOT EXISTS steps(
  run_id TEXT NOT NULL, agent TEXT NOT NULL, round INTEGER NOT NULL, ord INTEGER NOT NULL, status TEXT NOT NULL,
  output TEXT NOT NULL, attempts INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
  tokens INTEGER NOT NULL, error TEXT NOT NULL, started_at REAL NOT NULL, finished_at REAL NOT NULL,
  PRIMARY KEY(run_id, agent, round));
CREATE TABLE IF NOT EXISTS events(run_id TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY(run_id, seq));
CREATE TABLE IF NOT EXISTS logs(id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, ts REAL NOT NULL, line TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS logs_by_run ON logs(run_id, id);
CREATE TABLE IF NOT EXISTS files(
  id TEXT PRIMARY KEY, filename TEXT NOT NULL, purpose TEXT NOT NULL, bytes INTEGER NOT NULL, created_at REAL NOT NULL,
  content BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS event_marks(run_id TEXT PRIMARY KEY, seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS responses(
  id TEXT PRIMARY KEY, status TEXT NOT NULL, body TEXT NOT NULL, context TEXT NOT NULL, tokens BLOB NOT NULL,
  created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS responses_by_status ON responses(status);
CREATE TABLE IF NOT EXISTS response_items(
  item_id TEXT PRIMARY KEY, response_id TEXT NOT NULL, body TEXT NOT NULL, tokens BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS response_items_by_response ON response_items(response_id);
)SQL";

// Token ids as a blob of little-endian int32 (the machines we build for are little-endian).
std::string token_blob(const std::vector<int32_t>& ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int32_t));
}
std::vector<int32_t> blob_tokens(const std::string& b) {
  std::vector<int32_t> ids(b.size() / sizeof(int32_t));
  if (!ids.empty()) std::memcpy(ids.data(), b.data(), ids.size() * sizeof(int32_t));
  return ids;
}

bool ended(const std::string& status) {
  return status == "completed" || status == "failed" || status == "cancelled" || status == "expired";
}

// The data dir holds every prompt and output: made 0700 (parents as the umask
// says). One that existed already is tightened only when it is a store of an
// earlier version (it holds spool.db), never some other directory given by mistake.
void make_private_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(dir, ec)) {
    if (fs::exists(dir + "/spool.db", ec)) (void)::chmod(dir.c_str(), 0700);  // best effort: another owner's stays
    return;
  }
  const fs::path parent = fs::path(dir).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) throw Error("data dir " + dir + ": cannot create it: " + ec.message());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw Error("data dir " + dir + ": cannot create it: " + std::strerror(errno));
  (void)::chmod(dir.c_str(), 0700);
}

// Creates the file 0600, or tightens an existing one (an earlier version's
// 0644). SQLite gives the -wal and -shm files the database file's mode.
void make_private_file(const std::string& path, bool create) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
  if (fd < 0) {
    if (!create && errno == ENOENT) return;
    throw Error("cannot open " + path + ": " + std::strerror(errno));
  }
  (void)::fchmod(fd, 0600);  // best effort: a file of another owner fails later, when SQLite opens it
  ::close(fd);
}

RunRecord read_run(const Stmt& s) {
  RunRecord r;
  r.seq = s.i64(0);
  r.id = s.text(1);
  r.kind = s.text(2);
  r.spec = nlohmann::ordered_json::parse(s.text(3), nullptr, false);
  r.input = s.text(4);
  r.status = s.text(5);
  r.error = s.text(6);
  r.created_at = s.real(7);
  r.started_at = s.real(8);
  r.finished_at = s.real(9);
  return r;
}

constexpr const char* kRunColumns = "seq, id, kind, spec, input, status, error, created_at, started_at, finished_at";

}  // namespace

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string default_data_dir() {
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) return std::string(x) + "/spool";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.local/share/spool";
  return ".spool-data";
}

RunStore::RunStore(const std::string& dir) : dir_(dir) {
  std::string path = ":memory:";
  if (!dir.empty()) {
    make_private_dir(dir);
    const std::string lock = dir + "/spool.lock";
    lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd_ < 0) throw Error("data dir " + dir + ": cannot open " + lock + ": " + std::strerror(errno));
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      ::close(lock_fd_);
      lock_fd_ = -1;
      throw Error("data dir " + dir + " is in use by another spool process; give each server its own --data-dir");
    }
    (void)::fchmod(lock_fd_, 0600);
    path = dir + "/spool.db";
    try {
      make_private_file(path, true);
      make_private_file(path + "-wal", false);
      make_private_file(path + "-shm", false);
    } catch (const Error& e) {
      ::close(lock_fd_);
      throw Error("data dir " + dir + ": " + e.what());
    }
  }
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    if (lock_fd_ >= 0) ::close(lock_fd_);
    throw Error("store " + path + ": " + msg);
  }
  sqlite3_busy_timeout(db_, 5000);
  try {
    exec("PRAGMA auto_vacuum=INCREMENTAL");  // takes effect in a new database (before its first table)
    if (!dir.empty()) {
      exec("PRAGMA journal_mode=WAL");
      exec("PRAGMA synchronous=FULL");
    }
    exec(kSchema);
  } catch (...) {
    sqlite3_close(db_);
    if (lock_fd_ >= 0) ::close(lock_fd_);
    throw;
  }
}

RunStore::~RunStore() {
  sqlite3_close(db_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void RunStore::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw Error("store: " + msg);
  }
}

void RunStore::put_spec(const std::string& name, const nlohmann::ordered_json& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt(db_, "INSERT INTO specs(name, body, updated_at) VALUES(?1, ?2, ?3) "
            "ON CONFLICT(name) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at")
      .bind(1, name).bind(2, spec.dump()).bind(3, unix_now()).run();
}

bool RunStore::delete_spec(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt(db_, "DELETE FROM specs WHERE name = ?1").bind(1, name).run();
  const bool deleted = sqlite3_changes(db_) > 0;
  if (deleted) reclaim();
  return deleted;
}

std::optional<nlohmann::ordered_json> RunStore::get_spec(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT body FROM specs WHERE name = ?1");
  s.bind(1, name);
  if (!s.step()) return std::nullopt;
  return nlohmann::ordered_json::parse(s.text(0));
}

std::vector<std::string> RunStore::spec_names() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT name FROM specs ORDER BY name");
  std::vector<std::string> out;
  while (s.step()) out.push_back(s.text(0));
  return out;
}

void RunStore::create_run(const RunRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt(db_, "INSERT INTO runs(id, kind, spec, input, status, error, created_at) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)")
      .bind(1, r.id).bind(2, r.kind).bind(3, r.spec.dump()).bind(4, r.input).bind(5, r.status).bind(6, r.error)
      .bind(7, r.created_at > 0 ? r.created_at : unix_now()).run();
}

void RunStore::set_run_status(const std::string& id, const std::string& status, const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  update_status(id, status, error);
}

void RunStore::finish_run(const std::string& id, const std::string& status, const std::string& error,
                          const std::string& log_line, int64_t event_seq, const json& event) {
  std::lock_guard<std::mutex> lock(mu_);
  exec("BEGIN IMMEDIATE");
  try {
    update_status(id, status, error);
    Stmt(db_, "INSERT INTO logs(run_id, ts, line) VALUES(?1, ?2, ?3)").bind(1, id).bind(2, unix_now()).bind(3, log_line).run();
    Stmt(db_, "INSERT OR REPLACE INTO events(run_id, seq, body) VALUES(?1, ?2, ?3)")
        .bind(1, id).bind(2, event_seq).bind(3, event.dump()).run();
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

void RunStore::update_status(const std::string& id, const std::string& status, const std::string& error) {
  const bool ended = status == "completed" || status == "failed" || status == "cancelled";
  Stmt(db_, "UPDATE runs SET status = ?2, error = ?3, "
            "started_at = CASE WHEN ?2 IN ('running', 'in_progress') AND started_at = 0 THEN ?4 ELSE started_at END, "
            "finished_at = CASE WHEN ?5 THEN ?4 ELSE finished_at END WHERE id = ?1")
      .bind(1, id).bind(2, status).bind(3, error).bind(4, unix_now()).bind(5, (int64_t)ended).run();
}

void RunStore::set_run_spec(const std::string& id, const nlohmann::ordered_json& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt(db_, "UPDATE runs SET spec = ?2 WHERE id = ?1").bind(1, id).bind(2, spec.dump()).run();
}

std::optional<RunRecord> RunStore::get_run(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, (std::string("SELECT ") + kRunColumns + " FROM runs WHERE id = ?1").c_str());
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  return read_run(s);
}

std::vector<RunRecord> RunStore::list_runs(const std::string& kind, int limit, int64_t before_seq) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, (std::string("SELECT ") + kRunColumns +
               " FROM runs WHERE kind = ?1 AND (?2 = 0 OR seq < ?2) ORDER BY seq DESC LIMIT ?3")
                  .c_str());
  s.bind(1, kind).bind(2, before_seq).bind(3, limit);
  std::vector<RunRecord> out;
  while (s.step()) out.push_back(read_run(s));
  return out;
}

std::vector<RunRecord> RunStore::page(const std::string& kind, int limit, const std::string& after_id, bool& more) {
  int64_t before = 0;
  if (!after_id.empty())
    if (const std::optional<RunRecord> r = get_run(after_id)) before = r->seq;
  std::vector<RunRecord> runs = list_runs(kind, limit + 1, before);
  more = (int)runs.size() > limit;
  if (more) runs.pop_back();
  return runs;
}

std::vector<RunRecord> RunStore::runs_with_status(const std::string& kind, const std::string& status) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, (std::string("SELECT ") + kRunColumns + " FROM runs WHERE kind = ?1 AND status = ?2 ORDER BY seq").c_str());
  s.bind(1, kind).bind(2, status);
  std::vector<RunRecord> out;
  while (s.step()) out.push_back(read_run(s));
  return out;
}

std::map<std::string, int64_t> RunStore::count_runs(const std::string& kind) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT status, COUNT(*) FROM runs WHERE kind = ?1 GROUP BY status");
  s.bind(1, kind);
  std::map<std::string, int64_t> out;
  while (s.step()) out[s.text(0)] = s.i64(1);
  return out;
}

DeleteOutcome RunStore::delete_run(const std::string& id, const std::string& kind, const std::vector<std::string>& files) {
  std::lock_guard<std::mutex> lock(mu_);
  exec("BEGIN IMMEDIATE");
  try {
    DeleteOutcome outcome;
    {
      Stmt s(db_, "SELECT status FROM runs WHERE id = ?1 AND kind = ?2");
      s.bind(1, id).bind(2, kind);
      outcome = !s.step() ? DeleteOutcome::NotFound : ended(s.text(0)) ? DeleteOutcome::Deleted : DeleteOutcome::Active;
    }
    if (outcome != DeleteOutcome::Deleted) {
      exec("ROLLBACK");
      return outcome;
    }
    for (const char* sql : {"DELETE FROM steps WHERE run_id = ?1", "DELETE FROM events WHERE run_id = ?1",
                            "DELETE FROM logs WHERE run_id = ?1", "DELETE FROM event_marks WHERE run_id = ?1",
                            "DELETE FROM runs WHERE id = ?1"})
      Stmt(db_, sql).bind(1, id).run();
    for (const std::string& f : files) Stmt(db_, "DELETE FROM files WHERE id = ?1").bind(1, f).run();
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  reclaim();
  return DeleteOutcome::Deleted;
}

void RunStore::reclaim() {
  exec("PRAGMA incremental_vacuum");
  if (!dir_.empty()) exec("PRAGMA wal_checkpoint(TRUNCATE)");  // the file shrinks only when the WAL is written back
}

int64_t RunStore::pragma_int(const char* sql) {
  Stmt s(db_, sql);
  return s.step() ? s.i64(0) : 0;
}

uint64_t RunStore::used_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t pages = pragma_int("PRAGMA page_count") - pragma_int("PRAGMA freelist_count");
  return (uint64_t)std::max<int64_t>(0, pages) * (uint64_t)pragma_int("PRAGMA page_size");
}

void RunStore::put_step(const std::string& run_id, const StepRecord& st) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt(db_, "INSERT OR REPLACE INTO steps(run_id, agent, round, ord, status, output, attempts, prompt_tokens, "
            "cached_tokens, tokens, error, started_at, finished_at) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13)")
      .bind(1, run_id).bind(2, st.agent).bind(3, st.round).bind(4, st.ord).bind(5, st.status).bind(6, st.output)
      .bind(7, st.attempts).bind(8, st.prompt_tokens).bind(9, st.cached_tokens).bind(10, st.tokens)
      .bind(11, st.error).bind(12, st.started_at).bind(13, st.finished_at).run();
}

void RunStore::commit(const std::string& run_id, const StepRecord* st, const std::vector<std::string>& log_lines,
                      int64_t event_seq, const json& event) {
  std::lock_guard<std::mutex> lock(mu_);
  exec("BEGIN IMMEDIATE");
  try {
    if (st)
      Stmt(db_, "INSERT OR REPLACE INTO steps(run_id, agent, round, ord, status, output, attempts, prompt_tokens, "
                "cached_tokens, tokens, error, started_at, finished_at) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13)")
          .bind(1, run_id).bind(2, st->agent).bind(3, st->round).bind(4, st->ord).bind(5, st->status)
          .bind(6, st->output).bind(7, st->attempts).bind(8, st->prompt_tokens).bind(9, st->cached_tokens)
          .bind(10, st->tokens).bind(11, st->error).bind(12, st->started_at).bind(13, st->finished_at).run();
    for (const std::string& line : log_lines)
      Stmt(db_, "INSERT INTO logs(run_id, ts, line) VALUES(?1, ?2, ?3)").bind(1, run_id).bind(2, unix_now()).bind(3, line).run();
    if (event_seq > 0)
      Stmt(db_, "INSERT OR REPLACE INTO events(run_id, seq, body) VALUES(?1, ?2, ?3)")
          .bind(1, run_id).bind(2, event_seq).bind(3, event.dump()).run();
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::vector<StepRecord> RunStore::steps(const std::string& run_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT agent, round, ord, status, output, attempts, prompt_tokens, cached_tokens, tokens, error, "
              "started_at, finished_at FROM steps WHERE run_id = ?1 ORDER BY ord, round");
  s.bind(1, run_id);
  std::vector<StepRecord> out;
  while (s.step()) {
    StepRecord r;
    r.agent = s.text(0);
    r.round = (int)s.i64(1);
    r.ord = (int)s.i64(2);
    r.status = s.text(3);
    r.output = s.text(4);
    r.attempts = (int)s.i64(5);
    r.prompt_tokens = (int)s.i64(6);
    r.cached_tokens = (int)s.i64(7);
    r.tokens = (int)s.i64(8);
    r.error = s.text(9);
    r.started_at = s.real(10);
    r.finished_at = s.real(11);
    out.push_back(std::move(r));
  }
  return out;
}

void RunStore::add_event(const std::string& run_id, int64_t seq, const json& ev) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt(db_, "INSERT OR REPLACE INTO events(run_id, seq, body) VALUES(?1, ?2, ?3)")
      .bind(1, run_id).bind(2, seq).bind(3, ev.dump()).run();
}

std::vector<std::pair<int64_t, json>> RunStore::events(const std::string& run_id, int64_t after_seq) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT seq, body FROM events WHERE run_id = ?1 AND seq > ?2 ORDER BY seq");
  s.bind(1, run_id).bind(2, after_seq);
  std::vector<std::pair<int64_t, json>> out;
  while (s.step()) out.emplace_back(s.i64(0), json::parse(s.text(1)));
  return out;
}

int64_t RunStore::last_event_seq(const std::string& run_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?1");
  s.bind(1, run_id);
  return s.step() ? s.i64(0) : 0;
}

void RunStore::reserve_event_seq(const std::string& run_id, int64_t upto) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt(db_, "INSERT INTO event_marks(run_id, seq) VALUES(?1, ?2) "
            "ON CONFLICT(run_id) DO UPDATE SET seq = MAX(seq, excluded.seq)")
      .bind(1, run_id).bind(2, upto).run();
}

int64_t RunStore::event_seq_floor(const std::string& run_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT MAX(COALESCE((SELECT MAX(seq) FROM events WHERE run_id = ?1), 0), "
              "COALESCE((SELECT seq FROM event_marks WHERE run_id = ?1), 0))");
  s.bind(1, run_id);
  return s.step() ? s.i64(0) : 0;
}

void RunStore::add_log(const std::string& run_id, const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt(db_, "INSERT INTO logs(run_id, ts, line) VALUES(?1, ?2, ?3)").bind(1, run_id).bind(2, unix_now()).bind(3, line).run();
}

std::vector<std::string> RunStore::logs(const std::string& run_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT line FROM logs WHERE run_id = ?1 ORDER BY id");
  s.bind(1, run_id);
  std::vector<std::string> out;
  while (s.step()) out.push_back(s.text(0));
  return out;
}

void RunStore::put_file(const FileRecord& f, const std::string& content) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt(db_, "INSERT OR REPLACE INTO files(id, filename, purpose, bytes, created_at, content) VALUES(?1,?2,?3,?4,?5,?6)")
      .bind(1, f.id).bind(2, f.filename).bind(3, f.purpose).bind(4, (int64_t)content.size())
      .bind(5, f.created_at > 0 ? f.created_at : unix_now()).bind(6, content).run();
}

std::optional<FileRecord> RunStore::get_file(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT id, filename, purpose, bytes, created_at FROM files WHERE id = ?1");
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  return FileRecord{s.text(0), s.text(1), s.text(2), s.i64(3), s.real(4)};
}

std::optional<std::string> RunStore::file_content(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT content FROM files WHERE id = ?1");
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  return s.text(0);
}

std::vector<FileRecord> RunStore::list_files(const std::string& purpose, int limit, const std::string& after_id,
                                             bool asc, bool& more) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t after = 0;  // rowid: insertion order
  if (!after_id.empty()) {
    Stmt a(db_, "SELECT rowid FROM files WHERE id = ?1");
    a.bind(1, after_id);
    if (a.step()) after = a.i64(0);
  }
  Stmt s(db_, asc ? "SELECT id, filename, purpose, bytes, created_at FROM files WHERE (?1 = '' OR purpose = ?1) "
                    "AND rowid > ?2 ORDER BY rowid LIMIT ?3"
                  : "SELECT id, filename, purpose, bytes, created_at FROM files WHERE (?1 = '' OR purpose = ?1) "
                    "AND (?2 = 0 OR rowid < ?2) ORDER BY rowid DESC LIMIT ?3");
  s.bind(1, purpose).bind(2, after).bind(3, limit + 1);
  std::vector<FileRecord> out;
  while (s.step()) out.push_back(FileRecord{s.text(0), s.text(1), s.text(2), s.i64(3), s.real(4)});
  more = (int)out.size() > limit;
  if (more) out.pop_back();
  return out;
}

bool RunStore::delete_file(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt(db_, "DELETE FROM files WHERE id = ?1").bind(1, id).run();
  const bool deleted = sqlite3_changes(db_) > 0;
  if (deleted) reclaim();
  return deleted;
}

void RunStore::put_response(const ResponseRecord& r, const std::vector<ResponseItemRecord>& items) {
  std::lock_guard<std::mutex> lock(mu_);
  exec("BEGIN IMMEDIATE");
  try {
    const std::string tokens = token_blob(r.tokens);
    Stmt(db_, "INSERT OR REPLACE INTO responses(id, status, body, context, tokens, created_at) VALUES(?1,?2,?3,?4,?5,?6)")
        .bind(1, r.id).bind(2, r.status).bind(3, r.body.dump(-1, ' ', false, json::error_handler_t::replace))
        .bind(4, r.context.dump(-1, ' ', false, json::error_handler_t::replace))
        .bind_blob(5, tokens.data(), tokens.size()).bind(6, r.created_at > 0 ? r.created_at : unix_now()).run();
    for (const ResponseItemRecord& it : items) {
      const std::string t = token_blob(it.tokens);
      Stmt(db_, "INSERT OR IGNORE INTO response_items(item_id, response_id, body, tokens) VALUES(?1,?2,?3,?4)")
          .bind(1, it.id).bind(2, r.id).bind(3, it.body.dump(-1, ' ', false, json::error_handler_t::replace))
          .bind_blob(4, t.data(), t.size()).run();
    }
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::optional<ResponseRecord> RunStore::get_response(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT id, status, body, context, tokens, created_at FROM responses WHERE id = ?1");
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  ResponseRecord r;
  r.id = s.text(0);
  r.status = s.text(1);
  r.body = json::parse(s.text(2), nullptr, false);
  r.context = json::parse(s.text(3), nullptr, false);
  r.tokens = blob_tokens(s.blob(4));
  r.created_at = s.real(5);
  return r;
}

bool RunStore::delete_response(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  exec("BEGIN IMMEDIATE");
  bool deleted = false;
  try {
    Stmt(db_, "DELETE FROM responses WHERE id = ?1").bind(1, id).run();
    deleted = sqlite3_changes(db_) > 0;
    Stmt(db_, "DELETE FROM response_items WHERE response_id = ?1").bind(1, id).run();
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  if (deleted) reclaim();
  return deleted;
}

std::optional<ResponseItemRecord> RunStore::get_response_item(const std::string& item_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT item_id, response_id, body, tokens FROM response_items WHERE item_id = ?1");
  s.bind(1, item_id);
  if (!s.step()) return std::nullopt;
  return ResponseItemRecord{s.text(0), s.text(1), json::parse(s.text(2), nullptr, false), blob_tokens(s.blob(3))};
}

std::vector<std::string> RunStore::responses_with_status(const std::string& status) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT id FROM responses WHERE status = ?1 ORDER BY created_at");
  s.bind(1, status);
  std::vector<std::string> out;
  while (s.step()) out.push_back(s.text(0));
  return out;
}

}  // namespace spool::agents
