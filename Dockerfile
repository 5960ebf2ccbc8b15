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
ENV PATH=/opt/devloop/bin:$PATH DEVLOOP_CACHE_DIR=/var/tmp/devloop
CMD ["devloop", "--help"]
