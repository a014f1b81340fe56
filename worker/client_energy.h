/* What a client meters of its process's energy and the GPU clock it runs
 * at: the counters of common/energy.h read over windows of iterations at
 * the iteration boundaries the client sees (flps_client_wait, or the
 * first push of the next iteration), the job's gpu_clock set through
 * common/gpuclock.h (auto: measured in the first iterations), and what
 * they add up to for flps_client_energy and the flworker_energy_joules_
 * total series. So flworker, a Python program and any other libflps
 * program meter the same way (docs/energy.md).
 *
 * Energy is a process's, not a client's: the process's first client that
 * is alive meters it and sets the clock; a client made while another one
 * meters reports no device. Not thread-safe: the client's thread
 * (client_internal.h); the claim on the process is atomic. */
#ifndef FLPS_WORKER_CLIENT_ENERGY_H
#define FLPS_WORKER_CLIENT_ENERGY_H

#include "worker/client_internal.h"

/* A client was registered: claim the process's energy, open the counters
 * of the GPUs it uses (cfg->gpus, else $CUDA_VISIBLE_DEVICES, else every
 * GPU NVML lists) and of the node's CPU packages, and set cfg->gpu_clock
 * (NULL: $FLPS_GPU_CLOCK, else default) with its record at
 * cfg->gpu_clock_record ($FLPS_GPU_CLOCK_RECORD). Logs once per process
 * what it meters, or the one line saying why nothing reports energy; a
 * GPU that refuses the clock is said once and the job runs at the default
 * clock. Errors: FLPS_EINVAL (logged) for a gpu_clock or
 * gpu_clock_slowdown that does not parse; FLPS_ENOMEM. Absent hardware is
 * no error. Does I/O (sysfs, NVML). */
flps_err client_energy_open(flps_client *c, const flps_client_config *cfg);

/* done iterations are finished (the next to run is done): read the
 * counters where a window is due, and under gpu_clock: auto take the
 * window's measurement and move the clock. Called by the waits (done =
 * iter + 1) and the pushes (done = iter); only a count above the last one
 * counts. Cheap when no window is due (a clock read). */
void client_energy_at(flps_client *c, uint64_t done);

/* Restore the clocks (gpuclock_close), close the counters and release the
 * process's claim. NULL energy: nothing. */
void client_energy_close(flps_client *c);

#endif
