// accio base: warnings. Resource shortages degrade to a slower path with ONE warning per cause
// that says what to change. Every warning goes through one channel: a sink set with set_sink (the
// C API's accio_set_log_callback; the Python package routes it to `warnings` and `logging`), else
// stderr unless ACCIO_QUIET=1. Warnings are recorded either way (warnings(), `accio info`); a forked
// child keeps what its parent said.
#pragma once
#include <string>
#include <vector>

namespace accio::base {

enum class Level { info = 20, warning = 30, error = 40 };  // Python logging's numbers, so a sink can pass them on
// Receives each message once, on whichever thread issued it (which may hold an accio lock): it must
// return promptly, never call back into accio or wait for another thread.
using Sink = void (*)(int level, const char* key, const char* message, void* user);

// Who says a warning: every process (a cause of its own: a shortage, a fallback), or one process per
// machine of a job, for a cause that the ranks of an MPI job on one machine share (no tuning profile
// for a filesystem: a profile is per machine): there only the machine's first rank issues it, so
// 1000 ranks on 10 nodes print 10 lines, not 1000; the others record it (warnings()).
enum class Scope { process, machine };
// Issues `msg` the first time `key` is seen (to the sink, or "accio: warning: <msg>" on stderr).
// Returns true if issued.
bool warn_once(const std::string& key, const std::string& msg, Scope scope = Scope::process);
// This process's rank among a job's processes on this machine, from the variables the launchers set
// (Open MPI, MPICH's Hydra and Intel MPI, MVAPICH, Slurm's srun, Cray PALS); where none gives a local
// rank, the rank in the job (Open MPI, Hydra, PMIx, MVAPICH, Slurm); 0 outside a job. bench's MPI
// detection (python/accio/bench/comm.py) names the same launchers.
int local_rank();
// Every warning issued so far (for `accio info` and tests).
std::vector<std::string> warnings();
// Issues `msg` every time (to the sink, or "accio: error: <msg>" etc. on stderr); not recorded.
// For messages of other components (the offload runtime, through accio_log).
void log(Level level, const std::string& key, const std::string& msg);
// Replaces the sink (nullptr: back to stderr). Applies to messages issued after it returns.
void set_sink(Sink sink, void* user);

}  // namespace accio::base
