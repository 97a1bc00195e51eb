// SPDX-License-Identifier: MIT
/* peer_trust.c - networks, tokens and addresses of peers. */
#include "peer_trust.h"
#include "utf8.h"

#include <pthread.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "ratelimit.h"

int peer_trust_allow(struct peer_trust *t, const char *cidr, struct errinfo *e)
{
	struct peer_net n = { 0 };
	char buf[64], *slash, *end;
	unsigned long bits;

	if (t->nallow >= PEER_MAX_ALLOW)
		return err_set(e, -E2BIG, "--peer-allow: at most %d networks", PEER_MAX_ALLOW);
	if (strlen(cidr) >= sizeof(buf))
		return err_set(e, -EINVAL, "--peer-allow: '%.*s...' is too long", UTF8_CUT(cidr, 64));
	strcpy(buf, cidr);
	slash = strchr(buf, '/');
	if (slash)
		*slash = 0;
	if (inet_pton(AF_INET, buf, n.addr) == 1)
		n.family = AF_INET;
	else if (inet_pton(AF_INET6, buf, n.addr) == 1)
		n.family = AF_INET6;
	else
		return err_set(e, -EINVAL, "--peer-allow: '%s' is not an address or a network (CIDR)", cidr);
	n.bits = n.family == AF_INET ? 32 : 128;
	if (slash) {
		errno = 0;
		bits = strtoul(slash + 1, &end, 10);
		if (errno || end == slash + 1 || *end || bits > n.bits)
			return err_set(e, -EINVAL, "--peer-allow: '%s' has a bad prefix length", cidr);
		n.bits = (unsigned)bits;
	}
	t->allow[t->nallow++] = n;
	return 0;
}

int peer_trust_token(struct peer_trust *t, const char *path, struct errinfo *e)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	char buf[PEER_TOKEN_MAX + 2];
	struct stat st;
	ssize_t n;
	size_t len;

	if (fd < 0)
		return err_set(e, -errno, "--peer-token %s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (st.st_mode & 077)) {
		close(fd);
		return err_set(e, -EPERM, "--peer-token %s: must be a regular file only its owner can read (chmod 600)",
			       path);
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return err_set(e, -errno, "--peer-token %s: %s", path, strerror(errno));
	buf[n] = 0;
	len = strcspn(buf, "\r\n");
	if (len < PEER_TOKEN_MIN || len > PEER_TOKEN_MAX)
		return err_set(e, -EINVAL, "--peer-token %s: the token (its first line) must be %d to %d bytes, not %zu",
			       path, PEER_TOKEN_MIN, PEER_TOKEN_MAX, len);
	memcpy(t->token, buf, len);
	t->token_len = len;
	explicit_bzero(buf, sizeof(buf));
	return 0;
}

static bool prefix_eq(const uint8_t *a, const uint8_t *b, unsigned bits)
{
	unsigned whole = bits / 8, rest = bits % 8;

	if (memcmp(a, b, whole))
		return false;
	return !rest || ((a[whole] ^ b[whole]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

bool peer_trust_allowed(const struct peer_trust *t, const struct sockaddr *sa)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	const uint8_t *a4 = NULL, *a6 = NULL;

	if (sa->sa_family == AF_INET) {
		a4 = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
	} else if (sa->sa_family == AF_INET6) {
		a6 = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
		if (memcmp(a6, mapped, sizeof(mapped)) == 0)
			a4 = a6 + 12;
	}
	for (size_t i = 0; i < t->nallow; i++) {
		const struct peer_net *n = &t->allow[i];
		if (n->family == AF_INET && a4 && prefix_eq(n->addr, a4, n->bits))
			return true;
		if (n->family == AF_INET6 && a6 && prefix_eq(n->addr, a6, n->bits))
			return true;
	}
	return false;
}

int peer_parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *len, struct errinfo *e)
{
	char host[64];
	const char *colon, *h = s;
	size_t hl;
	unsigned long port;
	char *end;

	memset(ss, 0, sizeof(*ss));
	colon = strrchr(s, ':');
	if (!colon)
		return err_set(e, -EINVAL, "'%s': expected ADDR:PORT", s);
	hl = (size_t)(colon - s);
	if (hl >= 2 && s[0] == '[' && s[hl - 1] == ']') {
		h = s + 1;
		hl -= 2;
	}
	if (hl == 0 || hl >= sizeof(host))
		return err_set(e, -EINVAL, "'%s': expected ADDR:PORT", s);
	memcpy(host, h, hl);
	host[hl] = 0;
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || port == 0 || port > 65535)
		return err_set(e, -EINVAL, "'%s': the port must be 1 to 65535", s);
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons((uint16_t)port);
		*len = sizeof(*a4);
	} else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*a6);
	} else {
		return err_set(e, -EINVAL, "'%s': '%s' is not a numeric address", s, host);
	}
	return 0;
}

void peer_addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN] = "?";

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &s->sin_addr, a, sizeof(a));
		snprintf(buf, len, "%s:%u", a, ntohs(s->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &s->sin6_addr, a, sizeof(a));
		snprintf(buf, len, "[%s]:%u", a, ntohs(s->sin6_port));
	} else {
		snprintf(buf, len, "(family %d)", sa->sa_family);
	}
}

void peer_refusal_log(const char *who, const char *how)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static struct ratelimit rl = { .window = 10, .burst = 5 };
	unsigned kept_out = 0;
	bool pass;

	pthread_mutex_lock(&mu);
	if ((pass = ratelimit_pass(&rl, mono_now()))) {
		kept_out = rl.suppressed;
		rl.suppressed = 0;
	}
	pthread_mutex_unlock(&mu);
	if (!pass)
		return;
	if (kept_out)
		log_warn("peer %s: refused %s: not in --peer-allow (and %u more refused since the last line)", who,
			 how, kept_out);
	else
		log_warn("peer %s: refused %s: not in --peer-allow", who, how);
}
