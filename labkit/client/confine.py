"""Confine a command before running it: resource limits, then Landlock where the kernel has it.

``labkit.client.runner.run_suite`` starts the model-edited tests through this file, as a script
of a fresh interpreter (``python -I -S confine.py CONFIG_JSON -m unittest ...``): it lowers the
limits, restricts writes, then ``exec``s the command, which inherits both. It runs in the child
rather than in a ``preexec_fn`` because a ``preexec_fn`` may deadlock in a parent with threads,
and the agent client runs many rollouts on threads.

``CONFIG_JSON`` holds:

- ``limits``: ``{"RLIMIT_CPU": seconds, ...}``; each soft and hard limit is lowered to the
  value (never raised), so the command cannot raise it back;
- ``extra_processes``: how many processes (threads count) the command may add to the user's
  current count (``RLIMIT_NPROC`` counts every process of the user; root ignores it);
- ``writable``: directories beneath which the command may create, write, rename and delete;
- ``writable_files``: single files it may write to (``/dev/null``).

Landlock (Linux 5.13+, no privileges needed) makes ``writable`` the only places the command
and its children can write to; from Linux 6.7 it also refuses TCP connects and binds, and from
6.12 signals to processes outside the run. Reads are not restricted: Python needs its standard
library and site-packages. Where Landlock is missing (an older kernel, another OS, a container
that filters the system calls) the command runs with the limits alone.

The file imports on every OS (``resource`` is imported when limits are lowered, and exists on
Linux and macOS only); on Windows ``labkit.client.runner`` does not run it.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import sys
from typing import Any

# System call numbers: the same on every architecture for calls added after 5.1.
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Filesystem rights: every right that changes something (reads and execution stay allowed).
_WRITE_FILE = 1 << 1
_CHANGES = 0x1FF2  # WRITE_FILE, REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, _DIR, _REG, _SOCK, _FIFO, _BLOCK, _SYM
_REFER = 1 << 13  # ABI 2: links and renames across directories
_TRUNCATE = 1 << 14  # ABI 3
_NET_TCP = 0b11  # ABI 4: BIND_TCP, CONNECT_TCP
_SCOPES = 0b11  # ABI 6: abstract Unix sockets and signals outside the domain


def _syscall() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    call = libc.syscall
    call.restype = ctypes.c_long
    return call


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (or the call is filtered)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        version = _syscall()(ctypes.c_long(_CREATE_RULESET), None, ctypes.c_long(0), ctypes.c_long(1))
    except (OSError, AttributeError):
        return 0
    return max(0, int(version))


def restrict_writes(writable: list[str], writable_files: list[str]) -> int:
    """Allow changes beneath ``writable`` (and writes to ``writable_files``) only, for this
    process and every process it starts; returns the ABI used, 0 if nothing was restricted."""
    abi = landlock_abi()
    if abi < 1:
        return 0
    syscall = _syscall()
    fs = _CHANGES | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    handled = [fs] + ([_NET_TCP] if abi >= 4 else []) + ([_SCOPES] if abi >= 6 else [])
    attr = struct.pack(f"={len(handled)}Q", *handled)  # the size tells the kernel which fields
    ruleset = syscall(ctypes.c_long(_CREATE_RULESET), attr, ctypes.c_size_t(len(attr)), ctypes.c_long(0))
    if ruleset < 0:
        return 0
    file_rights = _WRITE_FILE | (_TRUNCATE if abi >= 3 else 0)
    try:
        for paths, rights in ((writable, fs), (writable_files, file_rights)):
            for path in paths:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                try:
                    rule = struct.pack("=Qi", rights, fd)  # struct landlock_path_beneath_attr, packed
                    added = syscall(
                        ctypes.c_long(_ADD_RULE),
                        ctypes.c_long(ruleset),
                        ctypes.c_long(_RULE_PATH_BENEATH),
                        rule,
                        ctypes.c_long(0),
                    )
                finally:
                    os.close(fd)
                if added != 0:
                    return 0
        # Required to restrict itself without privileges; also stops set-uid programs gaining any.
        ctypes.CDLL(None).prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if syscall(ctypes.c_long(_RESTRICT_SELF), ctypes.c_long(ruleset), ctypes.c_long(0)) != 0:
            return 0
    finally:
        os.close(ruleset)
    return abi


def _user_tasks() -> int | None:
    """Processes and threads this user runs now (what RLIMIT_NPROC counts), from /proc."""
    uid = os.getuid()
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    count = 0
    for pid in pids:
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                count += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue  # it ended meanwhile
    return count


def lower_limits(limits: dict[str, int], extra_processes: int | None = None) -> None:
    """Lower each named limit (soft and hard) to its value; a limit already lower stays.

    A limit this system does not have, or refuses to set (macOS for some), is left as it is.
    """
    import resource  # POSIX only: imported here so the module still imports on Windows

    wanted = dict(limits)
    if extra_processes is not None and hasattr(resource, "RLIMIT_NPROC"):
        tasks = _user_tasks()
        if tasks is not None:
            wanted["RLIMIT_NPROC"] = tasks + extra_processes
    for name, value in wanted.items():
        which = getattr(resource, name, None)
        if which is None:
            continue  # not on this system
        _, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):  # the kernel refuses this one; the others still apply
            continue


def main(argv: list[str]) -> None:
    config, command = json.loads(argv[0]), argv[1:]
    lower_limits(config.get("limits", {}), config.get("extra_processes"))
    restrict_writes(config.get("writable", []), config.get("writable_files", []))
    os.execv(sys.executable, [sys.executable, *command])


if __name__ == "__main__":
    main(sys.argv[1:])
