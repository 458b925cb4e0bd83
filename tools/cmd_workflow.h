/* cmd_workflow.h: the commands for named workflow definitions and
 * schedules (tools/cmd_workflow.c). */
#ifndef CAIRN_CMD_WORKFLOW_H
#define CAIRN_CMD_WORKFLOW_H

#include "cairn.h"

int cmd_workflow_put(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_workflow_get(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_workflow_list(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_schedule_add(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_schedule_list(struct cairn *cn, const struct cmd *self, int argc, char **argv);
int cmd_schedule_rm(struct cairn *cn, const struct cmd *self, int argc, char **argv);

/* Parses a version number (1 to INT32_MAX) into *out; returns -1 if bad. */
int parse_version(const char *s, long *out);

#endif
