#pragma once

// The compile worker: kilnd started again as `kilnd --compile-worker [--memory-bytes N]`
// (worker_compiler.h starts and supervises it). It serves compile requests from the socket on
// descriptor worker::kWorkerFd, one at a time, with the compiler linked into kilnd, and holds
// nothing else of kilnd's: no store, no gRPC server, no locks. It limits its own address space
// to N bytes (RLIMIT_AS) and reports an allocation that fails under that limit before exiting
// with worker::kExitOutOfMemory; it exits when kilnd closes the socket or dies.
//
// For tests only, KILN_TEST_WORKER_FAULT makes it fail on purpose: a comma-separated list of
// KIND@PHASE or KIND@PHASE:KEYPREFIX, where KIND is crash (abort, SIGABRT), segv (SIGSEGV),
// hang (sleeps forever), oom (allocates without bound; needs a memory limit) or garbage
// (writes bytes that are no frame, then hangs); PHASE is a compile phase name (the fault
// strikes once that phase has finished and been reported), `start` (before the compile) or
// `ready` (before the worker tells kilnd it is ready: the worker never starts);
// KEYPREFIX limits it to compile keys that start with it.

namespace kiln::server {

// Runs the worker; returns its exit code. `argv[1]` is "--compile-worker".
int RunCompileWorker(int argc, char** argv);

}  // namespace kiln::server
