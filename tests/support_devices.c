/* support_devices.c: see support_devices.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "support_devices.h"
#include "support_raw.h"

#define TDEV_MAX 16

Fos__Response *tdev_put(nng_socket s, const char *name, uint64_t version, const uint16_t *w, int64_t n, int64_t k,
			const uint32_t *devices, size_t nd, uint32_t replicas, int pin)
{
	Fos__PutWeightRequest pw = FOS__PUT_WEIGHT_REQUEST__INIT;
	Fos__Tensor t = FOS__TENSOR__INIT;
	int64_t shape_store[2];
	fosw_placer pl;
	memset(&pl, 0, sizeof pl);
	fosw_tensor_init(&t, shape_store, &pl, FOS__DTYPE__DTYPE_BF16, 2, (int64_t[]){n, k});
	pw.name = (char *)name;
	pw.version = version;
	pw.w = &t;
	pw.pin = pin;
	pw.devices = (uint32_t *)devices;
	pw.n_devices = nd;
	pw.replicas = replicas;
	Fos__Request rq = FOS__REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_PUT_WEIGHT;
	rq.put_weight = &pw;
	return traw_call(s, &rq, &pl, w, (size_t)(n * k) * 2);
}

Fos__Response *tdev_stats(nng_socket s, int ndev)
{
	Fos__StatsRequest sr = FOS__STATS_REQUEST__INIT;
	Fos__Request rq = FOS__REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_STATS;
	rq.stats = &sr;
	Fos__Response *r = traw_call(s, &rq, NULL, NULL, 0);
	assert_int_equal(r->result_case, FOS__RESPONSE__RESULT_STATS);
	assert_int_equal(r->stats->n_devices, ndev);
	return r;
}

void tdev_requests(nng_socket s, int ndev, uint64_t *out)
{
	Fos__Response *r = tdev_stats(s, ndev);
	for (int i = 0; i < ndev; i++) {
		assert_int_equal(r->stats->devices[i]->index, i);
		out[i] = r->stats->devices[i]->requests;
	}
	fos__response__free_unpacked(r, NULL);
}

int tdev_ran_on(nng_socket s, int ndev, const uint64_t *before)
{
	uint64_t now[TDEV_MAX];
	assert_true(ndev <= TDEV_MAX);
	tdev_requests(s, ndev, now);
	int dev = -1;
	for (int i = 0; i < ndev; i++)
		if (now[i] != before[i]) {
			assert_int_equal(dev, -1);
			assert_int_equal(now[i], before[i] + 1);
			dev = i;
		}
	assert_true(dev >= 0);
	return dev;
}

unsigned tdev_set(const Fos__WeightInfo *wi)
{
	unsigned m = 0;
	for (size_t i = 0; i < wi->n_devices; i++)
		m |= 1u << wi->devices[i];
	return m;
}
