/* pipeset.c: the set of open connections (pipeset.h), an unordered array grown by doubling. */
#include "pipeset.h"

#include <stdlib.h>

int fosd_pipeset_add(fosd_pipeset *s, uint32_t pipe)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		uint32_t *p = realloc(s->ids, cap * sizeof *p);
		if (!p)
			return -1;
		s->ids = p;
		s->cap = cap;
	}
	s->ids[s->n++] = pipe;
	return 0;
}

void fosd_pipeset_remove(fosd_pipeset *s, uint32_t pipe)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->ids[i] == pipe) {
			s->ids[i] = s->ids[--s->n];
			return;
		}
}

int fosd_pipeset_has(const fosd_pipeset *s, uint32_t pipe)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->ids[i] == pipe)
			return 1;
	return 0;
}

void fosd_pipeset_free(fosd_pipeset *s)
{
	free(s->ids);
	s->ids = NULL;
	s->n = s->cap = 0;
}
