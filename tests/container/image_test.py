#!/usr/bin/env python3
"""The CPU image (deploy/docker/Dockerfile) built and run with podman.

The image's runtime stage is built around the `strata` binary this build tree made
(target runtime-prebuilt), on a Debian 12 base image made here with debootstrap from the
Debian mirror (no image registry is needed), cached in the build tree with podman's own
image store. The container runs with the SSD tier on a named volume and its ports
published on loopback; through them a 2-turn chat must reuse the first turn's KV, the
server must run as the image's non-root user and /metrics must count the turns. Then the
container is replaced by a new one on the same volume, and the session's next turn must
come from the SSD tier.

Exits 77 (ctest: skipped) saying why where this cannot be done: no podman or debootstrap,
not root (and no password-less sudo), not Debian 12 (the binary must match the image's
libraries), no Debian mirror, or a container runtime that cannot start containers here.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

SKIP = 77
BASE_IMAGE = "localhost/strata-test-base:bookworm"
IMAGE = "localhost/strata:cpu-test"
# Limits a container may be given without CAP_SYS_RESOURCE: podman's own defaults (nofile
# 1048576, nproc 4194304) exceed the hard limits of some sandboxes, and runc/crun then
# cannot set them.
NPROC = 4096


def log(msg):
    print(msg, flush=True)


def skip(reason):
    log("SKIP: " + reason)
    sys.exit(SKIP)


class Podman:
    """podman with the options chosen for this machine: its own image store in the build
    tree, a storage driver and an OCI runtime that can start containers here."""

    def __init__(self, sudo, root, runroot, driver, runtime):
        self.base = sudo + ["podman", "--root", root, "--runroot", runroot, "--storage-driver", driver,
                            "--cgroup-manager", "cgroupfs"]
        if runtime:
            self.base += ["--runtime", runtime]
        hard_nofile = subprocess.run(["sh", "-c", "ulimit -Hn"], capture_output=True, text=True).stdout.strip()
        nofile = min(int(hard_nofile), 65536) if hard_nofile.isdigit() else 65536
        self.limits = ["--ulimit", "nofile=%d:%d" % (nofile, nofile), "--ulimit", "nproc=%d:%d" % (NPROC, NPROC)]
        self.driver = driver
        self.runtime = runtime or "default"

    def run(self, *args, timeout=120, check=True, stdin=None):
        p = subprocess.run(self.base + list(args), capture_output=True, text=True, timeout=timeout, stdin=stdin)
        if check and p.returncode != 0:
            raise RuntimeError("podman %s failed (%d):\n%s%s" % (" ".join(args[:3]), p.returncode, p.stdout[-3000:],
                                                                  p.stderr[-3000:]))
        return p


def os_is_debian12():
    try:
        fields = dict(line.strip().split("=", 1) for line in open("/etc/os-release") if "=" in line)
    except OSError:
        return False
    return fields.get("ID") == "debian" and fields.get("VERSION_ID", "").strip('"') == "12"


def make_base_tarball(sudo, work, mirror):
    """A minimal Debian 12 root file system as a tarball, made once per build tree."""
    tarball = os.path.join(work, "debian-bookworm-minbase.tar")
    if os.path.exists(tarball):
        return tarball
    rootfs = os.path.join(work, "rootfs.tmp")
    subprocess.run(sudo + ["rm", "-rf", rootfs], check=True)
    log("== debootstrap --variant=minbase bookworm from %s (once per build tree)" % mirror)
    t = time.time()
    try:
        p = subprocess.run(sudo + ["debootstrap", "--variant=minbase", "bookworm", rootfs, mirror],
                           capture_output=True, text=True, timeout=420)
    except subprocess.TimeoutExpired:
        subprocess.run(sudo + ["rm", "-rf", rootfs])
        skip("debootstrap from %s took over 7 minutes (a slow or unreachable mirror)" % mirror)
    if p.returncode != 0:
        subprocess.run(sudo + ["rm", "-rf", rootfs])
        skip("debootstrap cannot make a Debian 12 base image from %s here:\n%s" % (mirror, p.stdout[-1500:] +
                                                                                   p.stderr[-1500:]))
    subprocess.run(sudo + ["tar", "-C", rootfs, "-cf", tarball + ".tmp", "."], check=True)
    subprocess.run(sudo + ["rm", "-rf", rootfs], check=True)
    os.replace(tarball + ".tmp", tarball)
    log("   %.0f s" % (time.time() - t))
    return tarball


def choose_podman(sudo, work, tarball):
    """The first storage driver and runtime that run a container from the base image:
    overlay and the default runtime on an ordinary host; vfs where overlay mounts are not
    allowed; runc where crun refuses the cgroup layout (cgroup v1 beside a v2 with
    controllers). Returns None and the errors when none does."""
    runroot = os.path.join("/tmp", "strata-podman-run-%d" % os.getuid())
    errors = []
    for driver in ("overlay", "vfs"):
        for runtime in (None, "runc"):
            if runtime and not shutil.which(runtime):
                continue
            pm = Podman(sudo, os.path.join(work, "storage-" + driver), runroot + "-" + driver, driver, runtime)
            if pm.run("image", "exists", BASE_IMAGE, check=False).returncode != 0:
                with open(tarball, "rb") as f:
                    imp = pm.run("import", "-", BASE_IMAGE, stdin=f, check=False)
                if imp.returncode != 0:
                    errors.append("%s/%s: import: %s" % (driver, pm.runtime, imp.stderr.strip()[-500:]))
                    continue
            p = pm.run("run", "--rm", *pm.limits, BASE_IMAGE, "true", check=False, timeout=60)
            if p.returncode == 0:
                return pm, errors
            errors.append("%s/%s: %s" % (driver, pm.runtime, p.stderr.strip()[-500:]))
    return None, errors


def http_get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read().decode()


def metric_sum(body, name):
    total = 0.0
    for line in body.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


class Container:
    def __init__(self, pm, name, volume, seccomp, flags):
        self.pm = pm
        self.name = name
        pm.run("rm", "-f", name, check=False)
        security = ["--security-opt", "seccomp=" + seccomp] if seccomp else []
        pm.run("run", "-d", "--name", name, *pm.limits, *security,
               "-p", "127.0.0.1::7070", "-p", "127.0.0.1::9464", "-v", volume + ":/var/lib/strata/ssd", IMAGE, *flags)
        deadline = time.time() + 120
        while time.time() < deadline:
            logs = self.logs()
            if "strata serving gRPC" in logs:
                self.grpc_port = self.published(7070)
                self.metrics_port = self.published(9464)
                return
            state = json.loads(pm.run("inspect", name).stdout)[0]["State"]
            if not state.get("Running"):
                raise RuntimeError("the container exited (%s) before serving:\n%s" % (state.get("ExitCode"),
                                                                                     self.logs()))
            time.sleep(0.5)
        raise RuntimeError("strata did not start serving in the container within 120 s:\n" + self.logs())

    def published(self, port):
        # "127.0.0.1:41234"
        out = self.pm.run("port", self.name, "%d/tcp" % port).stdout.strip().splitlines()[0]
        return int(out.rsplit(":", 1)[1])

    def logs(self):
        p = self.pm.run("logs", self.name, check=False)
        return p.stdout + p.stderr

    def host_pid(self):
        return json.loads(self.pm.run("inspect", self.name).stdout)[0]["State"]["Pid"]

    def remove(self):
        # SIGTERM drains; the exit status says the server shut down cleanly.
        self.pm.run("stop", "-t", "30", self.name, check=False, timeout=60)
        code = json.loads(self.pm.run("inspect", self.name).stdout)[0]["State"]["ExitCode"]
        self.pm.run("rm", "-f", self.name, check=False)
        return code


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True, help="the strata binary of this build tree")
    ap.add_argument("--source", required=True, help="the repository (deploy/docker, clients/python)")
    ap.add_argument("--work", required=True, help="a build-tree folder for the base image and podman's store")
    args = ap.parse_args()
    # podman takes its store's paths as given; relative ones break volume mounts.
    args.work, args.source, args.strata = (os.path.abspath(p) for p in (args.work, args.source, args.strata))
    t0 = time.time()

    for tool in ("podman", "debootstrap"):
        if not shutil.which(tool):
            skip("%s is not installed (Debian: apt-get install podman debootstrap)" % tool)
    if not os_is_debian12():
        skip("the image is Debian 12 and takes this machine's strata binary: this is not Debian 12")
    sudo = []
    if os.getuid() != 0:
        if subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode != 0:
            skip("debootstrap and rootful podman need root, and sudo asks for a password")
        sudo = ["sudo", "-n"]
    sys.path.insert(0, os.path.join(args.source, "clients", "python"))
    try:
        import grpc  # noqa: F401 (the client kit needs it)
    except ImportError:
        skip("python3-grpcio is not installed")
    from strata.client import Session
    from strata.v1 import cache_pb2, cache_pb2_grpc, chat_pb2

    os.makedirs(args.work, exist_ok=True)
    mirror = os.environ.get("STRATA_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    tarball = make_base_tarball(sudo, args.work, mirror)
    pm, errors = choose_podman(sudo, args.work, tarball)
    if pm is None:
        skip("podman cannot start a container here; tried:\n  " + "\n  ".join(errors))
    for e in errors:
        log("   (not %s)" % e)
    log("== podman: storage driver %s, runtime %s" % (pm.driver, pm.runtime))

    # The build context is the binary alone (runtime-prebuilt copies it), stripped as the
    # image's own build stage does.
    context = os.path.join(args.work, "context")
    os.makedirs(context, exist_ok=True)
    shutil.copy2(args.strata, os.path.join(context, "strata"))
    subprocess.run(["strip", os.path.join(context, "strata")], check=False)
    log("== podman build --target runtime-prebuilt")
    t = time.time()
    pm.run("build", "--network=host", *pm.limits, "-f", os.path.join(args.source, "deploy/docker/Dockerfile"),
           "--target", "runtime-prebuilt", "--build-arg", "BASE_IMAGE=" + BASE_IMAGE, "-t", IMAGE, context,
           timeout=600)
    log("   %.0f s" % (time.time() - t))

    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)
            log("FAIL: " + what)

    seccomp = os.path.join(args.source, "deploy/docker/seccomp.json")
    name = "strata-image-test-%d" % os.getpid()
    volume = name + "-ssd"
    pm.run("volume", "create", volume)
    # A small SSD file and host tier and no read-speed probe keep the start quick.
    flags = ["--ssd_capacity_bytes=268435456", "--ssd_probe_bytes=0", "--host_cache_bytes=268435456"]
    container = None
    try:
        # Under the runtime's default seccomp profile the SSD tier's io_uring is refused
        # (podman; Docker since 25.0): strata must stop saying so and what to do.
        try:
            Container(pm, name, volume, None, flags).remove()
            log("   (the runtime's default seccomp profile allows io_uring here)")
        except RuntimeError as e:
            check("exited" in str(e) and "deploy/docker/seccomp.json" in str(e),
                  "without the seccomp profile strata did not stop naming it:\n" + str(e)[-2000:])
            pm.run("rm", "-f", name, check=False)
        container = Container(pm, name, volume, seccomp, flags)
        target = "127.0.0.1:%d" % container.grpc_port
        log("== serving: gRPC %s, metrics 127.0.0.1:%d" % (target, container.metrics_port))

        # The server process, seen from the host, is the image's user.
        with open("/proc/%d/status" % container.host_pid()) as f:
            uids = [line.split()[1:] for line in f if line.startswith("Uid:")][0]
        check(set(uids) == {"10001"}, "strata runs as uid %s in the container, not the image's user 10001" % uids)
        whoami = pm.run("exec", name, "id", "-un").stdout.strip()
        check(whoami == "strata", "exec in the container runs as %r, not strata" % whoami)

        session = Session(target, "container-chat", max_new_tokens=16, timeout_s=120)
        session.send("Hello from inside a test. What is a KV cache?")
        first = session.last
        check(first.usage.cached_tokens == 0, "turn 1 reused %d tokens of a new session" % first.usage.cached_tokens)
        session.send("And why keep it between turns?")
        second = session.last
        check(second.usage.cached_tokens >= first.usage.prompt_tokens,
              "turn 2 reused %d tokens, fewer than turn 1's prompt of %d" % (second.usage.cached_tokens,
                                                                             first.usage.prompt_tokens))
        check(second.cache_tier != chat_pb2.TIER_NONE, "turn 2 was a miss")

        status, body = http_get("http://127.0.0.1:%d/metrics" % container.metrics_port)
        check(status == 200, "/metrics answered %d" % status)
        check(metric_sum(body, "strata_finished_turns_total") >= 2,
              "/metrics counts %g finished turns, not 2" % metric_sum(body, "strata_finished_turns_total"))
        check(metric_sum(body, "strata_cache_hits_total") >= 1, "/metrics counts no cache hit")

        # Durable on the volume, then a new container on the same volume serves the next
        # turn from its SSD tier.
        channel = grpc.insecure_channel(target)
        cache = cache_pb2_grpc.CacheServiceStub(channel)
        cache.Flush(cache_pb2.FlushRequest(session_ids=["container-chat"]), timeout=60)
        info = cache.GetSession(cache_pb2.GetSessionRequest(session_id="container-chat"), timeout=30)
        check(info.persisted, "the session is not persisted on the SSD volume after Flush")
        channel.close()
        code = container.remove()
        container = None
        check(code == 0, "strata exited %s on SIGTERM, not 0" % code)

        container = Container(pm, name, volume, seccomp, flags)
        # The conversation as it stood after turn 2, the answers verbatim.
        conversation = list(session.messages)
        session = Session("127.0.0.1:%d" % container.grpc_port, "container-chat", max_new_tokens=16, timeout_s=120)
        session.messages = conversation
        session.send("One more question.")
        third = session.last
        check(third.cache_tier == chat_pb2.TIER_SSD,
              "turn 3 in a new container came from tier %s, not the SSD volume" % chat_pb2.Tier.Name(third.cache_tier))
        check(third.usage.cached_tokens > 0, "turn 3 in a new container reused nothing")
        code = container.remove()
        container = None
        check(code == 0, "strata exited %s on SIGTERM, not 0" % code)
    except Exception as e:  # noqa: BLE001 (report what happened with the logs)
        failures.append("%s: %s" % (type(e).__name__, e))
        if container is not None:
            log("== container log:\n" + container.logs()[-4000:])
    finally:
        if container is not None:
            container.remove()
        pm.run("volume", "rm", "-f", volume, check=False)

    log("== %.0f s in all" % (time.time() - t0))
    if failures:
        log("FAILED:\n  " + "\n  ".join(failures))
        return 1
    log("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
