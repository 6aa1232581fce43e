# dlm-server as a container image: the build (the workspace's install and tsc, then
# `pnpm deploy --prod` of the server alone, about 40 MB with its dependencies) and the runtime
# (Node.js and that directory, run as the unprivileged user 1000).
#
#   docker build -t dlm-server .
#   docker run -p 7070:7070 -e DLM_INSECURE=1 -v dlm-data:/data dlm-server     # try it: embedded, no tokens
#   docker run -p 7070:7070 -e DLM_AUTH_TOKENS="$(cat tokens.txt)" \
#     -e DLM_BACKEND=etcd -e DLM_ETCD_ENDPOINTS=http://etcd:2379 dlm-server
#
# Configuration is the server's environment variables (apps/server/README.md). Listening on all
# interfaces (as a container must) needs tokens or DLM_INSECURE=1, as anywhere else.
# NODE_IMAGE: any image with Node.js 20 and npm, /bin/sh and a user 1000. The official one by
# default; CI builds a local one from this machine's Node.js (deploy/docker/node-base.sh),
# since it cannot pull images.
ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY . .
RUN npx -y pnpm@12.4.2 install --frozen-lockfile --filter "@dlm/server..." \
 && npx -y pnpm@12.4.2 --filter "@dlm/server..." run build \
 && npx -y pnpm@12.4.2 --filter @dlm/server deploy --prod /app

FROM ${NODE_IMAGE}
COPY --from=build --chown=1000:1000 /app /app
# The embedded backend's journal: a volume, so that locks and tokens outlive the container.
RUN mkdir -p /data && chown 1000:1000 /data
VOLUME /data
ENV NODE_ENV=production DLM_HOST=0.0.0.0 DLM_PORT=7070 DLM_DATA_DIR=/data
USER 1000:1000
EXPOSE 7070
# Healthy while the backend answers (/readyz), as a load balancer would check it.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.DLM_PORT||7070)+'/readyz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
ENTRYPOINT ["node", "/app/dist/main.js"]
