#include "server/compile/worker_main.h"

#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "compiler/compile.h"
#include "compiler/graph/import.h"
#include "kiln/v1/compile.pb.h"
#include "kiln/v1/graph.pb.h"
#include "server/compile/worker_protocol.h"

// Sanitizers reserve terabytes of address space for their shadow memory: no limit there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KILN_WORKER_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KILN_WORKER_SANITIZED 1
#endif
#endif

namespace kiln::server {
namespace {

using worker::kWorkerFd;

// The last phase reported, kept where the out-of-memory handler can read it without
// allocating.
char g_last_phase[64] = "start";
size_t g_last_phase_size = 5;

// Called by operator new when an allocation fails: there is no memory left to do anything
// but tell kilnd and exit.
void OnOutOfMemory() {
  char frame[worker::kHeaderBytes + sizeof(g_last_phase)];
  const uint32_t length = static_cast<uint32_t>(g_last_phase_size + 1);
  std::memcpy(frame, &length, 4);  // little-endian hosts only, as kilnd itself
  frame[4] = static_cast<char>(worker::FrameType::kOutOfMemory);
  std::memcpy(frame + worker::kHeaderBytes, g_last_phase, g_last_phase_size);
  const ssize_t ignored = ::write(kWorkerFd, frame, worker::kHeaderBytes + g_last_phase_size);
  (void)ignored;
  ::_exit(worker::kExitOutOfMemory);
}

struct Fault {
  std::string kind;
  std::string phase;
  std::string key_prefix;
};

std::vector<Fault> FaultsFromEnvironment() {
  std::vector<Fault> faults;
  const char* spec = std::getenv("KILN_TEST_WORKER_FAULT");
  if (spec == nullptr) return faults;
  for (absl::string_view entry : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kind_rest = absl::StrSplit(entry, absl::MaxSplits('@', 1));
    std::pair<std::string, std::string> phase_key =
        absl::StrSplit(kind_rest.second, absl::MaxSplits(':', 1));
    faults.push_back({kind_rest.first, phase_key.first, phase_key.second});
  }
  return faults;
}

[[noreturn]] void Hang() {
  while (true) ::pause();
}

void Strike(const Fault& fault, bool limited) {
  std::fprintf(stderr, "kilnd compile worker %d: test fault %s at %s\n", ::getpid(),
               fault.kind.c_str(), fault.phase.c_str());
  if (fault.kind == "crash") std::abort();
  if (fault.kind == "segv") {
    ::signal(SIGSEGV, SIG_DFL);
    ::raise(SIGSEGV);
  }
  if (fault.kind == "hang") Hang();
  if (fault.kind == "garbage") {
    const std::string garbage = "\xff\xff\xff\x7f this is not a frame";
    (void)worker::WriteAll(kWorkerFd, garbage);
    Hang();
  }
  if (fault.kind == "oom") {
    if (!limited) {
      std::fprintf(stderr, "the oom fault needs --compile-memory-bytes\n");
      std::abort();
    }
    std::vector<char*> held;
    while (true) {
      char* block = new char[64 << 20];
      std::memset(block, 1, 64 << 20);
      held.push_back(block);
    }
  }
}

class Worker {
 public:
  Worker(std::vector<Fault> faults, bool limited) : faults_(std::move(faults)), limited_(limited) {}

  // Serves requests until the socket closes; the exit code.
  int Serve() {
    MaybeStrike("ready", "");
    worker::Ready ready;
    ready.pid = ::getpid();
    if (!Send(worker::FrameType::kReady, worker::EncodeReady(ready))) return 1;
    while (true) {
      absl::StatusOr<std::optional<worker::Frame>> frame = worker::ReadFrame(kWorkerFd);
      if (!frame.ok()) {
        std::fprintf(stderr, "kilnd compile worker: %s\n", frame.status().ToString().c_str());
        return 1;
      }
      if (!frame->has_value()) return 0;  // kilnd closed the socket
      if ((*frame)->type != worker::FrameType::kCompileRequest) {
        std::fprintf(stderr, "kilnd compile worker: unexpected frame type %d\n",
                     static_cast<int>((*frame)->type));
        return 1;
      }
      if (!Compile((*frame)->payload)) return 1;
    }
  }

