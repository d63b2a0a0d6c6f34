#!/usr/bin/env python3
"""Writes seccomp.json: a container runtime's default seccomp profile plus the io_uring
system calls, which the SSD tier submits its reads and writes with. Default profiles
(podman's containers-common, Docker's since 25.0) refuse io_uring, and `strata serve
--ssd_dirs` then stops at start with "cannot set up io_uring: Function not implemented".

    python3 deploy/docker/make_seccomp.py /usr/share/containers/seccomp.json > deploy/docker/seccomp.json

The committed seccomp.json was made from Debian 12's golang-github-containers-common
0.50.1 profile; tests/container/image_test.py runs the image under it.
"""
import json
import sys

IO_URING = ["io_uring_enter", "io_uring_register", "io_uring_setup"]


def main():
    with open(sys.argv[1]) as f:
        profile = json.load(f)
    for rule in profile["syscalls"]:
        # A rule that refuses them by name would win over the default action, not over an
        # allow rule; drop the names from refusals so the result does not depend on order.
        if rule["action"] != "SCMP_ACT_ALLOW":
            rule["names"] = [n for n in rule["names"] if n not in IO_URING]
    profile["syscalls"] = [r for r in profile["syscalls"] if r["names"]]
    profile["syscalls"].append({"names": IO_URING, "action": "SCMP_ACT_ALLOW", "args": [],
                                "comment": "strata's SSD tier (io_uring)", "includes": {}, "excludes": {}})
    json.dump(profile, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
