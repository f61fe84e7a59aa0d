// FaultStorage: the wrapper behind SPOOL_STORAGE_FAULTS (fault_storage.h).
#include "storage/fault_storage.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace spool {
namespace {

uint64_t parse_u64(const std::string& s, const std::string& rule) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
    throw Error("SPOOL_STORAGE_FAULTS: rule '" + rule + "': '" + s + "' is not a non-negative integer");
  try {
    return std::stoull(s);
  } catch (...) {
    throw Error("SPOOL_STORAGE_FAULTS: rule '" + rule + "': '" + s + "' is out of range");
  }
}

FaultRule parse_rule(const std::string& rule) {
  FaultRule r;
  std::string rest = rule;
  const size_t at = rest.find('@');
  if (at == std::string::npos)
    throw Error("SPOOL_STORAGE_FAULTS: rule '" + rule + "' has no '@BEGIN-END' (form: KIND[=ARG]@BEGIN-END[#COUNT][:FILE])");
  std::string kind = rest.substr(0, at), arg;
  rest = rest.substr(at + 1);
  if (const size_t eq = kind.find('='); eq != std::string::npos) arg = kind.substr(eq + 1), kind = kind.substr(0, eq);
  if (kind == "eio") r.kind = FaultRule::Kind::Eio;
  else if (kind == "short") r.kind = FaultRule::Kind::Short;
  else if (kind == "delay") r.kind = FaultRule::Kind::Delay;
  else if (kind == "corrupt") r.kind = FaultRule::Kind::Corrupt;
  else throw Error("SPOOL_STORAGE_FAULTS: rule '" + rule + "': unknown kind '" + kind + "' (eio, short, delay, corrupt)");
  if (r.kind == FaultRule::Kind::Delay) {
    if (arg.empty()) throw Error("SPOOL_STORAGE_FAULTS: rule '" + rule + "': delay needs milliseconds (delay=MS@...)");
    r.delay_ms = (int)std::min<uint64_t>(parse_u64(arg, rule), 600000);
  } else if (!arg.empty()) {
    throw Error("SPOOL_STORAGE_FAULTS: rule '" + rule + "': " + kind + " takes no argument");
  }
  if (const size_t colon = rest.find(':'); colon != std::string::npos) r.file = rest.substr(colon + 1), rest = rest.substr(0, colon);
  if (const size_t hash = rest.find('#'); hash != std::string::npos) {
    r.count = (long)std::min<uint64_t>(parse_u64(rest.substr(hash + 1), rule), 1u << 30);
    rest = rest.substr(0, hash);
  }
  const size_t dash = rest.find('-');
  if (dash == std::string::npos) throw Error("SPOOL_STORAGE_FAULTS: rule '" + rule + "': range must be BEGIN-END");
  r.begin = parse_u64(rest.substr(0, dash), rule);
  r.end = parse_u64(rest.substr(dash + 1), rule);
  if (r.end <= r.begin) throw Error("SPOOL_STORAGE_FAULTS: rule '" + rule + "': empty range (END must be above BEGIN)");
  return r;
}

class FaultStorage final : public Storage {
 public:
  FaultStorage(std::unique_ptr<Storage> inner, std::vector<FaultRule> rules)
      : inner_(std::move(inner)), rules_(std::move(rules)) {}

  const std::string& name() const override { return inner_->name(); }
  uint64_t size() const override { return inner_->size(); }
  bool direct() const override { return inner_->direct(); }
  size_t alignment() const override { return inner_->alignment(); }
  uint64_t retries() const override { return inner_->retries(); }

  void read(std::span<const ReadRequest> reqs) override {
    for (const ReadRequest& r : reqs) before(r.offset, r.n);
    inner_->read(reqs);
    for (const ReadRequest& r : reqs) after(r.offset, r.n, static_cast<uint8_t*>(r.dst));
  }

  void read_unaligned(uint64_t offset, size_t n, void* dst) override {
    before(offset, n);
    inner_->read_unaligned(offset, n, dst);
    after(offset, n, static_cast<uint8_t*>(dst));
  }

 private:
  // Takes one use of rule i if it applies to [off, off + n).
  bool fires(size_t i, uint64_t off, size_t n) {
    FaultRule& r = rules_[i];
    if (off >= r.end || off + n <= r.begin) return false;
    std::lock_guard<std::mutex> lock(mu_);
    if (r.count == 0) return false;
    if (r.count > 0) --r.count;
    return true;
  }

  std::string where(uint64_t off, size_t n) const {
    return "read of '" + inner_->name() + "' at offset " + std::to_string(off) + " (" + std::to_string(n) + " bytes)";
  }

  void before(uint64_t off, size_t n) {
    for (size_t i = 0; i < rules_.size(); ++i) {
      const FaultRule::Kind k = rules_[i].kind;
      if (k == FaultRule::Kind::Corrupt) continue;
      if (!fires(i, off, n)) continue;
      if (k == FaultRule::Kind::Delay)
        std::this_thread::sleep_for(std::chrono::milliseconds(rules_[i].delay_ms));
      else if (k == FaultRule::Kind::Eio)
        throw Error(where(off, n) + " failed: " + std::strerror(EIO) + " (injected by SPOOL_STORAGE_FAULTS)");
      else  // Short: the read ends where the range begins (at least one byte short)
        throw Error(where(off, n) + " was short: " +
                    std::to_string(rules_[i].begin > off ? rules_[i].begin - off : 0) +
                    " bytes delivered (injected by SPOOL_STORAGE_FAULTS)");
    }
  }

  void after(uint64_t off, size_t n, uint8_t* dst) {
    for (size_t i = 0; i < rules_.size(); ++i) {
      const FaultRule& r = rules_[i];
      if (r.kind != FaultRule::Kind::Corrupt || !fires(i, off, n)) continue;
      const uint64_t b = std::max(off, r.begin), e = std::min<uint64_t>(off + n, r.end);
      for (uint64_t p = b; p < e; ++p) dst[p - off] ^= 0x5A;
    }
  }

  std::unique_ptr<Storage> inner_;
  std::vector<FaultRule> rules_;
  std::mutex mu_;
};

}  // namespace

std::vector<FaultRule> parse_fault_rules(const std::string& spec) {
  std::vector<FaultRule> out;
  size_t i = 0;
  while (i <= spec.size()) {
    size_t j = spec.find(';', i);
    if (j == std::string::npos) j = spec.size();
    std::string rule = spec.substr(i, j - i);
    while (!rule.empty() && rule.front() == ' ') rule.erase(0, 1);
    while (!rule.empty() && rule.back() == ' ') rule.pop_back();
    if (!rule.empty()) out.push_back(parse_rule(rule));
    i = j + 1;
  }
  return out;
}

std::unique_ptr<Storage> with_faults(std::unique_ptr<Storage> inner, const std::vector<FaultRule>& rules) {
  std::vector<FaultRule> mine;
  for (const FaultRule& r : rules)
    if (r.file.empty() || inner->name().ends_with(r.file)) mine.push_back(r);
  if (mine.empty()) return inner;
  return std::make_unique<FaultStorage>(std::move(inner), std::move(mine));
}

std::vector<FaultRule> env_fault_rules() {
  const char* s = std::getenv("SPOOL_STORAGE_FAULTS");  // read at every open: tests set it per case
  return s ? parse_fault_rules(s) : std::vector<FaultRule>{};
}

}  // namespace spool
