// kiln: the Kiln command-line client.

#include <google/protobuf/util/json_util.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/bundle_transfer.h"
#include "client/cache_client.h"
#include "client/channel.h"
#include "client/compile_client.h"
#include "client/health.h"
#include "kiln/v1/admin.grpc.pb.h"
#include "proto/base/serialize.h"
#include "proto/cache_outcome.h"
#include "proto/fx/capture_import.h"
#include "proto/graph_file.h"

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitBadUsage = 2;

int Fail(const std::string& message) {
  std::fprintf(stderr, "kiln: %s\n", message.c_str());
  return kExitFailure;
}

bool ReadWholeFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

bool WriteWholeFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

struct GlobalOptions {
  kiln::client::ChannelOptions channel;
  std::string token_file;
};

absl::Status LoadToken(GlobalOptions& global) {
  if (global.token_file.empty()) return absl::OkStatus();
  std::string token;
  if (!ReadWholeFile(global.token_file, &token)) {
    return absl::InvalidArgumentError("cannot read --token-file " + global.token_file);
  }
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  global.channel.token = token;
  return absl::OkStatus();
}

int RunHealth(GlobalOptions& global, double timeout_seconds) {
  if (absl::Status s = LoadToken(global); !s.ok()) return Fail(std::string(s.message()));
  absl::StatusOr<kiln::client::ServingStatus> status =
      kiln::client::CheckHealth(global.channel, "", absl::Seconds(timeout_seconds));
  if (!status.ok()) {
    return Fail("cannot reach " + global.channel.address + ": " +
                std::string(status.status().message()));
  }
  std::printf("%s\n", kiln::client::ServingStatusName(*status));
  return *status == kiln::client::ServingStatus::kServing ? 0 : kExitFailure;
}

int RunImportFx(const std::string& input, const std::string& output, std::string format) {
  std::string text;
  if (!ReadWholeFile(input, &text)) return Fail("cannot read " + input);
  absl::StatusOr<kiln::v1::Graph> graph = kiln::fx::ImportCapture(text);
  if (!graph.ok()) return Fail(input + ": " + std::string(graph.status().message()));
  if (format.empty()) format = absl::EndsWith(output, ".json") ? "json" : "binary";
  std::string bytes;
  if (format == "json") {
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = true;
    options.preserve_proto_field_names = true;
    auto status = google::protobuf::util::MessageToJsonString(*graph, &bytes, options);
    if (!status.ok()) return Fail("cannot print JSON: " + std::string(status.message()));
  } else {
    bytes = kiln::DeterministicBytes(*graph);
  }
  if (output == "-") {
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  } else if (!WriteWholeFile(output, bytes)) {
    return Fail("cannot write " + output);
  }
  std::fprintf(stderr, "kiln: %s: %d inputs, %d nodes, %d symbols -> %s (%s)\n", input.c_str(),
               graph->inputs_size(), graph->nodes_size(), graph->symbols_size(), output.c_str(),
               format.c_str());
  return 0;
}

struct ExplainOptions {
  std::string a;
  std::string b;
  std::string target = "cuda:sm_90";
  std::string precision = "strict";
  bool require_cudagraph = false;
  std::vector<std::string> backend_options;  // "NAME=VALUE"
  double timeout_seconds = 60;
};

