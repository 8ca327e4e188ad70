"""A step's freed memory goes back to the OS between steps (glibc keeps freed heap pages otherwise)."""

import platform
import subprocess
import sys

import pytest

# Run in a fresh interpreter: a long test session's heap (its mmap threshold, its arenas) says nothing of a run's.
MEASURE = """
import gc
from runners.train.run_info import release_freed_memory

def rss_mib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS"))

blocks = [bytearray(4000) for _ in range(50_000)]
pinned = bytearray(4000)  # a live block above them: freeing alone cannot shrink the heap's top
held = rss_mib()
del blocks
gc.collect()
freed = rss_mib()
release_freed_memory()
print(held, freed, rss_mib(), len(pinned))
"""


@pytest.mark.quick
@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc and glibc's malloc_trim")
def test_freed_heap_blocks_leave_the_resident_set():
    """200 MiB of small heap blocks, freed, stay resident until the release hands them back."""
    out = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True, check=True).stdout
    held, freed, released, _ = (float(x) for x in out.split())
    assert freed > held - 50, (held, freed, released)  # glibc keeps the pages
    assert released < freed - 150, (held, freed, released)


COUNT_ARENAS = """
import ctypes, sys, tempfile, threading
from runners.train.run_info import limit_malloc_arenas

if sys.argv[1] == "capped":
    limit_malloc_arenas()
libc = ctypes.CDLL("libc.so.6")
started = threading.Barrier(8)

def allocate():
    started.wait()  # all eight threads alive at once, each with its first allocations to make
    blocks = [bytearray(1000) for _ in range(2000)]
    started.wait()
    del blocks

threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
with tempfile.NamedTemporaryFile("r") as report:
    libc.fopen.restype = ctypes.c_void_p
    stream = ctypes.c_void_p(libc.fopen(report.name.encode(), b"w"))
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    print(report.read().count("<heap nr="))
"""


@pytest.mark.quick
@pytest.mark.skipif(platform.system() != "Linux", reason="counts glibc's malloc arenas")
def test_a_process_keeps_at_most_the_capped_number_of_malloc_arenas():
    """Eight threads allocating at once get arenas of their own, unless the process capped them first."""
    import os

    from runners.train.run_info import MALLOC_ARENAS

    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}

    def arenas(mode: str) -> int:
        run = subprocess.run([sys.executable, "-c", COUNT_ARENAS, mode], capture_output=True, text=True, env=env)
        return int(run.stdout)

    assert arenas("capped") <= MALLOC_ARENAS
    assert arenas("default") > MALLOC_ARENAS
