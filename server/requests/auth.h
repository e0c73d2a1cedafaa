/* auth.h: who sent a request. The request's auth_token is matched against the tenants of the
 * tokens file (tenants.h); the tenant's requests-in-flight quota is applied; duplicate detection
 * is made per tenant. Without a tokens file every request belongs to the anonymous tenant (NULL)
 * and the token is ignored. */
#ifndef FOSD_AUTH_H
#define FOSD_AUTH_H

#include <stddef.h>

#include "dispatch.h"

/* Called by dispatch once the header is decoded (s->rq, s->op, s->client_id set), before anything
 * else looks at the request. Sets s->tenant. Returns 0, or UNAUTHENTICATED (a wrong token: all of
 * its bytes are compared, so a secret followed by a NUL and more is wrong; or no token for
 * anything but Health) or RESOURCE_EXHAUSTED (the tenant's requests-in-flight quota) with msg.
 * The messages never say whether a tenant exists and never repeat the token. Each request is
 * matched against the tenants of the moment (fosd_reload may change them). */
int fosd_auth_request(fosd_rqsrv *srv, fosd_request *s, char *msg, size_t msgsz);
/* Called when the request is answered: ends its count in the tenant's requests in flight. */
void fosd_auth_done(fosd_request *s);
/* At start: loads the tokens file of cfg (NULL *out without one), warns when its permissions let
 * group or others read it, and logs how clients are authenticated (the anonymous tenant, or how
 * many tenants; a warning for plain tcp:// listeners, whose tokens travel in clear). Returns 0, or
 * -1 with msg. */
int fosd_auth_setup(const fosd_config *cfg, fosd_tenants **out, char *msg, size_t msgsz);
/* The tenant's name, or NULL for the anonymous tenant. */
const char *fosd_tenant_name(const fosd_tenant *t);

#endif
