"""How the local runtime's long-lived processes allocate: glibc's malloc with at most two arenas.

glibc gives each thread that allocates while another holds the main arena an arena of its
own, up to 8 per core, and an arena's free memory is not returned to the system while any
block above it is in use. The emulator serves each keep-alive connection on its own thread
(about 50 in a soak) and the state function writes through a pool of threads, so their
resident size grew with free memory scattered over many arenas: the state worker ended one
200-second soak at 80 MB and the next, the same code, at 143 MB (docs/benchmarks.md, "Memory
per structure"). `MALLOC_ARENA_MAX=2` bounds the arenas; Python objects up to 512 bytes come
from Python's own allocator and are unaffected. The figures before and after are in
docs/benchmarks.md ("Soak").

Set in the environment where the emulator, the runner and each function worker are started
(a process reads it once, when it starts). A function sees it in `os.environ` next to the
runtime's own `PYTHONUNBUFFERED`; it changes how memory is laid out, never what a call does.
"""

from __future__ import annotations

MALLOC_ENVIRONMENT: dict[str, str] = {"MALLOC_ARENA_MAX": "2"}
"""Added to the environment of every process the local runtime starts and keeps running."""
