/* stats.c: the one snapshot of fosd's numbers (fosd_stats_take), the table of what is reported
 * of it (fosd_stats_rows) and the Stats op's message built from the table (fosd_stats_to_pb); the
 * Prometheus page is built from the same rows in http_metrics.c. Invariant: every field of
 * StatsResult but backend, device and ops, and every field of OpStats but op, is one row. */
#include "stats.h"
#include "transport.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

#include "fos_version.h"

#define S(f) offsetof(fosd_stats, f)
#define PB(f) offsetof(Fos__StatsResult, f)
#define OP(f) offsetof(fosd_op_snap, f)
#define OPB(f) offsetof(Fos__OpStats, f)

const fosd_stat_row fosd_stats_rows[] = {
	{FOSD_STAT_U64, S(uptime_ms), PB(uptime_ms), NULL, NULL, "Milliseconds since fosd started."},
	{FOSD_STAT_FLAG, S(draining), 0, "fosd_draining", "gauge",
	 "1 once fosd drains (SIGTERM/SIGINT or a failed backend): new requests get UNAVAILABLE."},
	{FOSD_STAT_FLAG, S(failed), 0, "fosd_backend_failed", "gauge",
	 "1 once the backend failed for good (fosd then exits 1)."},
	{FOSD_STAT_FLAG, S(mps), 0, "fosd_mps", "gauge",
	 "1 when fosd's GPU work runs under NVIDIA MPS (Health's mps is on); 0 when it is off, unknown "
	 "or not applicable (cpu)."},
	/* by op */
	{FOSD_STAT_OP_U64, OP(requests), OPB(requests), NULL, NULL, "Requests answered."},
	{FOSD_STAT_OP_CODES, OP(codes), OPB(codes), "fosd_requests_total", "counter",
	 "Requests answered, by operation, status code and tenant (\"\": none)."},
	{FOSD_STAT_OP_HIST, OP(lat), OPB(latency), NULL, NULL, "OK requests: from receipt to the reply."},
	{FOSD_STAT_OP_CODE_HIST, OP(lat), 0, "fosd_request_duration_seconds", "histogram",
	 "Requests by operation and status code: from receipt (the whole message read) to the reply "
	 "handed to nng."},
	{FOSD_STAT_OP_HIST, OP(queue), OPB(queue), "fosd_request_queue_seconds", "histogram",
	 "OK requests an executor lane ran: from receipt until a lane took the request."},
	{FOSD_STAT_OP_HIST, OP(in_copy), 0, "fosd_request_input_copy_seconds", "histogram",
	 "OK requests an executor lane ran: copying their input tensors to the device."},
	{FOSD_STAT_OP_HIST, OP(compute), 0, "fosd_request_compute_seconds", "histogram",
	 "OK requests an executor lane ran: their time on the lane less the input and output copies."},
	{FOSD_STAT_OP_HIST, OP(out_copy), 0, "fosd_request_output_copy_seconds", "histogram",
	 "OK requests an executor lane ran: making the reply and copying their results out of the device."},
	{FOSD_STAT_OP_HIST, OP(run), OPB(run), "fosd_request_run_seconds", "histogram",
	 "OK requests an executor lane ran: all of their time on the lane (input copy, compute, output copy)."},
	{FOSD_STAT_OP_U64, OP(ran_at_once), OPB(ran_at_once), "fosd_requests_run_at_once_total", "counter",
	 "OK requests run on the thread that received them (small, nothing queued, a lane free)."},
	{FOSD_STAT_OP_U64, OP(bytes_in), OPB(bytes_in), "fosd_request_bytes_total", "counter",
	 "Bytes of request messages received, by operation."},
	{FOSD_STAT_OP_U64, OP(bytes_out), OPB(bytes_out), "fosd_response_bytes_total", "counter",
	 "Bytes of reply messages sent, by operation."},
	/* the whole server */
	{FOSD_STAT_U64, S(duplicates), PB(duplicates), "fosd_duplicate_requests_total", "counter",
	 "Repeated request ids answered with the first copy's reply instead of running again."},
	{FOSD_STAT_U64, S(bad_messages), PB(bad_messages), "fosd_bad_messages_total", "counter",
	 "Messages that were not a decodable request."},
	{FOSD_STAT_U64, S(inflight), PB(inflight), "fosd_inflight_requests", "gauge",
	 "Requests received and not yet answered."},
	{FOSD_STAT_U64, S(queued), PB(queued), "fosd_queued_requests", "gauge", "Requests waiting for an executor worker."},
	{FOSD_STAT_U64, S(workers), PB(workers), "fosd_workers", "gauge", "Executor worker threads."},
	{FOSD_STAT_U64, S(cache.bytes), PB(cache_bytes), "fosd_weight_cache_bytes", "gauge",
	 "Bytes held by the weight cache."},
	{FOSD_STAT_U64, S(cache.budget), PB(cache_budget), "fosd_weight_cache_budget_bytes", "gauge",
	 "The weight cache budget (cache_bytes)."},
	{FOSD_STAT_U64, S(cache.entries), PB(cache_entries), "fosd_weight_cache_entries", "gauge", "Weights cached."},
	{FOSD_STAT_U64, S(cache.hits), PB(cache_hits), "fosd_weight_cache_hits_total", "counter",
	 "Weight lookups that found the weight."},
	{FOSD_STAT_U64, S(cache.misses), PB(cache_misses), "fosd_weight_cache_misses_total", "counter",
	 "Weight lookups that did not find it."},
	{FOSD_STAT_U64, S(cache.evictions), PB(cache_evictions), "fosd_weight_cache_evictions_total", "counter",
	 "Weights evicted to make room."},
	{FOSD_STAT_U64, S(cache.tier_bytes), PB(decoded_tier_bytes), "fosd_decoded_tier_bytes", "gauge",
	 "Bytes of the decoded tier's bf16 weight copies (small forwards; not in the cache's bytes)."},
	{FOSD_STAT_U64, S(cache.tier_budget), PB(decoded_tier_budget), "fosd_decoded_tier_budget_bytes", "gauge",
	 "The decoded tier's bound (an eighth of cache_bytes)."},
	{FOSD_STAT_U64, S(cache.tier_entries), PB(decoded_tier_entries), "fosd_decoded_tier_entries", "gauge",
	 "Weights with a decoded tier copy."},
	{FOSD_STAT_U64, S(cache.tier_hits), PB(decoded_tier_hits), "fosd_decoded_tier_hits_total", "counter",
	 "Forwards that read a decoded tier copy made before."},
	{FOSD_STAT_U64, S(cache.tier_drops), PB(decoded_tier_drops), "fosd_decoded_tier_drops_total", "counter",
	 "Decoded tier copies dropped to make room."},
	{FOSD_STAT_U64, S(cache.scratch_bytes), PB(scratch_bytes), "fosd_scratch_bytes", "gauge",
	 "Bytes of the executor lanes' weight decode buffers (not cache)."},
	{FOSD_STAT_U64, S(contexts.count), PB(contexts), "fosd_contexts", "gauge", "Saved contexts held."},
	{FOSD_STAT_U64, S(contexts.bytes), PB(context_bytes), "fosd_context_bytes", "gauge",
	 "Bytes held by saved contexts."},
	{FOSD_STAT_U64, S(contexts.budget), PB(context_budget), "fosd_context_budget_bytes", "gauge",
	 "The saved-context budget (context_bytes)."},
	{FOSD_STAT_U64, S(contexts.expired), PB(contexts_expired), "fosd_contexts_expired_total", "counter",
	 "Saved contexts freed after their TTL."},
	{FOSD_STAT_U64, S(contexts.evicted), PB(contexts_evicted), "fosd_contexts_evicted_total", "counter",
	 "Saved contexts evicted to make room."},
	{FOSD_STAT_U64, S(shm_regions), PB(shm_regions), "fosd_shm_regions", "gauge",
	 "Shared-memory regions registered by clients."},
	{FOSD_STAT_U64, S(shm_region_bytes), PB(shm_region_bytes), "fosd_shm_region_bytes", "gauge",
	 "Bytes of the registered shared-memory regions."},
	{FOSD_STAT_U64, S(shm_mapped_bytes), PB(shm_mapped_bytes), "fosd_shm_mapped_bytes", "gauge",
	 "Bytes of shared-memory regions still mapped."},
	{FOSD_STAT_U64, S(device_mappings), PB(device_mappings), "fosd_device_mappings", "gauge",
	 "Client GPU allocations mapped for device tensors."},
	{FOSD_STAT_U64, S(device_mapped_bytes), PB(device_mapped_bytes), "fosd_device_mapped_bytes", "gauge",
	 "Bytes of the client GPU allocations mapped."},
	{FOSD_STAT_U64, S(device_tensors), PB(device_tensors), "fosd_device_tensors_total", "counter",
	 "Device tensors read or written."},
	{FOSD_STAT_U64, S(device_staged), PB(device_staged), "fosd_device_staged_total", "counter",
	 "Device tensors copied once on the GPU instead of used in place."},
	{FOSD_STAT_U64, S(channels), PB(channels), "fosd_channels", "gauge", "Request channels being served."},
	{FOSD_STAT_U64, S(channel_requests), PB(channel_requests), "fosd_channel_requests_total", "counter",
	 "Requests taken from request channels."},
	{FOSD_STAT_U64, S(connections), PB(connections), "fosd_connections", "gauge", "Client connections now."},
	{FOSD_STAT_U64, S(connections_dropped), PB(connections_dropped), "fosd_connections_dropped_total", "counter",
	 "Connections closed for not reading their replies."},
	{FOSD_STAT_U64, S(connection_refusals), PB(connection_refusals), "fosd_connection_refusals_total", "counter",
	 "Requests refused for a connection's share, the token-less cap or max_connections."},
	{FOSD_STAT_U64, S(connections_rejected), PB(connections_rejected), "fosd_connections_rejected_total", "counter",
	 "Connections past max_connections."},
	{FOSD_STAT_U64, S(pool.taken), PB(msg_pool_taken), "fosd_msg_pool_taken_total", "counter",
	 "Message bodies of 1 MiB and more handed out by the pool."},
	{FOSD_STAT_U64, S(pool.reused), PB(msg_pool_reused), "fosd_msg_pool_reused_total", "counter",
	 "Of those, reused from the pool."},
	{FOSD_STAT_U64, S(pool.mapped_new), PB(msg_pool_mapped_new), "fosd_msg_pool_mapped_new_total", "counter",
	 "Of those, freshly mapped."},
	{FOSD_STAT_U64, S(pool.bytes_free), PB(msg_pool_bytes_free), "fosd_msg_pool_free_bytes", "gauge",
	 "Pool bytes mapped and kept for the next message."},
	{FOSD_STAT_U64, S(pool.bytes_used), PB(msg_pool_bytes_used), "fosd_msg_pool_used_bytes", "gauge",
	 "Pool bytes mapped and holding a message now."},
	{FOSD_STAT_U64, S(pool.bytes_pinned), PB(msg_pool_bytes_pinned), "fosd_msg_pool_pinned_bytes", "gauge",
	 "Pool bytes registered with the device for DMA."},
	{FOSD_STAT_U64, S(pool.pin_failures), PB(msg_pool_pin_failures), "fosd_msg_pool_pin_failures_total", "counter",
	 "Pool buffers that could not be pinned."},
	{FOSD_STAT_FLAG, S(pool.active), PB(msg_pool_active), "fosd_msg_pool_active", "gauge",
	 "1 once the message pool handed out its first buffer."},
	/* the process (the names of Prometheus' own process collectors) */
	{FOSD_STAT_US, S(proc.cpu_us), 0, "process_cpu_seconds_total", "counter",
	 "User and system CPU time of fosd, in seconds."},
	{FOSD_STAT_U64, S(proc.rss_bytes), 0, "process_resident_memory_bytes", "gauge",
	 "Resident memory of fosd, in bytes."},
	{FOSD_STAT_U64, S(proc.vm_bytes), 0, "process_virtual_memory_bytes", "gauge", "Virtual memory of fosd, in bytes."},
	{FOSD_STAT_U64, S(proc.open_fds), 0, "process_open_fds", "gauge", "File descriptors fosd has open."},
	{FOSD_STAT_U64, S(proc.max_fds), 0, "process_max_fds", "gauge", "fosd's file descriptor limit (RLIMIT_NOFILE)."},
	{FOSD_STAT_U64, S(proc.threads), 0, "process_threads", "gauge", "Threads of fosd."},
	{FOSD_STAT_US, S(proc.start_time_us), 0, "process_start_time_seconds", "gauge",
	 "When fosd started, in seconds since the Unix epoch."},
};
const size_t fosd_stats_nrows = sizeof fosd_stats_rows / sizeof fosd_stats_rows[0];

