/* ops_shm.c: the region operations RegisterRegion, UnregisterRegion and ListRegions (see shm.h and
 * PROTOCOL.md "Shared memory"): request checks, the peer's credentials from its ipc connection,
 * and the replies. */
#include "ops.h"
#include "log.h"
#include "fos_chan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fosd_shm_validate_op(const Fos__Request *rq, char *msg, size_t msgsz)
{
	switch (rq->op_case) {
	case FOS__REQUEST__OP_REGISTER_REGION: {
		const Fos__RegisterRegionRequest *r = rq->register_region;
		if (fosd_check_name(r->name, "region name", msg, msgsz))
			return FOS__CODE__INVALID_ARGUMENT;
		size_t kl = r->key ? strlen(r->key) : 0;
		if (kl == 0 || kl > 256) {
			snprintf(msg, msgsz, "region key must be 1 to 256 bytes ('fd:N' or 'shm:/NAME'), got %zu", kl);
			return FOS__CODE__INVALID_ARGUMENT;
		}
		if (r->size < 1 || r->size > FOSD_SHM_MAX_SIZE) {
			snprintf(msg, msgsz, "region size %llu is not in 1 .. %llu", (unsigned long long)r->size,
				 (unsigned long long)FOSD_SHM_MAX_SIZE);
			return FOS__CODE__INVALID_ARGUMENT;
		}
		if (r->channel && r->size < FOS_CHAN_MIN_SIZE) {
			snprintf(msg, msgsz, "a channel region needs at least %u bytes, got %llu", FOS_CHAN_MIN_SIZE,
				 (unsigned long long)r->size);
			return FOS__CODE__INVALID_ARGUMENT;
		}
		if (!r->channel && r->spin_us) {
			snprintf(msg, msgsz, "spin_us is %u but the region is not a channel", r->spin_us);
			return FOS__CODE__INVALID_ARGUMENT;
		}
		if (r->spin_us > FOSD_CHAN_SPIN_MAX_US) {
			snprintf(msg, msgsz, "spin_us %u is more than %u", r->spin_us, FOSD_CHAN_SPIN_MAX_US);
			return FOS__CODE__INVALID_ARGUMENT;
		}
		return 0;
	}
	case FOS__REQUEST__OP_UNREGISTER_REGION:
		if (fosd_check_name(rq->unregister_region->name, "region name", msg, msgsz))
			return FOS__CODE__INVALID_ARGUMENT;
		return 0;
	case FOS__REQUEST__OP_LIST_REGIONS:
		return 0;
	default:
		snprintf(msg, msgsz, "not a region operation");
		return FOS__CODE__INVALID_ARGUMENT;
	}
}

static void region_info_msg(const fosd_region_info *in, Fos__RegionInfo *out)
{
	fos__region_info__init(out);
	out->name = (char *)in->name;
	out->size = in->size;
	out->sealed = in->sealed;
	out->device_registered = in->pinned;
	out->uses = in->uses;
	out->channel_bytes = in->channel_bytes;
}

int fosd_op_register_region(fosd_opctx *c)
{
	fosd_opsrv *srv = c->srv;
	fosd_opreq *s = c->s;
	const Fos__RegisterRegionRequest *r = s->rq->register_region;
	char msg[FOSD_MSG_MAX];
	nng_pipe p = nng_msg_get_pipe(s->msg);
	uint64_t pid = 0, uid = 0;
	if (nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_PID, &pid) || nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_UID, &uid) ||
	    !pid)
		return fosd_fail(c, FOS__CODE__FAILED_PRECONDITION,
				 "shared-memory regions need an ipc:// connection on fosd's host (this connection has no "
				 "peer credentials)");
	fosd_region_info info;
	int rc = fosd_regions_register(&srv->regions, s->shm.pipe, s->shm.tenant, (int)pid, (int)uid, r->name, r->key,
				       r->size, &info, msg, sizeof msg);
	if (rc)
		return fosd_fail(c, rc, "%s", msg);
	if (r->channel) { /* serve it; on failure the region goes again: nothing half made stays */
		fosd_region *reg = fosd_regions_acquire(&srv->regions, s->shm.pipe, s->shm.tenant, r->name, &rc, msg,
							sizeof msg);
		if (!rc)
			rc = srv->chan_start(srv, s, reg, r->spin_us, &info.channel_bytes, msg, sizeof msg);
		if (rc) {
			char m2[FOSD_MSG_MAX];
			fosd_regions_unregister(&srv->regions, s->shm.pipe, s->shm.tenant, r->name, m2, sizeof m2);
			return fosd_fail(c, rc, "%s", msg);
		}
	}
	Fos__RegionInfo ri;
	region_info_msg(&info, &ri);
	Fos__RegisterRegionResult rr = FOS__REGISTER_REGION_RESULT__INIT;
	rr.info = &ri;
	return fosd_result(c, FOS__RESPONSE__RESULT_REGISTER_REGION, &rr, NULL);
}

int fosd_op_unregister_region(fosd_opctx *c)
{
	fosd_opsrv *srv = c->srv;
	fosd_opreq *s = c->s;
	char msg[FOSD_MSG_MAX];
	int rc = fosd_regions_unregister(&srv->regions, s->shm.pipe, s->shm.tenant, s->rq->unregister_region->name, msg,
					 sizeof msg);
	if (rc)
		return fosd_fail(c, rc, "%s", msg);
	Fos__UnregisterRegionResult ur = FOS__UNREGISTER_REGION_RESULT__INIT;
	return fosd_result(c, FOS__RESPONSE__RESULT_UNREGISTER_REGION, &ur, NULL);
}

int fosd_op_list_regions(fosd_opctx *c)
{
	fosd_opsrv *srv = c->srv;
	fosd_opreq *s = c->s;
	fosd_region_info *infos;
	size_t n;
	if (fosd_regions_list(&srv->regions, s->shm.pipe, s->shm.tenant, &infos, &n))
		return fosd_fail(c, FOS__CODE__RESOURCE_EXHAUSTED, "out of memory");
	Fos__RegionInfo *ri = calloc(n ? n : 1, sizeof *ri);
	Fos__RegionInfo **rp = calloc(n ? n : 1, sizeof *rp);
	int m;
	if (!ri || !rp) {
		m = fosd_fail(c, FOS__CODE__RESOURCE_EXHAUSTED, "out of memory");
	} else {
		for (size_t i = 0; i < n; i++) {
			region_info_msg(&infos[i], &ri[i]);
			rp[i] = &ri[i];
		}
		Fos__ListRegionsResult lr = FOS__LIST_REGIONS_RESULT__INIT;
		lr.n_regions = n;
		lr.regions = rp;
		m = fosd_result(c, FOS__RESPONSE__RESULT_LIST_REGIONS, &lr, NULL);
	}
	free(ri);
	free(rp);
	free(infos);
	return m;
}
