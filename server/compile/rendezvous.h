#pragma once

// Rendezvous gathers the n-th compile request of every rank of a job and turns them into one
// decision. When all `world_size` ranks have arrived with the same key, the work runs once
// (on the thread of the last rank to arrive) and every rank gets the same result. When keys
// differ, every rank gets FAILED_PRECONDITION with a divergence report naming the ranks in
// each group and the first difference. When ranks are still missing at the timeout, the
// policy decides: every waiting rank gets DEADLINE_EXCEEDED naming the missing ranks, or
// the present ranks proceed and their answer lists who was missing. Late ranks get the
// decision that was made. Thread-safe.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kiln/v1/errors.pb.h"
#include "proto/base/sync.h"
#include "proto/error_detail.h"

namespace kiln::server {

struct RendezvousPolicy {
  absl::Duration timeout = absl::Seconds(120);  // from the first rank's arrival
  bool proceed_without_missing = false;         // false: missing ranks fail everyone
  absl::Duration retain = absl::Minutes(10);    // how long a decision answers late ranks
};

// Who took part in a decision.
struct Participation {
  std::vector<int> present;
  std::vector<int> missing;
  absl::Time deadline;  // the latest deadline of the present ranks: the work may take this long
};

// Counts for metrics.
struct RendezvousStats {
  int64_t groups = 0;  // decisions made
  int64_t divergences = 0;
  int64_t timeouts = 0;  // groups with missing ranks at the timeout
  int64_t waiting = 0;   // ranks waiting now
};

template <typename Payload, typename Result>
class Rendezvous {
 public:
  // The compile key of a payload, and a description of the first difference between two.
  using KeyOf = std::function<std::string(const Payload&)>;
  using Differ = std::function<std::string(const Payload&, const Payload&)>;
  // The work, run once per decision with one present rank's payload.
  using Compute = std::function<absl::StatusOr<Result>(const Payload&, const Participation&)>;

  struct Arrival {
    std::string job_id;
    int64_t sequence = 0;
    int rank = 0;
    int world_size = 0;
    Payload payload;
  };

  struct Answer {
    Result result;
    Participation participation;
  };

  Rendezvous(RendezvousPolicy policy, KeyOf key_of, Differ differ)
      : policy_(policy), key_of_(std::move(key_of)), differ_(std::move(differ)) {}

