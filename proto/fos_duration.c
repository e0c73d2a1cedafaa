/* fos_duration.c: fos_parse_duration (fos_duration.h). Exact integer arithmetic: the integer part
 * saturates just above the maximum, the fraction keeps at most 9 digits, and the product of the
 * fraction and the unit is taken in 128 bits, so no input overflows. */
#include "fos_duration.h"

#include <ctype.h>
#include <string.h>

int fos_parse_duration(const char *s, uint64_t unit_ns, uint64_t *out, const char **why)
{
	const char *dummy;
	if (!why)
		why = &dummy;
	const char *p = s ? s : "";
	if (*p == '-') {
		*why = "negative";
		return -1;
	}
	if (!isdigit((unsigned char)*p) || !unit_ns) {
		*why = "not a decimal number";
		return -1;
	}
	const uint64_t max_ns = FOS_DURATION_MAX_MS * 1000000ull;
	uint64_t ip = 0, frac = 0, fden = 1;
	for (; isdigit((unsigned char)*p); p++)
		if (ip <= max_ns)
			ip = ip * 10 + (uint64_t)(*p - '0');
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p)) {
			*why = "not a decimal number";
			return -1;
		}
		for (; isdigit((unsigned char)*p); p++)
			if (fden < 1000000000ull) {
				frac = frac * 10 + (uint64_t)(*p - '0');
				fden *= 10;
			}
	}
	uint64_t mul; /* nanoseconds per unit of the text */
	if (!*p || !strcmp(p, "s"))
		mul = 1000000000ull;
	else if (!strcmp(p, "ms"))
		mul = 1000000ull;
	else if (!strcmp(p, "m") || !strcmp(p, "min"))
		mul = 60000000000ull;
	else if (!strcmp(p, "h"))
		mul = 3600000000000ull;
	else {
		int word = 1;
		for (const char *q = p; *q; q++)
			word &= isalpha((unsigned char)*q) != 0;
		*why = word ? "its unit is not ms, s, m or h" : "not a decimal number";
		return -1;
	}
	if (ip > max_ns / mul) {
		*why = "longer than 24 days";
		return -1;
	}
	unsigned __int128 den = (unsigned __int128)fden * unit_ns;
	unsigned __int128 v = ((unsigned __int128)ip * mul * fden + (unsigned __int128)frac * mul + den / 2) / den;
	if ((unsigned __int128)ip * mul * fden + (unsigned __int128)frac * mul > (unsigned __int128)max_ns * fden) {
		*why = "longer than 24 days";
		return -1;
	}
	*out = (uint64_t)v;
	return 0;
}
