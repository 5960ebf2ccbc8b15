"""The seccomp filter every sandboxed command runs under: a deny list built by libseccomp.

Tests and builds never need to trace other processes, mount file systems, use the kernel's
keyrings, load BPF or kernel modules, open perf events or userfaultfd, or enter new
namespaces; each of those is a door to kernel bugs, so the filter answers EPERM. clone3
answers ENOSYS: its flags sit in memory a filter cannot read, and on ENOSYS libc falls back
to clone, whose flags it can. Everything else is allowed.

The filter is compiled by libseccomp (its official Python bindings when installed, else
`pyseccomp`, the same API over the C library through ctypes), exported as BPF and handed to
bubblewrap with `--seccomp FD`: bubblewrap loads it after building the sandbox, just before
it runs the command, so its own mounts and namespaces are unaffected.
"""

from __future__ import annotations

import errno
import functools
import os
from types import ModuleType

from devloop.core.errors import SandboxUnavailable

# Denied outright (EPERM). Names this libseccomp does not know are skipped (a newer call on
# an older library); the ones the sandbox test probes are known to every libseccomp 2.5.
DENIED = (
    # other processes' memory
    "ptrace", "process_vm_readv", "process_vm_writev",
    # file systems and mounts
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "open_by_handle_at",
    # the kernel's keyrings
    "keyctl", "add_key", "request_key",
    # kernel attack surface tests never use
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register",
    # new namespaces (unshare and clone: only with a namespace flag, below)
    "setns",
    # the machine itself
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "lookup_dcookie",
)

# CLONE_NEWTIME, CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER,
# CLONE_NEWPID, CLONE_NEWNET: unshare or clone with any of them is denied.
NAMESPACE_FLAGS = (
    0x80, 0x20000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000
)

# personality() flags that weaken the address space (ADDR_NO_RANDOMIZE, FDPIC_FUNCPTRS,
# MMAP_PAGE_ZERO, ADDR_COMPAT_LAYOUT, READ_IMPLIES_EXEC, ADDR_LIMIT_32BIT, SHORT_INODE,
# WHOLE_SECONDS, STICKY_TIMEOUTS, ADDR_LIMIT_3GB). Asking for the current persona
# (0xffffffff) and PER_LINUX32/UNAME26 stay allowed.
PERSONALITY_FLAGS = (
    0x0040000, 0x0080000, 0x0100000, 0x0200000, 0x0400000, 0x0800000, 0x1000000,
    0x2000000, 0x4000000, 0x8000000,
)
_QUERY_BIT = 0x80000000  # set only in 0xffffffff, "tell me the persona"

FIX = (
    "install libseccomp (Debian/Ubuntu: `apt install libseccomp2`; it comes with apt) "
    "and the `pyseccomp` package (a DevLoop dependency), or Debian's python3-seccomp"
)


def _library() -> ModuleType:
    """libseccomp's Python bindings: the official ones, else pyseccomp (the same API)."""
    try:
        import seccomp

        return seccomp
    except ImportError:
        pass
    try:
        import pyseccomp
    except (ImportError, RuntimeError, OSError) as exc:  # RuntimeError: no libseccomp
        raise SandboxUnavailable(f"the sandbox's seccomp filter cannot be built: {exc}. "
                                 f"Fix: {FIX}.") from None
    return pyseccomp


@functools.cache
def filter_bpf() -> bytes:
    """The compiled filter (classic BPF for this machine's architectures), built once."""
    sc = _library()
    deny = sc.ERRNO(errno.EPERM)
    flt = sc.SyscallFilter(sc.ALLOW)
    # The 32-bit ABIs get the same rules: a filter for the native one alone would let a
    # process reach a denied call through int 0x80 or x32 (libseccomp kills other arches).
    if sc.system_arch() == sc.Arch.X86_64:
        for arch in (sc.Arch.X86, sc.Arch.X32):
            if not flt.exist_arch(arch):
                flt.add_arch(arch)
    for name in DENIED:
        if sc.resolve_syscall(sc.Arch.NATIVE, name) >= 0:
            flt.add_rule(deny, name)
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for flag in NAMESPACE_FLAGS:
        # One rule per flag: a rule's comparisons all hold at once (AND), so "any of these
        # bits" takes a rule each.
        flt.add_rule(deny, "unshare", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        flt.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    for flag in PERSONALITY_FLAGS:
        flt.add_rule(deny, "personality", sc.Arg(0, sc.MASKED_EQ, flag | _QUERY_BIT, flag))
    fd = os.memfd_create("devloop-seccomp", os.MFD_CLOEXEC)
    try:
        with os.fdopen(os.dup(fd), "wb") as out:
            flt.export_bpf(out)
        size = os.fstat(fd).st_size
        return os.pread(fd, size, 0)
    finally:
        os.close(fd)


def filter_fd() -> int:
    """A fresh fd holding the filter at offset 0, for one bubblewrap (it reads to EOF)."""
    program = filter_bpf()
    fd = os.memfd_create("devloop-seccomp", os.MFD_CLOEXEC)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def summary() -> list[str]:
    """What the filter denies, for `devloop sandbox limits`."""
    return [
        f"seccomp: denied (EPERM): {', '.join(DENIED)}",
        "seccomp: denied (EPERM): unshare and clone with a namespace flag (CLONE_NEWNS, "
        "NEWUSER, NEWPID, NEWNET, NEWIPC, NEWUTS, NEWCGROUP, NEWTIME); personality flags "
        "that weaken the address space (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, MMAP_PAGE_ZERO, "
        "...)",
        "seccomp: clone3 answers ENOSYS (libc falls back to clone, whose flags are checked)",
    ]