  // Joins the rendezvous of (job_id, sequence). Blocks until there is a decision and, if the
  // group proceeds, its result; or until the caller's `deadline` passes or `abandoned()`.
  absl::StatusOr<Answer> Arrive(Arrival arrival, absl::Time deadline,
                                const std::function<bool()>& abandoned, const Compute& compute) {
    if (arrival.world_size < 2 || arrival.rank < 0 || arrival.rank >= arrival.world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("job.rank ", arrival.rank, " is outside [0, ", arrival.world_size, ")"));
    }
    const std::string key = key_of_(arrival.payload);
    std::shared_ptr<Group> group;
    bool run_compute = false;
    {
      MutexLock lock(&mu_);
      PruneLocked();
      auto& slot = groups_[{arrival.job_id, arrival.sequence}];
      if (slot == nullptr) {
        slot = std::make_shared<Group>();
        slot->job_id = arrival.job_id;
        slot->sequence = arrival.sequence;
        slot->world_size = arrival.world_size;
        slot->opened = absl::Now();
      }
      group = slot;
      if (group->world_size != arrival.world_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "job.world_size ", arrival.world_size, " differs from the ", group->world_size,
            " that other ranks of job ", arrival.job_id, " sent for sequence ", arrival.sequence));
      }
      if (group->state == State::kGathering) {
        group->arrivals[arrival.rank] = {key, std::move(arrival.payload), deadline};
        if (static_cast<int>(group->arrivals.size()) == group->world_size) {
          run_compute = DecideLocked(*group);
        }
      } else if (group->state != State::kFailed && key != group->key) {
        // A late rank whose graph differs from the decision.
        ++stats_.divergences;
        return Divergence(*group, arrival.rank, key, arrival.payload);
      }
    }
    if (run_compute) RunCompute(*group, compute);

    MutexLock lock(&mu_);
    ++stats_.waiting;
    absl::StatusOr<Answer> answer = WaitLocked(*group, deadline, abandoned, compute);
    --stats_.waiting;
    return answer;
  }

  RendezvousStats stats() const {
    MutexLock lock(&mu_);
    return stats_;
  }

 private:
  enum class State { kGathering, kComputing, kDone, kFailed };

  struct RankArrival {
    std::string key;
    Payload payload;
    absl::Time deadline;
  };

  struct Group {
    std::string job_id;
    int64_t sequence = 0;
    int world_size = 0;
    absl::Time opened;
    absl::Time decided;
    State state = State::kGathering;
    std::map<int, RankArrival> arrivals;  // by rank
    std::string key;                      // the decided key
    Participation participation;
    absl::Status failure;
    absl::StatusOr<Result> result = absl::UnknownError("not computed");
    CondVar cv;
  };

  absl::StatusOr<Answer> WaitLocked(Group& g, absl::Time deadline,
                                    const std::function<bool()>& abandoned, const Compute& compute)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Group* group = &g;
    const absl::Time group_timeout = group->opened + policy_.timeout;
    while (true) {
      if (group->state == State::kFailed) return group->failure;
      if (group->state == State::kDone) {
        if (!group->result.ok()) return group->result.status();
        return Answer{*group->result, group->participation};
      }
      const absl::Time now = absl::Now();
      if (group->state == State::kGathering && now >= group_timeout) {
        ++stats_.timeouts;
        if (!policy_.proceed_without_missing) {
          FailMissingLocked(*group);
          continue;
        }
        if (DecideLocked(*group)) {
          mu_.Unlock();
          RunCompute(*group, compute);
          mu_.Lock();
        }
        continue;
      }
      if (now >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("deadline exceeded waiting for the rendezvous of job ", group->job_id,
                         " sequence ", group->sequence));
      }
      if (abandoned && abandoned()) {
        return absl::CancelledError("cancelled while waiting for the rendezvous");
      }
      absl::Time wake = std::min(deadline, now + absl::Milliseconds(20));
      if (group->state == State::kGathering) wake = std::min(wake, group_timeout);
      group->cv.WaitWithDeadline(&mu_, wake);
    }
  }

  // Decides a group from the ranks present. Returns true when the caller must run the work.
  bool DecideLocked(Group& g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++stats_.groups;
    g.decided = absl::Now();
    for (int r = 0; r < g.world_size; ++r) {
      (g.arrivals.contains(r) ? g.participation.present : g.participation.missing).push_back(r);
    }
    std::map<std::string, std::vector<int>> by_key;
    for (const auto& [rank, a] : g.arrivals) by_key[a.key].push_back(rank);
    if (by_key.size() > 1) {
      ++stats_.divergences;
      g.state = State::kFailed;
      g.failure = DivergenceReport(g, by_key);
      g.cv.SignalAll();
      return false;
    }
    g.key = by_key.begin()->first;
    g.participation.deadline = absl::InfinitePast();
    for (const auto& [rank, a] : g.arrivals) {
      g.participation.deadline = std::max(g.participation.deadline, a.deadline);
    }
    g.state = State::kComputing;
    return true;
  }

  void RunCompute(Group& g, const Compute& compute) {
    const Payload* payload;
    Participation participation;
    {
      MutexLock lock(&mu_);
      payload = &g.arrivals.begin()->second.payload;
      participation = g.participation;
    }
    // Arrivals are never erased while the group is computing, so `payload` stays valid.
    absl::StatusOr<Result> result = compute(*payload, participation);
    MutexLock lock(&mu_);
    g.result = std::move(result);
    g.state = State::kDone;
    g.cv.SignalAll();
  }

  void FailMissingLocked(Group& g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    v1::ErrorDetail detail;
    std::vector<int> missing;
    for (int r = 0; r < g.world_size; ++r) {
      if (!g.arrivals.contains(r)) {
        missing.push_back(r);
        detail.add_missing_ranks(r);
      }
    }
    g.state = State::kFailed;
    g.decided = absl::Now();
    g.failure =
        WithErrorDetail(absl::DeadlineExceededError(absl::StrCat(
                            "rendezvous of job ", g.job_id, " sequence ", g.sequence,
                            " timed out after ", absl::FormatDuration(policy_.timeout), ": ranks ",
                            absl::StrJoin(missing, ","), " of ", g.world_size, " did not arrive")),
                        detail);
    g.cv.SignalAll();
  }

  absl::Status DivergenceReport(const Group& g,
                                const std::map<std::string, std::vector<int>>& by_key) {
    std::vector<std::pair<std::string, std::vector<int>>> groups(by_key.begin(), by_key.end());
    std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
      return a.second.size() > b.second.size();
    });
    v1::ErrorDetail detail;
    v1::DivergenceReport* report = detail.mutable_divergence();
    report->set_job_id(g.job_id);
    report->set_sequence(g.sequence);
    std::string message = absl::StrCat("ranks of job ", g.job_id, " sent different graphs for ",
                                       "compile sequence ", g.sequence, ":");
    const Payload& reference = g.arrivals.at(groups[0].second[0]).payload;
    for (size_t i = 0; i < groups.size(); ++i) {
      v1::RankGroup* rg = report->add_groups();
      rg->set_compile_key(groups[i].first);
      for (int r : groups[i].second) rg->add_ranks(r);
      absl::StrAppend(&message, i == 0 ? " " : "; ", "ranks [",
                      absl::StrJoin(groups[i].second, ","), "] key ",
                      groups[i].first.substr(0, 12));
      if (i > 0) {
        std::string diff =
            absl::StrCat("ranks [", absl::StrJoin(groups[i].second, ","), "] vs [",
                         absl::StrJoin(groups[0].second, ","),
                         "]: ", differ_(reference, g.arrivals.at(groups[i].second[0]).payload));
        absl::StrAppend(&message, " (", diff, ")");
        report->add_differences(std::move(diff));
      }
    }
    return WithErrorDetail(absl::FailedPreconditionError(message), detail);
  }

  absl::Status Divergence(const Group& g, int rank, const std::string& key,
                          const Payload& payload) {
    // Reported against the decided group; the late rank forms its own group.
    v1::ErrorDetail detail;
    v1::DivergenceReport* report = detail.mutable_divergence();
    report->set_job_id(g.job_id);
    report->set_sequence(g.sequence);
    v1::RankGroup* decided = report->add_groups();
    decided->set_compile_key(g.key);
    for (int r : g.participation.present) decided->add_ranks(r);
    v1::RankGroup* late = report->add_groups();
    late->set_compile_key(key);
    late->add_ranks(rank);
    const std::string diff =
        absl::StrCat("rank ", rank, " vs [", absl::StrJoin(g.participation.present, ","),
                     "]: ", differ_(g.arrivals.begin()->second.payload, payload));
    report->add_differences(diff);
    return WithErrorDetail(
        absl::FailedPreconditionError(absl::StrCat(
            "rank ", rank, " of job ", g.job_id, " sent a different graph for compile sequence ",
            g.sequence, " than ranks [", absl::StrJoin(g.participation.present, ","),
            "] already compiled (", diff, ")")),
        detail);
  }

  void PruneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time now = absl::Now();
    for (auto it = groups_.begin(); it != groups_.end();) {
      const Group& g = *it->second;
      const bool settled = g.state == State::kDone || g.state == State::kFailed;
      if (settled && now - g.decided > policy_.retain) {
        it = groups_.erase(it);
      } else {
        ++it;
      }
    }
  }

  const RendezvousPolicy policy_;
  const KeyOf key_of_;
  const Differ differ_;
  mutable Mutex mu_;
  std::map<std::pair<std::string, int64_t>, std::shared_ptr<Group>> groups_ ABSL_GUARDED_BY(mu_);
  RendezvousStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::server