 private:
  bool Send(worker::FrameType type, absl::string_view payload) {
    return worker::WriteAll(kWorkerFd, worker::EncodeFrame(type, payload)).ok();
  }

  void MaybeStrike(absl::string_view phase, const std::string& key) {
    for (const Fault& f : faults_) {
      if (f.phase == phase && (phase == "ready" || absl::StartsWith(key, f.key_prefix))) {
        Strike(f, limited_);
      }
    }
  }

  // Compiles one request and answers it; false when the answer could not be sent.
  bool Compile(absl::string_view payload) {
    absl::StatusOr<worker::CompileRequest> request = worker::DecodeCompileRequest(payload);
    if (!request.ok()) return false;
    SetLastPhase("start");
    absl::StatusOr<v1::CompiledGraph> compiled = CompileRequest(*request);
    if (!compiled.ok())
      return Send(worker::FrameType::kError, worker::EncodeError(compiled.status()));
    return Send(worker::FrameType::kResult, compiled->SerializeAsString());
  }

  absl::StatusOr<v1::CompiledGraph> CompileRequest(const worker::CompileRequest& request) {
    v1::Graph proto;
    v1::CompileOptions options;
    if (!proto.ParseFromString(request.graph) || !options.ParseFromString(request.options)) {
      return absl::InternalError("the compile worker received a request it cannot parse");
    }
    absl::StatusOr<graph::Graph> graph = graph::Import(proto);
    if (!graph.ok()) return graph.status();
    MaybeStrike("start", request.compile_key);
    compiler::CompileContext context;
    bool sent = true;
    context.on_phase = [&](absl::string_view phase, absl::Time start, absl::Time end) {
      SetLastPhase(phase);
      sent = sent &&
             Send(worker::FrameType::kPhase, worker::EncodePhase({std::string(phase), start, end}));
      MaybeStrike(phase, request.compile_key);
    };
    absl::StatusOr<v1::CompiledGraph> compiled =
        compiler::Compile(*graph, options, request.compile_key, context);
    if (!sent) return absl::UnavailableError("kilnd closed the compile socket");
    return compiled;
  }

  static void SetLastPhase(absl::string_view phase) {
    g_last_phase_size = std::min(phase.size(), sizeof(g_last_phase));
    std::memcpy(g_last_phase, phase.data(), g_last_phase_size);
  }

  const std::vector<Fault> faults_;
  const bool limited_;
};

}  // namespace

int RunCompileWorker(int argc, char** argv) {
  int64_t memory_bytes = 0;
  for (int i = 2; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--memory-bytes" && i + 1 < argc && absl::SimpleAtoi(argv[i + 1], &memory_bytes)) {
      ++i;
      continue;
    }
    std::fprintf(stderr, "kilnd --compile-worker: unknown argument %s\n", argv[i]);
    return 2;
  }
  // kilnd is gone, or went away: a write must fail, not kill the worker before it can say so.
  ::signal(SIGPIPE, SIG_IGN);
  bool limited = false;
#ifndef KILN_WORKER_SANITIZED
  if (memory_bytes > 0) {
    const rlimit limit{static_cast<rlim_t>(memory_bytes), static_cast<rlim_t>(memory_bytes)};
    if (::setrlimit(RLIMIT_AS, &limit) != 0) {
      std::fprintf(stderr, "kilnd --compile-worker: setrlimit: %s\n", std::strerror(errno));
      return 1;
    }
    limited = true;
    // glibc reserves 64 MiB of address space for each malloc arena, up to 8 per core, and
    // the compiler's codegen threads each take one: on a many-core host that alone would
    // approach the limit. A few arenas serve those threads as well.
    ::mallopt(M_ARENA_MAX, 4);
  }
#endif
  std::set_new_handler(OnOutOfMemory);
  // When kilnd dies its end of the socket closes: leave even in the middle of a compile.
  std::thread([] {
    pollfd p{kWorkerFd, POLLRDHUP, 0};
    while (true) {
      if (::poll(&p, 1, -1) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) {
        ::_exit(0);
      }
    }
  }).detach();
  return Worker(FaultsFromEnvironment(), limited).Serve();
}

}  // namespace kiln::server
