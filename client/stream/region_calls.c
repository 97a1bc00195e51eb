// SPDX-License-Identifier: MIT
/* region_calls.c - the device-region requests (docs/protocol.md): open a
 * region by key, commit it with its handle, close a hold. */
#include <errno.h>
#include <unistd.h>

#include "packet.h"
#include "region_calls.h"

int region_call_open(struct wsrv_model *m, const char *device, int kind, uint64_t fingerprint,
		     uint64_t bytes, bool read_only, struct region_answer *out)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__RegionOpen ro = WSRV__REGION_OPEN__INIT;
	Wsrv__Response *r;
	int fds[1], n = 0, ret;

	ro.device = (char *)device;
	ro.kind = kind;
	ro.fingerprint = fingerprint;
	ro.bytes = bytes;
	ro.read_only = read_only;
	q.body_case = WSRV__REQUEST__BODY_REGION_OPEN;
	q.region_open = &ro;
	if ((ret = cl_call_model(m, &ro.attach_id, &q, &r, fds, 1, &n)) < 0)
		return ret;
	*out = (struct region_answer){ .fd = -1 };
	if (r->body_case != WSRV__RESPONSE__BODY_REGION || !r->region) {
		ret = cl_err(-EBADMSG, "the server sent the wrong reply to RegionOpen");
	} else {
		out->role = r->region->role;
		out->id = r->region->region_id;
		out->writer_pid = r->region->writer_pid;
		/* (A read-only WAIT for a region nobody opened names none.) */
		if (r->region->bytes != bytes && !(read_only && r->region->role == WSRV__REGION_ROLE__REGION_WAIT))
			ret = cl_err(-EBADMSG, "the server answered RegionOpen for %llu bytes with a region of %llu",
				     (unsigned long long)bytes, (unsigned long long)r->region->bytes);
		else if ((out->role == WSRV__REGION_ROLE__REGION_READER) != (n == 1))
			ret = cl_err(-EBADMSG, "the server's RegionReply came with %d handles", n);
		else if (out->role != WSRV__REGION_ROLE__REGION_READER &&
			 out->role != WSRV__REGION_ROLE__REGION_WRITER &&
			 out->role != WSRV__REGION_ROLE__REGION_WAIT)
			ret = cl_err(-EBADMSG, "the server's RegionReply has an unknown role %d", out->role);
		else if (out->role != WSRV__REGION_ROLE__REGION_WAIT && !out->id)
			ret = cl_err(-EBADMSG, "the server's RegionReply has no region id");
	}
	if (ret == 0 && n == 1) {
		out->fd = fds[0];
		n = 0;
	}
	pkt_close_fds(fds, n);
	wsrv__response__free_unpacked(r, NULL);
	return ret;
}

static int ok_call(struct wsrv_model *m, Wsrv__Request *q, int fd, const char *what)
{
	Wsrv__Response *r;
	int fds[1], n = 0, ret = cl_call_fd(cl_model_client(m), q, fd, &r, fds, 0, &n);

	if (ret < 0)
		return ret;
	if (r->body_case != WSRV__RESPONSE__BODY_OK)
		ret = cl_err(-EBADMSG, "the server sent the wrong reply to %s", what);
	wsrv__response__free_unpacked(r, NULL);
	return ret;
}

int region_call_commit(struct wsrv_model *m, uint32_t id, int fd)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__RegionCommit rc = WSRV__REGION_COMMIT__INIT;

	rc.region_id = id;
	q.body_case = WSRV__REQUEST__BODY_REGION_COMMIT;
	q.region_commit = &rc;
	return ok_call(m, &q, fd, "RegionCommit");
}

int region_call_close(struct wsrv_model *m, uint32_t id)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__RegionClose rc = WSRV__REGION_CLOSE__INIT;

	rc.region_id = id;
	q.body_case = WSRV__REQUEST__BODY_REGION_CLOSE;
	q.region_close = &rc;
	return ok_call(m, &q, -1, "RegionClose");
}
