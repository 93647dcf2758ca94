#include "server/coordinator/store/etcd_state.h"

#include <unistd.h>

#include <ctime>
#include <random>
#include <thread>

#include "common/base/log.h"

namespace shardps {
namespace {

std::string NowUtc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

Status ParseEtcdUrl(const std::string& url, std::vector<std::string>* endpoints, std::string* prefix) {
  const std::string scheme = "etcd://";
  if (url.rfind(scheme, 0) != 0) return Status::InvalidArgument("'" + url + "' is not etcd://HOST:PORT[,HOST:PORT...]/PREFIX");
  const std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  if (slash == std::string::npos || slash + 1 >= rest.size())
    return Status::InvalidArgument("'" + url + "' names no prefix (etcd://HOST:PORT/PREFIX: the job's keys go under PREFIX)");
  *prefix = rest.substr(slash + 1);
  while (!prefix->empty() && prefix->back() == '/') prefix->pop_back();
  endpoints->clear();
  std::string hosts = rest.substr(0, slash);
  for (size_t b = 0; b <= hosts.size();) {
    size_t e = hosts.find(',', b);
    if (e == std::string::npos) e = hosts.size();
    const std::string h = hosts.substr(b, e - b);
    const size_t colon = h.rfind(':');
    if (h.empty() || colon == std::string::npos || colon == 0 || colon + 1 == h.size() ||
        h.find_first_not_of("0123456789", colon + 1) != std::string::npos)
      return Status::InvalidArgument("'" + url + "': '" + h + "' is not HOST:PORT");
    endpoints->push_back(h);
    b = e + 1;
  }
  return Status::OK();
}

EtcdStateStore::EtcdStateStore(std::vector<std::string> endpoints, std::string prefix)
    : etcd_(std::move(endpoints), std::chrono::milliseconds(1000)), prefix_(std::move(prefix)) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::random_device rd;
  id_ = std::string(host) + ":" + std::to_string(getpid()) + ":" + std::to_string(rd());
}

Status EtcdStateStore::Open(const std::string& url, std::unique_ptr<StateStore>* out, const StoreWait& wait) {
  std::vector<std::string> endpoints;
  std::string prefix;
  SHARDPS_RETURN_IF_ERROR(ParseEtcdUrl(url, &endpoints, &prefix));
  std::unique_ptr<EtcdStateStore> s(new EtcdStateStore(std::move(endpoints), prefix));
  s->path_ = url;
  SHARDPS_RETURN_IF_ERROR(s->Campaign(wait));
  *out = std::move(s);
  return Status::OK();
}

Status EtcdStateStore::TryLead(std::string* leader, bool* led) {
  *led = false;
  // A lease first (again when the last lapsed, as while etcd was down).
  if (lease_ == 0 || (Clock::now() - renewed_ >= std::chrono::milliseconds(500) && !Renew().ok())) {
    SHARDPS_RETURN_IF_ERROR(etcd_.Grant(kLeaseSec, &lease_));
    renewed_ = Clock::now();
    lapses_ = renewed_ + std::chrono::seconds(kLeaseSec);
  }
  EtcdClient::Txn take;
  take.compare = EtcdClient::Txn::kAbsent;
  take.key = prefix_ + "/leader";
  take.puts = {{take.key, id_}};
  take.lease = lease_;
  SHARDPS_RETURN_IF_ERROR(etcd_.Commit(take, led));
  if (*led) return Status::OK();
  bool found = false;
  return etcd_.Get(take.key, leader, &found);
}

Status EtcdStateStore::Campaign(const StoreWait& wait) {
  // A standby (no time limit) waits out etcd too; a coordinator started
  // alone says at once that etcd cannot be reached.
  const bool patient = wait.campaign.count() == 0;
  const auto deadline = Clock::now() + wait.campaign;
  std::string said, down;
  for (;; std::this_thread::sleep_for(std::chrono::milliseconds(100))) {
    std::string leader;
    bool led = false;
    Status s = TryLead(&leader, &led);
    if (wait.stop && wait.stop->load())
      return Status::Unavailable("stopped while waiting to lead the job in " + path_);
    if (!s.ok()) {
      if (!patient) return s;
      if (down.empty()) LOG_WARN << "waiting for etcd to lead the job in " << path_ << ": " << s.message();
      down = s.message();
      continue;
    }
    if (!down.empty()) LOG_INFO << "etcd answers again (" << path_ << ")";
    down.clear();
    if (led) break;
    if (!patient && Clock::now() >= deadline)
      return Status::Conflict("another coordinator leads the job in " + path_ + " (" + leader + ") and its lease " +
                              "did not lapse within " + std::to_string(wait.campaign.count()) + " s");
    if (leader != said) {
      LOG_INFO << "waiting for the coordinator that leads the job in " << path_ << " (" << leader
               << ") to give up or lapse (at most " << kLeaseSec << " s after it died)";
      said = leader;
    }
  }
  SHARDPS_RETURN_IF_ERROR(AfterTheEnd(patient, wait.ended));
  LOG_INFO << "leading the job in " << path_ << " as " << id_ << " (lease " << kLeaseSec << " s)";
  return Status::OK();
}

Status EtcdStateStore::AfterTheEnd(bool standby, bool* ended) {
  std::string when;
  bool found = false;
  SHARDPS_RETURN_IF_ERROR(etcd_.Get(prefix_ + "/ended", &when, &found));
  if (!found) return Status::OK();
  if (standby) {
    if (Status s = etcd_.Revoke(lease_); !s.ok()) LOG_WARN << "giving up the lead in " << path_ << ": " << s.message();
    deposed_ = true;
    if (ended) *ended = true;
    return Status::Unavailable("the job in " + path_ + " ended (" + when + "): there is nothing to take over");
  }
  // A new job under the same prefix: the old one's end no longer applies.
  EtcdClient::Txn t;
  t.key = prefix_ + "/leader";
  t.value = id_;
  t.deletes = {prefix_ + "/ended"};
  bool ok = false;
  SHARDPS_RETURN_IF_ERROR(etcd_.Commit(t, &ok));
  if (!ok) return Status::Conflict("lost the lead of the job in " + path_ + " as it began");
  LOG_INFO << "the job in " << path_ << " ended before (" << when << "): starting it afresh";
  return Status::OK();
}

Status EtcdStateStore::Renew() {
  const auto sent = Clock::now();
  int64_t ttl = 0;
  Status s = etcd_.KeepAlive(lease_, &ttl);
  if (s.ok() && ttl <= 0) s = Status::Unavailable("its lease lapsed");
  if (!s.ok()) return s;
  renewed_ = sent;
  lapses_ = sent + std::chrono::seconds(ttl);
  return Status::OK();
}

Status EtcdStateStore::Keep() {
  if (deposed_) return Status::Conflict("this coordinator no longer leads the job in " + path_);
  const auto now = Clock::now();
  if (now - renewed_ < std::chrono::milliseconds(500)) return Status::OK();
  Status s = Renew();
  if (s.ok()) return s;
  // Stop acting before the lease can have lapsed: another coordinator may
  // take the lead as soon as it does.
  if (Clock::now() + std::chrono::milliseconds(500) >= lapses_) {
    deposed_ = true;
    return Status::Unavailable("this coordinator cannot renew its lead of the job in " + path_ + " (" + s.message() +
                               "): it stops acting before another may take over");
  }
  LOG_WARN << "renewing the lead in " << path_ << " failed (" << s.message() << "); trying again";
  return Status::OK();
}

Status EtcdStateStore::Load(const StateShape& job, DurableState* out, bool* found) {
  std::string value;
  SHARDPS_RETURN_IF_ERROR(etcd_.Get(prefix_ + "/state", &value, found));
  if (!*found) return Status::OK();
  Status s = DecodeState(value, job, out);
  if (!s.ok()) {
    *found = false;
    return Status(s.code(), path_ + ": " + s.message());
  }
  return Status::OK();
}

bool EtcdStateStore::Save(const DurableState& d) {
  if (deposed_) return false;
  EtcdClient::Txn t;
  t.key = prefix_ + "/leader";
  t.value = id_;
  t.puts = {{prefix_ + "/state", EncodeState(d)}};
  bool ok = false;
  Status s = etcd_.Commit(t, &ok);
  if (!s.ok()) {
    // Its replies would promise what is not saved: it steps down, and the
    // job waits (data keeps flowing) for a coordinator that can save.
    deposed_ = true;
    LOG_ERROR << "cannot save the coordinator's state in " << path_ << " (" << s.message()
              << "): this coordinator steps down; a standby, or one started again, leads once etcd answers";
    return false;
  }
  if (!ok) {
    deposed_ = true;
    LOG_ERROR << "not saved: this coordinator no longer leads the job in " << path_;
  }
  return ok;
}

void EtcdStateStore::Forget() {
  if (deposed_) return;
  EtcdClient::Txn t;
  t.key = prefix_ + "/leader";
  t.value = id_;
  t.deletes = {prefix_ + "/state"};
  // (No lease: the mark outlives this leader, for the standbys to read.)
  t.puts = {{prefix_ + "/ended", NowUtc() + " by " + id_}};
  bool ok = false;
  Status s = etcd_.Commit(t, &ok);
  if (!s.ok() || !ok) LOG_WARN << "cannot clear the finished job's state in " << path_ << ": " << (s.ok() ? "not its leader" : s.message());
}

EtcdStateStore::~EtcdStateStore() {
  if (lease_ && !deposed_) {
    Status s = etcd_.Revoke(lease_);  // the lead goes at once, not when the lease lapses
    if (!s.ok()) LOG_WARN << "giving up the lead in " << path_ << ": " << s.message();
  }
}

}  // namespace shardps