#undef S
#undef PB
#undef OP
#undef OPB

void fosd_stats_take(fosd_tpsrv *srv, fosd_stats *out)
{
	memset(out, 0, sizeof *out);
	out->version = FOS_VERSION;
	out->backend = srv->devs[0].be->name;
	out->device = srv->devs[0].be->device;
	out->uptime_ms = (fosd_now_ns() - srv->start_ns) / 1000000u;
	out->draining = atomic_load(&srv->draining) != 0;
	out->failed = atomic_load(&srv->fatal) != 0;
	out->mps = srv->mps == FOS_MPS_ON;
	fosd_metrics_snap *m = malloc(sizeof *m);
	if (m) {
		fosd_metrics_snapshot(&srv->metrics, m);
		memcpy(out->ops, m->ops, sizeof out->ops);
		out->duplicates = m->duplicates;
		out->bad_messages = m->bad_messages;
		free(m);
	}
	int inflight = atomic_load(&srv->inflight);
	out->inflight = inflight > 0 ? (uint64_t)inflight : 0;
	out->n_devs = srv->n_devs;
	for (int i = 0; i < srv->n_devs; i++) {
		fosd_device *d = &srv->devs[i];
		fosd_dev_stat *ds = &out->devs[i];
		ds->device = d->name;
		fosd_wcache_stats_get(&d->wc, &ds->cache);
		fosd_contexts_stats_get(&d->cx, &ds->contexts);
		fosd_devmaps_stats(&d->devmaps, &ds->device_mappings, &ds->device_mapped_bytes, &ds->device_tensors,
				   &ds->device_staged);
		fosd_exec_snap ex;
		fosd_device_exec_snapshot(d, &ex);
		ds->lanes = ex.lanes;
		ds->lanes_busy = ex.lanes_busy;
		ds->queued = ex.queued;
		ds->requests = ex.requests;
		ds->busy_us = ex.busy_us;
		fosd_wcache_stats *c = &out->cache;
		c->bytes += ds->cache.bytes;
		c->budget += ds->cache.budget;
		c->entries += ds->cache.entries;
		c->hits += ds->cache.hits;
		c->misses += ds->cache.misses;
		c->evictions += ds->cache.evictions;
		c->tier_bytes += ds->cache.tier_bytes;
		c->tier_budget += ds->cache.tier_budget;
		c->tier_entries += ds->cache.tier_entries;
		c->tier_hits += ds->cache.tier_hits;
		c->tier_drops += ds->cache.tier_drops;
		c->scratch_bytes += ds->cache.scratch_bytes;
		fosd_contexts_stats *x = &out->contexts;
		x->count += ds->contexts.count;
		x->bytes += ds->contexts.bytes;
		x->budget += ds->contexts.budget;
		x->expired += ds->contexts.expired;
		x->evicted += ds->contexts.evicted;
		out->device_mappings += ds->device_mappings;
		out->device_mapped_bytes += ds->device_mapped_bytes;
		out->device_tensors += ds->device_tensors;
		out->device_staged += ds->device_staged;
		out->queued += ds->queued;
		out->workers += ex.workers;
	}
	fosd_regions_stats(&srv->regions, &out->shm_regions, &out->shm_region_bytes, &out->shm_mapped_bytes);
	out->channels = fosd_chans_count(&srv->chans);
	out->channel_requests = atomic_load(&srv->chans.requests);
	out->connections = (uint64_t)atomic_load(&srv->pipes);
	out->connections_dropped = atomic_load(&srv->conns.dropped);
	out->connection_refusals = atomic_load(&srv->conns.refused);
	out->connections_rejected = atomic_load(&srv->conns.rejected);
	fosd_msgpool_get_stats(&out->pool);
	fosd_proc_stats_get(&out->proc);
}

