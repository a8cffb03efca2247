"""Memory pre-flight: a run too large for the machine says so before any forward.

The limit is the least of ATTNLAB_MEMORY_LIMIT, the cgroup's memory.max, the process's soft
RLIMIT_AS and RLIMIT_DATA, and the available memory. The estimate counts what a run holds at its peak, the variant's forward, from the shapes alone:
the variant's score-sized stages (scores, the copy kept before an in-place mask, scaled scores,
weights) while its forward's own transients are alive, and the reference's three (none when they
are spilled to disk: the passes of the diagnosis afterwards read one block of one stage at a
time); plus the interpreter with torch and the activations. The figures it was checked against
are in benchmarks/README.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from attnlab.errors import UserError

BASE_BYTES = 450 * 2**20  # the interpreter with torch, hydra and the sinks imported
SPILL_STAGE_BYTES = 2**29  # a (batch, heads, query, key) stage this large is spilled to disk
LIMIT_ENV = "ATTNLAB_MEMORY_LIMIT"  # bytes attnlab may use; overrides what the machine says
CGROUP_MAX = Path("/sys/fs/cgroup/memory.max")
CGROUP_CURRENT = Path("/sys/fs/cgroup/memory.current")
MEMINFO = Path("/proc/meminfo")
STATUS = Path("/proc/self/status")


@dataclass(frozen=True)
class Size:
    batch: int
    heads: int
    n_tokens: int
    d_in: int
    d_out: int
    itemsize: int = 4  # bytes per value (float32)
    context_length: int = 0  # a (context_length x context_length) mask buffer in each module, if it takes one
    heads_known: bool = True  # False: checked before the module says its heads, at the least it can take

    @property
    def stage_bytes(self) -> int:
        """One (batch, heads, query, key) stage."""
        return self.batch * self.heads * self.n_tokens**2 * self.itemsize

    def describe(self) -> str:
        heads = f"{self.heads} head{'s' if self.heads > 1 else ''}" if self.heads_known else "at least 1 head"
        return f"batch {self.batch} x {heads} x {self.n_tokens}² tokens"


def estimate_peak_bytes(size: Size, *, spilled: bool) -> int:
    """The peak a run of this size reaches (see the module docstring for what is counted)."""
    variant = 4 * size.stage_bytes  # scores, the kept copy, scaled scores, weights
    reference = 0 if spilled else 3 * size.stage_bytes
    activations = 12 * size.batch * size.n_tokens * max(size.d_in, size.d_out) * size.itemsize
    buffers = 2 * size.context_length**2 * size.itemsize
    return BASE_BYTES + variant + reference + activations + buffers


def available_bytes() -> tuple[int, str]:
    """What this process may use and where that figure comes from."""
    if os.environ.get(LIMIT_ENV):
        return int(float(os.environ[LIMIT_ENV])), LIMIT_ENV
    limits = []
    cgroup = _read(CGROUP_MAX)
    if cgroup and cgroup != "max":
        used = int(_read(CGROUP_CURRENT) or 0)
        limits.append((int(cgroup) - used + _own_rss(), "the cgroup's memory.max"))
    limits += _rlimits()
    meminfo = _read(MEMINFO)
    if meminfo:
        fields = dict(line.split(":", 1) for line in meminfo.splitlines() if ":" in line)
        if "MemAvailable" in fields:
            limits.append((int(fields["MemAvailable"].split()[0]) * 1024 + _own_rss(), "available memory"))
    return min(limits) if limits else (2**62, "no limit found")


RLIMITS = (("RLIMIT_AS", "VmSize", "the address-space limit RLIMIT_AS (ulimit -v)"),
           ("RLIMIT_DATA", "VmData", "the data-segment limit RLIMIT_DATA (ulimit -d)"))


def _rlimits() -> list[tuple[int, str]]:
    """What this process's soft rlimits leave (a run under `prlimit --as` failed in its module,
    with the module blamed): each limit less what the process maps already, plus its resident part
    (the estimate's interpreter)."""
    try:
        import resource
    except ImportError:
        return []
    status = dict(line.split(":", 1) for line in (_read(STATUS) or "").splitlines() if ":" in line)
    found = []
    for name, field, source in RLIMITS:
        soft, _ = resource.getrlimit(getattr(resource, name))
        if soft != resource.RLIM_INFINITY and field in status:
            used = int(status[field].split()[0]) * 1024
            found.append((soft - used + _own_rss(), source))
    return found


def should_spill(size: Size) -> bool:
    """Spill the reference's stages to disk when one is large, or when keeping them would not fit."""
    limit, _ = available_bytes()
    return size.stage_bytes >= SPILL_STAGE_BYTES or estimate_peak_bytes(size, spilled=False) > limit


def check_fits(size: Size, *, spilled: bool) -> None:
    """A one-line error, before any forward, when the run would not fit."""
    need = estimate_peak_bytes(size, spilled=spilled)
    limit, source = available_bytes()
    if need <= limit:
        return
    spill = "; the reference's stages already spill to disk" if spilled else ""
    raise UserError(f"this run needs about {_gib(need)} ({size.describe()}{spill}) but "
                    f"{_gib(limit)} is available ({source}); shrink it with inputs.n_tokens, batch or num_heads")


def check_declared_inputs(batch: int, n_tokens: int | None, d_in: int | None, d_out: int) -> None:
    """Before the inputs are built: a run whose inputs the config sizes (random inputs) is checked
    at one head, the least it can take (the full check, with the module's heads, follows)."""
    if n_tokens and d_in:
        check_fits(Size(batch, 1, n_tokens, d_in, d_out, heads_known=False), spilled=True)


def cap_process() -> None:
    """With ATTNLAB_MEMORY_LIMIT set, this process's data segment is capped at it too (RLIMIT_DATA:
    the heap and anonymous maps, where tensors live; RLIMIT_AS would also count the address space
    torch's libraries and thread stacks reserve), so a module that allocates past the limit fails
    its own record. Where the platform has no such limit, the figure only feeds the estimate."""
    value = os.environ.get(LIMIT_ENV)
    try:
        import resource

        limit = int(float(value)) if value else None
        if limit is None:
            return
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        resource.setrlimit(resource.RLIMIT_DATA, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    except (ImportError, AttributeError, ValueError, OSError):
        return


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _own_rss() -> int:
    statm = _read(Path("/proc/self/statm"))
    return int(statm.split()[1]) * os.sysconf("SC_PAGE_SIZE") if statm else 0
