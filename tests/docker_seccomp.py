"""Install a Docker seccomp profile (its JSON format) on this process, as Docker would.

No Docker engine runs here, so the compose file's profile is tried the way the kernel sees
it: its rules for this machine's architecture and kernel, for a container with Docker's
default capabilities (no CAP_SYS_ADMIN), compiled by libseccomp and loaded with
no_new_privs. Docker's sub-architectures and masked /proc paths are not reproduced.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pyseccomp as sc

# Docker's default capability set for a container that adds or drops none.
DOCKER_CAPS = {
    "CAP_AUDIT_WRITE", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID",
    "CAP_KILL", "CAP_MKNOD", "CAP_NET_BIND_SERVICE", "CAP_NET_RAW", "CAP_SETFCAP",
    "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_CHROOT",
}
GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
OPS = {
    "SCMP_CMP_NE": sc.NE, "SCMP_CMP_LT": sc.LT, "SCMP_CMP_LE": sc.LE, "SCMP_CMP_EQ": sc.EQ,
    "SCMP_CMP_GE": sc.GE, "SCMP_CMP_GT": sc.GT, "SCMP_CMP_MASKED_EQ": sc.MASKED_EQ,
}


def stock(profile: dict[str, Any]) -> dict[str, Any]:
    """The profile without DevLoop's rule: Docker's default profile as it ships."""
    rules = [r for r in profile["syscalls"] if not r.get("comment", "").startswith("DevLoop:")]
    return {**profile, "syscalls": rules}


def install(profile: dict[str, Any]) -> None:
    """Load the profile on the calling process (and on all it starts from now on)."""
    arch = GO_ARCH.get(os.uname().machine, os.uname().machine)
    found = re.match(r"(\d+)\.(\d+)", os.uname().release)
    kernel = (int(found.group(1)), int(found.group(2))) if found else (0, 0)
    default = _action(profile["defaultAction"], profile.get("defaultErrnoRet"))
    flt = sc.SyscallFilter(default)
    for rule in profile["syscalls"]:
        if not _applies(rule.get("includes") or {}, rule.get("excludes") or {}, arch, kernel):
            continue
        action = _action(rule["action"], rule.get("errnoRet"))
        args = [sc.Arg(a["index"], OPS[a["op"]], a["value"], a.get("valueTwo", 0))
                for a in rule.get("args") or []]
        for name in rule["names"]:
            if sc.resolve_syscall(sc.Arch.NATIVE, name) < 0:
                continue  # unknown to this libseccomp, or not on this architecture
            flt.add_rule(action, name, *args)
    flt.load()


def _applies(includes: dict[str, Any], excludes: dict[str, Any], arch: str,
             kernel: tuple[int, int]) -> bool:
    """Whether a rule holds for this container (Docker's includes/excludes)."""
    if not set(includes.get("caps", [])) <= DOCKER_CAPS:
        return False
    if "arches" in includes and arch not in includes["arches"]:
        return False
    if "minKernel" in includes:
        major, minor = (int(x) for x in includes["minKernel"].split(".")[:2])
        if kernel < (major, minor):
            return False
    if set(excludes.get("caps", [])) & DOCKER_CAPS:
        return False
    return arch not in excludes.get("arches", [])


def _action(name: str, errno_ret: int | None) -> int:
    if name == "SCMP_ACT_ALLOW":
        return sc.ALLOW
    if name == "SCMP_ACT_ERRNO":
        return sc.ERRNO(errno_ret if errno_ret is not None else 1)
    raise ValueError(f"action {name} is not used by the profiles tested here")
