/* compare.c: the inference-consistency comparison (definitions in compare.h). One pass in flat
 * order; each element's contribution depends only on its own pair and its index, so feeding the
 * array in pieces gives the same result as feeding it whole. */
#include "compare.h"
#include "fos_format.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int64_t fos_ulp_key_bf16(uint16_t bits)
{
	int64_t mag = bits & 0x7FFF;
	return (bits & 0x8000) ? -mag : mag;
}

int64_t fos_ulp_key_f32(uint32_t bits)
{
	int64_t mag = bits & 0x7FFFFFFFu;
	return (bits & 0x80000000u) ? -mag : mag;
}

void fos_cmp_init(fos_cmp *r, int type)
{
	memset(r, 0, sizeof *r);
	r->type = type;
	r->max_at = FOS_CMP_NONE;
	r->first_differ = FOS_CMP_NONE;
	r->nonfinite_at = FOS_CMP_NONE;
}

double fos_cmp_bits_value(int type, uint32_t bits)
{
	if (type == FOS_CMP_U8)
		return bits & 0xFF;
	if (type == FOS_CMP_BF16)
		return fos_bf16_to_f32((uint16_t)bits);
	return fos_u2f(bits);
}

/* A new distance d at flat index at: the first element of the largest distance wins. */
static void note_ulps(fos_cmp *r, int64_t d, size_t at, uint32_t a, uint32_t b)
{
	if (r->max_at == FOS_CMP_NONE || d > r->max_ulps) {
		r->max_ulps = d;
		r->max_at = at;
		r->max_bits[0] = a;
		r->max_bits[1] = b;
	}
}

/* An element whose bits differ. */
static void note_differ(fos_cmp *r, size_t at, uint32_t a, uint32_t b)
{
	if (!r->differ++) {
		r->first_differ = at;
		r->first_bits[0] = a;
		r->first_bits[1] = b;
	}
}

void fos_cmp_add(fos_cmp *r, const void *ours, const void *ref, size_t count)
{
	const size_t base = r->n;
	for (size_t j = 0; j < count; j++) {
		const size_t i = base + j;
		uint32_t ab, bb;
		int64_t ka, kb;
		if (r->type == FOS_CMP_U8) {
			uint8_t x = ((const uint8_t *)ours)[j], y = ((const uint8_t *)ref)[j];
			if (x != y) {
				note_differ(r, i, x, y);
				note_ulps(r, x > y ? x - y : y - x, i, x, y);
			}
			continue;
		}
		if (r->type == FOS_CMP_BF16) {
			ab = ((const uint16_t *)ours)[j];
			bb = ((const uint16_t *)ref)[j];
			ka = fos_ulp_key_bf16((uint16_t)ab);
			kb = fos_ulp_key_bf16((uint16_t)bb);
		} else {
			ab = ((const uint32_t *)ours)[j];
			bb = ((const uint32_t *)ref)[j];
			ka = fos_ulp_key_f32(ab);
			kb = fos_ulp_key_f32(bb);
		}
		double av = fos_cmp_bits_value(r->type, ab), bv = fos_cmp_bits_value(r->type, bb);
		if (ab == bb) {
			if (isfinite(bv))
				r->sig += bv * bv;
			continue;
		}
		note_differ(r, i, ab, bb);
		int nan_a = isnan(av), nan_b = isnan(bv);
		if (nan_a && nan_b)
			continue; /* two NaNs (different payloads): the same non-number */
		if (nan_a || nan_b || isinf(av) || isinf(bv)) {
			/* only one side non-finite, or +inf against -inf (equal infinities have equal bits) */
			if (!r->nonfinite++) {
				r->nonfinite_at = i;
				r->nonfinite_bits[0] = ab;
				r->nonfinite_bits[1] = bb;
			}
			continue;
		}
		note_ulps(r, ka > kb ? ka - kb : kb - ka, i, ab, bb);
		r->sig += bv * bv;
		r->noise += (av - bv) * (av - bv);
	}
	r->n = base + count;
}

void fos_compare(int type, const void *ours, const void *ref, size_t count, fos_cmp *r)
{
	fos_cmp_init(r, type);
	fos_cmp_add(r, ours, ref, count);
}

double fos_cmp_sqnr_db(const fos_cmp *r)
{
	if (r->noise == 0)
		return INFINITY;
	if (r->sig == 0)
		return -INFINITY;
	return 10.0 * log10(r->sig / r->noise);
}

void fos_cmp_index_str(int ndim, const int64_t *shape, size_t i, char *buf, size_t cap)
{
	size_t idx[8];
	if (ndim < 0 || ndim > 8) {
		snprintf(buf, cap, "[%zu]", i); /* no shape to spell it in: the flat index */
		return;
	}
	for (int d = ndim - 1; d >= 0; d--) {
		size_t dim = (size_t)shape[d];
		idx[d] = dim ? i % dim : 0;
		i = dim ? i / dim : 0;
	}
	size_t used = (size_t)snprintf(buf, cap, "[");
	for (int d = 0; d < ndim && used < cap; d++)
		used += (size_t)snprintf(buf + used, cap - used, "%s%zu", d ? ", " : "", idx[d]);
	if (used < cap)
		snprintf(buf + used, cap - used, "]");
}

int fos_cmp_verdict(const fos_cmp *r, double sqnr, const fos_cmp_criterion *c, const fos_cmp_labels *l, int ndim,
		    const int64_t *shape, char *why, size_t whysz)
{
	const char *unit = r->type == FOS_CMP_BF16 ? "bf16" : (r->type == FOS_CMP_F32 ? "f32" : "uint8");
	if (!c->by_max_ulps && !c->by_min_sqnr) {
		if (!r->differ) {
			snprintf(why, whysz, "bitwise identical");
			return 1;
		}
		snprintf(why, whysz, "%zu of %zu elements differ (%s)", r->differ, r->n, l->bitwise);
		return 0;
	}
	if (r->nonfinite) {
		char at[100];
		fos_cmp_index_str(ndim, shape, r->nonfinite_at, at, sizeof at);
		snprintf(why, whysz, "%zu elements are NaN/inf on one side only (first at %s)", r->nonfinite, at);
		return 0;
	}
	if (c->by_max_ulps && r->max_ulps > (int64_t)c->max_ulps) {
		snprintf(why, whysz, "max %lld %s ulps > %s %llu", (long long)r->max_ulps, unit, l->max_ulps,
			 (unsigned long long)c->max_ulps);
		return 0;
	}
	if (c->by_min_sqnr && !(sqnr >= c->min_sqnr_db)) {
		snprintf(why, whysz, "SQNR %.2f dB < %s %g dB", sqnr, l->min_sqnr, c->min_sqnr_db);
		return 0;
	}
	size_t used = (size_t)snprintf(why, whysz, "within");
	if (c->by_max_ulps && used < whysz)
		used += (size_t)snprintf(why + used, whysz - used, " %s %llu", l->max_ulps, (unsigned long long)c->max_ulps);
	if (c->by_min_sqnr && used < whysz)
		snprintf(why + used, whysz - used, "%s %s %g dB", c->by_max_ulps ? " and" : "", l->min_sqnr,
			 c->min_sqnr_db);
	return 1;
}
