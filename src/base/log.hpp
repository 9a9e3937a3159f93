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
// job, for a cause that the ranks of an MPI job share (no tuning profile for a filesystem: the ranks
// look up the same profile file, in a profile directory that a cluster's nodes share, for the same
// filesystem, kernel and accio): there only rank 0 issues it, so 1000 ranks print one line, not
// 1000; the others record it (warnings(), `accio info`).
enum class Scope { process, job };
// Issues `msg` the first time `key` is seen (to the sink, or "accio: warning: <msg>" on stderr).
// Returns true if issued.
bool warn_once(const std::string& key, const std::string& msg, Scope scope = Scope::process);
// This process's rank in a job, from the first variable set of those the launchers set, MPI's before
// Slurm's (an mpirun inside an sbatch step inherits the step's SLURM_PROCID): Open MPI, MPICH's Hydra
// and Intel MPI, PMIx, MVAPICH, Cray PALS, Slurm's srun. 0 outside a job or for a value that is not
// a number.
int job_rank();
// Every warning issued so far (for `accio info` and tests).
std::vector<std::string> warnings();
// Issues `msg` every time (to the sink, or "accio: error: <msg>" etc. on stderr); not recorded.
// For messages of other components (the offload runtime, through accio_log).
void log(Level level, const std::string& key, const std::string& msg);
// Replaces the sink (nullptr: back to stderr). Applies to messages issued after it returns.
void set_sink(Sink sink, void* user);

}  // namespace accio::base
