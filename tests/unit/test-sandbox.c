/* test-sandbox: profile parsing, the seccomp policy as data, and a few
 * real spawns through the library API (outcome classification). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox.h"
#include "tap.h"
#include "util.h"

static int limits(const char *json, struct sandbox_limits *l, char *err, size_t errlen)
{
	json_t *p = json ? json_loads(json, 0, NULL) : NULL;
	int rc = sandbox_limits_parse(p, l, err, errlen);

	json_decref(p);
	return rc;
}

static void test_limits(void)
{
	struct sandbox_limits l;
	char err[256];

	ok(limits(NULL, &l, err, sizeof(err)) == 0, "no profile gives defaults");
	is_int(l.memory, 1LL << 30, "default memory 1G");
	is_int(l.pids, 512, "default pids 512");
	ok(l.output_kill, "default: kill at the output cap");
	ok(limits("{\"memory\":\"64M\",\"pids\":32,\"cpu\":0.5,\"tmp_size\":\"8M\",\"cpu_time\":\"3s\","
		  "\"output\":\"10k\",\"on_output_cap\":\"truncate\",\"network\":\"none\"}", &l, err, sizeof(err)) == 0,
	   "full profile parses");
	is_int(l.memory, 64LL << 20, "memory");
	is_int(l.pids, 32, "pids");
	is_int(l.cpu_millicores, 500, "cpu");
	is_int(l.cpu_time_ms, 3000, "cpu_time");
	is_int(l.output_max, 10 * 1024, "output");
	ok(!l.output_kill, "on_output_cap truncate");
	ok(limits("{\"bogus\":1}", &l, err, sizeof(err)) < 0 && strstr(err, "bogus"), "unknown key refused: %s", err);
	ok(limits("{\"memory\":\"lots\"}", &l, err, sizeof(err)) < 0, "bad size refused: %s", err);
	ok(limits("{\"network\":{\"allow\":[\"a.example:443\",\"*.b.example:80\",\"[::1]:8080\"]}}", &l, err, sizeof(err)) == 0 && l.egress,
	   "network allow-list parses");
	ok(limits("{\"network\":{\"allow\":[\"noport\"]}}", &l, err, sizeof(err)) < 0, "allow entry without a port refused: %s", err);
	ok(limits("{\"network\":{\"allow\":[\"a:70000\"]}}", &l, err, sizeof(err)) < 0, "allow entry with a bad port refused");
	ok(limits("{\"network\":\"host\"}", &l, err, sizeof(err)) < 0, "network host refused");
	ok(limits("{\"pids\":1}", &l, err, sizeof(err)) < 0, "pids below 2 refused");
}

static const struct sandbox_rule *rule(const struct sandbox_policy *pol, const char *name)
{
	return sandbox_policy_find(pol, seccomp_syscall_resolve_name(name));
}

static void test_policy(void)
{
	struct sandbox_policy pol;
	char err[256], path[] = "/tmp/cn-policy.XXXXXX";
	json_t *step;
	int fd;

	ok(sandbox_policy_build(&pol, NULL, NULL, false, err, sizeof(err)) == 0, "default policy builds");
	ok(pol.bpf && pol.bpf_len > 10, "compiled to BPF (%zu instructions)", pol.bpf_len);
	ok(rule(&pol, "mount") && rule(&pol, "mount")->action == SANDBOX_ACT_EPERM, "mount is EPERM");
	ok(rule(&pol, "io_uring_setup") && rule(&pol, "io_uring_setup")->action == SANDBOX_ACT_ENOSYS, "io_uring is ENOSYS");
	ok(rule(&pol, "kexec_load") && rule(&pol, "kexec_load")->action == SANDBOX_ACT_KILL, "kexec_load kills");
	ok(rule(&pol, "socket") && rule(&pol, "socket")->by_args, "socket refused by arguments only");
	ok(!rule(&pol, "read"), "read is allowed");
	{
		struct sandbox_policy again;

		ok(sandbox_policy_build(&again, NULL, NULL, false, err, sizeof(err)) == 0 &&
		   again.bpf_len == pol.bpf_len && memcmp(again.bpf, pol.bpf, pol.bpf_len * 8) == 0 &&
		   again.bpf != pol.bpf, "a second build (from the cache) gives the same program in its own memory");
		sandbox_policy_release(&again);
		ok(sandbox_policy_build(&again, NULL, NULL, true, err, sizeof(err)) == 0 && again.unix_sockets &&
		   (again.bpf_len != pol.bpf_len || memcmp(again.bpf, pol.bpf, pol.bpf_len * 8) != 0),
		   "unix_sockets gives a different program");
		sandbox_policy_release(&again);
	}
	sandbox_policy_release(&pol);

	step = json_loads("{\"deny\":[\"getpid\"],\"kill\":[\"chmod\"]}", 0, NULL);
	ok(sandbox_policy_build(&pol, NULL, step, false, err, sizeof(err)) == 0, "step additions build");
	ok(rule(&pol, "getpid") && rule(&pol, "getpid")->action == SANDBOX_ACT_EPERM, "step denies getpid");
	ok(rule(&pol, "chmod") && rule(&pol, "chmod")->action == SANDBOX_ACT_KILL, "step kills on chmod");
	sandbox_policy_release(&pol);
	json_decref(step);

	step = json_loads("{\"allow\":[\"mount\"]}", 0, NULL);
	ok(sandbox_policy_build(&pol, NULL, step, false, err, sizeof(err)) < 0 && strstr(err, "allow"),
	   "a step cannot allow: %s", err);
	json_decref(step);
	step = json_loads("{\"deny\":[\"reboot\"]}", 0, NULL);
	ok(sandbox_policy_build(&pol, NULL, step, false, err, sizeof(err)) == 0 &&
	   rule(&pol, "reboot")->action == SANDBOX_ACT_KILL, "a step cannot soften kill to EPERM");
	sandbox_policy_release(&pol);
	json_decref(step);
	step = json_loads("{\"deny\":[\"no_such_call\"]}", 0, NULL);
	ok(sandbox_policy_build(&pol, NULL, step, false, err, sizeof(err)) < 0 && strstr(err, "no_such_call"),
	   "unknown system call refused: %s", err);
	json_decref(step);

	fd = mkstemp(path);
	if (fd >= 0) {
		const char *s = "{\"allow\":[\"ptrace\",\"process_vm_readv\"],\"kill\":[\"mount\"]}";

		if (write(fd, s, strlen(s)) < 0)
			diag("write: %s", strerror(errno));
		close(fd);
	}
	ok(sandbox_policy_build(&pol, path, NULL, false, err, sizeof(err)) == 0, "operator file builds");
	ok(!rule(&pol, "ptrace"), "operator allowed ptrace");
	ok(rule(&pol, "mount")->action == SANDBOX_ACT_KILL, "operator made mount kill");
	sandbox_policy_release(&pol);
	unlink(path);
	{
		char bad[] = "/tmp/cn-policy.XXXXXX";

		fd = mkstemp(bad);
		if (fd >= 0) {
			if (write(fd, "{\"allow\":[\"socket\"]}", 20) < 0)
				diag("write: %s", strerror(errno));
			close(fd);
		}
		ok(sandbox_policy_build(&pol, bad, NULL, false, err, sizeof(err)) < 0,
		   "argument rules cannot be allowed outright: %s", err);
		unlink(bad);
	}
}

/* Runs argv in a sandbox with profile; returns the outcome. */
static int run(char *const *argv, const char *profile, const char *ws, struct sandbox_result *r, char *out, size_t outlen)
{
	char *envp[] = { "PATH=/usr/bin:/bin", NULL }, err[512];
	struct sandbox_opts o;
	struct sandbox_proc p;
	json_t *prof = profile ? json_loads(profile, 0, NULL) : NULL;
	int pfd[2], st = 0, rc = -1;
	size_t got = 0;
	int64_t deadline;

	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -1;
	memset(&o, 0, sizeof(o));
	o.argv = argv;
	o.envp = envp;
	o.workspace = ws;
	o.profile = prof;
	o.stdout_fd = o.stderr_fd = pfd[1];
	if (sandbox_spawn(&o, &p, err, sizeof(err)) < 0) {
		diag("spawn: %s", err);
		goto out;
	}
	close(pfd[1]);
	pfd[1] = -1;
	deadline = mono_ms() + 20000;
	for (;;) {
		ssize_t n = read(pfd[0], out + got, outlen - 1 - got);

		if (n <= 0)
			break;
		got += (size_t)n;
		if (got == outlen - 1)
			break;
	}
	out[got] = '\0';
	while (sandbox_reap(&p, &st) == 0 && mono_ms() < deadline)
		usleep(2000);
	if (!p.reaped) {
		p.timed_out = true;
		sandbox_kill(&p);
		while (sandbox_reap(&p, &st) == 0)
			usleep(2000);
	}
	sandbox_outcome(&p, st, r);
	sandbox_release(&p);
	rc = 0;
out:
	close(pfd[0]);
	if (pfd[1] >= 0)
		close(pfd[1]);
	json_decref(prof);
	return rc;
}

