# ZooKeeper for `make deploy-test`: Debian's zookeeper package on a Debian
# base made with debootstrap (no image registry is reachable), run with
# plain java as testenv does; standalone, on 127.0.0.1:$ZK_PORT (host network).
ARG BASE_IMAGE=baton-base
FROM ${BASE_IMAGE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless zookeeper >/dev/null \
 && rm -rf /var/lib/apt/lists/*
COPY zk-start.sh /usr/local/bin/zk-start
USER 65534:65534
ENTRYPOINT ["/bin/bash", "/usr/local/bin/zk-start"]
