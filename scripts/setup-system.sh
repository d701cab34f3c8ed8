#!/usr/bin/env bash
# Installs the Debian packages klog's setup and tests need, only when they are missing.
# Called by `make setup`; safe to run again. Needs root (or sudo) only when something is missing.
set -euo pipefail

missing=()
# The venv module is a separate Debian package for Debian's own python3.
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    missing+=(python3-venv)
fi

# A C compiler and the Python headers build klog.storage._fastread (the read path in C);
# without them klog still installs and runs, more slowly.
command -v cc >/dev/null 2>&1 || missing+=(gcc)
if ! python3 -c 'import os, sysconfig; p = sysconfig.get_paths()["include"]; raise SystemExit(not os.path.exists(os.path.join(p, "Python.h")))' >/dev/null 2>&1; then
    missing+=(python3-dev)
fi

# Real peers for the tests: kcat (librdkafka's CLI) and ZooKeeper (cluster mode), plus Java
# for ZooKeeper itself.
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
[ -e /usr/share/zookeeper/bin/zkServer.sh ] || missing+=(zookeeper)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
# The JVM peers (tests/jvm: Kafka's Java client, Streams, Connect and tools) are a Maven
# project compiled by `make setup`: a JDK and Maven.
command -v javac >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
# The security tests make their TLS certificates with the openssl command line.
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# The chaos harness (tests/chaos): network namespaces, veths and a bridge (ip, tc from
# iproute2), faults as nftables rules, and NFQUEUE rules (iptables) for latency where the
# kernel has no sch_netem.
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo="sudo"
    else
        echo "error: need root to install: ${missing[*]}" >&2
        exit 1
    fi
fi
echo "installing system packages: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
