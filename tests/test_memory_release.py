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
from runners.train.run_info import configure_malloc

if sys.argv[1] == "configured":
    configure_malloc()
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

    from runners.train.run_info import MALLOC_SETTINGS

    cap = MALLOC_SETTINGS["MALLOC_ARENA_MAX"]
    assert _run(COUNT_ARENAS, "configured") <= cap
    assert _run(COUNT_ARENAS, "default") > cap


COUNT_OWN_PAGES = """
import ctypes, sys
from runners.train.run_info import configure_malloc

class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

if sys.argv[1] == "configured":
    configure_malloc()
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Mallinfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 2 * 1024 * 1024
libc.free(libc.malloc(size))  # glibc's own threshold rises past a freed block that had pages of its own
before = libc.mallinfo2().hblks
block = libc.malloc(size)
print(libc.mallinfo2().hblks - before)
"""


@pytest.mark.quick
@pytest.mark.skipif(platform.system() != "Linux", reason="reads glibc's mallinfo2")
def test_a_large_block_keeps_pages_of_its_own_after_others_were_freed():
    """A 2 MiB block allocated after an equal one was freed lands in the heap by default (glibc raised its mmap
    threshold), and in pages of its own, handed back when freed, once the process fixed the threshold."""
    assert _run(COUNT_OWN_PAGES, "default") == 0
    assert _run(COUNT_OWN_PAGES, "configured") == 1


def _run(script: str, mode: str) -> int:
    """Run ``script`` in a fresh interpreter with glibc's malloc variables unset and read the integer it prints."""
    import os

    from runners.train.run_info import MALLOC_SETTINGS

    env = {k: v for k, v in os.environ.items() if k not in MALLOC_SETTINGS}
    run = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, env=env, check=True)
    return int(run.stdout)