bool IsCompileKey(const std::string& text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

// The compile options named by --target, --precision, --require-cudagraph and
// --backend-option NAME=VALUE.
absl::StatusOr<kiln::v1::CompileOptions> MakeCompileOptions(
    const std::string& target, const std::string& precision_name, bool require_cudagraph,
    const std::vector<std::string>& backend_options) {
  kiln::v1::CompileOptions options;
  options.set_target(target);
  options.set_require_cudagraph(require_cudagraph);
  kiln::v1::PrecisionPolicy precision;
  if (!kiln::v1::PrecisionPolicy_Parse("PRECISION_POLICY_" + absl::AsciiStrToUpper(precision_name),
                                       &precision)) {
    return absl::InvalidArgumentError("unknown --precision " + precision_name);
  }
  options.set_precision(precision);
  for (const std::string& kv : backend_options) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError("--backend-option needs NAME=VALUE, got " + kv);
    }
    (*options.mutable_backend_options())[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return options;
}

int RunExplain(GlobalOptions& global, const ExplainOptions& o) {
  if (absl::Status s = LoadToken(global); !s.ok()) return Fail(std::string(s.message()));
  absl::StatusOr<kiln::v1::CompileOptions> made =
      MakeCompileOptions(o.target, o.precision, o.require_cudagraph, o.backend_options);
  if (!made.ok()) return Fail(std::string(made.status().message()));
  const kiln::v1::CompileOptions& options = *made;
  kiln::v1::ExplainRequest request;
  for (auto [source, arg] : {std::pair{request.mutable_a(), &o.a}, {request.mutable_b(), &o.b}}) {
    std::ifstream probe(*arg);
    if (!probe && IsCompileKey(*arg)) {
      source->set_compile_key(*arg);
      continue;
    }
    absl::StatusOr<kiln::v1::Graph> graph = kiln::ReadGraphFile(*arg);
    if (!graph.ok()) return Fail(std::string(graph.status().message()));
    *source->mutable_request()->mutable_graph() = *std::move(graph);
    *source->mutable_request()->mutable_options() = options;
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      kiln::client::CreateChannel(global.channel);
  if (!channel.ok()) return Fail(std::string(channel.status().message()));
  auto stub = kiln::v1::Admin::NewStub(*channel);
  grpc::ClientContext context;
  kiln::client::PrepareContext(global.channel, &context);
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(o.timeout_seconds * 1000)));
  kiln::v1::ExplainResponse response;
  grpc::Status status = stub->Explain(&context, request, &response);
  if (!status.ok()) {
    return Fail("explain failed (" + std::to_string(status.error_code()) +
                "): " + status.error_message());
  }
  std::printf("%s\n", response.description().c_str());
  return 0;
}

struct CompileCommand {
  std::string graph;
  std::string output;
  std::string target = "x86_64";
  std::string precision = "strict";
  bool require_cudagraph = false;
  std::vector<std::string> backend_options;
  std::string job_id;
  int rank = 0;
  int world_size = 1;
  int64_t sequence = 0;
  bool force = false;
  double timeout_seconds = 600;
};

int RunCompile(GlobalOptions& global, const CompileCommand& c) {
  if (absl::Status s = LoadToken(global); !s.ok()) return Fail(std::string(s.message()));
  absl::StatusOr<kiln::v1::Graph> graph = kiln::ReadGraphFile(c.graph);
  if (!graph.ok()) return Fail(std::string(graph.status().message()));
  absl::StatusOr<kiln::v1::CompileOptions> options =
      MakeCompileOptions(c.target, c.precision, c.require_cudagraph, c.backend_options);
  if (!options.ok()) return Fail(std::string(options.status().message()));
  kiln::v1::CompileRequest request;
  *request.mutable_graph() = *std::move(graph);
  *request.mutable_options() = *std::move(options);
  request.mutable_job()->set_job_id(c.job_id);
  request.mutable_job()->set_rank(c.rank);
  request.mutable_job()->set_world_size(c.world_size);
  request.mutable_job()->set_sequence(c.sequence);
  request.set_force_compile(c.force);
  auto client = kiln::client::CompileClient::Connect(global.channel);
  if (!client.ok()) return Fail(std::string(client.status().message()));
  const absl::Time start = absl::Now();
  absl::StatusOr<kiln::v1::CompileResponse> response =
      (*client)->Compile(request, absl::Seconds(c.timeout_seconds));
  if (!response.ok()) return Fail("compile " + c.graph + ": " + response.status().ToString());
  std::printf("%s key=%s artifact=%s/%lld decision=%s in %.1f ms\n",
              kiln::CacheOutcomeName(response->outcome()), response->compile_key().c_str(),
              response->artifact_digest().hash().c_str(),
              static_cast<long long>(response->artifact_digest().size_bytes()),
              response->decision_digest().substr(0, 16).c_str(),
              absl::ToDoubleMilliseconds(absl::Now() - start));
  if (!response->failed_guard().empty()) std::printf("  %s\n", response->failed_guard().c_str());
  for (const kiln::v1::PhaseTiming& t : response->timings()) {
    std::printf("  %-12s %9.3f ms\n", t.phase().c_str(), t.micros() / 1000.0);
  }
  if (response->rendezvous().missing_ranks_size() > 0) {
    std::printf("  missing ranks:");
    for (int r : response->rendezvous().missing_ranks()) std::printf(" %d", r);
    std::printf("\n");
  }
  if (!c.output.empty() && !WriteWholeFile(c.output, response->compiled_graph())) {
    return Fail("cannot write " + c.output);
  }
  return 0;
}

