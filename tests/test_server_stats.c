/* test_server_stats.c: the one stats snapshot (stats.h) and its table. Every field of the Stats
 * reply (StatsResult but backend, device and ops; OpStats but op) is filled by exactly one row, of
 * the wire type its kind writes; Prometheus names are unique, counters end in _total; and for a
 * snapshot whose every number differs, each row's Stats value and its /metrics sample are the
 * same number (scalars, and per op). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_metrics.h"
#include "stats.h"

/* the row that fills the field at offset off of a message (op: an OpStats row), or -1; fails on two */
static int row_of(size_t off, int op)
{
	int found = -1;
	for (size_t r = 0; r < fosd_stats_nrows; r++) {
		const fosd_stat_row *row = &fosd_stats_rows[r];
		int is_op = row->kind == FOSD_STAT_OP_U64 || row->kind == FOSD_STAT_OP_HIST || row->kind == FOSD_STAT_OP_CODES;
		if (row->pb != off || is_op != op || !row->pb)
			continue;
		if (found >= 0)
			fail_msg("rows %d and %zu fill the same field", found, r);
		found = (int)r;
	}
	return found;
}

static void test_rows_cover_the_reply(void **state)
{
	(void)state;
	const ProtobufCMessageDescriptor *d = &fos__stats_result__descriptor;
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		if (!strcmp(f->name, "backend") || !strcmp(f->name, "device") || !strcmp(f->name, "ops") ||
		    !strcmp(f->name, "devices")) /* per op and per device: filled beside the rows (stats.c) */
			continue;
		int r = row_of(f->offset, 0);
		if (r < 0)
			fail_msg("StatsResult.%s: no row fills it", f->name);
		fosd_stat_kind k = fosd_stats_rows[r].kind;
		if (!((k == FOSD_STAT_U64 && f->type == PROTOBUF_C_TYPE_UINT64) ||
		      (k == FOSD_STAT_FLAG && f->type == PROTOBUF_C_TYPE_BOOL)))
			fail_msg("StatsResult.%s: row %d writes another type", f->name, r);
	}
	d = &fos__op_stats__descriptor;
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		if (!strcmp(f->name, "op"))
			continue;
		int r = row_of(f->offset, 1);
		if (r < 0)
			fail_msg("OpStats.%s: no row fills it", f->name);
		fosd_stat_kind k = fosd_stats_rows[r].kind;
		int ok = (k == FOSD_STAT_OP_U64 && f->type == PROTOBUF_C_TYPE_UINT64) ||
			 (k == FOSD_STAT_OP_HIST && f->type == PROTOBUF_C_TYPE_MESSAGE &&
			  f->descriptor == &fos__latency_stats__descriptor) ||
			 (k == FOSD_STAT_OP_CODES && f->label == PROTOBUF_C_LABEL_REPEATED &&
			  f->descriptor == &fos__code_count__descriptor);
		if (!ok)
			fail_msg("OpStats.%s: row %d writes another type", f->name, r);
	}
	/* every row with a Stats field names a real one (no offset into the middle of a field) */
	int hists = 0;
	for (size_t r = 0; r < fosd_stats_nrows; r++) {
		const fosd_stat_row *row = &fosd_stats_rows[r];
		hists += row->kind == FOSD_STAT_OP_HIST && row->pb; /* the LatencyStats of Stats */
		if (!row->pb) {
			assert_non_null(row->prom); /* a row goes somewhere */
			continue;
		}
		int is_op = row->kind == FOSD_STAT_OP_U64 || row->kind == FOSD_STAT_OP_HIST || row->kind == FOSD_STAT_OP_CODES;
		d = is_op ? &fos__op_stats__descriptor : &fos__stats_result__descriptor;
		int hit = 0;
		for (unsigned i = 0; i < d->n_fields; i++)
			hit |= d->fields[i].offset == row->pb;
		if (!hit)
			fail_msg("row %zu: its offset is no field of %s", r, d->name);
	}
	assert_true(hists <= FOSD_STATS_MAX_HIST);
}

static void test_prom_names(void **state)
{
	(void)state;
	for (size_t r = 0; r < fosd_stats_nrows; r++) {
		const fosd_stat_row *row = &fosd_stats_rows[r];
		assert_non_null(row->help);
		if (!row->prom)
			continue;
		assert_true(!strncmp(row->prom, "fosd_", 5) || !strncmp(row->prom, "process_", 8));
		assert_non_null(row->type);
		int counter = !strcmp(row->type, "counter");
		assert_true(counter || !strcmp(row->type, "gauge") || !strcmp(row->type, "histogram"));
		assert_true(!strcmp(row->type, "histogram") ==
			    (row->kind == FOSD_STAT_OP_HIST || row->kind == FOSD_STAT_OP_CODE_HIST));
		size_t n = strlen(row->prom);
		if (counter && (n < 6 || strcmp(row->prom + n - 6, "_total")))
			fail_msg("counter %s does not end in _total", row->prom);
		for (size_t j = 0; j < r; j++)
			if (fosd_stats_rows[j].prom && !strcmp(fosd_stats_rows[j].prom, row->prom))
				fail_msg("%s twice", row->prom);
	}
}

