"""Inside allocator.fresh_large_blocks a free 64 MiB chunk of the heap cannot take a 60 MiB
block: prints whether the block was mmapped while plugged, then after (True, False)."""

import ctypes

from mhabench.measure import allocator

assert allocator.retain_freed_memory()  # large blocks from the heap, never unmapped
libc = allocator._glibc_malloc()


def mapped(block: int) -> bool:
    return bool(ctypes.c_size_t.from_address(block - 8).value & 2)  # malloc's IS_MMAPPED


hole, guard = libc.malloc(64 << 20), libc.malloc(1024)
libc.free(hole)  # a free 64 MiB chunk inside the heap
with allocator.fresh_large_blocks():
    inside = libc.malloc(60 << 20)
    print(mapped(inside))
    libc.free(inside)
after = libc.malloc(60 << 20)
print(mapped(after))
