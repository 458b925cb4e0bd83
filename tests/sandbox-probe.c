/* sandbox-probe: makes one system call an escape would need and reports
 * how it went ("NAME: ok" or "NAME: ERRNO (message)"), for the sandbox
 * escape tests. Exit 0 when the call succeeded, 1 when it failed. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/ptrace.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

static const struct { int e; const char *name; } names[] = {
	{ EPERM, "EPERM" }, { ENOENT, "ENOENT" }, { EACCES, "EACCES" }, { ENOSYS, "ENOSYS" },
	{ EROFS, "EROFS" }, { ESRCH, "ESRCH" }, { EINVAL, "EINVAL" }, { ECONNREFUSED, "ECONNREFUSED" },
	{ ENETUNREACH, "ENETUNREACH" }, { ENOSPC, "ENOSPC" }, { ENOTTY, "ENOTTY" }, { EBADF, "EBADF" },
	{ EAGAIN, "EAGAIN" }, { EAFNOSUPPORT, "EAFNOSUPPORT" }, { EFBIG, "EFBIG" }, { ENXIO, "ENXIO" },
	{ EHOSTUNREACH, "EHOSTUNREACH" }, { ETIMEDOUT, "ETIMEDOUT" }, { EEXIST, "EEXIST" },
};

static int report(const char *what, long rc)
{
	int e = errno;

	if (rc >= 0) {
		printf("%s: ok\n", what);
		return 0;
	}
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].e == e) {
			printf("%s: %s (%s)\n", what, names[i].name, strerror(e));
			return 1;
		}
	printf("%s: errno %d (%s)\n", what, e, strerror(e));
	return 1;
}

static int tcp_connect(const char *host, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int s = socket(AF_INET, SOCK_STREAM, 0);

	if (s < 0)
		return -1;
	inet_pton(AF_INET, host, &a.sin_addr);
	return connect(s, (struct sockaddr *)&a, sizeof(a));
}

static int unix_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int s = socket(AF_UNIX, SOCK_STREAM, 0);

	if (s < 0)
		return -1;
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	return connect(s, (struct sockaddr *)&a, sizeof(a));
}

static int membomb(void)
{
	for (size_t total = 0;; total += 1 << 20) {
		char *p = malloc(1 << 20);

		if (!p)
			return -1;
		memset(p, 1, 1 << 20);
	}
}

static long x86_int80_getpid(void)
{
#if defined(__x86_64__)
	long ret;

	__asm__ volatile("int $0x80" : "=a"(ret) : "a"(20) : "memory");
	return ret;
#else
	errno = ENOSYS;
	return -1;
#endif
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";
	char c = 'x';

	setvbuf(stdout, NULL, _IONBF, 0);
	if (!strcmp(cmd, "open") && argc > 2) {
		int flags = argc > 3 && !strcmp(argv[3], "w") ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY;
		return report("open", open(argv[2], flags, 0644));
	}
	if (!strcmp(cmd, "connect") && argc > 3)
		return report("connect", tcp_connect(argv[2], atoi(argv[3])));
	if (!strcmp(cmd, "unix-connect") && argc > 2)
		return report("unix-connect", unix_connect(argv[2]));
	if (!strcmp(cmd, "raw"))
		return report("raw", socket(AF_INET, SOCK_RAW, IPPROTO_ICMP));
	if (!strcmp(cmd, "packet"))
		return report("packet", socket(17 /* AF_PACKET */, SOCK_RAW, 0));
	if (!strcmp(cmd, "kill") && argc > 2)
		return report("kill", kill(atoi(argv[2]), argc > 3 ? atoi(argv[3]) : 0));
	if (!strcmp(cmd, "mount"))
		return report("mount", mount("none", "/tmp", "tmpfs", 0, NULL));
	if (!strcmp(cmd, "umount"))
		return report("umount", umount2("/proc", MNT_DETACH));
	if (!strcmp(cmd, "unshare"))
		return report("unshare", unshare(CLONE_NEWUSER));
	if (!strcmp(cmd, "clone-ns")) {
		long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);

		if (pid == 0)
			_exit(0);
		if (pid > 0)
			waitpid((pid_t)pid, NULL, 0);
		return report("clone-ns", pid);
	}
	if (!strcmp(cmd, "setns")) {
		int fd = open("/proc/self/ns/net", O_RDONLY);

		return report("setns", fd < 0 ? fd : setns(fd, 0));
	}
	if (!strcmp(cmd, "ptrace")) {
		pid_t pid = fork();

		if (pid == 0) {
			pause();
			_exit(0);
		}
		long rc = ptrace(PTRACE_ATTACH, pid, NULL, NULL);
		int e = errno;

		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		errno = e;
		return report("ptrace", rc);
	}
	if (!strcmp(cmd, "bpf")) {
		union bpf_attr attr;

		memset(&attr, 0, sizeof(attr));
		attr.map_type = BPF_MAP_TYPE_ARRAY;
		attr.key_size = 4;
		attr.value_size = 4;
		attr.max_entries = 1;
		return report("bpf", syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof(attr)));
	}
	if (!strcmp(cmd, "keyctl"))
		return report("keyctl", syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0));
	if (!strcmp(cmd, "io_uring_setup")) {
		char params[120];

		memset(params, 0, sizeof(params));
		return report("io_uring_setup", syscall(425 /* io_uring_setup */, 4, params));
	}
	if (!strcmp(cmd, "tiocsti"))
		return report("tiocsti", ioctl(argc > 2 ? atoi(argv[2]) : 0, TIOCSTI, &c));
	if (!strcmp(cmd, "tiocsti-high"))
		return report("tiocsti-high", syscall(SYS_ioctl, 0, (unsigned long)TIOCSTI | (1UL << 32), &c));
	if (!strcmp(cmd, "perf")) {
		struct perf_event_attr pa;

		memset(&pa, 0, sizeof(pa));
		pa.size = sizeof(pa);
		pa.type = PERF_TYPE_SOFTWARE;
		pa.config = PERF_COUNT_SW_CPU_CLOCK;
		return report("perf", syscall(SYS_perf_event_open, &pa, 0, -1, -1, 0));
	}
	if (!strcmp(cmd, "userfaultfd"))
		return report("userfaultfd", syscall(SYS_userfaultfd, 0));
	if (!strcmp(cmd, "personality"))
		return report("personality", personality(ADDR_NO_RANDOMIZE));
	if (!strcmp(cmd, "reboot"))
		return report("reboot", reboot(RB_AUTOBOOT));
	if (!strcmp(cmd, "int80"))
		return report("int80", x86_int80_getpid());
	if (!strcmp(cmd, "membomb"))
		return report("membomb", membomb());
	if (!strcmp(cmd, "alg"))
		return report("alg", socket(38 /* AF_ALG */, SOCK_SEQPACKET, 0));
	if (!strcmp(cmd, "vsock"))
		return report("vsock", socket(40 /* AF_VSOCK */, SOCK_STREAM, 0));
	if (!strcmp(cmd, "open_by_handle_at")) {
		char h[128];

		memset(h, 0, sizeof(h));
		return report("open_by_handle_at", syscall(SYS_open_by_handle_at, AT_FDCWD, h, O_RDONLY));
	}
	if (!strcmp(cmd, "x32"))
		return report("x32", syscall(39 | 0x40000000 /* x32 getpid */));
	if (!strcmp(cmd, "chroot"))
		return report("chroot", chroot("/tmp"));
	fprintf(stderr, "usage: sandbox-probe open PATH [w] | connect IP PORT | unix-connect PATH | raw | packet |\n"
		"  kill PID [SIG] | mount | umount | unshare | clone-ns | setns | ptrace | bpf | keyctl |\n"
		"  io_uring_setup | tiocsti [FD] | tiocsti-high | perf | userfaultfd | personality |\n"
		"  reboot | int80 | x32 | membomb | chroot | alg | vsock | open_by_handle_at\n");
	return 2;
}