/* One distribution as its wire message. */
static void stats_latency(Fos__LatencyStats *l, const fosd_hist_snap *h)
{
	fos__latency_stats__init(l);
	l->count = h->count;
	l->mean_us = h->count ? (double)h->sum_us / (double)h->count : 0.0;
	l->p50_us = h->p50_us;
	l->p90_us = h->p90_us;
	l->p99_us = h->p99_us;
	l->p999_us = h->p999_us;
	l->max_us = h->max_us;
}

static void op_to_pb(const fosd_op_snap *om, int op, fosd_stats_pb *out)
{
	Fos__OpStats *o = &out->ops[op];
	fos__op_stats__init(o);
	o->op = (char *)fosd_op_name(op);
	int nh = 0;
	for (size_t r = 0; r < fosd_stats_nrows; r++) {
		const fosd_stat_row *row = &fosd_stats_rows[r];
		const char *src = (const char *)om + row->off;
		char *dst = (char *)o + row->pb;
		if (!row->pb)
			continue;
		if (row->kind == FOSD_STAT_OP_U64) {
			memcpy(dst, src, sizeof(uint64_t));
		} else if (row->kind == FOSD_STAT_OP_HIST && nh < FOSD_STATS_MAX_HIST) {
			Fos__LatencyStats *l = &out->lat[op][nh++];
			stats_latency(l, (const fosd_hist_snap *)(const void *)src);
			memcpy(dst, &l, sizeof l);
		} else if (row->kind == FOSD_STAT_OP_CODES) {
			/* the codes seen, in code order */
			size_t nc = 0;
			for (int c = 0; c < FOSD_NUM_CODES; c++)
				if (om->codes[c]) {
					Fos__CodeCount *cc = &out->codes[op][nc];
					fos__code_count__init(cc);
					cc->code = c;
					cc->count = om->codes[c];
					out->codep[op][nc++] = cc;
				}
			o->n_codes = nc;
			o->codes = out->codep[op];
		}
	}
	out->opp[op] = o;
}

