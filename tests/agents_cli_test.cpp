// `spool agents` as users meet it: `agents run` executes a pipeline in-process
// and prints each agent's output (deterministic at temperature 0), a bad spec
// is one error line naming the field, and submit / status / logs / events /
// cancel talk to a real `spool serve` (API key included).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace {

using spool::test::slurp;

namespace fs = std::filesystem;
using nlohmann::json;
const std::string kShared = SPOOL_SHARED_DIR;
const std::string kBin = SPOOL_BIN;

std::string temp_dir() {
  static spool::test::ScratchDir dir("spool-agents-cli-test");
  return dir.path;
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = temp_dir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

struct Result {
  int status = -1;
  std::string out, err;
  int err_lines() const {
    int n = 0;
    for (char c : err) n += c == '\n';
    return n;
  }
};

// Runs `[ENV] spool ARGS` with stdout and stderr captured separately.
Result spool(const std::string& args, const std::string& env = "") {
  const std::string out = temp_dir() + "/stdout", err = temp_dir() + "/stderr";
  const int rc = std::system((env + (env.empty() ? "" : " ") + kBin + " " + args + " >" + out + " 2>" + err).c_str());
  Result r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

const std::string& stories() {
  static const std::string p = kShared + "/models/stories260K.gguf";
  return p;
}

// Two agents in a chain, greedy, a few tokens each.
const std::string& chain_spec() {
  static const std::string p = write_file("chain.json", R"({"name": "chain", "agents": [
    {"name": "writer", "prompt": "Once upon a time {task}", "temperature": 0, "max_tokens": 12},
    {"name": "editor", "prompt": "{agents.writer.output} The end. Then", "temperature": 0, "max_tokens": 12}]})");
  return p;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(AgentsCli, RunPrintsEachAgentsOutput) {
  const Result r = spool("agents run " + chain_spec() + " --input 'there was a cat' -t 1 -m " + stories());
  ASSERT_EQ(r.status, 0) << r.err;
  const size_t w = r.out.find("== writer (round 1) ==\n"), e = r.out.find("== editor (round 1) ==\n");
  ASSERT_NE(w, std::string::npos) << r.out;
  ASSERT_NE(e, std::string::npos) << r.out;
  EXPECT_EQ(w, 0u) << r.out;
  EXPECT_LT(w, e);
  EXPECT_GT(e - w, std::string("== writer (round 1) ==\n\n").size()) << "the writer's output is empty:\n" << r.out;
  EXPECT_GT(r.out.size() - e, std::string("== editor (round 1) ==\n\n").size()) << r.out;
  // The runtime's log lines go to stderr, not stdout.
  EXPECT_NE(r.err.find("[agent:writer] DONE"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("COMPLETED"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("[agent:"), std::string::npos) << r.out;
}

TEST(AgentsCli, RunIsDeterministicAtTemperatureZero) {
  const std::string args = "agents run " + chain_spec() + " --input 'there was a cat' -t 1 -m " + stories();
  const Result a = spool(args), b = spool(args);
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  // Another input gives another story (the input reaches the prompt).
  const Result c = spool("agents run " + chain_spec() + " --input-file " + write_file("in.txt", "a dog barked") +
                         " -t 1 -m " + stories());
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.out, a.out);
}

TEST(AgentsCli, RunJsonPrintsOneObjectPerOutput) {
  const Result r = spool("agents run " + chain_spec() + " --input hi --json -t 1 -m " + stories());
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.out);
  std::vector<json> events;
  for (std::string line; std::getline(lines, line);) events.push_back(json::parse(line));
  ASSERT_EQ(events.size(), 2u) << r.out;
  EXPECT_EQ(events[0]["type"], "output");
  EXPECT_EQ(events[0]["agent"], "writer");
  EXPECT_EQ(events[1]["agent"], "editor");
  EXPECT_EQ(events[1]["round"], 1);
  EXPECT_TRUE(events[1]["output"].is_string());
  EXPECT_GT(events[1]["tokens"].get<int>(), 0);
}

TEST(AgentsCli, ModelAliasFromDashM) {
  const std::string spec = write_file("alias.json", R"({"model": "story", "agents": [
    {"name": "a", "prompt": "Once {input}", "temperature": 0, "max_tokens": 4}]})");
  EXPECT_EQ(spool("agents run " + spec + " --input x -t 1 -m story=" + stories()).status, 0);
  // Without the alias the spec names an unknown model: the field is in the error.
  const Result r = spool("agents run " + spec + " --input x -t 1 -m " + stories());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err_lines(), 1) << r.err;
  EXPECT_NE(r.err.find("agents[0].model"), std::string::npos) << r.err;
  // The file name works as well.
  const std::string by_file = write_file("byfile.json", R"({"model": "stories260K.gguf", "agents": [
    {"name": "a", "prompt": "Once {input}", "temperature": 0, "max_tokens": 4}]})");
  EXPECT_EQ(spool("agents run " + by_file + " --input x -t 1 -m story=" + stories()).status, 0);
  // Several -m: each agent uses the model it names; the same name twice is an error.
  const std::string two = write_file("two.json", R"({"agents": [
    {"name": "a", "model": "first", "prompt": "Once {input}", "temperature": 0, "max_tokens": 4},
    {"name": "b", "model": "second", "prompt": "{previous}", "temperature": 0, "max_tokens": 4}]})");
  const Result both = spool("agents run " + two + " --input x -t 1 -m first=" + stories() + " -m second=" + stories());
  EXPECT_EQ(both.status, 0) << both.err;
  EXPECT_NE(both.out.find("== b (round 1) =="), std::string::npos) << both.out;
  const Result dup = spool("agents run " + two + " --input x -t 1 -m " + stories() + " -m " + stories());
  EXPECT_EQ(dup.status, 1);
  EXPECT_NE(dup.err.find("two models are named"), std::string::npos) << dup.err;
}

