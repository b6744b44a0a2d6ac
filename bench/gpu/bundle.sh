#!/usr/bin/env bash
# Builds .gpu/ (and .whl/) for a GPU machine that reaches nothing outside: a jlinked Java 17 runtime
# and the Kafka broker's jars (natives of other platforms dropped), so `bench.overhead --device cuda`
# can start a real broker there, and the wheels its Python lacks. Run here, from the repo root, after
# `make up` once (it fetches the jars). Then, on the GPU machine, from a copy of the tree carrying
# .gpu and .whl:  source bench/gpu/device_setup.sh && python3 -m bench.overhead --device cuda
set -euo pipefail
JDK=${JDK:-/usr/lib/jvm/java-17-openjdk-amd64}
LIBS=${LIBS:-.steplens/kafka/libs}
PY=${PY:-.venv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p .gpu .whl
grep -qx "/.gpu/" .git/info/exclude || echo "/.gpu/" >> .git/info/exclude
grep -qx "/.whl/" .git/info/exclude || echo "/.whl/" >> .git/info/exclude

"$JDK/bin/jlink" --add-modules java.base,java.management,java.naming,java.security.jgss,java.security.sasl,\
jdk.unsupported,java.xml,java.sql,java.desktop,jdk.crypto.ec,jdk.management,java.logging,java.instrument,\
java.scripting,jdk.naming.dns,java.rmi,jdk.security.auth \
  --strip-debug --no-header-files --no-man-pages --output "$tmp/jre17u"
rm -f "$tmp"/jre17u/lib/server/classes*.jsa
strip --strip-unneeded "$tmp/jre17u/lib/server/libjvm.so"
tar -C "$tmp" -cf - jre17u | xz -9 -T2 > .gpu/jre17u.tar.xz

cp -r "$LIBS" "$tmp/klibs"
(cd "$tmp/klibs"
 zip -q -d zstd-jni-*.jar 'darwin/*' 'freebsd/*' 'win/*' 'linux/aarch64/*' 'linux/arm/*' 'linux/i386/*' \
   'linux/loongarch64/*' 'linux/mips64/*' 'linux/ppc64/*' 'linux/ppc64le/*' 'linux/riscv64/*' 'linux/s390x/*'
 unzip -l snappy-java-*.jar | awk '{print $4}' | grep -E '\.(so|dll|dylib|jnilib)$' | grep -v 'Linux/x86_64' \
   | xargs -r zip -q -d snappy-java-*.jar)
tar -C "$tmp" -cf - klibs | xz -9 -T2 > .gpu/klibs.tar.xz

"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl orjson==3.13.0 kafka-python==3.0.12 crc32c==2.7.1 \
  cryptography==50.0.2 cffi==2.1.1 pycparser==3.12
du -sh .gpu .whl
