"""A test helper: the processes below a process, and whether one still runs (Linux's /proc,
no psutil), for tests that check that no process outlives its parent."""

from __future__ import annotations

from pathlib import Path

HAS_PROC = Path("/proc/self/stat").exists()
"""Whether this system has Linux's /proc (the helpers need it)."""


def descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid``, each with its start time (Linux's /proc, no psutil)."""
    children: dict[int, list[int]] = {}
    started: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:  # the fields after the command name: state, ppid, ... starttime (the 20th)
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # ended meanwhile
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
            started[int(entry.name)] = fields[19]
    found: dict[int, str] = {}
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found[child] = started[child]
            stack.append(child)
    return found


def running(pid: int, started: str) -> bool:
    """Whether process ``pid`` (started at ``started``, not a reused PID) still runs."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and fields[19] == started


def command_line(pid: int) -> str:
    """The start of process ``pid``'s command line (for messages)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
    except OSError:
        return "?"
