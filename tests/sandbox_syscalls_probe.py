"""Run inside the sandbox by Debian's python3: try each call the seccomp filter denies.

Prints one JSON object: for each call, the errno name it failed with ("ok" when it did
not fail), and whether ordinary work (a fork, a thread, a subprocess, asking for the
persona) still works. The arguments are chosen so that, with no filter, the calls fail
harmlessly with another errno (EFAULT, EINVAL, EBADF, ESRCH) or do nothing lasting: the
filter's EPERM is then its own. x86-64 numbers.
"""

import ctypes
import errno
import json
import os
import subprocess
import threading

libc = ctypes.CDLL(None, use_errno=True)
CLONE_SIGHAND = 0x800  # without CLONE_VM: EINVAL before anything happens
NAMESPACES = {
    "NEWTIME": 0x80, "NEWNS": 0x20000, "NEWCGROUP": 0x02000000, "NEWUTS": 0x04000000,
    "NEWIPC": 0x08000000, "NEWUSER": 0x10000000, "NEWPID": 0x20000000, "NEWNET": 0x40000000,
}
PPID = os.getppid()

CALLS = {
    "ptrace": (101, 2, PPID, 0, 0),  # PTRACE_PEEKDATA on a process it does not trace
    "process_vm_readv": (310, PPID, 0, 0, 0, 0, 0),
    "process_vm_writev": (311, PPID, 0, 0, 0, 0, 0),
    "mount": (165, 0, 0, 0, 0, 0),
    "umount2": (166, 0, 0),
    "pivot_root": (155, 0, 0),
    "open_tree": (428, -1, 0, 0),
    "move_mount": (429, -1, 0, -1, 0, 0),
    "fsopen": (430, 0, 0),
    "fsconfig": (431, -1, 0, 0, 0, 0),
    "fsmount": (432, -1, 0, 0),
    "fspick": (433, -1, 0, 0),
    "mount_setattr": (442, -1, 0, 0, 0, 0),
    "open_by_handle_at": (304, -1, 0, 0),
    "keyctl": (250, 0, -3, 0),  # KEYCTL_GET_KEYRING_ID of the session keyring
    "add_key": (248, 0, 0, 0, 0, 0),
    "request_key": (249, 0, 0, 0, 0),
    "bpf": (321, 0xFFFF, 0, 0),
    "perf_event_open": (298, 0, 0, -1, -1, 0),
    "userfaultfd": (323, 0xFFFF),
    "io_uring_setup": (425, 1, 0),
    "io_uring_enter": (426, -1, 0, 0, 0, 0, 0),
    "io_uring_register": (427, -1, 0, 0, 0),
    "setns": (308, -1, 0),
    "kexec_load": (246, 0, 0, 0, 0),
    "kexec_file_load": (320, -1, -1, 0, 0, 0),
    "init_module": (175, 0, 0, 0),
    "finit_module": (313, -1, 0, 0),
    "delete_module": (176, 0, 0),
    "reboot": (169, 0, 0, 0, 0),  # bad magic
    "swapon": (167, 0, 0),
    "swapoff": (168, 0),
    "acct": (163, 0),
    "quotactl": (179, 0, 0, 0, 0),
    "quotactl_fd": (443, -1, 0, 0, 0),
    "lookup_dcookie": (212, 0, 0, 0),
    "personality(ADDR_NO_RANDOMIZE)": (135, 0x0040000),
    "clone3": (435, 0, 0),
}
for name, flag in NAMESPACES.items():
    CALLS[f"unshare(CLONE_{name})"] = (272, flag | 0x1)  # 0x1 alone makes it EINVAL
    CALLS[f"clone(CLONE_{name})"] = (56, flag | CLONE_SIGHAND, 0, 0, 0, 0)


def attempt(number: int, *args: int) -> str:
    """The errno name the call failed with, or "ok"."""
    ctypes.set_errno(0)
    result = libc.syscall(number, *(ctypes.c_long(a) for a in args))
    return "ok" if result >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")


def ordinary() -> dict[str, bool]:
    """What tests do all the time, which must keep working."""
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    forked = os.waitpid(pid, 0)[1] == 7 << 8
    seen: list[int] = []
    worker = threading.Thread(target=lambda: seen.append(1))
    worker.start()
    worker.join()
    spawned = subprocess.run(["/bin/sh", "-c", "exit 3"]).returncode == 3
    persona = libc.syscall(135, ctypes.c_long(0xFFFFFFFF)) >= 0
    return {"fork": forked, "thread": seen == [1], "subprocess": spawned, "persona": persona}


print(json.dumps({"denied": {n: attempt(*a) for n, a in CALLS.items()}, "ordinary": ordinary()}))
