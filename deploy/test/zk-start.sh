#!/bin/bash
# Starts a standalone ZooKeeper on 127.0.0.1:$ZK_PORT in the foreground.
set -euo pipefail
: "${ZK_PORT:?ZK_PORT is not set}"
dir=$(mktemp -d /tmp/zk.XXXXXX)
mkdir -p "$dir/data"
cat >"$dir/zoo.cfg" <<CFG
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$dir/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
maxClientCnxns=0
4lw.commands.whitelist=ruok,srvr,mntr,stat
admin.enableServer=false
CFG
cat >"$dir/log4j.properties" <<CFG
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n
CFG
J=/usr/share/java
CP=$J/zookeeper.jar:$J/zookeeper-jute.jar:$J/slf4j-api.jar:$J/slf4j-log4j12.jar:$J/log4j-1.2.jar:$J/metrics-core.jar:$J/snappy-java.jar
exec java -Xms128m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
  -Dlog4j.configuration="file:$dir/log4j.properties" -Dzookeeper.jmx.log4j.disable=true \
  -Dznode.container.checkIntervalMs=1000 \
  -cp "$CP" org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg"
