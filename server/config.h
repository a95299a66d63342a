#pragma once

// kilnd's configuration, from flags and KILN_* environment variables (flags win).

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace kiln::server {

struct ServerConfig {
  std::string listen = "127.0.0.1:50051";         // gRPC address; port 0 picks a free port
  std::string metrics_listen = "127.0.0.1:9464";  // /metrics, status pages; empty: none
  std::string blob_listen;  // HTTP/1.1 blob endpoint (GET/HEAD/PUT /cas/<hash>); empty: none
  int blob_loops = 2;       // its event-loop threads
  // RESP (Redis protocol) front for Inductor's Redis remote caches; empty: none.
  std::string resp_listen;
  std::string data_dir = "kiln-data";  // store and lock file
  // Shared cache tier: "redis://host:port[,host:port...]" (Redis Cluster seeds); empty: none.
  std::string shared_cache;
  // The fleet this kilnd belongs to ("host:port,host:port,...", the addresses clients list in
  // KILN_SERVER) and its own address in that list. The ranks of a job meet on the instance
  // that owns the job id (proto/base/fleet.h); a job this one does not own is answered with
  // FAILED_PRECONDITION naming the owner. Empty: no fleet, every job is served here.
  std::string fleet;
  std::string advertise;
  // Fleet-wide single flight: how long a compile lease in the shared cache's cluster lives
  // unless renewed (every third of it) by its holder; a dead holder's lease expires after it.
  int64_t shared_cache_lease_ms = 10000;
  bool insecure = false;      // allow a non-loopback listen address without TLS
  double drain_seconds = 10;  // grace period on SIGTERM before in-flight work is cancelled
  int64_t max_message_bytes = 64 << 20;  // largest gRPC message accepted
  std::string log_level = "info";        // debug, info, warning, error

  // The cache (content-addressed store and action cache under <data_dir>/store).
  int64_t cache_max_bytes = int64_t{16} << 30;    // eviction budget; 0: no limit
  int64_t max_blob_bytes = int64_t{256} << 20;    // largest blob a Put may store
  bool refuse_corrupt_store = false;              // exit instead of moving a corrupt store aside
  bool cache_sync_writes = false;                 // fsync every cache write (machine crashes too)
  int64_t cache_memory_bytes = int64_t{1} << 30;  // verified blobs served from memory; 0: none
  int64_t cache_block_cache_bytes = int64_t{256} << 20;  // RocksDB's block and blob cache
  // TLS: a PEM certificate chain and key make the gRPC port (and HTTP stays loopback-only
  // unless --insecure) speak TLS; a client CA additionally requires and verifies client
  // certificates (mutual TLS).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  std::string token_file;    // bearer tokens with roles; empty: no token checks
  std::string otlp_url;      // "http://host:port/v1/traces": export traces as OTLP/JSON
  int trace_capacity = 256;  // recent traces kept for /debug/traces
  // Compiles: worker threads (<= 0: one per core), queued compiles before RESOURCE_EXHAUSTED,
  // requests one client identity may have in flight (<= 0: no limit).
  int compile_workers = 0;
  int compile_queue = 64;
  int max_in_flight_per_client = 0;
  // Where compiles run: "process" (supervised worker processes, one per compile thread, so a
  // crashing compile costs one request, not kilnd) or "none" (kilnd's own threads).
  std::string compile_isolation = "process";
  int64_t compile_memory_bytes = int64_t{16} << 30;  // address space of a worker; 0: no limit
  // A worker is replaced after this many compiles, so that whatever a long-lived compiler
  // process accumulates is given back; 0: never.
  int compile_worker_max_compiles = 500;
  // How long a key whose compile crashed its worker is answered with that error at once
  // (force_compile retries sooner); 0: not remembered.
  double poisoned_key_seconds = 600;
  // Rank rendezvous: how long the first rank waits for the others, and what happens then:
  // "fail" (every waiting rank gets DEADLINE_EXCEEDED naming the missing ranks) or
  // "proceed" (present ranks go on; their answer lists the missing ones).
  double rendezvous_timeout_seconds = 120;
  std::string rendezvous_policy = "fail";
  bool tls() const { return !tls_cert_file.empty(); }
};

// Checks values that flag parsing cannot: address forms, loopback without TLS, ranges.
// INVALID_ARGUMENT naming the flag.
absl::Status ValidateConfig(const ServerConfig& config);

// Whether `address` ("host:port", "[v6]:port", "unix:path") binds only to loopback.
bool IsLoopbackAddress(const std::string& address);

}  // namespace kiln::server
