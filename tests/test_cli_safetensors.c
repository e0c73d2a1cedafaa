/* test_cli_safetensors.c: the .safetensors reader (formats/safetensors.c) on files from the
 * tests' own writer (support_safetensors.c): tensors sorted by name with dtype, shape and byte
 * range; F32 rounded to bf16 to nearest even (ties, NaN, -0, inf); every malformed header refused
 * with a message naming the file and the problem; and every one-byte change and truncation of a
 * valid file either read or refused, never a crash (run under ASan by the sanitizer suite). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "safetensors.h"
#include "support_safetensors.h"

static char g_dir[64];

static int st_setup(void **state)
{
	(void)state;
	snprintf(g_dir, sizeof g_dir, "/tmp/fos-test-st-XXXXXX");
	return mkdtemp(g_dir) ? 0 : -1;
}

static int st_teardown(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
	return system(cmd) == 0 ? 0 : -1;
}

static const char *p(const char *name)
{
	static char buf[4][256];
	static int i;
	i = (i + 1) % 4;
	snprintf(buf[i], sizeof buf[i], "%s/%s", g_dir, name);
	return buf[i];
}

static float f_of(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static void test_read_valid(void **state)
{
	(void)state;
	uint16_t b[2 * 16];
	for (int i = 0; i < 32; i++)
		b[i] = (uint16_t)(0x3F80 + i);
	/* f32 -> bf16: exact; halfway, even below (stays); halfway, odd below (up); above half; NaN
	 * (quiet, sign kept); -0; -inf; largest finite rounding to inf */
	float f[8] = {1.5f,
		      f_of(0x3F808000u),
		      f_of(0x3F818000u),
		      f_of(0x3F808001u),
		      f_of(0xFF800001u),
		      -0.0f,
		      -INFINITY,
		      f_of(0x7F7FFFFFu)};
	static const uint16_t want[8] = {0x3FC0, 0x3F80, 0x3F82, 0x3F81, 0xFFC0, 0x8000, 0xFF80, 0x7F80};
	uint8_t u8[3] = {1, 2, 3};
	tst_in t[] = {{"z.w", "BF16", 2, 2, 16, b, sizeof b},
		      {"a.f", "F32", 2, 2, 4, f, sizeof f},
		      {"m.u8", "U8", 1, 3, 0, u8, sizeof u8}};
	assert_int_equal(tst_write(p("ok.safetensors"), t, 3, 0, NULL), 0);
	safet_file sf;
	fos_err e = {0, ""};
	if (safet_open(p("ok.safetensors"), &sf, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(sf.n, 3);
	assert_string_equal(sf.t[0].name, "a.f");
	assert_string_equal(sf.t[1].name, "m.u8");
	assert_string_equal(sf.t[2].name, "z.w");
	assert_int_equal(sf.t[0].dtype, SAFET_F32);
	assert_int_equal(sf.t[1].dtype, SAFET_OTHER);
	assert_string_equal(sf.t[1].dtype_name, "U8");
	assert_int_equal(sf.t[2].dtype, SAFET_BF16);
	assert_true(sf.t[2].ndim == 2 && sf.t[2].shape[0] == 2 && sf.t[2].shape[1] == 16 && sf.t[2].count == 32);
	assert_true(sf.t[2].begin == 0 && sf.t[2].end == 64 && sf.t[0].begin == 64 && sf.t[0].end == 96);
	assert_true(sf.t[1].ndim == 1 && sf.t[1].count == 3);
	char sb[64];
	assert_string_equal(safet_shape_str(&sf.t[1], sb, sizeof sb), "(3,)");
	assert_string_equal(safet_shape_str(&sf.t[2], sb, sizeof sb), "(2, 16)");
	uint16_t *out;
	assert_int_equal(safet_read_bf16(&sf, &sf.t[2], &out, &e), 0);
	assert_memory_equal(out, b, sizeof b);
	assert_true(((uintptr_t)out & 63) == 0);
	free(out);
	assert_int_equal(safet_read_bf16(&sf, &sf.t[0], &out, &e), 0);
	for (int i = 0; i < 8; i++)
		if (out[i] != want[i])
			fail_msg("f32 value %d: bf16 0x%04x, expected 0x%04x", i, out[i], want[i]);
	free(out);
	assert_int_not_equal(safet_read_bf16(&sf, &sf.t[1], &out, &e), 0);
	assert_non_null(strstr(e.msg, "tensor 'm.u8' has dtype U8 (BF16 or F32 expected)"));
	safet_close(&sf);
	safet_close(&sf); /* twice: safe */
}

static void write_raw(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

static void test_refuses(void **state)
{
	(void)state;
	static const struct {
		const char *header, *why;
	} bad[] = {
		{"{\"x\": [1, 2", "bad safetensors header (JSON line 1 column"},
		{"[1, 2]", "not a JSON object"},
		{"{\"a\": {\"dtype\": \"BF16\", \"shape\": [1], \"data_offsets\": [0, 2]}, \"a\": 1}", "duplicate object key"},
		{"{\"a\": 5}", "header entry 'a' is not an object"},
		{"{\"a\": {\"shape\": [1], \"data_offsets\": [0, 2]}}", "tensor 'a': \"dtype\" is missing"},
		{"{\"a\": {\"dtype\": \"BF16\", \"shape\": 1, \"data_offsets\": [0, 2]}}", "tensor 'a': \"shape\" is missing"},
		{"{\"a\": {\"dtype\": \"BF16\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 2]}}", "at most 8"},
		{"{\"a\": {\"dtype\": \"BF16\", \"shape\": [-1], \"data_offsets\": [0, 2]}}", "shape entry 0 is not a size"},
		{"{\"a\": {\"dtype\": \"BF16\", \"shape\": [1], \"data_offsets\": [0]}}", "\"data_offsets\" is missing or not"},
		{"{\"a\": {\"dtype\": \"BF16\", \"shape\": [1], \"data_offsets\": [2, 0]}}", "are not a range inside"},
		{"{\"a\": {\"dtype\": \"BF16\", \"shape\": [1], \"data_offsets\": [0, 4096]}}", "(truncated file?)"},
		{"{\"a\": {\"dtype\": \"BF16\", \"shape\": [3], \"data_offsets\": [0, 4]}}", "4 bytes for 3 BF16 elements (expected 6)"},
		{"{\"a\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0, 4]}, "
		 "\"b\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [2, 6]}}",
		 "tensors 'a' and 'b' overlap"},
		{"{\"__metadata__\": [1]}", "\"__metadata__\" is not an object"},
		{"{\"a\": {\"dtype\": \"BF16\", \"shape\": [18446744073709551615], \"data_offsets\": [0, 2]}}",
		 "bad safetensors header"},
	};
	uint16_t data[8] = {0};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		tst_in t = {"a", "BF16", 1, 4, 0, data, sizeof data};
		assert_int_equal(tst_write(p("bad.safetensors"), &t, 1, 0, bad[i].header), 0);
		safet_file sf;
		fos_err e = {0, ""};
		if (!safet_open(p("bad.safetensors"), &sf, &e))
			fail_msg("accepted %s", bad[i].header);
		if (!strstr(e.msg, bad[i].why) || strncmp(e.msg, p("bad.safetensors"), strlen(p("bad.safetensors"))))
			fail_msg("%s: message '%s' does not name the file and say '%s'", bad[i].header, e.msg, bad[i].why);
		assert_int_equal(sf.fd, -1);
	}
	/* the 8-byte length itself */
	safet_file sf;
	fos_err e = {0, ""};
	write_raw(p("short"), "\x02\0\0", 3);
	assert_int_not_equal(safet_open(p("short"), &sf, &e), 0);
	assert_non_null(strstr(e.msg, "shorter than the 8-byte header length"));
	write_raw(p("long"), "\xff\0\0\0\0\0\0\0{}", 10);
	assert_int_not_equal(safet_open(p("long"), &sf, &e), 0);
	assert_non_null(strstr(e.msg, "header length 255, file 10 bytes"));
	assert_int_not_equal(safet_open(p("missing"), &sf, &e), 0);
	assert_non_null(strstr(e.msg, "cannot open"));
	assert_int_not_equal(safet_open(g_dir, &sf, &e), 0);
	assert_non_null(strstr(e.msg, "not a regular file"));
}

/* Every one-byte change (to a few values) and every truncation of a valid file. */
static void test_mutations(void **state)
{
	(void)state;
	uint16_t b[16 * 2];
	float f[4] = {1, 2, 3, 4};
	for (int i = 0; i < 32; i++)
		b[i] = (uint16_t)(0x3F80 + i);
	tst_in t[] = {{"w", "BF16", 2, 16, 2, b, sizeof b}, {"f", "F32", 2, 2, 2, f, sizeof f}};
	assert_int_equal(tst_write(p("base.safetensors"), t, 2, 0, NULL), 0);
	FILE *in = fopen(p("base.safetensors"), "rb");
	assert_non_null(in);
	uint8_t base[1024];
	size_t n = fread(base, 1, sizeof base, in);
	fclose(in);
	assert_true(n > 100 && n < sizeof base);
	static const uint8_t vals[] = {0x00, 0xff, '"', '{', '9', ',', ' '};
	uint8_t m[1024];
	int opened = 0, refused = 0;
	for (size_t len = 0; len <= n; len++) { /* truncations, then changes of each byte */
		for (size_t i = 0; i <= (len == n ? n : 0); i++) {
			for (size_t v = 0; v < (len == n ? sizeof vals : 1); v++) {
				memcpy(m, base, n);
				if (len == n && i < n)
					m[i] = vals[v];
				write_raw(p("m.safetensors"), m, len);
				safet_file sf;
				fos_err e = {0, ""};
				if (safet_open(p("m.safetensors"), &sf, &e)) {
					refused++;
					assert_true(e.msg[0] != 0);
					continue;
				}
				opened++;
				for (size_t k = 0; k < sf.n; k++) {
					uint16_t *out = NULL;
					if (!safet_read_bf16(&sf, &sf.t[k], &out, &e))
						free(out);
				}
				safet_close(&sf);
			}
		}
	}
	assert_true(opened > 0 && refused > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_valid),
		cmocka_unit_test(test_refuses),
		cmocka_unit_test(test_mutations),
	};
	return cmocka_run_group_tests_name("cli_safetensors", tests, st_setup, st_teardown);
}