/* The value of the sample line that starts with series followed by a space; -1 when none. */
static double sample(const char *text, const char *series)
{
	size_t n = strlen(series);
	for (const char *p = text; (p = strstr(p, series)); p++)
		if ((p == text || p[-1] == '\n') && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	return -1;
}

static void test_one_number_two_outputs(void **state)
{
	(void)state;
	fosd_stats *s = calloc(1, sizeof *s);
	fosd_metrics *m = calloc(1, sizeof *m);
	fosd_stats_pb *pb = calloc(1, sizeof *pb);
	assert_non_null(s);
	assert_non_null(m);
	assert_non_null(pb);
	assert_int_equal(fosd_metrics_init(m), 0);
	/* op i answered i + 1 times (OK, one NOT_FOUND), with distinct sizes */
	for (int op = 0; op < FOSD_NUM_OPS; op++)
		for (int i = 0; i <= op; i++)
			fosd_metrics_record(m, op, i == 1 ? 5 : 0, 10u * (uint64_t)(i + 1), 1000000, 2000000, 3000000, i & 1,
					    100 + (uint64_t)op, 1000 + (uint64_t)op);
	fosd_metrics_snap *snap = malloc(sizeof *snap);
	assert_non_null(snap);
	fosd_metrics_snapshot(m, snap);
	memcpy(s->ops, snap->ops, sizeof s->ops);
	free(snap);
	fosd_metrics_destroy(m);
	free(m);
	/* every scalar its own value */
	uint64_t v = 11;
	for (size_t r = 0; r < fosd_stats_nrows; r++) {
		const fosd_stat_row *row = &fosd_stats_rows[r];
		if (row->kind == FOSD_STAT_U64 || row->kind == FOSD_STAT_US) {
			memcpy((char *)s + row->off, &v, sizeof v);
			v += 13;
		} else if (row->kind == FOSD_STAT_FLAG) {
			int one = 1;
			memcpy((char *)s + row->off, &one, sizeof one);
		}
	}
	s->backend = "cpu";
	s->device = "test";
	s->version = "0";
	fosd_stats_to_pb(s, pb);
	char *page = fosd_prom_format(s, NULL);
	assert_non_null(page);
	assert_string_equal(pb->st.backend, "cpu");
	assert_int_equal(pb->st.n_ops, FOSD_NUM_OPS);
	for (size_t r = 0; r < fosd_stats_nrows; r++) {
		const fosd_stat_row *row = &fosd_stats_rows[r];
		if (row->kind == FOSD_STAT_US) { /* microseconds, on the page in seconds */
			uint64_t want;
			memcpy(&want, (const char *)s + row->off, sizeof want);
			assert_true(sample(page, row->prom) == (double)want / 1e6);
		} else if (row->kind == FOSD_STAT_U64 || row->kind == FOSD_STAT_FLAG) {
			uint64_t want;
			if (row->kind == FOSD_STAT_U64) {
				memcpy(&want, (const char *)s + row->off, sizeof want);
			} else {
				want = 1;
			}
			if (row->pb) {
				uint64_t got = 0;
				if (row->kind == FOSD_STAT_U64)
					memcpy(&got, (const char *)&pb->st + row->pb, sizeof got);
				else
					got = *(const protobuf_c_boolean *)(const void *)((const char *)&pb->st + row->pb) != 0;
				assert_int_equal(got, want);
			}
			if (row->prom && sample(page, row->prom) != (double)want)
				fail_msg("%s: %g on the page, %llu in the snapshot", row->prom, sample(page, row->prom),
					 (unsigned long long)want);
		} else if (row->kind == FOSD_STAT_OP_U64) {
			for (int op = 0; op < FOSD_NUM_OPS; op++) {
				uint64_t want, got;
				memcpy(&want, (const char *)&s->ops[op] + row->off, sizeof want);
				memcpy(&got, (const char *)&pb->ops[op] + row->pb, sizeof got);
				assert_int_equal(got, want);
				assert_ptr_equal(pb->st.ops[op], &pb->ops[op]);
				if (!row->prom)
					continue;
				char series[160];
				snprintf(series, sizeof series, "%s{op=\"%s\"}", row->prom, fosd_op_name(op));
				assert_true(sample(page, series) == (double)want);
			}
		} else if (row->kind == FOSD_STAT_OP_HIST) {
			for (int op = 0; op < FOSD_NUM_OPS; op++) {
				const fosd_hist_snap *h =
					(const fosd_hist_snap *)(const void *)((const char *)&s->ops[op] + row->off);
				if (row->pb) {
					Fos__LatencyStats *l;
					memcpy(&l, (const char *)&pb->ops[op] + row->pb, sizeof l);
					assert_non_null(l);
					assert_int_equal(l->count, h->count);
					assert_int_equal(l->max_us, h->max_us);
					assert_int_equal(l->p50_us, h->p50_us);
				}
				if (!row->prom)
					continue;
				char series[160];
				snprintf(series, sizeof series, "%s_count{op=\"%s\"}", row->prom, fosd_op_name(op));
				assert_true(sample(page, series) == (double)h->count);
			}
		} else if (row->kind == FOSD_STAT_OP_CODE_HIST) {
			/* a histogram per op and code seen: as many as the code's requests */
			assert_int_equal(row->pb, 0);
			for (int op = 0; op < FOSD_NUM_OPS; op++) {
				char series[200];
				snprintf(series, sizeof series, "%s_count{op=\"%s\",code=\"OK\"}", row->prom, fosd_op_name(op));
				assert_true(sample(page, series) == (double)s->ops[op].codes[0]);
				snprintf(series, sizeof series, "%s_count{op=\"%s\",code=\"NOT_FOUND\"}", row->prom,
					 fosd_op_name(op));
				assert_true(sample(page, series) == (op >= 1 ? 1.0 : -1.0));
			}
		} else if (row->kind == FOSD_STAT_OP_CODES) {
			for (int op = 0; op < FOSD_NUM_OPS; op++) {
				uint64_t sum = 0;
				for (size_t c = 0; c < pb->ops[op].n_codes; c++) {
					const Fos__CodeCount *cc = pb->ops[op].codes[c];
					assert_int_equal(cc->count, s->ops[op].codes[cc->code]);
					sum += cc->count;
				}
				assert_int_equal(sum, (uint64_t)op + 1);
				char series[160];
				snprintf(series, sizeof series, "%s{op=\"%s\",code=\"OK\",tenant=\"\"}", row->prom,
					 fosd_op_name(op));
				assert_true(sample(page, series) == (double)(op >= 1 ? op : 1));
			}
		}
	}
	free(page);
	free(pb);
	free(s);
}

/* Per device: Stats' DeviceStats and the page's fosd_device_* series carry the snapshot's numbers. */
static void test_devices_two_outputs(void **state)
{
	(void)state;
	fosd_stats *s = calloc(1, sizeof *s);
	fosd_stats_pb *pb = calloc(1, sizeof *pb);
	assert_non_null(s);
	assert_non_null(pb);
	s->backend = "cpu";
	s->device = "test";
	s->version = "0";
	s->n_devs = 2;
	for (int i = 0; i < 2; i++) {
		s->devs[i].device = i ? "cpu:1 (b)" : "cpu:0 (a)";
		s->devs[i].cache.bytes = 1000u + (uint64_t)i;
		s->devs[i].cache.entries = 3u + (uint64_t)i;
		s->devs[i].contexts.count = 7u + (uint64_t)i;
		s->devs[i].lanes = 2;
		s->devs[i].queued = 9u + (uint64_t)i;
		s->devs[i].requests = 40u + (uint64_t)i;
		s->devs[i].busy_us = 2500000u * (uint64_t)(i + 1);
	}
	fosd_stats_to_pb(s, pb);
	assert_int_equal(pb->st.n_devices, 2);
	for (int i = 0; i < 2; i++) {
		const Fos__DeviceStats *d = pb->st.devices[i];
		assert_int_equal(d->index, i);
		assert_string_equal(d->device, s->devs[i].device);
		assert_int_equal(d->cache_bytes, 1000u + (uint64_t)i);
		assert_int_equal(d->cache_entries, 3u + (uint64_t)i);
		assert_int_equal(d->contexts, 7u + (uint64_t)i);
		assert_int_equal(d->queued, 9u + (uint64_t)i);
		assert_int_equal(d->requests, 40u + (uint64_t)i);
		assert_int_equal(d->busy_us, 2500000u * (uint64_t)(i + 1));
	}
	char *page = fosd_prom_format(s, NULL);
	assert_non_null(page);
	assert_true(sample(page, "fosd_device_weight_cache_bytes{device=\"1\",name=\"cpu:1 (b)\"}") == 1001.0);
	assert_true(sample(page, "fosd_device_requests_total{device=\"0\",name=\"cpu:0 (a)\"}") == 40.0);
	assert_true(sample(page, "fosd_device_queued_requests{device=\"1\",name=\"cpu:1 (b)\"}") == 10.0);
	assert_true(sample(page, "fosd_device_busy_seconds_total{device=\"1\",name=\"cpu:1 (b)\"}") == 5.0);
	free(page);
	free(pb);
	free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows_cover_the_reply),
		cmocka_unit_test(test_prom_names),
		cmocka_unit_test(test_one_number_two_outputs),
		cmocka_unit_test(test_devices_two_outputs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
