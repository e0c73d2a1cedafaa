/* control.h: fosd's control loop (control.c): signals, the drain, idle work, the watchdog. */
#ifndef FOSD_CONTROL_H
#define FOSD_CONTROL_H

#include <stddef.h>
#include <stdint.h>

typedef struct fosd_server fosd_server;
typedef struct fosd_slot fosd_slot;
typedef struct fosd_device fosd_device;

/* control.c: blocks SIGTERM and SIGINT in the calling thread (main, before any thread starts, so
 * every thread inherits it): they stay pending until fosd_control_run's handlers exist. */
void fosd_control_block_signals(void);
/* SIGTERM or SIGINT when one is pending (arrived while blocked, before the loop runs), else 0:
 * for the steps of the start that can take long (the weight repository) to stop early. */
int fosd_control_stop_pending(void);
/* Runs the libuv loop (signals, timers) until a drain finishes; unblocks SIGTERM/SIGINT in its
 * thread once their handlers are in place. Returns the exit code. */
int fosd_control_run(fosd_server *srv);
/* After the loop: bounds the teardown (a thread exits the process with exit_code, or 1, if it has
 * not ended in 15 s) and gives SIGTERM/SIGINT their default action back. */
void fosd_control_watchdog(int exit_code);

#endif
