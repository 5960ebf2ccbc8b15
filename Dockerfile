# One image for every DevLoop process: workers, Flower, the CLI.
# Node 20 for the node stack; Debian's python3 (3.11, world-readable) runs DevLoop and
# the python stack's test venv.
FROM node:20-bookworm-slim
# libseccomp2 builds the sandbox's syscall filter, util-linux's prlimit sets its process
# limit (both come with Debian's base; named so the image says what it needs).
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    libseccomp2 util-linux \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY . /app
# A normal install: the wheel carries prompts/, toolchains/ and examples/ inside the package.
RUN python3 -m venv /opt/devloop \
 && /opt/devloop/bin/pip install --no-cache-dir /app
# Every process runs as `devloop` (uid 10001), not root, and owns the cache it writes
# (toolchains, session views, the sandbox's /etc): /var/cache/devloop, under root's
# /var/cache, never in a shared sticky dir such as /var/tmp (devloop/safe/cachedir.py). Not being root, the sandbox runs
# commands as this same uid inside their own user namespace, which needs the
# seccomp profile (deploy/seccomp-bwrap.json) and AppArmor setting in docker-compose.yml.
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/devloop devloop \
 && install -d -m 0755 -o devloop -g devloop /var/cache/devloop
ENV PATH=/opt/devloop/bin:$PATH DEVLOOP_CACHE_DIR=/var/cache/devloop
USER devloop
WORKDIR /home/devloop
RUN devloop toolchain install node && devloop toolchain install python
CMD ["devloop", "--help"]