absl::StatusOr<std::unique_ptr<kiln::client::CacheClient>> ConnectCache(GlobalOptions& global) {
  if (absl::Status s = LoadToken(global); !s.ok()) return s;
  return kiln::client::CacheClient::Create(global.channel);
}

int RunCachePut(GlobalOptions& global, const std::string& input) {
  std::string bytes;
  if (!ReadWholeFile(input, &bytes)) return Fail("cannot read " + input);
  auto cache = ConnectCache(global);
  if (!cache.ok()) return Fail(std::string(cache.status().message()));
  absl::StatusOr<kiln::client::CacheClient::PutResult> put = (*cache)->Put(bytes);
  if (!put.ok()) return Fail("put " + input + ": " + put.status().ToString());
  std::printf("%s\n", kiln::client::FormatDigest(put->digest).c_str());
  if (put->already_present) std::fprintf(stderr, "kiln: the server held it already\n");
  return 0;
}

int RunCacheGet(GlobalOptions& global, const std::string& digest_text, const std::string& output) {
  absl::StatusOr<kiln::v1::Digest> digest = kiln::client::ParseDigest(digest_text);
  if (!digest.ok()) return Fail(std::string(digest.status().message()));
  auto cache = ConnectCache(global);
  if (!cache.ok()) return Fail(std::string(cache.status().message()));
  absl::StatusOr<std::string> bytes = (*cache)->Get(*digest);
  if (!bytes.ok()) return Fail("get " + digest_text + ": " + bytes.status().ToString());
  if (output == "-") {
    std::fwrite(bytes->data(), 1, bytes->size(), stdout);
  } else if (!WriteWholeFile(output, *bytes)) {
    return Fail("cannot write " + output);
  }
  return 0;
}

int RunCacheStat(GlobalOptions& global) {
  auto cache = ConnectCache(global);
  if (!cache.ok()) return Fail(std::string(cache.status().message()));
  absl::StatusOr<kiln::v1::CacheStats> stats = (*cache)->Stat();
  if (!stats.ok()) return Fail("stat: " + stats.status().ToString());
  const google::protobuf::Descriptor* d = stats->GetDescriptor();
  const google::protobuf::Reflection* r = stats->GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    std::printf("%-20s %lld\n", d->field(i)->name().c_str(),
                static_cast<long long>(r->GetInt64(*stats, d->field(i))));
  }
  return 0;
}

void PrintBundleSummary(const std::string& path, const kiln::client::BundleSummary& s,
                        bool imported) {
  std::printf("%s %s: %d actions, %d variants, %d blobs (%lld bytes)",
              imported ? "imported" : "exported", path.c_str(), s.actions, s.variants, s.blobs,
              static_cast<long long>(s.blob_bytes));
  if (imported) std::printf(", %d blobs written", s.blobs_written);
  std::printf("\n");
}

struct BundleExportCommand {
  std::string job_id;
  std::string since;
  std::vector<std::string> compile_keys;
  bool all = false;
  std::string output;
};

