// SPDX-License-Identifier: MIT
/* dev_cuda_copy.c - the cuda backend's copies: from locked memory straight
 * to the device in pieces that each lie in one registration, and through
 * two pinned bounce buffers from anything else, for any size. */
#include <stdint.h>
#include <string.h>

#include "wire.h"
#include "dev_cuda.h"

/* Up to rows rows of width bytes through one bounce buffer; width is at
 * most CU_BOUNCE. Waits for the buffer's previous copy to leave first. */
static int bounce_once(struct cuda_dev *c, void *dst, const void *src, size_t width, size_t rows,
		       size_t pitch)
{
	int b = c->next_bounce;
	CUresult e;

	c->next_bounce = (b + 1) % CU_NBOUNCE;
	/* Made when first needed: a stream whose sources are all locked (or
	 * a copy service's) pins no staging at all. */
	if (!c->bounce[b] && (e = c->cu->MemAllocHost(&c->bounce[b], CU_BOUNCE)) != CUDA_SUCCESS) {
		c->bounce[b] = NULL;
		return cu_fail(c, e, "cuMemAllocHost (bounce buffer)");
	}
	if ((e = c->cu->EventSynchronize(c->bounce_ev[b])) != CUDA_SUCCESS)
		return cu_fail(c, e, "cuEventSynchronize (bounce buffer)");
	for (size_t r = 0; r < rows; r++)
		memcpy((char *)c->bounce[b] + r * width, (const char *)src + r * pitch, width);
	if ((e = c->cu->MemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst, c->bounce[b], rows * width,
					c->copy)) != CUDA_SUCCESS)
		return cu_fail(c, e, "cuMemcpyHtoDAsync (bounced)");
	if ((e = c->cu->EventRecord(c->bounce_ev[b], c->copy)) != CUDA_SUCCESS)
		return cu_fail(c, e, "cuEventRecord (bounce buffer)");
	return 0;
}

/* Rows packed into the bounce buffers, as many per trip as fit; a row
 * wider than a buffer goes in buffer-sized parts. */
static int bounced(struct cuda_dev *c, char *dst, const char *src, size_t width, size_t height,
		   size_t pitch)
{
	int r = 0;

	if (width > CU_BOUNCE) {
		for (size_t row = 0; row < height && r == 0; row++)
			for (size_t off = 0; off < width && r == 0; off += CU_BOUNCE) {
				size_t n = width - off < CU_BOUNCE ? width - off : CU_BOUNCE;
				r = bounce_once(c, dst + row * width + off, src + row * pitch + off, n, 1, n);
			}
		return r;
	}
	for (size_t done = 0, per = CU_BOUNCE / width; done < height && r == 0;) {
		size_t n = height - done < per ? height - done : per;
		r = bounce_once(c, dst + done * width, src + done * pitch, width, n, pitch);
		done += n;
	}
	return r;
}

/* Bytes from p that lie in locked memory, up to max; 0 when p is not
 * locked. */
static size_t locked_run(const struct cuda_dev *c, const char *p, size_t max)
{
	const struct cu_reg *g = cu_reg_at(c, (uintptr_t)p);

	if (!g || !g->locked)
		return 0;
	return g->b - (uintptr_t)p < max ? g->b - (uintptr_t)p : max;
}

/* Where the first locked registration above p starts; UINTPTR_MAX when
 * none does. */
static uintptr_t next_locked(const struct cuda_dev *c, uintptr_t p)
{
	uintptr_t best = UINTPTR_MAX;

	for (size_t i = 0; i < c->nregs; i++)
		if (c->regs[i].locked && c->regs[i].a > p && c->regs[i].a < best)
			best = c->regs[i].a;
	return best;
}

/* One flat run of len bytes: direct pieces where locked, bounced where not. */
static int flat(struct cuda_dev *c, char *dst, const char *src, size_t len)
{
	for (size_t off = 0; off < len;) {
		size_t want = len - off < CU_PIECE ? len - off : CU_PIECE;
		size_t n = locked_run(c, src + off, want);
		CUresult e;
		int r;
		if (n == 0) {
			/* Unlocked up to the next locked registration. */
			uintptr_t here = (uintptr_t)(src + off), next = next_locked(c, here);
			n = next - here < want ? next - here : want;
			if ((r = bounced(c, dst + off, src + off, n, 1, n)) < 0)
				return r;
		} else if ((e = c->cu->MemcpyHtoDAsync((CUdeviceptr)(uintptr_t)(dst + off), src + off, n,
						       c->copy)) != CUDA_SUCCESS) {
			return cu_fail(c, e, "cuMemcpyHtoDAsync");
		}
		off += n;
	}
	return 0;
}

/* Rows row0.. that lie whole in one locked registration: how many, up
 * to max (0: row0 does not). */
static size_t locked_rows(const struct cuda_dev *c, const char *src, size_t width, size_t pitch,
			  size_t max)
{
	const struct cu_reg *g = cu_reg_at(c, (uintptr_t)src);
	size_t n;

	if (!g || !g->locked || (uintptr_t)src + width > g->b)
		return 0;
	n = (g->b - (uintptr_t)src - width) / pitch + 1;
	return n < max ? n : max;
}

static int strided(struct cuda_dev *c, char *dst, const char *src, size_t width, size_t height,
		   size_t pitch)
{
	size_t per_piece = CU_PIECE / width ? CU_PIECE / width : 1;

	for (size_t row = 0; row < height;) {
		const char *s = src + row * pitch;
		size_t max = height - row < per_piece ? height - row : per_piece;
		size_t n = locked_rows(c, s, width, pitch, max);
		int r;
		if (n == 0) {
			n = 1;
			r = bounced(c, dst + row * width, s, width, 1, width);
		} else {
			struct cu_memcpy2d m = {
				.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = s, .srcPitch = pitch,
				.dstMemoryType = CU_MEMORYTYPE_DEVICE,
				.dstDevice = (CUdeviceptr)(uintptr_t)(dst + row * width), .dstPitch = width,
				.WidthInBytes = width, .Height = n,
			};
			CUresult e = c->cu->Memcpy2DAsync(&m, c->copy);
			r = e == CUDA_SUCCESS ? 0 : cu_fail(c, e, "cuMemcpy2DAsync");
		}
		if (r < 0)
			return r;
		row += n;
	}
	return 0;
}

int cu_copy_rows(struct cuda_dev *c, void *dst, const void *src, size_t width, size_t height,
		 size_t pitch)
{
	if (!width || !height)
		return 0;
	if (height == 1 || pitch == width)
		return flat(c, dst, src, width * height);
	return strided(c, dst, src, width, height, pitch);
}
