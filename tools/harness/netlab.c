// SPDX-License-Identifier: MIT
/* netlab.c - namespaces joined by a bridge, for peers on one machine. */
#include "netlab.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	strncat(cmd, " >/dev/null 2>&1", sizeof(cmd) - strlen(cmd) - 1);
	return system(cmd) == 0 ? 0 : -1;
}

static int host_up(struct netlab *nl, int i)
{
	if (sh("ip netns add %s", nl->host[i]) < 0 ||
	    sh("ip -n %s link add eth0 type veth peer name p%d netns %s", nl->host[i], i, nl->sw) < 0 ||
	    sh("ip -n %s link set p%d master br0 up", nl->sw, i) < 0 ||
	    sh("ip -n %s addr add %s/24 dev eth0", nl->host[i], nl->ip[i]) < 0 ||
	    sh("ip -n %s link set eth0 up", nl->host[i]) < 0 || sh("ip -n %s link set lo up", nl->host[i]) < 0)
		return -1;
	return 0;
}

static int ns_up(struct netlab *nl, const char *tag)
{
	int pid = getpid();

	snprintf(nl->sw, sizeof(nl->sw), "%s%d-sw", tag, pid);
	if (geteuid() != 0 || sh("ip netns add %s", nl->sw) < 0)
		return -1;
	nl->ns = true;
	if (sh("ip -n %s link add br0 type bridge", nl->sw) < 0 || sh("ip -n %s link set br0 up", nl->sw) < 0)
		return -1;
	for (int i = 0; i < nl->n; i++) {
		snprintf(nl->host[i], sizeof(nl->host[i]), "%s%d-h%d", tag, pid, i);
		snprintf(nl->ip[i], sizeof(nl->ip[i]), "10.99.0.%d", i + 1);
		if (host_up(nl, i) < 0)
			return -1;
	}
	snprintf(nl->net, sizeof(nl->net), "10.99.0.0/24");
	nl->port = 13000;
	return 0;
}

void netlab_up(struct netlab *nl, int n, const char *tag)
{
	memset(nl, 0, sizeof(*nl));
	nl->n = n > NETLAB_MAX ? NETLAB_MAX : n;
	if (ns_up(nl, tag) == 0)
		return;
	netlab_down(nl);
	nl->n = n > NETLAB_MAX ? NETLAB_MAX : n;
	for (int i = 0; i < nl->n; i++)
		snprintf(nl->ip[i], sizeof(nl->ip[i]), "127.0.0.1");
	snprintf(nl->net, sizeof(nl->net), "127.0.0.0/8");
	nl->port = 20000 + (getpid() % 4000) * 10;
}

void netlab_down(struct netlab *nl)
{
	if (!nl->ns)
		return;
	for (int i = 0; i < nl->n; i++)
		if (nl->host[i][0])
			sh("ip netns del %s", nl->host[i]);
	sh("ip netns del %s", nl->sw);
	nl->ns = false;
}

void netlab_ports(struct netlab *nl)
{
	nl->port += NETLAB_MAX;
	for (int i = 0; i < nl->n; i++)
		snprintf(nl->addr[i], sizeof(nl->addr[i]), "%s:%d", nl->ip[i], nl->port + i);
}

int netlab_enter(const struct netlab *nl, int i)
{
	char path[256];
	int fd, r;

	if (!nl->ns)
		return 0;
	snprintf(path, sizeof(path), "/var/run/netns/%s", nl->host[i]);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = setns(fd, CLONE_NEWNET);
	close(fd);
	return r < 0 ? -errno : 0;
}