TEST(AgentsCli, BadSpecIsOneErrorLineNamingTheField) {
  const std::string unknown = write_file("unknown.json", R"({"agents": [
    {"name": "writer", "prompt": "Once {task}", "temperature": 0, "max_tokens": 4},
    {"name": "editor", "prompt": "{agents.nobody.output}", "temperature": 0, "max_tokens": 4}]})");
  Result r = spool("agents run " + unknown + " --input x -m " + stories());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err_lines(), 1) << r.err;
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("agents[1].prompt"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nobody"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;

  r = spool("agents run " + write_file("notjson.json", "{\"agents\": [") + " -m " + stories());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err_lines(), 1) << r.err;
  EXPECT_NE(r.err.find("not valid JSON"), std::string::npos) << r.err;

  r = spool("agents run " + temp_dir() + "/missing.json -m " + stories());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err_lines(), 1) << r.err;
  EXPECT_NE(r.err.find("missing.json"), std::string::npos) << r.err;
}

TEST(AgentsCli, FailedRunExitsOne) {
  // An input longer than max_context with context_policy fail: the run fails (the spec is fine).
  std::string long_input;
  for (int i = 0; i < 100; ++i) long_input += "the cat sat on the mat ";
  const std::string spec = write_file("fail.json", R"({"context_policy": "fail", "max_context": 64, "agents": [
    {"name": "writer", "prompt": "{input}", "temperature": 0, "max_tokens": 8}]})");
  const Result r = spool("agents run " + spec + " --input-file " + write_file("long.txt", long_input) + " -t 1 -m " +
                         stories());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(r.out.empty()) << r.out;
  const size_t e = r.err.rfind("error: run run_");
  ASSERT_NE(e, std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" failed: agent 'writer'", e), std::string::npos) << r.err;
  EXPECT_EQ(r.err.back(), '\n');
  EXPECT_EQ(r.err.find('\n', e), r.err.size() - 1) << "the error is the last line:\n" << r.err;
}

// `spool serve --port 0` on a scratch data dir, stopped (SIGTERM) at the end.
struct Server {
  pid_t pid = -1;
  std::string url, err_path;
  explicit Server(const std::string& extra) {
    const std::string dir = temp_dir() + "/data";
    fs::create_directories(dir);
    err_path = temp_dir() + "/serve.err";
    const std::string cmd = "exec " + kBin + " serve -m " + stories() + " -t 1 --port 0 --data-dir " + dir + " " + extra;
    pid = fork();
    if (pid == 0) {  // only async-signal-safe calls here
      const int fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 2);
      const int null_fd = open("/dev/null", O_WRONLY);
      dup2(null_fd, 1);
      execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
      _exit(127);
    }
    const std::regex port_re("serving .* on http://127\\.0\\.0\\.1:([0-9]+)");
    for (int i = 0; i < 200 && url.empty(); ++i) {
      std::smatch m;
      const std::string err = slurp(err_path);
      if (std::regex_search(err, m, port_re)) url = "http://127.0.0.1:" + m[1].str();
      else std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  }
  ~Server() {
    if (pid > 0) {
      kill(pid, SIGTERM);
      int st = 0;
      waitpid(pid, &st, 0);
    }
  }
};