static void test_spawn(void)
{
	char ws[] = "/tmp/cn-ws.XXXXXX", out[4096], err[512];
	struct sandbox_result r;
	char *a_exit[] = { "sh", "-c", "echo hello; exit 3", NULL };
	char *a_id[] = { "sh", "-c", "id -u; hostname; echo x > /workspace/f", NULL };
	char *a_kill[] = { "sh", "-c", "exec /bin/sh -c 'kill -9 $$'", NULL };
	char *a_mem[] = { "sh", "-c", "a=x; while :; do a=$a$a; done", NULL };
	char *a_noexec[] = { "no-such-command-here", NULL };
	struct stat st;

	if (sandbox_check_host(err, sizeof(err)) < 0) {
		skip(12, err);
		return;
	}
	if (!mkdtemp(ws))
		bail("mkdtemp: %s", strerror(errno));
	ok(run(a_exit, NULL, ws, &r, out, sizeof(out)) == 0, "spawn exit 3");
	is_str(r.reason, "exit", "reason exit");
	is_int(r.exit_code, 3, "exit code 3");
	ok(strstr(out, "hello") != NULL, "stdout captured");

	ok(run(a_id, NULL, ws, &r, out, sizeof(out)) == 0 && r.success, "spawn id");
	ok(strncmp(out, "1000\ncairn\n", 11) == 0, "uid 1000 and hostname cairn inside: %s", out);
	ok(stat(strcat(strcpy(out, ws), "/f"), &st) == 0 && (geteuid() != 0 || st.st_uid == 65534),
	   "file written in the workspace, owned by the sandbox user on the host");

	ok(run(a_kill, NULL, ws, &r, out, sizeof(out)) == 0, "spawn self-kill");
	ok(strcmp(r.reason, "signal") == 0 && r.signal == 9, "reason signal 9 (%s)", r.reason);

	ok(run(a_mem, "{\"memory\":\"32M\"}", ws, &r, out, sizeof(out)) == 0, "spawn memory hog");
	is_str(r.reason, "oom", "reason oom: %s", r.message);

	ok(run(a_noexec, NULL, ws, &r, out, sizeof(out)) == 0 && r.exit_code == 127 && strstr(out, "could not execute"),
	   "missing command: exit 127 with a message");
	ok(run(a_exit, "{\"network\":{\"allow\":[\"a.example:443\"]}}", ws, &r, out, sizeof(out)) < 0,
	   "an allow-list without a proxy is refused at spawn");
	unlink(strcat(strcpy(out, ws), "/f"));
	rmdir(ws);
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

static void report(const char *what, int64_t *us, int n)
{
	qsort(us, (size_t)n, sizeof(*us), cmp_i64);
	printf("%-44s %8.2f %8.2f\n", what, us[n / 2] / 1000.0, us[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] / 1000.0);
}

/* --bench N: the time from asking for a process to the moment it is
 * executed, through sandbox_spawn and through a plain fork/exec, in one
 * run; what a worker pays per step (no CLI start-up in it). */
static int bench(int n)
{
	char ws[] = "/tmp/cn-bench.XXXXXX", err[512];
	char *argv[] = { "/bin/true", NULL }, *envp[] = { "PATH=/usr/bin:/bin", NULL };
	int64_t *sb = calloc((size_t)n, sizeof(*sb)), *fe = calloc((size_t)n, sizeof(*fe));
	int nul = open("/dev/null", O_WRONLY | O_CLOEXEC), st;

	if (!sb || !fe || nul < 0 || !mkdtemp(ws))
		return 1;
	for (int i = 0; i < n; i++) {
		struct sandbox_opts o;
		struct sandbox_proc p;
		int64_t t = mono_us();
		int pfd[2];
		pid_t pid;
		char c;

		/* plain: fork, exec, the parent learns of the exec by EOF */
		if (pipe2(pfd, O_CLOEXEC) < 0)
			return 1;
		pid = fork();
		if (pid == 0) {
			execve(argv[0], argv, envp);
			_exit(127);
		}
		close(pfd[1]);
		if (read(pfd[0], &c, 1) < 0)
			return 1;
		fe[i] = mono_us() - t;
		close(pfd[0]);
		waitpid(pid, &st, 0);

		memset(&o, 0, sizeof(o));
		o.argv = argv;
		o.envp = envp;
		o.workspace = ws;
		o.stdout_fd = o.stderr_fd = nul;
		t = mono_us();
		if (sandbox_spawn(&o, &p, err, sizeof(err)) < 0) {
			fprintf(stderr, "spawn: %s\n", err);
			return 1;
		}
		sb[i] = mono_us() - t;
		while (sandbox_reap(&p, &st) == 0)
			usleep(200);
		sandbox_release(&p);
	}
	printf("%-44s %8s %8s  (%d runs each)\n", "in-process, request -> exec'd", "p50 ms", "p99 ms", n);
	report("fork/exec /bin/true", fe, n);
	report("sandbox_spawn /bin/true", sb, n);
	rmdir(ws);
	close(nul);
	free(sb);
	free(fe);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 2 && strcmp(argv[1], "--bench") == 0)
		return bench(atoi(argv[2]) > 0 ? atoi(argv[2]) : 100);
	test_limits();
	test_policy();
	test_spawn();
	return done_testing();
}
