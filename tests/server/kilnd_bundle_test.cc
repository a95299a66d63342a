// Cache bundles end to end: real kilnd processes (RocksDB on disk, gRPC on loopback, the real
// compiler) and the `kiln bundle` commands. A job's compiles exported from one kilnd and
// imported into a fresh one are all hits there, with identical bytes; a damaged bundle is
// refused whole and leaves the fresh kilnd empty; --since and explicit keys select; export
// needs the `read` role and import `compile`.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/bundle.h"
#include "client/cache_client.h"
#include "client/compile_client.h"
#include "tests/server/kilnd_client_fixture.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace kiln {
namespace {

using ::kiln::testing::KilndProcess;
using ::kiln::testing::LoadSharedGraph;
using ::kiln::testing::TempDir;
using ::testing::HasSubstr;

// Corpus graphs a job compiles: forward and backward, static and symbolic shapes.
const std::vector<std::string> kJobGraphs = {
    "mlp_fp32.fw.json",       "mlp_fp32.bw.json",        "nanogpt_fp32.fw.json",
    "mlp_dynamic.fw.json.gz", "ref_mlp_bf16.fw.json.gz",
};
// Compiled outside the job: never in its bundle.
const std::string kOtherGraph = "ref_mlp.fw.json.gz";

class KilndBundleTest : public ::testing::Test {
 protected:
  static v1::CompileRequest Request(const std::string& graph, const std::string& job,
                                    int64_t sequence) {
    v1::CompileRequest r;
    *r.mutable_graph() = LoadSharedGraph(graph);
    r.mutable_options()->set_target("x86_64");
    if (!job.empty()) {
      r.mutable_job()->set_job_id(job);
      r.mutable_job()->set_world_size(1);
      r.mutable_job()->set_sequence(sequence);
    }
    return r;
  }

  static KilndProcess Start(const std::string& data_dir,
                            const std::vector<std::string>& flags = {}) {
    absl::StatusOr<KilndProcess> k = KilndProcess::Start(data_dir, flags);
    EXPECT_TRUE(k.ok()) << k.status();
    return *std::move(k);
  }

  static v1::CompileResponse Compile(const KilndProcess& kilnd, const v1::CompileRequest& r) {
    absl::StatusOr<std::unique_ptr<client::CompileClient>> c = testing::ConnectTo(kilnd);
    EXPECT_TRUE(c.ok()) << c.status();
    absl::StatusOr<v1::CompileResponse> response = (*c)->Compile(r, absl::Seconds(120));
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? *response : v1::CompileResponse();
  }

  static v1::CacheStats Stat(const KilndProcess& kilnd) {
    client::ChannelOptions o;
    o.address = kilnd.address();
    absl::StatusOr<v1::CacheStats> stats = (*client::CacheClient::Create(o))->Stat();
    EXPECT_TRUE(stats.ok()) << stats.status();
    return stats.ok() ? *stats : v1::CacheStats();
  }

  // `kiln bundle ARGS... --server ADDRESS`.
  static testing::RunResult Kiln(const KilndProcess& kilnd, std::vector<std::string> args) {
    std::vector<std::string> argv = {testing::KilnCliPath(), "bundle"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--server");
    argv.push_back(kilnd.address());
    absl::StatusOr<testing::RunResult> r = testing::Run(argv, absl::Seconds(120));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : testing::RunResult();
  }

  static std::vector<std::string> BundleKeys(const std::string& path) {
    absl::StatusOr<std::unique_ptr<client::BundleReader>> r = client::BundleReader::Open(path);
    EXPECT_TRUE(r.ok()) << r.status();
    std::vector<std::string> keys;
    if (r.ok()) {
      for (const v1::ActionEntry& e : (*r)->manifest().actions()) keys.push_back(e.compile_key());
    }
    return keys;
  }

  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }

  TempDir dir_;
};

TEST_F(KilndBundleTest, AnExportedJobIsAllHitsOnAFreshKilnd) {
  std::map<std::string, v1::CompileResponse> compiled;  // graph -> its answer on the source
  {
    KilndProcess source = Start(Path("source"));
    for (size_t i = 0; i < kJobGraphs.size(); ++i) {
      compiled[kJobGraphs[i]] = Compile(source, Request(kJobGraphs[i], "train-1", i));
      EXPECT_EQ(compiled[kJobGraphs[i]].outcome(), v1::CACHE_OUTCOME_MISS) << kJobGraphs[i];
    }
    Compile(source, Request(kOtherGraph, "", 0));
    Compile(source, Request(kOtherGraph, "another-job", 0));
  }
  // Which keys the job used survives a restart of the source.
  KilndProcess source = Start(Path("source"));
  const testing::RunResult exported =
      Kiln(source, {"export", "--job", "train-1", "-o", Path("job.bundle")});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  std::set<std::string> job_keys;
  for (const auto& [graph, r] : compiled) job_keys.insert(r.compile_key());
  EXPECT_THAT(exported.out, HasSubstr(absl::StrCat("exported ", Path("job.bundle"), ": ",
                                                   job_keys.size(), " actions")));
  const std::vector<std::string> keys = BundleKeys(Path("job.bundle"));
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()), job_keys);

  KilndProcess fresh = Start(Path("fresh"));
  EXPECT_EQ(Stat(fresh).actions(), 0);
  const testing::RunResult imported = Kiln(fresh, {"import", Path("job.bundle")});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  EXPECT_THAT(imported.out, HasSubstr("imported"));
  for (size_t i = 0; i < kJobGraphs.size(); ++i) {
    const v1::CompileResponse hit = Compile(fresh, Request(kJobGraphs[i], "train-1", i));
    EXPECT_EQ(hit.outcome(), v1::CACHE_OUTCOME_HIT) << kJobGraphs[i];
    EXPECT_EQ(hit.compile_key(), compiled[kJobGraphs[i]].compile_key());
    EXPECT_EQ(hit.compiled_graph(), compiled[kJobGraphs[i]].compiled_graph()) << kJobGraphs[i];
    EXPECT_EQ(hit.decision_digest(), compiled[kJobGraphs[i]].decision_digest());
  }
  EXPECT_EQ(Stat(fresh).misses(), 0);
  EXPECT_EQ(Compile(fresh, Request(kOtherGraph, "", 0)).outcome(), v1::CACHE_OUTCOME_MISS);

  // A second export of the same entries gives the same bytes; importing again writes no blob.
  const testing::RunResult again =
      Kiln(source, {"export", "--job", "train-1", "-o", Path("again.bundle")});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(*testing::ReadFile(Path("again.bundle")), *testing::ReadFile(Path("job.bundle")));
  const testing::RunResult reimported = Kiln(fresh, {"import", Path("job.bundle")});
  ASSERT_EQ(reimported.exit_code, 0) << reimported.err;
  EXPECT_THAT(reimported.out, HasSubstr(", 0 blobs written"));
}

TEST_F(KilndBundleTest, EveryRankOfAJobIsRecorded) {
  KilndProcess source = Start(Path("source"));
  // Both ranks of job "ddp" meet in the rendezvous; job "solo" (one rank) compiles another
  // graph. Each job's bundle holds the key it used, and only that.
  std::vector<v1::CompileResponse> answers(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      v1::CompileRequest r = Request(kJobGraphs[0], "ddp", 0);
      r.mutable_job()->set_rank(rank);
      r.mutable_job()->set_world_size(2);
      answers[rank] = Compile(source, r);
    });
  }
  for (std::thread& t : ranks) t.join();
  EXPECT_EQ(answers[0].compiled_graph(), answers[1].compiled_graph());
  const std::string second = Compile(source, Request(kJobGraphs[1], "solo", 0)).compile_key();
  ASSERT_EQ(Kiln(source, {"export", "--job", "ddp", "-o", Path("ddp.bundle")}).exit_code, 0);
  EXPECT_EQ(BundleKeys(Path("ddp.bundle")), std::vector<std::string>{answers[0].compile_key()});
  ASSERT_EQ(Kiln(source, {"export", "--job", "solo", "-o", Path("solo.bundle")}).exit_code, 0);
  EXPECT_EQ(BundleKeys(Path("solo.bundle")), std::vector<std::string>{second});
}

TEST_F(KilndBundleTest, ADamagedBundleIsRefusedWholeAndNothingIsWritten) {
  KilndProcess source = Start(Path("source"));
  for (size_t i = 0; i < 3; ++i) Compile(source, Request(kJobGraphs[i], "j", i));
  ASSERT_EQ(Kiln(source, {"export", "--job", "j", "-o", Path("good.bundle")}).exit_code, 0);
  const std::string good = *testing::ReadFile(Path("good.bundle"));
  absl::StatusOr<std::unique_ptr<client::BundleReader>> reader =
      client::BundleReader::Open(Path("good.bundle"));
  ASSERT_TRUE(reader.ok()) << reader.status();
  const v1::Digest& last = (*reader)->manifest().blobs((*reader)->manifest().blobs_size() - 1);

  struct Damage {
    std::string name;
    std::string bytes;
    std::string says;
  };
  std::string flipped_blob = good;
  flipped_blob[good.size() - 10] ^= 0x01;  // in the last blob: every other blob is sound
  std::string flipped_manifest = good;
  flipped_manifest[40] ^= 0x01;
  const std::vector<Damage> damages = {
      {"blob.bundle", flipped_blob,
       absl::StrCat("corrupt: blob ", last.hash(), "/", last.size_bytes())},
      {"manifest.bundle", flipped_manifest, "the manifest's checksum does not match"},
      {"truncated.bundle", good.substr(0, good.size() - 1), "is truncated"},
      {"text.bundle", "hello\n", "is not a Kiln bundle"},
  };
  KilndProcess fresh = Start(Path("fresh"));
  for (const Damage& d : damages) {
    std::ofstream(Path(d.name), std::ios::binary) << d.bytes;
    const testing::RunResult r = Kiln(fresh, {"import", Path(d.name)});
    EXPECT_NE(r.exit_code, 0) << d.name;
    EXPECT_THAT(r.err, HasSubstr("bundle import refused")) << d.name;
    EXPECT_THAT(r.err, HasSubstr(d.says)) << d.name;
    const v1::CacheStats stats = Stat(fresh);
    EXPECT_EQ(stats.blobs(), 0) << d.name;
    EXPECT_EQ(stats.actions(), 0) << d.name;
  }
  const testing::RunResult missing = Kiln(fresh, {"import", Path("absent.bundle")});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(missing.err, HasSubstr("no bundle at " + Path("absent.bundle")));
  EXPECT_EQ(Compile(fresh, Request(kJobGraphs[0], "j", 0)).outcome(), v1::CACHE_OUTCOME_MISS);
}

