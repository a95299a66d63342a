// kilnd: the Kiln compile server.

#include <malloc.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kiln/version.h"
#include "server/compile/worker_main.h"
#include "server/config.h"
#include "server/kilnd.h"
#include "server/observe/json_log.h"

namespace {

constexpr int kExitBadUsage = 2;

kiln::server::LogLevel ParseLevel(const std::string& name) {
  using kiln::server::LogLevel;
  if (name == "debug") return LogLevel::kDebug;
  if (name == "warning") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

// Every flag can also be set through the environment variable named after it: --cache-max-bytes
// is KILN_CACHE_MAX_BYTES, so the two names cannot drift apart.
std::string EnvironmentName(const std::string& flag) {
  std::string name = "KILN_" + flag.substr(2);
  for (char& c : name) c = c == '-' ? '_' : absl::ascii_toupper(c);
  return name;
}

// An option; the help shows its default unless that is empty.
template <typename T>
CLI::Option* AddSetting(CLI::App& app, const std::string& flag, T& value, const std::string& help) {
  return app.add_option(flag, value, help)->envname(EnvironmentName(flag))->capture_default_str();
}

// A byte count that also takes units (16GiB, 512MB).
void AddSizeSetting(CLI::App& app, const std::string& flag, int64_t& value,
                    const std::string& help) {
  AddSetting(app, flag, value, help)->transform(CLI::AsSizeValue(false));
}

void AddFlagSetting(CLI::App& app, const std::string& flag, bool& value, const std::string& help) {
  app.add_flag(flag, value, help)->envname(EnvironmentName(flag));
}

int Serve(const kiln::server::ServerConfig& config) {
  // Signals are taken synchronously by this thread; every thread started later inherits
  // the mask, so no handler runs inside gRPC or RocksDB threads.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  kiln::server::SetLogLevel(ParseLevel(config.log_level));
  auto server = kiln::server::KilnServer::Start(config);
  if (!server.ok()) {
    kiln::server::LogError("start_failed", {{"error", server.status().ToString()}});
    std::fprintf(stderr, "kilnd: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  kiln::server::LogInfo("signal", {{"signal", signal_number == SIGTERM ? "SIGTERM" : "SIGINT"}});
  (*server)->Drain(absl::Seconds(config.drain_seconds));
  (*server)->Wait();
  server->reset();
  kiln::server::LogInfo("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // kilnd starts itself again as its compile workers (server/compile/worker_main.h).
  if (argc >= 2 && std::string(argv[1]) == "--compile-worker") {
    return kiln::server::RunCompileWorker(argc, argv);
  }
  // Debian's Abseil checks every Mutex acquisition for lock-order cycles through one global
  // graph; the sanitizer builds and tests catch those, the server should not pay for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Blobs and messages of megabytes come and go with every request. glibc would raise its
  // mmap threshold after the first such buffer is freed and serve the next ones from its
  // arenas, which keep the freed memory: resident memory then follows the largest burst ever
  // seen, not what is live. A fixed threshold gives buffers of 1 MiB and more back at once.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  kiln::server::ServerConfig config;
  CLI::App app{"kilnd: the Kiln compile server (to compile a graph file offline: kilnc)"};
  app.set_version_flag("--version", kiln::kKilnVersion);
  AddSetting(app, "--listen", config.listen, "gRPC address HOST:PORT (port 0 picks a free one)");
  AddSetting(app, "--metrics-listen", config.metrics_listen,
             "HTTP address for /metrics and status pages; empty disables it");
  AddSetting(app, "--blob-listen", config.blob_listen,
             "HTTP/1.1 address serving blobs at /cas/<sha256 hex> (GET, HEAD, PUT); empty "
             "disables it");
  AddSetting(app, "--blob-loops", config.blob_loops, "event-loop threads of --blob-listen");
  AddSetting(app, "--resp-listen", config.resp_listen,
             "RESP (Redis protocol) address HOST:PORT serving GET/SET from the cache, for "
             "PyTorch Inductor's Redis remote caches; empty disables it");
  AddSetting(app, "--data-dir", config.data_dir, "directory for the store and lock file");
  AddFlagSetting(app, "--insecure", config.insecure,
                 "allow plaintext on non-loopback addresses (development only)");
  AddSetting(app, "--drain-seconds", config.drain_seconds,
             "grace period for in-flight work on SIGTERM");
  AddSetting(app, "--max-message-bytes", config.max_message_bytes,
             "largest gRPC message accepted or sent");
  AddSetting(app, "--log-level", config.log_level, "debug, info, warning or error");

  AddSetting(app, "--tls-cert", config.tls_cert_file, "PEM certificate chain: serve gRPC over TLS");
  AddSetting(app, "--tls-key", config.tls_key_file, "PEM private key for --tls-cert");
  AddSetting(app, "--tls-client-ca", config.tls_client_ca_file,
             "PEM CA: require and verify client certificates (mutual TLS)");
  AddSetting(app, "--token-file", config.token_file,
             "bearer tokens with roles, one `ROLE TOKEN [NAME]` per line");

  AddSetting(app, "--shared-cache", config.shared_cache,
             "shared cache tier: a Redis Cluster as redis://HOST:PORT[,HOST:PORT...]; "
             "action records and blobs go through to it and are read from it on a local miss");
  AddSetting(app, "--fleet", config.fleet,
             "every instance of this kilnd's fleet, HOST:PORT,HOST:PORT,... as clients list "
             "them in KILN_SERVER: a job with several ranks is served by the instance that "
             "owns its id, the others name it");
  AddSetting(app, "--advertise", config.advertise, "this instance's own address in --fleet");
  AddSetting(app, "--shared-cache-lease-ms", config.shared_cache_lease_ms,
             "milliseconds a compile lease in the shared cache's cluster lives unless its "
             "holder renews it (every third of it); servers waiting on a dead holder's compile "
             "take over after it");
  AddSetting(app, "--otlp-url", config.otlp_url,
             "export traces as OTLP/JSON to this collector URL (http://HOST:PORT/v1/traces)");
  AddSetting(app, "--trace-capacity", config.trace_capacity,
             "recent traces kept for /debug/traces");

  AddSizeSetting(app, "--cache-max-bytes", config.cache_max_bytes,
                 "byte budget of the cache; eviction keeps it near this (0: no limit; 16GiB, "
                 "512MB... accepted)");
  AddSizeSetting(app, "--cache-memory-bytes", config.cache_memory_bytes,
                 "recently read blobs kept in memory, verified when they entered it and "
                 "checked on every read (0: none: every read hashes the stored blob)");
  AddSizeSetting(app, "--cache-block-cache-bytes", config.cache_block_cache_bytes,
                 "RocksDB's cache of table blocks and blob values (at least 1 MiB); with the "
                 "memory tier and the write buffers, most of the store's memory");
  AddSizeSetting(app, "--max-blob-bytes", config.max_blob_bytes,
                 "largest blob the cache accepts (RESOURCE_EXHAUSTED beyond)");
  AddFlagSetting(app, "--refuse-corrupt-store", config.refuse_corrupt_store,
                 "exit if the store is corrupt instead of moving it aside and starting empty");
  AddFlagSetting(app, "--cache-sync-writes", config.cache_sync_writes,
                 "fsync every cache write, so acknowledged writes survive a machine crash too");

  AddSetting(app, "--compile-workers", config.compile_workers,
             "compiles at once: threads, each with its worker process (0: one per core)");
  AddSetting(app, "--compile-isolation", config.compile_isolation,
             "process: compile in supervised worker processes (a crash fails one request); "
             "none: in kilnd's own threads");
  AddSizeSetting(app, "--compile-memory-bytes", config.compile_memory_bytes,
                 "address-space limit of each compile worker (0: none; 16GiB, 512MB... accepted)");
  AddSetting(app, "--compile-worker-max-compiles", config.compile_worker_max_compiles,
             "compiles after which a worker is replaced by a fresh one, in the background "
             "(0: never)");
  AddSetting(app, "--poisoned-key-seconds", config.poisoned_key_seconds,
             "how long a key whose compile crashed a worker is answered with that error at "
             "once (0: never; force_compile retries)");
  AddSetting(app, "--compile-queue", config.compile_queue,
             "compiles that may wait for a worker before RESOURCE_EXHAUSTED");
  AddSetting(app, "--max-in-flight-per-client", config.max_in_flight_per_client,
             "requests one client identity may have in flight (0: no limit)");
  AddSetting(app, "--rendezvous-timeout", config.rendezvous_timeout_seconds,
             "seconds the ranks of a job wait for each other");
  AddSetting(app, "--rendezvous-policy", config.rendezvous_policy,
             "when ranks are missing at the timeout: fail or proceed");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "kilnd: %s\nRun 'kilnd --help' for the flags.\n", e.what());
    return kExitBadUsage;
  }
  if (absl::Status s = kiln::server::ValidateConfig(config); !s.ok()) {
    std::fprintf(stderr, "kilnd: %s\n", std::string(s.message()).c_str());
    return kExitBadUsage;
  }
  return Serve(config);
}