TEST(AgentsCli, SubmitStatusLogsAgainstAServer) {
  Server server("--api-key sekret");
  ASSERT_FALSE(server.url.empty()) << slurp(server.err_path);
  const std::string srv = " --server " + server.url;
  const std::string key = " --api-key sekret";

  // No key: the server's 401 message, exit 1.
  Result r = spool("agents submit " + chain_spec() + " --input 'a dog'" + srv);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err_lines(), 1) << r.err;
  EXPECT_NE(r.err.find("API key"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("401"), std::string::npos) << r.err;

  // The key from SPOOL_API_KEY.
  r = spool("agents submit " + chain_spec() + " --input 'there was a cat'" + srv, "SPOOL_API_KEY=sekret");
  ASSERT_EQ(r.status, 0) << r.err;
  std::string id = r.out;
  while (!id.empty() && id.back() == '\n') id.pop_back();
  ASSERT_EQ(id.rfind("run_", 0), 0u) << r.out;
  ASSERT_EQ(id.find('\n'), std::string::npos) << r.out;

  json run;
  for (int i = 0; i < 200; ++i) {
    r = spool("agents status " + id + srv + key);
    ASSERT_EQ(r.status, 0) << r.err;
    run = json::parse(r.out);
    if (run["status"] == "completed" || run["status"] == "failed") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_EQ(run["status"], "completed") << run.dump(2);
  EXPECT_EQ(run["id"], id);
  EXPECT_EQ(run["input"], "there was a cat");
  ASSERT_EQ(run["agents"].size(), 2u);
  EXPECT_EQ(run["agents"][0]["name"], "writer");
  EXPECT_EQ(run["agents"][1]["status"], "done");
  EXPECT_NE(r.out.find("\n  \"agents\""), std::string::npos) << "status prints indented JSON:\n" << r.out;

  // The server's outputs are the in-process ones (greedy, same model).
  const Result local = spool("agents run " + chain_spec() + " --input 'there was a cat' -t 1 -m " + stories());
  ASSERT_EQ(local.status, 0) << local.err;
  EXPECT_EQ(local.out, "== writer (round 1) ==\n" + run["agents"][0]["output"].get<std::string>() +
                           "\n== editor (round 1) ==\n" + run["agents"][1]["output"].get<std::string>() + "\n");

  r = spool("agents logs " + id + srv + key);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("[run:" + id + "] QUEUED\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[agent:editor] DONE"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[run:" + id + "] COMPLETED\n"), std::string::npos) << r.out;

  // The event stream of a finished run replays to its end.
  r = spool("agents events " + id + srv + key);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, local.out);
  r = spool("agents events --json " + id + srv + key);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"type\":\"done\""), std::string::npos) << r.out;

  // Cancelling a finished run is a no-op; an unknown run is the server's 404.
  r = spool("agents cancel " + id + srv + key);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, id + " completed\n");
  r = spool("agents status run_0123456789abcdef01234567" + srv + key);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err_lines(), 1) << r.err;
  EXPECT_NE(r.err.find("no pipeline run"), std::string::npos) << r.err;

  // A bad spec is rejected by the server naming the field.
  r = spool("agents submit " + write_file("bad-remote.json", R"({"agents": [
    {"name": "a", "prompt": "{agents.b.output}", "max_tokens": 4}, {"name": "b", "prompt": "x", "max_tokens": 4}]})") +
            srv + key);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err_lines(), 1) << r.err;
  EXPECT_NE(r.err.find("agents[0].prompt"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("400"), std::string::npos) << r.err;
}

TEST(AgentsCli, UnreachableServerIsOneErrorLine) {
  const Result r = spool("agents status run_0123456789abcdef01234567 --server http://127.0.0.1:1");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err_lines(), 1) << r.err;
  EXPECT_NE(r.err.find("cannot reach http://127.0.0.1:1"), std::string::npos) << r.err;
}

TEST(AgentsCli, HelpListsTheSubcommands) {
  const Result r = spool("agents --help");
  EXPECT_EQ(r.status, 0);
  for (const char* sub : {"run", "submit", "status", "cancel", "logs", "events"})
    EXPECT_NE(r.out.find(std::string("  ") + sub), std::string::npos) << sub << "\n" << r.out;
  const Result none = spool("agents");
  EXPECT_NE(none.status, 0);
}

}  // namespace
