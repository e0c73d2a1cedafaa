/* test_fuzz_replay.c: the request fuzz target (tests/support_fuzz.c) in `make test`, built with
 * the normal compiler (and under AddressSanitizer + UBSan in the sanitizer build): every input of
 * the committed corpus tests/fuzz_corpus/ (seeds from tests/fuzz_corpus_gen.c plus what libFuzzer
 * found, merged), the seeds answered with the codes they are meant to get, then a short smoke run
 * of seeded random mutations ($FOS_FUZZ_SMOKE_SECONDS, 5 s by default). A crash, a sanitizer
 * report or a violated check of the target fails the test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fos.h"
#include "support_fuzz.h"
#include "support_server.h"
#include "support_trust.h"

typedef struct input {
	char name[256];
	uint8_t *data;
	size_t len;
} input;

static input *g_in;
static int g_n;

static const char *corpus_dir(void)
{
	const char *env = getenv("FOS_FUZZ_CORPUS");
	if (env && *env)
		return env;
	return "tests/fuzz_corpus"; /* make test runs in the source tree */
}

static int load_corpus(void **state)
{
	(void)state;
	DIR *d = opendir(corpus_dir());
	if (!d) {
		fprintf(stderr, "no fuzz corpus at %s (set FOS_FUZZ_CORPUS)\n", corpus_dir());
		return -1;
	}
	struct dirent *e;
	int cap = 0;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[1024];
		snprintf(path, sizeof path, "%s/%s", corpus_dir(), e->d_name);
		FILE *f = fopen(path, "rb");
		if (!f)
			continue;
		struct stat sb;
		if (fstat(fileno(f), &sb) || !S_ISREG(sb.st_mode)) {
			fclose(f);
			continue;
		}
		if (g_n == cap) {
			cap = cap ? cap * 2 : 256;
			g_in = realloc(g_in, sizeof *g_in * (size_t)cap);
		}
		input *in = &g_in[g_n++];
		snprintf(in->name, sizeof in->name, "%s", e->d_name);
		in->len = (size_t)sb.st_size;
		in->data = malloc(in->len ? in->len : 1);
		if (in->len && fread(in->data, 1, in->len, f) != in->len)
			in->len = 0;
		fclose(f);
	}
	closedir(d);
	return 0;
}

static int free_corpus(void **state)
{
	(void)state;
	for (int i = 0; i < g_n; i++)
		free(g_in[i].data);
	free(g_in);
	return 0;
}

/* What each seed is meant to get (by the tag in its name). */
static const struct {
	const char *tag;
	int code;
} g_expect[] = {
	{"-health-alice.", 0},
	{"-health-none.", 0},
	{"-health-wrong.", FOS_CODE_UNAUTHENTICATED},
	{"-stats-alice.", 0},
	{"-stats-bob.", 0},
	{"-list.", 0},
	{"-put.", 0},
	{"-drop.", 0},
	{"-forward.", 0},
	{"-forward-shm.", FOS_CODE_NOT_FOUND},
	{"-backward.", 0},
	{"-release.", 0},
	{"-quantize.", 0},
	{"-quantize-nvfp4.", 0},
	{"-dequantize.", 0},
	{"-linear.", 0},
	{"-empty.", FOS_CODE_INVALID_ARGUMENT},
	{"-hlen-lies.", FOS_CODE_INVALID_ARGUMENT},
	{"-junk-proto.", FOS_CODE_INVALID_ARGUMENT},
};

static void test_corpus(void **state)
{
	(void)state;
	int seeds = 0;
	for (int i = 0; i < g_n; i++) {
		int code = tf_request_one(g_in[i].data, g_in[i].len);
		if (strncmp(g_in[i].name, "seed-", 5))
			continue;
		seeds++;
		for (size_t k = 0; k < sizeof g_expect / sizeof g_expect[0]; k++)
			if (strstr(g_in[i].name, g_expect[k].tag) && code != g_expect[k].code)
				fail_msg("seed %s: got %s, expected %s", g_in[i].name, fos_code_name(code),
					 fos_code_name(g_expect[k].code));
	}
	fprintf(stderr, "replayed %d corpus inputs (%d seeds)\n", g_n, seeds);
	assert_true(seeds >= 20);
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
	uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* One mutation of src into dst (capacity cap); returns the new length. */
static size_t mutate(const input *src, const input *other, uint8_t *dst, size_t cap)
{
	size_t n = src->len < cap ? src->len : cap;
	memcpy(dst, src->data, n);
	int steps = 1 + (int)(rnd() % 4);
	for (int s = 0; s < steps; s++) {
		switch (rnd() % 8) {
		case 0: /* flip a bit */
			if (n)
				dst[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
			break;
		case 1: { /* an interesting byte */
			static const uint8_t v[] = {0, 1, 0x7f, 0x80, 0xff, 0x40, 0x10, 0x3f};
			if (n)
				dst[rnd() % n] = v[rnd() % sizeof v];
			break;
		}
		case 2: /* truncate */
			if (n)
				n = rnd() % n;
			break;
		case 3: { /* append random bytes */
			size_t add = rnd() % 64;
			for (size_t i = 0; i < add && n < cap; i++)
				dst[n++] = (uint8_t)rnd();
			break;
		}
		case 4: /* a little-endian length at the start */
			if (n >= 4) {
				uint32_t h = (uint32_t)(rnd() % (n + 8));
				memcpy(dst, &h, 4);
			}
			break;
		case 5: { /* splice the tail of another input */
			if (other->len) {
				size_t at = n ? rnd() % n : 0, from = rnd() % other->len, k = other->len - from;
				if (at + k > cap)
					k = cap - at;
				memcpy(dst + at, other->data + from, k);
				n = at + k;
			}
			break;
		}
		case 6: /* a varint byte of the header made large */
			if (n > 4)
				dst[4 + rnd() % (n - 4 < 64 ? n - 4 : 64)] |= 0x80;
			break;
		default: { /* overwrite 8 bytes with a random 64-bit value */
			if (n >= 8) {
				uint64_t v = rnd();
				memcpy(dst + rnd() % (n - 7), &v, 8);
			}
			break;
		}
		}
	}
	return n;
}

static void test_smoke(void **state)
{
	(void)state;
	assert_true(g_n > 0);
	int seconds = tt_env_seconds("FOS_FUZZ_SMOKE_SECONDS", 5);
	size_t cap = 1 << 18;
	uint8_t *buf = malloc(cap);
	uint64_t t0 = tsrv_now_ms(), runs = 0;
	int codes[FOS_STATS_CODES + 1] = {0};
	while (tsrv_now_ms() - t0 < (uint64_t)seconds * 1000) {
		for (int i = 0; i < 64; i++) {
			const input *a = &g_in[rnd() % (uint64_t)g_n], *b = &g_in[rnd() % (uint64_t)g_n];
			size_t n = mutate(a, b, buf, cap);
			int code = tf_request_one(buf, n);
			codes[code >= 0 && code < FOS_STATS_CODES ? code : FOS_STATS_CODES]++;
			runs++;
		}
	}
	free(buf);
	fprintf(stderr, "fuzz smoke: %llu mutated inputs in %d s (%d accepted, %d invalid, %d unauthenticated)\n",
		(unsigned long long)runs, seconds, codes[0], codes[FOS_CODE_INVALID_ARGUMENT],
		codes[FOS_CODE_UNAUTHENTICATED]);
	assert_true(runs > 1000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_corpus),
		cmocka_unit_test(test_smoke),
	};
	return cmocka_run_group_tests(tests, load_corpus, free_corpus);
}