int RunBundleExport(GlobalOptions& global, const BundleExportCommand& c) {
  kiln::client::BundleSelection selection;
  selection.job_id = c.job_id;
  selection.compile_keys = c.compile_keys;
  selection.all = c.all;
  if (!c.since.empty()) {
    absl::StatusOr<int64_t> since = kiln::client::ParseSince(c.since, absl::Now());
    if (!since.ok()) return Fail(std::string(since.status().message()));
    selection.since_unix_ms = *since;
  }
  auto cache = ConnectCache(global);
  if (!cache.ok()) return Fail(std::string(cache.status().message()));
  absl::StatusOr<kiln::client::BundleSummary> summary =
      kiln::client::ExportBundle(**cache, selection, c.output);
  if (!summary.ok()) return Fail("bundle export: " + summary.status().ToString());
  PrintBundleSummary(c.output, *summary, /*imported=*/false);
  return 0;
}

int RunBundleImport(GlobalOptions& global, const std::string& input) {
  auto cache = ConnectCache(global);
  if (!cache.ok()) return Fail(std::string(cache.status().message()));
  absl::StatusOr<kiln::client::BundleSummary> summary = kiln::client::ImportBundle(**cache, input);
  if (!summary.ok()) {
    return Fail("bundle import refused: " + summary.status().ToString());
  }
  PrintBundleSummary(input, *summary, /*imported=*/true);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln: client for the Kiln compile server"};
  app.require_subcommand(1);
  // Global options may follow the subcommand: `kiln health --server ADDR`.
  app.fallthrough();
  GlobalOptions global;
  global.channel.address = "127.0.0.1:50051";
  app.add_option("--server", global.channel.address,
                 "kilnd address HOST:PORT, or a fleet HOST:PORT,HOST:PORT,... (compile routes "
                 "a job to the instance that owns it; other commands use the first)")
      ->envname("KILN_SERVER")
      ->capture_default_str();
  app.add_option("--token-file", global.token_file, "file holding a bearer token")
      ->envname("KILN_TOKEN_FILE");
  app.add_option("--ca-cert", global.channel.ca_cert_file, "PEM CA certificate: use TLS")
      ->envname("KILN_CA_CERT");
  app.add_option("--cert", global.channel.client_cert_file, "PEM client certificate (mTLS)")
      ->envname("KILN_CLIENT_CERT");
  app.add_option("--key", global.channel.client_key_file, "PEM client key (mTLS)")
      ->envname("KILN_CLIENT_KEY");

  double health_timeout = 5;
  CLI::App* health = app.add_subcommand("health", "print the server's serving status");
  health->add_option("--timeout", health_timeout, "seconds to wait")->capture_default_str();

  CLI::App* graph = app.add_subcommand("graph", "work with graph files");
  graph->require_subcommand(1);
  graph->fallthrough();
  std::string fx_input, fx_output, fx_format;
  CLI::App* import_fx =
      graph->add_subcommand("import-fx", "convert an FX capture JSON file into kiln.v1.Graph");
  import_fx->add_option("FILE", fx_input, "capture JSON file")->required();
  import_fx->add_option("-o,--output", fx_output, "output file ('-' for stdout)")->required();
  import_fx->add_option("--format", fx_format, "binary or json (default: from the extension)")
      ->check(CLI::IsMember({"binary", "json"}));

  ExplainOptions explain_options;
  CLI::App* explain = app.add_subcommand(
      "explain",
      "derive the compile keys of two graphs (or name stored keys) and say how they "
      "differ");
  explain->add_option("A", explain_options.a, "graph file (binary, JSON or FX capture) or key")
      ->required();
  explain->add_option("B", explain_options.b, "graph file (binary, JSON or FX capture) or key")
      ->required();
  explain->add_option("--target", explain_options.target, "x86_64 or cuda:sm_90")
      ->capture_default_str();
  explain->add_option("--precision", explain_options.precision, "strict, allow_tf32, fast_math")
      ->capture_default_str();
  explain->add_flag("--require-cudagraph", explain_options.require_cudagraph,
                    "compile with require_cudagraph");
  explain->add_option("--backend-option", explain_options.backend_options, "NAME=VALUE");
  explain->add_option("--timeout", explain_options.timeout_seconds, "seconds to wait")
      ->capture_default_str();

  CLI::App* cache = app.add_subcommand("cache", "read and write the server's cache");
  cache->require_subcommand(1);
  cache->fallthrough();
  std::string put_input, get_digest, get_output;
  CLI::App* cache_put = cache->add_subcommand("put", "store a file; prints its digest HASH/SIZE");
  cache_put->add_option("FILE", put_input, "file to store")->required();
  CLI::App* cache_get = cache->add_subcommand("get", "fetch a blob by digest");
  cache_get->add_option("DIGEST", get_digest, "HASH or HASH/SIZE")->required();
  cache_get->add_option("-o,--output", get_output, "output file ('-' for stdout)")->required();
  CLI::App* cache_stat = cache->add_subcommand("stat", "print the cache's counts and sizes");

  CLI::App* bundle = app.add_subcommand(
      "bundle", "move action-cache entries and their blobs between servers as one file");
  bundle->require_subcommand(1);
  bundle->fallthrough();
  BundleExportCommand export_command;
  std::string import_input;
  CLI::App* bundle_export = bundle->add_subcommand(
      "export", "write the entries a job used (or since a time, or named keys) to a bundle");
  bundle_export->add_option("KEY", export_command.compile_keys, "compile keys to export");
  bundle_export->add_option("--job", export_command.job_id, "the keys this job compiled or hit");
  bundle_export->add_option("--since", export_command.since,
                            "keys compiled since: RFC 3339 time or a duration ago (24h)");
  bundle_export->add_flag("--all", export_command.all, "every entry the server holds");
  bundle_export->add_option("-o,--output", export_command.output, "bundle file to write")
      ->required();
  CLI::App* bundle_import =
      bundle->add_subcommand("import", "verify a bundle whole, then load it into the server");
  bundle_import->add_option("FILE", import_input, "bundle file")->required();

  CompileCommand compile_command;
  CLI::App* compile = app.add_subcommand("compile", "compile a graph file on the server");
  compile->add_option("GRAPH", compile_command.graph, "graph file (binary, JSON or FX capture)")
      ->required();
  compile->add_option("-o,--output", compile_command.output, "write the CompiledGraph here");
  compile->add_option("--target", compile_command.target, "x86_64 or cuda:sm_90")
      ->capture_default_str();
  compile->add_option("--precision", compile_command.precision, "strict, allow_tf32, fast_math")
      ->capture_default_str();
  compile->add_flag("--require-cudagraph", compile_command.require_cudagraph,
                    "fail unless the plan can be captured in a CUDA graph");
  compile->add_option("--backend-option", compile_command.backend_options, "NAME=VALUE");
  compile->add_option("--job", compile_command.job_id, "job id (for multi-rank jobs)");
  compile->add_option("--rank", compile_command.rank, "this process's rank")->capture_default_str();
  compile->add_option("--world-size", compile_command.world_size, "ranks in the job")
      ->capture_default_str();
  compile->add_option("--sequence", compile_command.sequence, "compile sequence number on the rank")
      ->capture_default_str();
  compile->add_flag("--force", compile_command.force, "compile even if cached");
  compile->add_option("--timeout", compile_command.timeout_seconds, "seconds to wait")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "kiln: %s\nRun 'kiln --help' for the commands.\n", e.what());
    return kExitBadUsage;
  }

  if (health->parsed()) return RunHealth(global, health_timeout);
  if (import_fx->parsed()) return RunImportFx(fx_input, fx_output, fx_format);
  if (explain->parsed()) return RunExplain(global, explain_options);
  if (compile->parsed()) return RunCompile(global, compile_command);
  if (cache_put->parsed()) return RunCachePut(global, put_input);
  if (cache_get->parsed()) return RunCacheGet(global, get_digest, get_output);
  if (cache_stat->parsed()) return RunCacheStat(global);
  if (bundle_export->parsed()) return RunBundleExport(global, export_command);
  if (bundle_import->parsed()) return RunBundleImport(global, import_input);
  return kExitBadUsage;
}