void fosd_stats_to_pb(const fosd_stats *s, fosd_stats_pb *out)
{
	Fos__StatsResult *st = &out->st;
	fos__stats_result__init(st);
	st->backend = (char *)s->backend;
	st->device = (char *)s->device;
	for (int i = 0; i < FOSD_NUM_OPS; i++)
		op_to_pb(&s->ops[i], i, out);
	st->n_ops = FOSD_NUM_OPS;
	st->ops = out->opp;
	for (int i = 0; i < s->n_devs; i++) {
		const fosd_dev_stat *ds = &s->devs[i];
		Fos__DeviceStats *d = &out->dev[i];
		fos__device_stats__init(d);
		d->index = (uint32_t)i;
		d->device = (char *)ds->device;
		d->cache_bytes = ds->cache.bytes;
		d->cache_budget = ds->cache.budget;
		d->cache_entries = ds->cache.entries;
		d->contexts = ds->contexts.count;
		d->context_bytes = ds->contexts.bytes;
		d->context_budget = ds->contexts.budget;
		d->decoded_tier_bytes = ds->cache.tier_bytes;
		d->scratch_bytes = ds->cache.scratch_bytes;
		d->device_mappings = ds->device_mappings;
		d->device_mapped_bytes = ds->device_mapped_bytes;
		d->lanes = ds->lanes;
		d->lanes_busy = ds->lanes_busy;
		d->queued = ds->queued;
		d->requests = ds->requests;
		d->busy_us = ds->busy_us;
		out->devp[i] = d;
	}
	st->n_devices = (size_t)s->n_devs;
	st->devices = out->devp;
	for (size_t r = 0; r < fosd_stats_nrows; r++) {
		const fosd_stat_row *row = &fosd_stats_rows[r];
		const char *src = (const char *)s + row->off;
		char *dst = (char *)st + row->pb;
		if (!row->pb)
			continue;
		if (row->kind == FOSD_STAT_U64) {
			memcpy(dst, src, sizeof(uint64_t));
		} else if (row->kind == FOSD_STAT_FLAG) {
			int v;
			memcpy(&v, src, sizeof v);
			protobuf_c_boolean b = v != 0;
			memcpy(dst, &b, sizeof b);
		}
	}
}

void *fosd_stats_result(fosd_tpsrv *srv, Fos__StatsResult **st)
{
	struct stats_result {
		fosd_stats snap;   /* the strings of pb point into it */
		fosd_stats_pb pb;
	} *b = malloc(sizeof *b);
	if (!b)
		return NULL;
	fosd_stats_take(srv, &b->snap);
	fosd_stats_to_pb(&b->snap, &b->pb);
	*st = &b->pb.st;
	return b;
}
