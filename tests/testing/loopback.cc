#include "tests/testing/loopback.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace kiln::testing {
namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// Ports below Linux's ephemeral range (32768 on) and below the Redis Cluster fixture's
// (20000 on, tests/testing/redis_cluster.cc): a listener that asks for port 0 (a metrics
// endpoint, another test's server) is never given one, so a port picked here stays free until
// its test binds it, unless another process picks the same one at random.
constexpr int kPickedLow = 10000, kPickedHigh = 20000;

// The ports FreeLoopbackPort gave this process: none is given twice.
ABSL_CONST_INIT absl::Mutex given_mu(absl::kConstInit);
std::set<int>* given ABSL_GUARDED_BY(given_mu) = nullptr;

bool Bindable(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const sockaddr_in addr = Loopback(port);
  const bool ok = bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

}  // namespace

int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const sockaddr_in addr = Loopback(port);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

int FreeLoopbackPort() {
  thread_local std::mt19937 rng(
      static_cast<uint32_t>(getpid() ^ absl::ToUnixNanos(absl::Now()) ^
                            std::hash<std::thread::id>()(std::this_thread::get_id())));
  std::uniform_int_distribution<int> pick(kPickedLow, kPickedHigh - 1);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = pick(rng);
    absl::MutexLock lock(&given_mu);
    if (given == nullptr) given = new std::set<int>();
    if (given->count(port) || !Bindable(port)) continue;
    given->insert(port);
    return port;
  }
  return -1;
}

}  // namespace kiln::testing
