/* rc_code.h: the one mapping from a backend's fos_err rc (enum fos_rc of backend.h, and fosd's own
 * FOSD_RC_PRECONDITION) to the gRPC code of a reply. Every stage that turns a backend failure into
 * a status uses it, so the same failure gets the same code whichever stage met it. */
#ifndef FOSD_RC_CODE_H
#define FOSD_RC_CODE_H

#include "backend.h"
#include "fos.pb-c.h"

/* An fos_err rc (beside enum fos_rc) for a shared-memory region that shrank (shm_req.c). */
#define FOSD_RC_PRECONDITION 100

/* enum fos_rc (or FOSD_RC_PRECONDITION) -> the gRPC code of the reply */
static inline int fosd_code_of_rc(int rc)
{
	switch (rc) {
	case FOS_OK:
		return FOS__CODE__OK;
	case FOS_EINVAL:
		return FOS__CODE__INVALID_ARGUMENT;
	case FOS_ENOMEM:
		return FOS__CODE__RESOURCE_EXHAUSTED;
	case FOS_EUNSUPPORTED:
		return FOS__CODE__UNIMPLEMENTED;
	case FOSD_RC_PRECONDITION:
		return FOS__CODE__FAILED_PRECONDITION;
	default:
		return FOS__CODE__INTERNAL;
	}
}

#endif
