# One image for every DevLoop process: workers, Flower, the CLI.
# Node 20 for the node stack; Debian's python3 (3.11, world-readable) runs DevLoop and
# the python stack's test venv.
FROM node:20-bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY . /app
RUN python3 -m venv /opt/devloop \
 && /opt/devloop/bin/pip install --no-cache-dir . \
 && /opt/devloop/bin/devloop toolchain install node \
 && /opt/devloop/bin/devloop toolchain install python
# Processes run as `devloop`, not root. Toolchains stay root's (read-only to the workers);
# the workers write only session views and the sandbox's generated /etc and bwrap copy.
# As a non-root user the sandbox runs commands as that same uid inside their own user
# namespace (the container needs the seccomp/AppArmor settings in docker-compose.yml).
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/devloop devloop \
 && mkdir -p /var/tmp/devloop/views /var/tmp/devloop/etc /var/tmp/devloop/bin \
 && chown devloop:devloop /var/tmp/devloop/views /var/tmp/devloop/etc /var/tmp/devloop/bin
ENV PATH=/opt/devloop/bin:$PATH DEVLOOP_CACHE_DIR=/var/tmp/devloop
USER devloop
WORKDIR /home/devloop
CMD ["devloop", "--help"]