TEST_F(KilndBundleTest, SinceAndKeysSelectAndUnknownKeysAreNamed) {
  KilndProcess source = Start(Path("source"));
  const std::string early = Compile(source, Request(kJobGraphs[0], "", 0)).compile_key();
  absl::SleepFor(absl::Milliseconds(20));
  const absl::Time cut = absl::Now();
  absl::SleepFor(absl::Milliseconds(20));
  const std::string late = Compile(source, Request(kJobGraphs[1], "", 0)).compile_key();

  const std::string since = absl::FormatTime(absl::RFC3339_full, cut, absl::UTCTimeZone());
  ASSERT_EQ(Kiln(source, {"export", "--since", since, "-o", Path("since.bundle")}).exit_code, 0);
  EXPECT_EQ(BundleKeys(Path("since.bundle")), std::vector<std::string>{late});
  ASSERT_EQ(Kiln(source, {"export", "--since", "1h", "-o", Path("hour.bundle")}).exit_code, 0);
  EXPECT_EQ(BundleKeys(Path("hour.bundle")).size(), 2u);
  ASSERT_EQ(Kiln(source, {"export", early, "-o", Path("key.bundle")}).exit_code, 0);
  EXPECT_EQ(BundleKeys(Path("key.bundle")), std::vector<std::string>{early});

  const std::string unknown(64, 'f');
  const testing::RunResult r = Kiln(source, {"export", early, unknown, "-o", Path("bad.bundle")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("no action for key " + unknown));
  EXPECT_FALSE(testing::ReadFile(Path("bad.bundle")).ok()) << "nothing is left behind";
  const testing::RunResult empty = Kiln(source, {"export", "-o", Path("none.bundle")});
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_THAT(empty.err, HasSubstr("name what to export"));
  const testing::RunResult future =
      Kiln(source, {"export", "--since", "2100-01-01T00:00:00Z", "-o", Path("f.bundle")});
  EXPECT_EQ(future.exit_code, 1);
  EXPECT_THAT(future.err, HasSubstr("no action entry matches"));
}

TEST_F(KilndBundleTest, ExportNeedsReadAndImportNeedsCompile) {
  const std::string tokens = Path("tokens");
  std::ofstream(tokens) << "read reader-token-0123456789\ncompile compile-token-0123456789\n";
  std::ofstream(Path("reader")) << "reader-token-0123456789\n";
  std::ofstream(Path("compiler")) << "compile-token-0123456789\n";
  KilndProcess source = Start(Path("source"), {"--token-file", tokens});
  v1::CompileRequest request = Request(kJobGraphs[0], "j", 0);
  {
    client::ChannelOptions o;
    o.address = source.address();
    o.token = "compile-token-0123456789";
    absl::StatusOr<v1::CompileResponse> r =
        (*client::CompileClient::Connect(o))->Compile(request, absl::Seconds(120));
    ASSERT_TRUE(r.ok()) << r.status();
  }
  const testing::RunResult exported = Kiln(
      source, {"export", "--job", "j", "-o", Path("j.bundle"), "--token-file", Path("reader")});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  const testing::RunResult anonymous = Kiln(source, {"export", "--job", "j", "-o", Path("x")});
  EXPECT_THAT(anonymous.err, HasSubstr("UNAUTHENTICATED"));

  KilndProcess fresh = Start(Path("fresh"), {"--token-file", tokens});
  const testing::RunResult denied =
      Kiln(fresh, {"import", Path("j.bundle"), "--token-file", Path("reader")});
  EXPECT_NE(denied.exit_code, 0);
  EXPECT_THAT(denied.err, HasSubstr("PERMISSION_DENIED"));
  const testing::RunResult imported =
      Kiln(fresh, {"import", Path("j.bundle"), "--token-file", Path("compiler")});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  client::ChannelOptions o;
  o.address = fresh.address();
  o.token = "reader-token-0123456789";  // a read token gets hits only: this must be one
  absl::StatusOr<v1::CompileResponse> hit =
      (*client::CompileClient::Connect(o))->Compile(request, absl::Seconds(120));
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->outcome(), v1::CACHE_OUTCOME_HIT);
}

}  // namespace
}  // namespace kiln
