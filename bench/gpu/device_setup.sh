# Sourced on the GPU machine, from the tree's root, with .gpu and .whl carried (bench/gpu/bundle.sh):
# unpacks the Java runtime and the Kafka jars where infra looks for them, installs the wheels.
set -e
export PYTHONUNBUFFERED=1
python3 - <<'PY'
import pathlib
import tarfile

tarfile.open(".gpu/jre17u.tar.xz").extractall("/opt/gpu")
pathlib.Path(".steplens/kafka").mkdir(parents=True, exist_ok=True)
tarfile.open(".gpu/klibs.tar.xz").extractall(".steplens/kafka")
libs = pathlib.Path(".steplens/kafka/libs")
if not libs.exists():
    pathlib.Path(".steplens/kafka/klibs").rename(libs)
PY
export JAVA_HOME=/opt/gpu/jre17u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv
