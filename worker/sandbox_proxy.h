/* sandbox_proxy: the egress allow-list proxy of one sandbox, on the
 * caller's event loop (see sandbox.h for the public part). */
#ifndef CAIRN_SANDBOX_PROXY_H
#define CAIRN_SANDBOX_PROXY_H

#include <jansson.h>

#include "sandbox.h"

/* Checks a "network" object's "allow" list. */
int sandbox_proxy_parse_allow(const json_t *network, char *err, size_t errlen) SANDBOX_WARN_UNUSED;
/* The end init gets (borrowed), and closing it once init holds it. */
int sandbox_proxy_child_fd(struct sandbox_proxy *px);
void sandbox_proxy_spawned(struct sandbox_proxy *px);

#endif
