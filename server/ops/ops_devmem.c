/* ops_devmem.c: the CloseDeviceMemory operation (its row in the op table): closes the request's
 * connection and tenant's mapping of a client GPU allocation (devmaps.c of the device it was opened
 * on), at once or when the last request using it is answered. */
#include "ops.h"

int fosd_op_close_device_memory(fosd_opctx *c)
{
	fosd_opreq *s = c->s;
	const Fos__CloseDeviceMemoryRequest *r = s->rq->close_device_memory;
	char msg[FOSD_MSG_MAX];
	/* the mapping is in the table of the device it was opened on: the first that has it */
	int rc = FOS__CODE__NOT_FOUND;
	for (int i = 0; rc == FOS__CODE__NOT_FOUND && i < c->srv->n_devs; i++)
		rc = fosd_devmaps_close(&c->srv->res[i]->devmaps, s->shm.pipe, s->shm.tenant, r->ipc_handle.data,
					r->ipc_handle.len, msg, sizeof msg);
	if (rc)
		return fosd_fail(c, rc, "%s", msg);
	Fos__CloseDeviceMemoryResult cr = FOS__CLOSE_DEVICE_MEMORY_RESULT__INIT;
	return fosd_result(c, FOS__RESPONSE__RESULT_CLOSE_DEVICE_MEMORY, &cr, NULL);
}
