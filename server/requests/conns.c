/* conns.c: per-connection accounting of request slots (policy in conns.h): a hash table of the
 * connected pipes by nng pipe id, each with the slots its requests hold. Entries live from the
 * pipe's ADD_PRE to its REM_POST event; a release for a pipe already gone is ignored (a slot's
 * failed send can complete after REM_POST). */
#include "conns.h"

#include <stdlib.h>

typedef struct fosd_conn {
	uint32_t pipe;
	int held;     /* slots holding this pipe's requests (running or sending) */
	int unauth;   /* of them, unauthenticated ones */
	int over_max; /* connected past max_connections */
	struct fosd_conn *next;
} fosd_conn;

int fosd_conns_init(fosd_conns *cs, int share, int max)
{
	cs->n_buckets = 1024;
	cs->buckets = calloc(cs->n_buckets, sizeof *cs->buckets);
	if (!cs->buckets)
		return -1;
	pthread_mutex_init(&cs->mu, NULL);
	cs->share = share > 0 ? share : 1;
	cs->max = max;
	cs->count = 0;
	atomic_init(&cs->dropped, 0);
	atomic_init(&cs->refused, 0);
	atomic_init(&cs->rejected, 0);
	return 0;
}

void fosd_conns_destroy(fosd_conns *cs)
{
	if (!cs->buckets)
		return;
	for (uint32_t i = 0; i < cs->n_buckets; i++)
		for (fosd_conn *c = cs->buckets[i], *next; c; c = next) {
			next = c->next;
			free(c);
		}
	free(cs->buckets);
	cs->buckets = NULL;
	pthread_mutex_destroy(&cs->mu);
}

static fosd_conn **slot_of(fosd_conns *cs, uint32_t pipe)
{
	fosd_conn **pp = &cs->buckets[(pipe * 2654435761u) % cs->n_buckets];
	while (*pp && (*pp)->pipe != pipe)
		pp = &(*pp)->next;
	return pp;
}

int fosd_conns_opened(fosd_conns *cs, uint32_t pipe)
{
	fosd_conn *c = calloc(1, sizeof *c);
	int rc = 0;
	pthread_mutex_lock(&cs->mu);
	if (cs->max > 0 && cs->count >= cs->max + FOSD_CONN_OVER_KEPT) {
		atomic_fetch_add(&cs->rejected, 1);
		rc = -1;
	} else if (c && !*slot_of(cs, pipe)) {
		c->pipe = pipe;
		c->over_max = cs->max > 0 && cs->count >= cs->max;
		if (c->over_max)
			atomic_fetch_add(&cs->rejected, 1);
		fosd_conn **b = &cs->buckets[(pipe * 2654435761u) % cs->n_buckets];
		c->next = *b;
		*b = c;
		cs->count++;
		c = NULL;
	}
	pthread_mutex_unlock(&cs->mu);
	free(c); /* closed, out of memory or already known: no entry */
	return rc;
}

void fosd_conns_closed(fosd_conns *cs, uint32_t pipe)
{
	pthread_mutex_lock(&cs->mu);
	fosd_conn **pp = slot_of(cs, pipe), *c = *pp;
	if (c) {
		*pp = c->next;
		cs->count--;
	}
	pthread_mutex_unlock(&cs->mu);
	free(c);
}

int fosd_conns_take(fosd_conns *cs, uint32_t pipe, int *held)
{
	int v = FOSD_CONN_OK;
	pthread_mutex_lock(&cs->mu);
	fosd_conn *c = *slot_of(cs, pipe);
	if (c) {
		c->held++;
		if (c->held > cs->share + FOSD_CONN_REFUSALS)
			v = FOSD_CONN_DROP;
		else if (c->over_max)
			v = FOSD_CONN_OVER_MAX;
		else if (c->held > cs->share)
			v = FOSD_CONN_OVER_SHARE;
		*held = c->held;
	} else {
		*held = 0;
	}
	pthread_mutex_unlock(&cs->mu);
	if (v == FOSD_CONN_OVER_SHARE || v == FOSD_CONN_OVER_MAX)
		atomic_fetch_add(&cs->refused, 1);
	return v;
}

void fosd_conns_release(fosd_conns *cs, uint32_t pipe)
{
	pthread_mutex_lock(&cs->mu);
	fosd_conn *c = *slot_of(cs, pipe);
	if (c && c->held > 0)
		c->held--;
	pthread_mutex_unlock(&cs->mu);
}

int fosd_conns_unauth_take(fosd_conns *cs, uint32_t pipe)
{
	int rc = 0;
	pthread_mutex_lock(&cs->mu);
	fosd_conn *c = *slot_of(cs, pipe);
	if (c) {
		if (c->unauth >= FOSD_CONN_UNAUTH)
			rc = -1;
		else
			c->unauth++;
	}
	pthread_mutex_unlock(&cs->mu);
	if (rc)
		atomic_fetch_add(&cs->refused, 1);
	return rc;
}

void fosd_conns_unauth_release(fosd_conns *cs, uint32_t pipe)
{
	pthread_mutex_lock(&cs->mu);
	fosd_conn *c = *slot_of(cs, pipe);
	if (c && c->unauth > 0)
		c->unauth--;
	pthread_mutex_unlock(&cs->mu);
}

unsigned long long fosd_conns_note_dropped(fosd_conns *cs)
{
	return atomic_fetch_add(&cs->dropped, 1) + 1;
}
