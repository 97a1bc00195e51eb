// SPDX-License-Identifier: MIT
/* syscount.c - counting system calls with seccomp SECCOMP_RET_TRAP. */
#include "syscount.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int64_t trapped;

static void on_sigsys(int sig, siginfo_t *si, void *ctx)
{
	trapped++;
}

static int install(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_write, 3, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit_group, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_rt_sigreturn, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof(f) / sizeof(f[0]), f };
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigsys;
	sa.sa_flags = SA_SIGINFO;
	if (sigaction(SIGSYS, &sa, NULL) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -1;
	return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

int64_t count_syscalls(void (*fn)(void *), void *arg)
{
	int p[2], st;
	int64_t n = -1;
	pid_t kid;

	if (pipe(p) < 0)
		return -errno;
	kid = fork();
	if (kid < 0)
		return -errno;
	if (kid == 0) {
		close(p[0]);
		if (install() < 0)
			_exit(2);
		fn(arg);
		n = trapped;
		if (write(p[1], &n, sizeof(n)) != sizeof(n))
			_exit(3);
		syscall(SYS_exit_group, 0);
	}
	close(p[1]);
	if (read(p[0], &n, sizeof(n)) != sizeof(n))
		n = -EIO;
	close(p[0]);
	waitpid(kid, &st, 0);
	return n;
}
