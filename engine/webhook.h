/* webhook: delivers the store's webhook outbox (approval events) to one
 * HTTP URL: claims due deliveries with cairn.webhook_claim, POSTs each one
 * signed with HMAC-SHA256 over the body, and records every attempt with
 * cairn.webhook_result (failed ones come back after an exponential
 * backoff). Deliveries are at least once: a receiver deduplicates on
 * X-Cairn-Delivery. */
#ifndef CAIRN_WEBHOOK_H
#define CAIRN_WEBHOOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

struct event_base;
struct pgq;
struct webhook;

#define WEBHOOK_CLAIM 16
#define WEBHOOK_LEASE_MS 30000
#define WEBHOOK_IN_FLIGHT 8
#define WEBHOOK_TIMEOUT_S 10
#define WEBHOOK_BACKOFF_MAX_MS 300000

/* Returns new, or NULL with a message in err when url is not an http://
 * URL. q (the connection the claims and results go through), url and
 * secret are borrowed; q must outlive the webhook, url and secret are
 * copied. Caller frees with webhook_free. */
struct webhook *webhook_new(struct event_base *base, struct pgq *q, const char *url,
			    const char *secret, char *err, size_t errlen);
/* Claims due deliveries when there is room for more; call it often. */
void webhook_poll(struct webhook *w);
/* Claims nothing more and drops the deliveries not yet sent (their
 * leases expire and they are claimed again); those in flight finish. */
void webhook_stop(struct webhook *w);
/* True while deliveries are queued, in flight or being recorded. */
bool webhook_busy(const struct webhook *w);
/* Appends the delivery counters in Prometheus text format. */
void webhook_metrics_write(const struct webhook *w, struct buf *out);
/* Drops deliveries in flight (their leases expire and they are claimed
 * again) and frees w. */
void webhook_free(struct webhook *w);

/* Writes "sha256=" and the lower-case hex HMAC-SHA256 of body under secret
 * into out (at least 72 bytes). */
void webhook_sign(const char *secret, const char *body, size_t len, char *out, size_t outlen);

#endif
