// SPDX-License-Identifier: MIT
/* http.c - HTTP over TCP (loopback, or an address of a test's own
 * network namespace) for the metrics tests: a connection,
 * a request and its status and body, a free port. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "helpers.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "clock.h"

int tcp_connect_loopback(int port)
{
	return tcp_connect_to(INADDR_LOOPBACK, port);
}

int tcp_connect_to(uint32_t addr, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	a.sin_addr.s_addr = htonl(addr);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* Reads fd until EOF or 5 s of silence, into a NUL-ended buffer. */
static char *read_answer(int fd)
{
	size_t cap = 1 << 16, got = 0;
	char *buf = malloc(cap + 1), *n;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t r;

	while (buf && poll(&p, 1, 5000) == 1 && (r = read(fd, buf + got, cap - got)) > 0) {
		got += (size_t)r;
		if (got == cap) {
			if (!(n = realloc(buf, (cap *= 2) + 1)))
				break;
			buf = n;
		}
	}
	if (buf)
		buf[got] = 0;
	return buf;
}

static int http_request_to(uint32_t addr, int port, const char *req, size_t len, char **body)
{
	int fd = tcp_connect_to(addr, port), status = 0;
	char *buf, *b;
	ssize_t n;

	if (fd < 0)
		return 0;
	for (size_t off = 0; off < len; off += (size_t)n)
		if ((n = send(fd, req + off, len - off, MSG_NOSIGNAL)) <= 0)
			break; /* refused mid-way: the answer may still be there */
	buf = read_answer(fd);
	close(fd);
	if (!buf)
		return 0;
	sscanf(buf, "HTTP/1.%*d %d", &status);
	b = strstr(buf, "\r\n\r\n");
	if (body)
		*body = strdup(b ? b + 4 : "");
	free(buf);
	return status;
}

int http_request(int port, const char *req, size_t len, char **body)
{
	return http_request_to(INADDR_LOOPBACK, port, req, len, body);
}

int http_get_to(uint32_t addr, int port, const char *path, char **body)
{
	char req[256];
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);

	return http_request_to(addr, port, req, (size_t)n, body);
}

int http_get(int port, const char *path, char **body)
{
	return http_get_to(INADDR_LOOPBACK, port, path, body);
}

int free_tcp_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}
