/* reload.h: SIGHUP. fosd reads its tokens file and its configuration (the --config file and the
 * command line, flags winning as at start) again and applies what can change while it serves:
 * the tenants of the tokens file and the keys the config table marks reloadable
 * (fosd_config_reloadable, config.h). Cached weights and saved contexts stay as they are. */
#ifndef FOSD_RELOAD_H
#define FOSD_RELOAD_H

#include <uv.h>

#include "server.h"

/* Rereads and applies, all or nothing: when the configuration or the tokens file is bad (or
 * cannot be read), nothing changes and the log says why. Tenants: one whose name and secret are
 * unchanged keeps its weights, contexts and usage, with the quotas of its new line; a new one can
 * authenticate from the next request on; a removed one (or whose secret changed) gets
 * UNAUTHENTICATED from its next request on, on connections already open too. The tokens file
 * itself is the one fosd started with: a changed `tokens` path, like every key outside the
 * reloadable ones, waits for a restart (logged as a warning). Safe to call from the control
 * thread while requests run; calls are serialized. Returns 0 when applied, -1 when nothing
 * changed because of an error. */
int fosd_reload(fosd_server *srv);

/* A libuv signal callback (h->data: the fosd_server) that logs "SIGHUP: ..." and reloads. */
void fosd_reload_on_signal(uv_signal_t *h, int signum);

#endif
